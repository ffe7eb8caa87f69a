"""WebSocket mode's connection without I/O (protocol.md §3): its state machine (protocol.py), the actions it
returns (actions.py) and what it remembers of its responses (responses.py)."""
