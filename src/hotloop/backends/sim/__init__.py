"""hotloop-sim: the deterministic simulated model, its example arguments and its shell commands."""
