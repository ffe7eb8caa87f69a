"""Admission, no I/O but the store probe: the one entry of a create (entry.py), per-key rate limits and connection
slots (limits.py), WebSocket lanes and a connection's limits (lanes.py), the shutdown drain (drain.py)."""
