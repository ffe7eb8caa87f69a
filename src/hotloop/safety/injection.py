"""The prompt-injection heuristic: weighted phrase and character rules over what tools return."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Sequence

import msgspec
from ahocorasick_rs import AhoCorasick

from hotloop.safety.base import Finding, clip, redact, scan_uncached
from hotloop.safety.secrets import find_secrets
from hotloop.safety.text import is_tool_output, tool_output_texts
from hotloop.wire.items import ContextItem

THRESHOLD = 1.0  # a tool output scoring at least this is a finding on its own
DECAY = 0.7  # the chain's pressure is multiplied by this at every tool output
CHAIN_THRESHOLD = 1.5  # pressure of sub-threshold signals that makes an `accumulated` finding
_B64_RUNS_CHECKED = 8
_B64_DECODED_CHARS = 4096
_PRINTABLE = bytes([9, 10, 13, *range(32, 127)])


class InjectionState(msgspec.Struct, frozen=True):
    """What the chain's tool outputs have looked like so far.

    `pressure` is an exponentially decaying sum of the scores of tool outputs that stayed below the threshold:
    weak signals spread over consecutive outputs (a role header here, "you must call …" there) add up to an
    `accumulated` finding, which a per-output score cannot see. Each tool output multiplies it by `DECAY`; a
    finding resets it. `scanned` and `flagged` count tool outputs, for metrics. Scanning turn by turn gives the
    same numbers as scanning the whole chain at once (the same operations in the same order).
    """

    scanned: int = 0
    flagged: int = 0
    pressure: float = 0.0


class _Signal(msgspec.Struct, frozen=True):
    """A case-insensitive regex, run only if the lowercased text has a word of each group in `needs` (words that
    every match contains: a cheap test that skips the regex for most text). With `starts` (the words a match can
    begin with), the regex is tried only where one of them occurs: `re` has no fast path for a pattern that opens
    with an alternation, and a search would try every position."""

    name: str
    weight: float
    pattern: re.Pattern[str]
    needs: tuple[tuple[str, ...], ...]
    starts: tuple[str, ...] = ()

    def search(self, text: str, lowered: str, present: set[str]) -> re.Match[str] | None:
        """The first match; `present`: the need words found in `lowered` (all of them, `NEEDS`)."""
        if not all(any(word in present for word in group) for group in self.needs):
            return None
        if not self.starts:
            return self.pattern.search(text)
        first: re.Match[str] | None = None
        for word in self.starts:
            at = lowered.find(word)
            while at >= 0 and (first is None or at < first.start()):
                match = self.pattern.match(text, at)
                if match is not None:
                    first = match
                    break
                at = lowered.find(word, at + 1)
        return first


def _signal(
    name: str,
    weight: float,
    pattern: str,
    *needs: tuple[str, ...],
    starts: tuple[str, ...] = (),
    flags: int = 0,
) -> _Signal:
    return _Signal(name, weight, re.compile(pattern, flags | re.IGNORECASE), needs, starts)


# Phrase rules: they run on the text of the output, and again on text decoded from base64 runs.
PHRASES: tuple[_Signal, ...] = (
    _signal(
        "ignore_instructions",
        1.0,
        r"\b(?:ignore|disregard|forget|override|bypass)\b[^.\n]{0,40}?\b(?:previous|prior|above|earlier|preceding"
        r"|foregoing|former|original|initial|system|all|any|your)\s+(?:\w+\s+)?(?:instructions?|prompts?|rules"
        r"|directions|directives|guidelines|guardrails|constraints)\b"
        r"|\bforget\s+(?:everything|all)\s+(?:above|before|you\s+(?:were|have\s+been)\s+told)\b",
        ("ignore", "disregard", "forget", "override", "bypass"),
        starts=("ignore", "disregard", "forget", "override", "bypass"),
    ),
    _signal(
        "system_prompt_leak",
        1.0,
        r"\b(?:reveal|print|show|output|repeat|leak|display|dump|share|disclose|expose|tell\s+me|give\s+me"
        r"|what\s+(?:is|are))\b[^.\n]{0,40}?\b(?:system\s+prompt|initial\s+(?:prompt|instructions)"
        r"|hidden\s+(?:prompt|instructions)|developer\s+(?:message|prompt|instructions)"
        r"|your\s+(?:original\s+|initial\s+|secret\s+)?(?:instructions|prompt))\b",
        ("prompt", "instructions", "message"),
        starts=(
            "reveal",
            "print",
            "show",
            "output",
            "repeat",
            "leak",
            "display",
            "dump",
            "share",
            "disclose",
            "expose",
            "tell",
            "give",
            "what",
        ),
    ),
    _signal(
        "template_tokens",
        1.0,
        r"<\|(?:im_start|im_end|system|user|assistant|endoftext|eot_id|start_header_id|end_header_id"
        r"|begin_of_text)\|>|\[/?inst\]|<</?sys>>|<(?:start|end)_of_turn>",
        ("<|", "inst]", "sys>>", "_of_turn>"),
    ),
    _signal(
        "new_instructions",
        0.8,
        r"\b(?:new|updated|revised|real|actual|true|additional|important|urgent|secret)\s+(?:system\s+)?"
        r"(?:instructions?|directives?|system\s+prompt|orders)\s*:",
        ("instruction", "directive", "prompt", "orders"),
        (":",),
        starts=("new", "updated", "revised", "real", "actual", "true", "additional", "important", "urgent", "secret"),
    ),
    _signal(
        "jailbreak_persona",
        1.0,
        r"\byou\s+are\s+now\s+(?:dan\b|in\s+(?:developer|god|jailbreak|dan|unrestricted)\s+mode)"
        r"|\b(?:enable|enter|activate)\s+(?:developer|god|jailbreak|dan)\s+mode\b|\bdo\s+anything\s+now\b"
        r"|\b(?:act|behave)\s+as\s+(?:if\s+you\s+(?:are|were)\s+)?(?:an?\s+)?(?:unrestricted|unfiltered|jailbroken)\b",
        ("now", "mode", "anything", "act", "behave"),
        starts=("you", "enable", "enter", "activate", "do", "act", "behave"),
    ),
    _signal(
        "role_override",
        0.6,
        r"\byou\s+are\s+now\s+(?:an?|the|my|no\s+longer)\s"
        r"|\bfrom\s+now\s+on,?\s+you\s+(?:are|will|must|shall)\b"
        r"|\bpretend\s+(?:to\s+be|you\s+are)\b",
        ("now", "pretend"),
        starts=("you", "from", "pretend"),
    ),
    _signal(
        "addresses_the_model",
        0.7,
        r"\bif\s+you\s+are\s+an?\s+(?:ai|assistant|llm|language\s+model|agent|chatbot)\b"
        r"|\b(?:attention|note|message|instructions?)\s+(?:to|for)\s+(?:the\s+|any\s+)?(?:ai|assistant|llm|agent"
        r"|language\s+model)s?\b|\bdear\s+(?:ai|assistant|llm|agent)\b",
        ("ai", "assistant", "llm", "agent", "model", "chatbot"),
        starts=("if", "attention", "note", "message", "instruction", "dear"),
    ),
    _signal(
        "exfiltration_url",
        0.7,
        r"\b(?:send|post|upload|forward|exfiltrate|transmit|submit|email|leak)\b[^\n]{0,80}?\b(?:to|at|into)\s+"
        r"<?(?:https?|ftp)://"
        r"|!\[[^\]\n]{0,80}\]\(https?://[^)\s]{0,200}[?&][^)\s=]{1,40}=(?:\{|\$|%7b|<)",
        ("://",),
        starts=("send", "post", "upload", "forward", "exfiltrate", "transmit", "submit", "email", "leak", "!["),
    ),
    _signal(
        "tool_instruction",
        0.5,
        r"\b(?:you|the\s+(?:ai|assistant|agent|model))\s+(?:must|should|need\s+to|have\s+to|will|shall)\s+"
        r"(?:now\s+|immediately\s+|also\s+|first\s+)?(?:call|invoke|run|execute|use)\b",
        ("must", "should", "need", "have", "will", "shall"),
    ),
    _signal(
        "pipe_to_shell",
        0.6,
        r"\b(?:curl|wget)\b[^\n|]{0,200}\|\s*(?:sudo\s+)?(?:ba|z|da)?sh\b",
        ("curl", "wget"),
        ("|",),
        starts=("curl", "wget"),
    ),
    _signal(
        "template_header",
        0.6,
        r"^[ \t]*#{2,}[ \t]*(?:system|instructions?|assistant)[ \t]*:",
        ("##",),
        (":",),
        flags=re.MULTILINE,
    ),
    _signal(
        "role_header",
        0.4,
        r"^[ \t]*(?:system|assistant|developer)[ \t]*:",
        ("system", "assistant", "developer"),
        (":",),
        flags=re.MULTILINE,
    ),
)

# Every phrase rule's need words, found in a text in one pass (a search per word cost ~170 µs on 8 KB of tool output).
NEEDS = AhoCorasick(sorted({word for signal in PHRASES for group in signal.needs for word in group}))

# Character rules: they run on the text as it is.
_UNICODE_TAGS = re.compile("[\U000e0000-\U000e007f]+")
_ZERO_WIDTH = re.compile("[\u200b\u2060\u2061\u2062\u2063\u2064\u180e\ufeff]")  # a leading BOM is skipped
_BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")
_INVISIBLE = re.compile("[\u200b-\u200f\u2060-\u2064\u180e\ufeff\u202a-\u202e\u2066-\u2069\U000e0000-\U000e007f]")
_B64_RUN = re.compile(r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{40,}={0,2}")
# Before that regex (~110 µs on 8 KB of code), a test that needs no regex: the text's bytes with every base64
# character as `a` and any other as a space hold a run of 40 `a` only if the text holds a run the regex can match.
_B64_BYTES = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
_B64_TABLE = bytes(0x61 if byte in _B64_BYTES else 0x20 for byte in range(256))
_B64_LONG = b"a" * 40


class _Hit(msgspec.Struct, frozen=True):
    name: str
    weight: float
    excerpt: str


def _excerpt(text: str) -> str:
    """A matched phrase, secrets redacted before it is clipped (a cut secret would no longer be recognised)."""
    for _, secret in find_secrets(text):
        text = text.replace(secret, redact(secret))
    return clip(text)


def _lowered(text: str) -> str:
    """`text.lower()` with offsets kept (the few characters that lowercase to two stay as they are)."""
    lowered = text.lower()
    if len(lowered) == len(text):
        return lowered
    return "".join(char if len(char.lower()) != 1 else char.lower() for char in text)


def _phrase_hits(text: str) -> list[_Hit]:
    hits = []
    lowered = _lowered(text)
    present = set(NEEDS.find_matches_as_strings(lowered, overlapping=True))
    for signal in PHRASES:
        match = signal.search(text, lowered, present)
        if match is not None:
            hits.append(_Hit(signal.name, signal.weight, _excerpt(match.group(0))))
    return hits


def _decoded(run: str) -> str | None:
    head = run[: _B64_DECODED_CHARS - _B64_DECODED_CHARS % 4].rstrip("=")
    head = head[: len(head) - len(head) % 4]
    try:
        raw = base64.b64decode(head, validate=True)
    except (binascii.Error, ValueError):
        return None
    unprintable = len(raw.translate(None, _PRINTABLE))
    return raw.decode("ascii", "replace") if raw and unprintable <= 0.1 * len(raw) else None


def _hidden_characters(text: str) -> list[_Hit]:
    hits = []
    tags = _UNICODE_TAGS.search(text)
    if tags is not None:
        hits.append(_Hit("unicode_tags", 1.0, clip(tags.group(0), 24)))
    zero_width = _ZERO_WIDTH.findall(text, 1 if text.startswith("\ufeff") else 0)
    if len(zero_width) >= 3:
        hits.append(_Hit("zero_width", 0.5, clip("".join(zero_width[:4]), 24)))
    bidi = _BIDI.search(text)
    if bidi is not None:
        hits.append(_Hit("bidi_controls", 0.4, clip(bidi.group(0), 24)))
    return hits


def score_text(text: str) -> tuple[float, list[_Hit]]:
    """The injection score of one tool output's text and the rules that made it (each rule counts once)."""
    # Phrases are matched with invisible characters taken out ("ig\u200bnore previous instructions").
    visible = text if text.isascii() else _INVISIBLE.sub("", text)
    hits = _phrase_hits(visible)
    if not text.isascii():
        hits += _hidden_characters(text)
    runs = _B64_LONG in text.encode("utf-8", "surrogatepass").translate(_B64_TABLE)
    for number, run in enumerate(_B64_RUN.finditer(text) if runs else ()):
        if number == _B64_RUNS_CHECKED:
            break
        decoded = _decoded(run.group(0))
        inner = _phrase_hits(decoded) if decoded is not None else []
        strong = [hit for hit in inner if hit.weight >= 0.7]
        if strong:
            hits.append(_Hit("encoded_instructions", 1.0, clip("base64: " + strong[0].excerpt)))
            break
    return sum(hit.weight for hit in hits), hits


