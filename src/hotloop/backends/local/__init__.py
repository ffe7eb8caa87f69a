"""In-process models: SmolLM2 run by llama.cpp, its GGUF, tokenizer and KV state snapshots."""
