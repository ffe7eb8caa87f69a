"""Decoding constrained by llguidance in-process (SmolLM2 via llama.cpp): a custom tool's regex grammar, which
llama.cpp's own JSON-schema converter cannot take (its regexes lack classes such as `\\d`, and a grammar it fails to
parse brings the process down), is enforced by masking the logits with llguidance's mask for the model's own
vocabulary. The schema is the call's (backends/output_schema.py); llguidance escapes the pattern inside the JSON
string itself."""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np

_lock = threading.Lock()
_tokenizers: dict[int, Any] = {}  # by id(llama): building one reads the whole vocabulary (~0.5 s)


def _tokenizer(llama: Any) -> Any:
    from llguidance.llamacpp import lltokenizer_from_vocab

    with _lock:
        found = _tokenizers.get(id(llama))
        if found is None:
            vocab = llama._model.vocab  # llama-cpp-python's llama_vocab_p
            found = _tokenizers[id(llama)] = lltokenizer_from_vocab(vocab)
        return found


class GuidedLogits:
    """A llama-cpp-python logits processor: before each token, the logits of the tokens the schema forbids are
    -inf; the tokens sampled since the last call advance the matcher. Built per generation, on its thread."""

    def __init__(self, llama: Any, schema: dict[str, Any], prompt_length: int) -> None:
        self._eos = int(llama.token_eos())
        from llguidance import LLMatcher
        from llguidance.numpy import allocate_token_bitmask

        tokenizer = _tokenizer(llama)
        grammar = LLMatcher.grammar_from_json_schema(json.dumps(schema))
        self._matcher = LLMatcher(tokenizer, grammar, log_level=0)
        if self._matcher.is_error():
            raise ValueError(self._matcher.get_error())
        self._mask = allocate_token_bitmask(1, tokenizer.vocab_size)
        self._seen = prompt_length

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        from llguidance.numpy import apply_token_bitmask_inplace, fill_next_token_bitmask

        new = [int(token) for token in input_ids[self._seen :]]
        self._seen = len(input_ids)
        if new:
            self._matcher.consume_tokens(new)
        if self._matcher.is_error():
            return scores  # lost (a token llguidance refused): the server's own check judges the input
        if self._matcher.is_stopped():  # the call is whole: only the end of the turn may follow
            scores[:] = -np.inf
            scores[self._eos] = 0.0
            return scores
        fill_next_token_bitmask(self._matcher, self._mask, 0)
        apply_token_bitmask_inplace(scores, self._mask)
        return scores
