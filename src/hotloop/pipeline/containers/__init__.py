"""Containers (the Containers API, issue 40): what a container is to the server — its record and files in the
store, its bounds, its expiry — apart from the sandbox that runs code in it (hotloop/sandbox/)."""