class Scored(msgspec.Struct, frozen=True):
    """What the heuristic makes of one tool output with at least one hit: its score, the rules that matched (in
    the order they were tried) and the strongest one (the first of the strongest), with its excerpt."""

    score: float
    rules: tuple[str, ...]
    top: str
    excerpt: str


_SCORED_SIZE = 320  # bytes per cached result besides its strings: the struct, the tuple, str headers


class InjectionClassifier:
    """Prompt injection in tool outputs only: a user or developer writing instructions is not an attack."""

    name = "injection"
    version = 1  # of what `analyze` returns (part of the scan cache's key)

    def initial_state(self) -> InjectionState:
        return InjectionState()

    def texts(self, item: ContextItem) -> tuple[str, ...] | None:
        if not is_tool_output(item):
            return None
        return ("\n".join(tool_output_texts(item)),)

    def analyze(self, texts: tuple[str, ...]) -> Scored | None:
        """One tool output's score (None: no rule matched)."""
        score, hits = score_text("\n".join(texts))
        if not hits:
            return None
        top = max(hits, key=lambda hit: hit.weight)
        return Scored(score, tuple(hit.name for hit in hits), top.name, top.excerpt)

    def result_size(self, result: Scored | None) -> int:
        if result is None:
            return 0
        return _SCORED_SIZE + sum(8 + len(rule) for rule in result.rules) + len(result.top) + len(result.excerpt)

    def fold(
        self, state: InjectionState, results: Sequence[tuple[int, Scored | None]]
    ) -> tuple[InjectionState, list[Finding]]:
        """Each tool output decays the chain's pressure; a strong one is a finding, weak ones add up."""
        scanned, flagged, pressure = state.scanned, state.flagged, state.pressure
        findings: list[Finding] = []
        for index, scored in results:
            scanned += 1
            pressure *= DECAY
            if scored is None:
                continue
            if scored.score >= THRESHOLD:
                rule, reported = scored.top, scored.score
            else:
                pressure += scored.score
                if pressure < CHAIN_THRESHOLD:
                    continue
                rule, reported = "accumulated", pressure
            flagged += 1
            pressure = 0.0
            findings.append(
                Finding(classifier=self.name, rule=rule, index=index, excerpt=scored.excerpt, score=round(reported, 3))
            )
        if scanned == state.scanned:
            return state, findings
        return InjectionState(scanned, flagged, pressure), findings

    def scan(self, state: InjectionState, items: Sequence[ContextItem]) -> tuple[InjectionState, list[Finding]]:
        return scan_uncached(self, state, items)
