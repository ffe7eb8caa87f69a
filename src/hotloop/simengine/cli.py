"""`hotloop sim-engine`: parse the flags, load SmolLM2's tokenizer and template, serve with uvicorn."""

from __future__ import annotations

import argparse

from hotloop.simengine.engine import EngineSettings


def add_sim_engine_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "sim-engine",
        help="run a stand-in OpenAI-compatible engine (tests, comparisons)",
        description="A standalone OpenAI-compatible engine with modelled costs: /v1/chat/completions and "
        "/v1/completions, real tokenization (SmolLM2), prefill charged only for tokens not in a cached prefix, "
        "decode at --tps, hotloop-sim's deterministic output and tool policy (docs/backends.md).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    defaults = EngineSettings()
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8100, help="TCP port")
    parser.add_argument("--model", default=defaults.model, help="model name in /v1/models and responses")
    parser.add_argument("--tps", type=float, default=defaults.tps, help="decode rate, output tokens per second")
    parser.add_argument(
        "--prefill-us-per-token",
        type=float,
        default=defaults.prefill_us_per_token,
        help="prefill cost in microseconds per prompt token not covered by a cached prefix",
    )
    parser.add_argument(
        "--prefix-cache-entries", type=int, default=defaults.prefix_cache_entries, help="prompts kept (LRU)"
    )
    parser.add_argument("--output-tokens", type=int, default=defaults.output_tokens, help="length of a text answer")
    parser.add_argument("--tool-calls", type=int, default=defaults.tool_calls, help="K: calls before answering")
    parser.add_argument(
        "--parallel-calls", type=int, default=defaults.parallel_calls, help="calls per response when parallel"
    )
    parser.add_argument("--seed", type=int, default=defaults.seed, help="output seed")
    parser.add_argument(
        "--reasoning-tokens",
        type=int,
        default=defaults.reasoning_tokens,
        help="a reasoning model: tokens of thinking before each answer or call (chat: --reasoning-field; "
        "completions: a <think> block)",
    )
    parser.add_argument(
        "--reasoning-field",
        choices=("reasoning_content", "reasoning"),
        default=defaults.reasoning_field,
        help="the chat chunk's field the thinking streams in",
    )
    parser.add_argument(
        "--output-format",
        choices=("hermes", "harmony"),
        default=defaults.output_format,
        help="a completion prompt's output: <tool_call> blocks and <think> (hermes), or gpt-oss's harmony channels",
    )
    parser.add_argument(
        "--tokenizer", default=defaults.tokenizer, help="a tokenizer.json to use instead of SmolLM2's (its own ids)"
    )
    parser.add_argument(
        "--structural-tag-lark",
        type=lambda value: value.lower() in ("1", "true", "yes", "on"),
        default=defaults.structural_tag_lark,
        help="a structural tag's grammar content may be Lark (xgrammar 0.2.9 on); false: refused with a 400, as "
        "vLLM 0.32.0 refuses it",
    )
    parser.add_argument(
        "--prefer-tools",
        default=defaults.prefer_tools,
        help="comma-separated tool names the model calls before any other when they are offered",
    )
    parser.add_argument("--log-level", default="warning", help="uvicorn log level")


def run_sim_engine(args: argparse.Namespace) -> int:
    from pathlib import Path

    import uvicorn

    from hotloop.backends.local.gguf import smollm2_chat_format
    from hotloop.backends.rust_tokenizer import RustTokenizer
    from hotloop.chat.format import ChatFormat
    from hotloop.simengine.app import build_app
    from hotloop.simengine.engine import Engine

    # Each setting has its flag (`--prefill-us-per-token` → prefill_us_per_token), so the fields name the flags.
    settings = EngineSettings(**{name: getattr(args, name) for name in EngineSettings.__struct_fields__})
    chat = smollm2_chat_format()
    if settings.tokenizer:  # SmolLM2's template (chat requests), the model's own ids
        chat = ChatFormat(chat.template, RustTokenizer.from_file(Path(settings.tokenizer)), **chat.special_tokens)
    app = build_app(Engine(settings, chat))
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)
    return 0
