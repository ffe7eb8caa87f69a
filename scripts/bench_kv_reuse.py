"""Time to first token of smollm2-135m continuations with KV state reuse, against a cold prefill of the same prompt.

Several multi-turn chains run interleaved on one model (each turn of chain A follows a turn of chain B, so the
context never holds the chain that comes next): a long opening document, then a short new user message each turn.
For every turn 2+ prompt the same tokens are also prefilled cold (a second model instance, its state dropped
first). With `--baseline` a third instance without snapshots (only the live context reused, the behaviour before
snapshots) follows the same chains, to show the interleaving thrash.

    .venv/bin/python scripts/bench_kv_reuse.py --threads 2 --context 1500 --turns 4 --chains 2 --baseline
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import time
from dataclasses import dataclass

from hotloop.backends.base import Finished, GenerationRequest, TextDelta
from hotloop.backends.local.gguf import smollm2_chat_format
from hotloop.backends.local.llama import LlamaBackend

WORDS = tuple(
    "river valley stone harbor engine signal market garden winter copper lantern bridge orbit ledger canyon "  # noqa: SIM905
    "meadow circuit archive compass thunder beacon forest glacier timber prism voyage quarry falcon meridian".split()
)
QUESTIONS = (
    "Which item mentions the harbor?",
    "Summarize items 3 to 5 in one sentence.",
    "What do the first two items have in common?",
    "Name one word that appears often.",
    "Is anything about winter listed?",
    "Give the last item a title.",
)


@dataclass
class Turn:
    chain: int
    turn: int
    prompt_tokens: int
    cached_tokens: int
    warm_ms: float
    cold_ms: float | None = None
    baseline_ms: float | None = None
    baseline_cached: int | None = None


def document(seed: int, tokens: int) -> str:
    """Numbered notes of about `tokens` tokens (SmolLM2's tokenizer: roughly 1.3 tokens per word here)."""
    rng = random.Random(seed)
    lines: list[str] = []
    words = 0
    while words * 1.3 < tokens:
        line = " ".join(rng.choice(WORDS) for _ in range(12))
        lines.append(f"{len(lines) + 1}. {line}.")
        words += 13
    return "\n".join(lines)


async def first_token(backend: LlamaBackend, tokens: list[int], max_output: int) -> tuple[float, str, Finished]:
    """Milliseconds to the first delta, the text, and the final delta."""
    request = GenerationRequest(prompt_tokens=tokens, max_output_tokens=max_output, temperature=0.0)
    start = time.perf_counter()
    ttft, text, finished = None, "", None
    async for delta in backend.generate(request):
        if ttft is None:
            ttft = (time.perf_counter() - start) * 1000
        if isinstance(delta, TextDelta):
            text += delta.text
        elif isinstance(delta, Finished):
            finished = delta
    assert ttft is not None and finished is not None
    return ttft, text, finished


async def bench(args: argparse.Namespace) -> list[Turn]:
    chat = smollm2_chat_format()
    warm = LlamaBackend(n_ctx=args.n_ctx, n_threads=args.threads)
    cold = LlamaBackend(n_ctx=args.n_ctx, n_threads=args.threads, kv_cache_bytes=0)
    base = LlamaBackend(n_ctx=args.n_ctx, n_threads=args.threads, kv_cache_bytes=0) if args.baseline else None
    chains = [
        [
            {"role": "system", "content": "You are a concise assistant. Answer from the notes."},
            {"role": "user", "content": f"Notes:\n{document(c, args.context)}\n\nRead these notes."},
        ]
        for c in range(args.chains)
    ]
    rows: list[Turn] = []
    for turn in range(1, args.turns + 1):
        for c, messages in enumerate(chains):
            tokens = chat.tokens(messages)
            ms, text, done = await first_token(warm, tokens, args.output_tokens)
            row = Turn(c, turn, len(tokens), done.cached_tokens, ms)
            if turn > 1:
                cold.drop_state()
                row.cold_ms = (await first_token(cold, tokens, 1))[0]
            if base is not None:
                row.baseline_ms, _, base_done = await first_token(base, tokens, args.output_tokens)
                row.baseline_cached = base_done.cached_tokens
            rows.append(row)
            print(_row(row), flush=True)
            messages += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": QUESTIONS[(turn + c) % len(QUESTIONS)]},
            ]
    stats = warm.kv_reading("smollm2-135m")
    print(f"snapshots held: {stats.snapshots.entries}, {stats.snapshots.bytes / 2**20:.1f} MiB", flush=True)
    for backend in (warm, cold, base):
        if backend is not None:
            await backend.close()
    return rows


def _row(row: Turn) -> str:
    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value:.0f}"

    base = "" if row.baseline_ms is None else f"  baseline {ms(row.baseline_ms)} ms (cached {row.baseline_cached})"
    return (
        f"chain {row.chain} turn {row.turn}: prompt {row.prompt_tokens} cached {row.cached_tokens}  "
        f"warm {ms(row.warm_ms)} ms  cold {ms(row.cold_ms)} ms{base}"
    )


def summary(rows: list[Turn]) -> str:
    later = [row for row in rows if row.turn > 1]
    warm = statistics.median(row.warm_ms for row in later)
    cold = statistics.median(row.cold_ms or 0.0 for row in later)
    lines = [
        f"turns 2+ ({len(later)} prompts, median {statistics.median(r.prompt_tokens for r in later):.0f} tokens, "
        f"median new {statistics.median(r.prompt_tokens - r.cached_tokens for r in later):.0f}):",
        f"  warm TTFT median {warm:.0f} ms, cold prefill TTFT median {cold:.0f} ms, ratio {warm / cold:.3f}",
    ]
    if later[0].baseline_ms is not None:
        base = statistics.median(row.baseline_ms or 0.0 for row in later)
        lines.append(f"  baseline (live context only) TTFT median {base:.0f} ms, ratio {base / cold:.3f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chains", type=int, default=2, help="chains run interleaved")
    parser.add_argument("--turns", type=int, default=4, help="turns per chain")
    parser.add_argument("--context", type=int, default=1500, help="tokens of each chain's opening document")
    parser.add_argument("--output-tokens", type=int, default=24, help="output tokens per turn (greedy)")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    parser.add_argument("--n-ctx", type=int, default=4096, help="context window")
    parser.add_argument("--baseline", action="store_true", help="also run without snapshots (live context only)")
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} cores", flush=True)
    rows = asyncio.run(bench(args))
    print(summary(rows))
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
