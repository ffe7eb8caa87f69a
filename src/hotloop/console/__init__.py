"""The operator's web console at `/`: static files (no build step) and one JSON snapshot of the server."""
