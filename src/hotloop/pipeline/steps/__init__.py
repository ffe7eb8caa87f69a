"""The step loop: what a response whose server runs steps between its generations runs (loop.py): a generation,
the executors (executor.py: MCP calls, server-run searches, a multi-agent response's actions), a multi-agent
response's wait for its client's outputs (waits.py), the next generation on the extended prompt. A response with
nothing for the server to run is one generation (pipeline/turn.py), its hot path unchanged."""
