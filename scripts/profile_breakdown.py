"""Where a turn's CPU goes, from py-spy's raw stacks (`scripts/compare_agentic_api.py --profile DIR` writes one file
per measured rollout): `python scripts/profile_breakdown.py DIR/*.txt [--rate 1000] [--turns 40] [--top 0]`.

Each stack is charged to the first part of the turn its frames name, read from the innermost frame outwards
(`PARTS`, in that order), so a socket write inside the event builder counts as the write. Prints µs per turn for
each part and file, as a markdown table; `--top N` adds each file's N hottest innermost frames.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

# (part, substrings of a frame that put a stack in it); the first part whose substring a frame holds wins, frame by
# frame from the innermost.
PARTS: list[tuple[str, tuple[str, ...]]] = [
    ("client socket writes", ("FrameWriter._flush", "httptools_impl.py", "transports/sse.py")),
    ("upstream request write", ("_Connection.send", "Pool.post", "http_writer.py")),
    ("upstream stream read", ("net/http1.py", "upstream/sse.py", "client_proto.py", "aiohttp/streams.py")),
    ("upstream chunk decode", ("upstream/chat.py", "upstream/tokens.py", "chat.py", "tokens.py:")),
    ("tool-call parsing", ("streaming.py", "toolcalls", "hermes")),
    ("tokenizing", ("rust_tokenizer.py", "tokenizer", "incremental.py")),
    ("prompt JSON", ("prompt_json.py",)),
    ("safety", ("safety/",)),
    ("event building and framing", ("builder.py", "events.py", "wire/", "merge.py", "text_frame")),
    ("store", ("sqlite.py", "stores/")),
    ("metrics and timings", ("prometheus_client", "metrics.py", "timings.py", "mirror.py")),
    ("request parsing (WebSocket, HTTP)", ("websockets/", "protocol.py", "http.py", "starlette")),
    ("pipeline", ("hotloop/pipeline", "hotloop/backends")),
    ("event loop", ("asyncio/", "runners.py", "uvloop")),
]


def part_of(stack: str) -> str:
    frames = stack.split(";")
    for frame in reversed(frames):
        for part, marks in PARTS:
            if any(mark in frame for mark in marks):
                return part
    return "other"


def read(path: Path) -> tuple[Counter[str], Counter[str]]:
    """Samples per part, and per innermost frame."""
    parts: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        parts[part_of(stack)] += int(count)
        leaves[stack.split(";")[-1]] += int(count)
    return parts, leaves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--rate", type=int, default=1000, help="py-spy's samples a second")
    parser.add_argument("--turns", type=int, default=40, help="turns each file's rollout ran")
    parser.add_argument("--top", type=int, default=0, help="also the N hottest innermost frames of each file")
    args = parser.parse_args()
    read_files = {path.stem: read(path) for path in args.files}
    us_per_sample = 1e6 / args.rate / args.turns
    names = [name for name, _ in PARTS] + ["other"]
    print("| part (µs a turn) | " + " | ".join(read_files) + " |")
    print("|---|" + "---|" * len(read_files))
    for name in names:
        cells = [f"{parts[name] * us_per_sample:.0f}" for parts, _ in read_files.values()]
        print(f"| {name} | " + " | ".join(cells) + " |")
    totals = [f"**{sum(parts.values()) * us_per_sample:.0f}**" for parts, _ in read_files.values()]
    print("| **all** | " + " | ".join(totals) + " |")
    for stem, (_, leaves) in read_files.items() if args.top else ():
        print(f"\n{stem}:")
        for leaf, count in leaves.most_common(args.top):
            print(f"  {count * us_per_sample:7.0f} µs  {leaf}")


if __name__ == "__main__":
    main()
