"""Model backends: the Backend protocol (base.py), what the families share, and one folder per family."""
