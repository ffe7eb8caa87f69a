"""The secrets detector: credentials in well-known formats and high-entropy `password = "…"` assignments."""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

import msgspec
from ahocorasick_rs import AhoCorasick

from hotloop.safety.base import Finding, redact, scan_uncached
from hotloop.safety.text import item_texts
from hotloop.wire.items import ContextItem

# A chain remembers at most this many fingerprints; past it, a new secret is still reported but not remembered,
# so it may be reported again if it reappears (bounds the state a hostile chain can grow).
MAX_REMEMBERED = 4096

_PLACEHOLDERS = (
    "example",
    "xxxx",
    "changeme",
    "change_me",
    "change-me",
    "placeholder",
    "your",
    "redacted",
    "dummy",
    "sample",
    "password",
    "secret",
    "token",
    "****",
    "...",
    "…",
    "<",
    ">",
    "${",
    "{{",
    "%(",
)


class SecretsState(msgspec.Struct, frozen=True):
    """Fingerprints (keyed BLAKE2b, 16 bytes) of the secrets already reported in this chain.

    A secret is reported once per chain, at its first occurrence: a tool output or a pasted file that repeats it
    in a later turn is not counted again. Fingerprints are one-way and only taken of high-entropy strings, so the
    state holds nothing that gives a secret back; a fork shares its parent's set and grows its own copy.
    """

    seen: frozenset[bytes] = frozenset()


def shannon_entropy(text: str) -> float:
    """Bits per character of `text` (0 for one repeated character; at most log2(len(text)))."""
    if not text:
        return 0.0
    size = len(text)
    return -sum(count / size * math.log2(count / size) for count in Counter(text).values())


def fingerprint(secret: str) -> bytes:
    return hashlib.blake2b(secret.encode(), digest_size=16, person=b"hotloop.secrets").digest()


def _placeholder(value: str) -> bool:
    lowered = value.lower()
    return any(word in lowered for word in _PLACEHOLDERS)


def _random(value: str, min_entropy: float) -> bool:
    return not _placeholder(value) and shannon_entropy(value) >= min_entropy


