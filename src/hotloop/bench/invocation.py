"""What the scenarios' runs take from their parsed arguments (the agent loop's and the load's alike): the
--upstream table and settings, and the event loop a bench client runs on."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from hotloop.config import Upstream

T = TypeVar("T")


def upstream_table(args: argparse.Namespace) -> Upstream | None:
    """The `[upstreams.upstream]` table of --upstream and its options; None without --upstream."""
    if not getattr(args, "upstream", None):
        return None
    extra = {"upstream_model": args.upstream_model} if args.upstream_model else {}
    if args.tokenizer:
        extra["tokenizer"] = args.tokenizer
    if getattr(args, "context_window", None):
        extra["context_window"] = args.context_window
    return Upstream(backend=args.upstream_backend, url=args.upstream, dialect=args.dialect, retries=0, **extra)


def upstream_config(args: argparse.Namespace) -> dict[str, Any]:
    """The AgentLoopConfig / LoadConfig fields of --upstream; none without it."""
    if not args.upstream:
        return {}
    from hotloop.bench.server_process import UPSTREAM_MODEL

    return {
        "model": UPSTREAM_MODEL,
        "upstream": args.upstream,
        "prefill_us_per_token": args.prefill_us_per_token,
        "tool_choice": args.tool_choice,
        "temperature": args.temperature,
        "max_output_tokens": args.max_output_tokens,
    }


def run_client(job: Coroutine[Any, Any, T]) -> T:
    """Run the client on uvloop when it is installed (as the server does), else on asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(job)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(job)
