"""`hotloop sim-engine`: a stand-in OpenAI-compatible engine for tests and comparisons (docs/backends.md).

It serves /v1/chat/completions and /v1/completions with an engine's cost model: real tokenization with
SmolLM2's tokenizer, prefill time only for the tokens a cached prefix does not cover, decode at a fixed rate,
and hotloop-sim's deterministic output and tool policy (backends/sim/backend.py).
"""
