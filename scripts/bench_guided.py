"""The cost of smollm2's guided decoding (backends/local/guided.py), side by side in one run: milliseconds per
generated token with no logits processor, with the guided processor over a grammar that allows any text (its mask
is computed and applied every token, but the text is unchanged), and with an empty processor; the mask's own time.

    .venv/bin/python scripts/bench_guided.py [--tokens 64] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import numpy as np

from hotloop.backends.local.gguf import load_llama
from hotloop.backends.local.guided import GuidedLogits

# A schema whose call input is any string: the mask is real work on every token of the input, no token is refused.
SCHEMA = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}


def per_token_ms(llama: Any, prompt: list[int], processors: list[Any] | None, tokens: int) -> float:
    started = time.perf_counter()
    made = 0
    for _ in llama.generate(prompt, temp=0.0, logits_processor=processors, reset=True):
        made += 1
        if made >= tokens:
            break
    return (time.perf_counter() - started) / made * 1000


class Timed:
    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seconds: list[float] = []

    def __call__(self, ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        started = time.perf_counter()
        out: np.ndarray = self.inner(ids, scores)
        self.seconds.append(time.perf_counter() - started)
        return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    llama = load_llama(n_ctx=1024, n_threads=2)
    from llguidance import LLMatcher

    grammar = LLMatcher.grammar_from_json_schema(json.dumps(SCHEMA))
    head = llama.tokenize(b"<|im_start|>user\nWrite a long story.<|im_end|>\n<|im_start|>assistant\n", special=True)
    opened = llama.tokenize(b'{"input": "', add_bos=False, special=False)  # the call's start: the mask's from here
    prompt = head + opened
    per_token_ms(llama, prompt, None, 8)  # warm
    results: dict[str, list[float]] = {"none": [], "empty": [], "guided": []}
    mask_us: list[float] = []
    for _ in range(args.runs):
        results["none"].append(per_token_ms(llama, prompt, None, args.tokens))
        results["empty"].append(per_token_ms(llama, prompt, [lambda ids, scores: scores], args.tokens))
        guided = GuidedLogits(llama, grammar, len(head), lazy=False)  # as if the model had written `{"input": "`
        timed = Timed(guided)
        results["guided"].append(per_token_ms(llama, prompt, [timed], args.tokens))
        mask_us += [seconds * 1e6 for seconds in timed.seconds]
    for name, values in results.items():
        print(f"{name:7} median {statistics.median(values):6.2f} ms/token  (min {min(values):.2f})")
    ratio = statistics.median(results["guided"]) / statistics.median(results["none"])
    print(f"guided/none {ratio:.3f}; the processor itself: median {statistics.median(mask_us):.0f} us a token")


if __name__ == "__main__":
    main()
