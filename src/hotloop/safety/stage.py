"""The safety stage: the configured classifiers over a turn's new items, one verdict, the chain's next states."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, get_args

import msgspec

from hotloop.safety.base import Action, Classifier, Finding, Verdict, worst
from hotloop.safety.cache import DEFAULT_MAX_BYTES, ScanCache, content_key, result_key
from hotloop.safety.injection import InjectionClassifier
from hotloop.safety.secrets import SecretsClassifier
from hotloop.wire.items import ContextItem

# Every classifier the stage knows, by the name its setting uses (`safety_<name>`).
CLASSIFIERS: dict[str, Callable[[], Classifier[Any, Any]]] = {
    "secrets": SecretsClassifier,
    "injection": InjectionClassifier,
}
ACTIONS: tuple[str, ...] = get_args(Action)
SUMMARY_MAX = 512  # a response metadata value is at most 512 characters

# One state per enabled classifier, in the stage's order; immutable, shared by every turn forked from it.
SafetyStates = tuple[Any, ...]


class SafetyResult(msgspec.Struct, frozen=True, kw_only=True):
    """What the stage decided for one turn's new items."""

    verdict: Verdict
    findings: tuple[Finding, ...]
    states: SafetyStates  # the chain's states after these items: the next turn's input
    elapsed_s: float  # time.perf_counter() around the scan

    def summary(self) -> str:
        """One line for the `hotloop_safety` metadata value: verdict, then `classifier:rule@index` per finding."""
        text: str = self.verdict
        for number, finding in enumerate(self.findings):
            entry = f"; {finding.classifier}:{finding.rule}@{finding.index}"
            if len(text) + len(entry) > SUMMARY_MAX - 16:
                return f"{text}; +{len(self.findings) - number} more"
            text += entry
        return text


class SafetyStage:
    """The enabled classifiers, each with its action: a classifier with findings yields its action, worst wins.

    Per-item results are cached by content (safety/cache.py) in an LRU of at most `cache_max_bytes` (0: no
    cache), so a request that resends its whole history pays a hash and a lookup for each item already seen. The
    counters (`cache_hits`, `cache_misses`, `cache_bytes`, `bytes_scanned`) are cumulative, for metrics.
    """

    def __init__(
        self, classifiers: Sequence[tuple[Classifier[Any, Any], Action]], cache_max_bytes: int = DEFAULT_MAX_BYTES
    ) -> None:
        self.classifiers = tuple((classifier, action) for classifier, action in classifiers if action != "off")
        self.cache = ScanCache(cache_max_bytes)
        self.bytes_scanned = 0  # UTF-8 bytes of text through `analyze` (cache misses), summed over classifiers

    @classmethod
    def from_actions(cls, actions: Mapping[str, str], cache_max_bytes: int = DEFAULT_MAX_BYTES) -> SafetyStage:
        """E.g. `{"secrets": "flag", "injection": "block"}`; a name left out is off; raises `ValueError` naming
        an unknown classifier or action."""
        chosen: list[tuple[Classifier[Any, Any], Action]] = []
        for name, action in actions.items():
            if name not in CLASSIFIERS:
                raise ValueError(f"unknown safety classifier {name!r} (known: {', '.join(CLASSIFIERS)})")
            if action not in ACTIONS:
                raise ValueError(f"safety_{name}: unknown action {action!r} (use one of: {', '.join(ACTIONS)})")
            chosen.append((CLASSIFIERS[name](), action))  # type: ignore[arg-type]  # checked against ACTIONS
        return cls(chosen, cache_max_bytes)

    @property
    def enabled(self) -> bool:
        return bool(self.classifiers)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(classifier.name for classifier, _ in self.classifiers)

    @property
    def cache_hits(self) -> int:
        """Items (per classifier) whose result came from the cache."""
        return self.cache.hits

    @property
    def cache_misses(self) -> int:
        """Items (per classifier) analyzed because the cache had no result for them (0 with no cache)."""
        return self.cache.misses

    @property
    def cache_bytes(self) -> int:
        """The estimated bytes the cache holds now (at most `cache.max_bytes`)."""
        return self.cache.bytes

    def initial_states(self) -> SafetyStates:
        """The states of a chain with no items yet."""
        return tuple(classifier.initial_state() for classifier, _ in self.classifiers)

    def _results(
        self,
        classifier: Classifier[Any, Any],
        items: Sequence[ContextItem],
        digests: dict[tuple[int, ...], tuple[tuple[str, ...], bytes, int]],
    ) -> list[tuple[int, Any]]:
        """`(index, result)` of each item `classifier` reads, from the cache where it can.

        `digests` remembers, for this scan, the content key of the texts already hashed (by the texts' identities,
        the texts kept alive with it), so the text of a tool output that every classifier reads is hashed once.
        """
        cache = self.cache
        results: list[tuple[int, Any]] = []
        for index, item in enumerate(items):
            texts = classifier.texts(item)
            if texts is None:
                continue
            if not cache.enabled:
                self.bytes_scanned += sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)
                results.append((index, classifier.analyze(texts)))
                continue
            identity = tuple(map(id, texts))
            known = digests.get(identity)
            if known is None:
                content, size = content_key(texts)
                digests[identity] = (texts, content, size)
            else:
                _, content, size = known
            key = result_key(content, classifier.name, classifier.version)
            hit, result = cache.get(key)
            if not hit:
                result = classifier.analyze(texts)
                self.bytes_scanned += size
                cache.put(key, result, classifier.result_size(result))
            results.append((index, result))
        return results

    def scan(self, states: SafetyStates | None, new_items: Sequence[ContextItem]) -> SafetyResult:
        """Scan a turn's new items from the parent's `states` (None: a new chain); `states` is never changed."""
        start = time.perf_counter()
        if states is None:
            states = self.initial_states()
        elif len(states) != len(self.classifiers):
            raise ValueError(f"expected {len(self.classifiers)} safety states, got {len(states)}")
        verdicts: list[Verdict] = []
        findings: list[Finding] = []
        next_states: list[Any] = []
        digests: dict[tuple[int, ...], tuple[tuple[str, ...], bytes, int]] = {}
        for (classifier, action), state in zip(self.classifiers, states, strict=True):
            state, found = classifier.fold(state, self._results(classifier, new_items, digests))
            next_states.append(state)
            if found:
                findings.extend(found)
                verdicts.append("block" if action == "block" else "flag")
        return SafetyResult(
            verdict=worst(verdicts),
            findings=tuple(findings),
            states=tuple(next_states),
            elapsed_s=time.perf_counter() - start,
        )