def _alnum_mix(value: str) -> bool:
    """Has a digit and a letter: what random tokens have and identifiers, words and kebab-case names rarely do."""
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def _jwt_header(value: str) -> bool:
    head = value.split(".", 1)[0]
    try:
        decoded = msgspec.json.decode(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (binascii.Error, ValueError, msgspec.DecodeError):
        return False
    return isinstance(decoded, dict) and ("alg" in decoded or "typ" in decoded)


Extract = Callable[[re.Match[str], str], tuple[int, int, str] | None]


def _group(index: int, check: Callable[[str], bool]) -> Extract:
    def extract(match: re.Match[str], _text: str) -> tuple[int, int, str] | None:
        value = match.group(index)
        return (match.start(index), match.end(index), value) if check(value) else None

    return extract


def _after_prefix(prefix: re.Pattern[str], check: Callable[[str], bool]) -> Callable[[str], bool]:
    return lambda value: check(prefix.sub("", value, count=1))


_END_PEM = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_NOISE = re.compile(r"\\n|\\r|\s")
_B64_CHARS = re.compile(r"[A-Za-z0-9+/=]")


def _pem(match: re.Match[str], text: str) -> tuple[int, int, str] | None:
    """The key body (up to the END line, or 4 KiB): a bare header mentioned in prose is not a key."""
    start = match.end()
    end = _END_PEM.search(text, start, start + 16384)
    stop = end.start() if end else min(len(text), start + 4096)
    body = _PEM_NOISE.sub("", text[start:stop])
    if len(_B64_CHARS.findall(body[:256])) < 32 or _placeholder(body[:64]):
        return None
    return match.start(), end.end() if end else stop, body


def _generic(match: re.Match[str], _text: str) -> tuple[int, int, str] | None:
    quoted = match.group(3) is not None
    index = 3 if quoted else 4
    value = match.group(index)
    if "://" in value or value.startswith("/") or _placeholder(value):
        return None
    has_upper = any(c.isupper() for c in value)
    has_lower = any(c.islower() for c in value)
    has_other = any(not c.isalnum() for c in value)
    mixed = _alnum_mix(value) or (quoted and has_upper and has_lower and has_other)
    if not mixed or shannon_entropy(value) < 3.2:
        return None
    return match.start(index), match.end(index), value


class _Rule(msgspec.Struct, frozen=True):
    """A regex, run only where one of its anchors occurs: `pattern.match` at each occurrence minus each offset in
    `backs` (the regex engine has no fast path for patterns that open with a lookbehind or an alternation)."""

    name: str
    pattern: re.Pattern[str]
    anchors: tuple[str, ...]  # literal substrings, of the lowercased text when `fold`
    extract: Extract
    backs: tuple[int, ...] | None = (0,)  # None: the pattern opens with a literal; scan with `finditer`
    fold: bool = False


_SK = re.compile(r"^sk-(?:proj-|svcacct-|admin-)?")
_GENERIC = re.compile(
    r"(?i)(password|passwd|passphrase|pwd|secret|token|api[_\-]?key|apikey|access[_\-]?key|auth[_\-]?key"
    r"|private[_\-]?key|credentials?)"
    r"[\"'`]?[ \t]*(?::=|=>|=|:)[ \t]*"
    r"(?:([\"'`])([^\"'`\s\\]{10,256})\2|([A-Za-z0-9_\-+/=!@$%^&*~]{10,256})(?=[\s,;#]|$))"
)
_SK_ANT = re.compile(r"^sk-ant-(?:[a-z]+[0-9]*-)?")

# Priority order: where two rules claim overlapping text, the earlier (more specific) one wins.
RULES: tuple[_Rule, ...] = (
    _Rule(
        "private_key",
        re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
        ("PRIVATE KEY",),
        _pem,
        backs=None,
    ),
    _Rule(
        "jwt",
        re.compile(r"(?<![A-Za-z0-9_\-])eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"),
        ("eyJ",),
        _group(0, lambda value: _jwt_header(value) and not _placeholder(value)),
    ),
    _Rule(
        "anthropic_api_key",
        re.compile(r"(?<![A-Za-z0-9_\-])sk-ant-[A-Za-z0-9_\-]{32,}(?![A-Za-z0-9_\-])"),
        ("sk-ant-",),
        _group(0, _after_prefix(_SK_ANT, lambda body: _alnum_mix(body) and _random(body, 3.5))),
    ),
    _Rule(
        "openai_api_key",
        re.compile(r"(?<![A-Za-z0-9_\-])sk-[A-Za-z0-9_\-]{32,}(?![A-Za-z0-9_\-])"),
        ("sk-",),
        _group(0, _after_prefix(_SK, lambda body: _alnum_mix(body) and _random(body, 3.5))),
    ),
    _Rule(
        "github_pat",
        re.compile(r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{50,255}(?![A-Za-z0-9_])"),
        ("github_pat_",),
        _group(0, lambda value: _random(value[11:], 3.5)),
    ),
    _Rule(
        "github_token",
        re.compile(r"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{36,251}(?![A-Za-z0-9_])"),
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        _group(0, lambda value: _random(value[4:], 3.5)),
    ),
    _Rule(
        "aws_access_key_id",
        re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        ("AKIA", "ASIA"),
        _group(0, lambda value: _random(value[4:], 2.5)),
    ),
    _Rule(
        "aws_secret_access_key",
        re.compile(
            r"(?i)(?:(?:aws_?)?secret_?access_?key|aws_?secret_?key)[\"']?\s*[:=]+\s*[\"']?"
            r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        ("secret_access", "secretaccess", "secret_key", "secretkey"),
        _group(1, lambda value: _random(value, 3.5)),
        backs=None,
        fold=True,
    ),
    _Rule(
        "slack_webhook",
        re.compile(r"https://hooks\.slack\.com/services/T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/[A-Za-z0-9]{20,}"),
        ("hooks.slack.com",),
        _group(0, lambda value: _random(value.rsplit("/", 1)[-1], 3.0)),
        backs=None,
    ),
    _Rule(
        "slack_token",
        re.compile(r"(?<![A-Za-z0-9_\-])xox[abposr]-[0-9A-Za-z\-]{10,250}(?![0-9A-Za-z\-])"),
        ("xox",),
        _group(0, lambda value: sum(c.isdigit() for c in value) >= 4 and _random(value[5:], 3.0)),
    ),
    _Rule(
        "google_api_key",
        re.compile(r"(?<![A-Za-z0-9_\-])AIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])"),
        ("AIza",),
        _group(0, lambda value: _random(value[4:], 3.5)),
    ),
    _Rule(
        "stripe_live_key",
        re.compile(r"(?<![A-Za-z0-9_])(?:sk|rk)_live_[0-9A-Za-z]{16,247}(?![0-9A-Za-z])"),
        ("_live_",),
        _group(0, lambda value: _random(value[8:], 3.5)),
        backs=(2,),
    ),
    _Rule(
        "generic_secret",
        _GENERIC,
        ("pass", "pwd", "secret", "token", "credential"),
        _generic,
        fold=True,
    ),
    _Rule(
        "generic_secret",
        _GENERIC,
        ("key",),  # api_key, apikey, access-key, auth_key, private_key, …
        _generic,
        backs=(3, 4, 5, 6, 7, 8),
        fold=True,
    ),
)


class _Anchors:
    """Every rule's anchors, found in a text in one pass per case (a search per anchor cost ~100 µs on 8 KB)."""

    def __init__(self, rules: Sequence[_Rule]) -> None:
        self.words = {
            fold: sorted({anchor for rule in rules if rule.fold == fold for anchor in rule.anchors})
            for fold in (False, True)
        }
        self.automata = {fold: AhoCorasick(words) for fold, words in self.words.items()}

    def find(self, text: str, lowered: str) -> dict[tuple[bool, str], list[int]]:
        """Where each anchor occurs, overlaps included, in order: by (fold, anchor)."""
        found: dict[tuple[bool, str], list[int]] = {}
        for fold, haystack in ((False, text), (True, lowered)):
            words = self.words[fold]
            for index, start, _ in self.automata[fold].find_matches_as_indexes(haystack, overlapping=True):
                found.setdefault((fold, words[index]), []).append(start)
        for places in found.values():
            places.sort()
        return found


ANCHORS = _Anchors(RULES)


def _matches(rule: _Rule, text: str, anchors: dict[tuple[bool, str], list[int]]) -> Iterator[re.Match[str]]:
    if rule.backs is None:
        if any((rule.fold, anchor) in anchors for anchor in rule.anchors):
            yield from rule.pattern.finditer(text)
        return
    for anchor in rule.anchors:
        for at in anchors.get((rule.fold, anchor), ()):
            for back in rule.backs:
                if at >= back:
                    match = rule.pattern.match(text, at - back)
                    if match is not None:
                        yield match


def find_secrets(text: str) -> list[tuple[str, str]]:
    """(rule, secret) for each secret in `text`, in order of position; overlaps go to the more specific rule."""
    lowered = text.lower()
    if len(lowered) != len(text):  # a few characters lowercase to two; keep offsets aligned
        lowered = "".join(char if len(char.lower()) != 1 else char.lower() for char in text)
    anchors = ANCHORS.find(text, lowered)
    claimed: list[tuple[int, int]] = []
    found: list[tuple[int, str, str]] = []
    for rule in RULES:
        for match in _matches(rule, text, anchors):
            hit = rule.extract(match, text)
            if hit is None:
                continue
            start, end, value = hit
            if any(start < other_end and other_start < end for other_start, other_end in claimed):
                continue
            claimed.append((start, end))
            found.append((start, rule.name, value))
    found.sort()
    return [(name, value) for _, name, value in found]


# What the detector finds in one item: (rule, fingerprint, redacted excerpt) per secret, in order of position.
SecretHit = tuple[str, bytes, str]
_HIT_SIZE = 240  # bytes per cached hit besides its strings: the tuple, the fingerprint, two str headers


class SecretsClassifier:
    """Credentials in any text of the new items: messages, call arguments and inputs, tool outputs, reasoning."""

    name = "secrets"
    version = 1  # of what `analyze` returns (part of the scan cache's key)

    def initial_state(self) -> SecretsState:
        return SecretsState()

    def texts(self, item: ContextItem) -> tuple[str, ...] | None:
        texts = tuple(item_texts(item))
        return texts or None

    def analyze(self, texts: tuple[str, ...]) -> tuple[SecretHit, ...]:
        """The secrets in one item's texts, fingerprinted and redacted (the secret itself is not kept)."""
        return tuple(
            (rule, fingerprint(secret), redact(secret)) for text in texts for rule, secret in find_secrets(text)
        )

    def result_size(self, result: tuple[SecretHit, ...]) -> int:
        return sum(_HIT_SIZE + len(rule) + len(excerpt) for rule, _, excerpt in result)

    def fold(
        self, state: SecretsState, results: Sequence[tuple[int, tuple[SecretHit, ...]]]
    ) -> tuple[SecretsState, list[Finding]]:
        """Report each secret at its first occurrence in the chain."""
        seen = state.seen
        added: set[bytes] = set()
        findings: list[Finding] = []
        for index, hits in results:
            for rule, key, excerpt in hits:
                if key in seen or key in added:
                    continue
                if len(seen) + len(added) < MAX_REMEMBERED:
                    added.add(key)
                findings.append(Finding(classifier=self.name, rule=rule, index=index, excerpt=excerpt))
        if not added:
            return state, findings
        return SecretsState(seen | added), findings

    def scan(self, state: SecretsState, items: Sequence[ContextItem]) -> tuple[SecretsState, list[Finding]]:
        return scan_uncached(self, state, items)
