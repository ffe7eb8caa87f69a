"""A multi-agent response's agents (protocol.md §1.12): the roster of the root and its subagents (roster.py), the
actions their calls run (actions.py), a subagent's own loop (branch.py), and what reaches the root's stream between
its steps (hub.py)."""
