"""`hotloop bench`: per-turn API overhead and agent-loop time against the physical limit (docs/benchmarks.md)."""
