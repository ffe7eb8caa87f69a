"""The safety stage: the configured classifiers over a turn's new items, one verdict, the chain's next states."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Any, NamedTuple, get_args

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
# New text (UTF-8 bytes, all classifiers together) from which `scan_async` analyzes on a worker thread: about a
# millisecond of regex work, below which a thread hop costs more than it saves.
OFFLOAD_BYTES = 64 * 1024
CACHED_CHARS = 256 * 1024  # an item's texts longer than this are analyzed every time, never hashed for the cache

# One state per enabled classifier, in the stage's order; immutable, shared by every turn forked from it.
SafetyStates = tuple[Any, ...]


class SafetyResult(msgspec.Struct, frozen=True, kw_only=True):
    """What the stage decided for one turn's new items."""

    verdict: Verdict
    findings: tuple[Finding, ...]
    states: SafetyStates  # the chain's states after these items: the next turn's input
    elapsed_s: float = 0.0  # time.perf_counter() around the scan

    def then(self, later: SafetyResult, offset: int) -> SafetyResult:
        """One scan of two batches: `later` was scanned from this result's states, `offset` items after it."""
        moved = tuple(msgspec.structs.replace(finding, index=finding.index + offset) for finding in later.findings)
        return SafetyResult(
            verdict=worst([self.verdict, later.verdict]),
            findings=self.findings + moved,
            states=later.states,
            elapsed_s=later.elapsed_s,
        )

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

    def _plan(
        self,
        classifier: Classifier[Any, Any],
        items: Sequence[ContextItem],
        digests: dict[tuple[int, ...], tuple[tuple[str, ...], bytes, int]],
    ) -> list[_Planned]:
        """Each item `classifier` reads, with its result where the cache has it (`_MISSING` where not).

        `digests` remembers, for this scan, the content key of the texts already hashed (by the texts' identities,
        the texts kept alive with it), so the text of a tool output that every classifier reads is hashed once.
        """
        cache = self.cache
        planned: list[_Planned] = []
        for index, item in enumerate(items):
            texts = classifier.texts(item)
            if texts is None:
                continue
            if not cache.enabled or sum(map(len, texts)) > CACHED_CHARS:
                # Not cached: hashing megabytes on the event loop would hold it (the analysis itself may move).
                size = sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)
                planned.append(_Planned(index, texts, None, size, _MISSING))
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
            planned.append(_Planned(index, texts, key, size, result if hit else _MISSING))
        return planned

    def _fill(self, classifier: Classifier[Any, Any], planned: list[_Planned], analyzed: list[Any]) -> list[Any]:
        """The results in item order, the new ones counted and cached (on the event loop, like every cache write)."""
        fresh = iter(analyzed)
        results: list[tuple[int, Any]] = []
        for entry in planned:
            result = entry.result
            if result is _MISSING:
                result = next(fresh)
                self.bytes_scanned += entry.size
                if entry.key is not None:
                    self.cache.put(entry.key, result, classifier.result_size(result))
            results.append((entry.position, result))
        return results

    def _plans(self, new_items: Sequence[ContextItem]) -> list[list[_Planned]]:
        digests: dict[tuple[int, ...], tuple[tuple[str, ...], bytes, int]] = {}
        return [self._plan(classifier, new_items, digests) for classifier, _ in self.classifiers]

    def _result(self, states: SafetyStates, plans: list[list[_Planned]], analyzed: list[list[Any]]) -> SafetyResult:
        verdicts: list[Verdict] = []
        findings: list[Finding] = []
        next_states: list[Any] = []
        for (classifier, action), state, planned, fresh in zip(self.classifiers, states, plans, analyzed, strict=True):
            state, found = classifier.fold(state, self._fill(classifier, planned, fresh))
            next_states.append(state)
            if found:
                findings.extend(found)
                verdicts.append("block" if action == "block" else "flag")
        return SafetyResult(verdict=worst(verdicts), findings=tuple(findings), states=tuple(next_states))

    def _states(self, states: SafetyStates | None) -> SafetyStates:
        if states is None:
            return self.initial_states()
        if len(states) != len(self.classifiers):
            raise ValueError(f"expected {len(self.classifiers)} safety states, got {len(states)}")
        return states

    def _analyze(self, plans: list[list[_Planned]]) -> list[list[Any]]:
        """The classifiers' work on the texts the cache had no result for: pure, so it may run on any thread."""
        return [
            [classifier.analyze(entry.texts) for entry in planned if entry.result is _MISSING]
            for (classifier, _), planned in zip(self.classifiers, plans, strict=True)
        ]

    def scan(self, states: SafetyStates | None, new_items: Sequence[ContextItem]) -> SafetyResult:
        """Scan a turn's new items from the parent's `states` (None: a new chain); `states` is never changed."""
        start = time.perf_counter()
        states = self._states(states)
        plans = self._plans(new_items)
        result = self._result(states, plans, self._analyze(plans))
        return msgspec.structs.replace(result, elapsed_s=time.perf_counter() - start)

    async def scan_async(
        self, states: SafetyStates | None, new_items: Sequence[ContextItem], executor: Executor | None = None
    ) -> SafetyResult:
        """`scan`, with the analysis of long new texts (a big tool output) on a worker thread: a regex pass over
        megabytes would hold the event loop, and every session on it, for as long. Cache reads and writes stay
        on the event loop."""
        start = time.perf_counter()
        states = self._states(states)
        plans = self._plans(new_items)
        fresh = sum(entry.size for planned in plans for entry in planned if entry.result is _MISSING)
        if fresh < OFFLOAD_BYTES:
            analyzed = self._analyze(plans)
        else:
            analyzed = await asyncio.get_running_loop().run_in_executor(executor, self._analyze, plans)
        result = self._result(states, plans, analyzed)
        return msgspec.structs.replace(result, elapsed_s=time.perf_counter() - start)


class _Planned(NamedTuple):
    position: int
    texts: tuple[str, ...]
    key: bytes | None
    size: int  # UTF-8 bytes of `texts`
    result: Any  # `_MISSING` until analyzed


_MISSING: Any = object()
