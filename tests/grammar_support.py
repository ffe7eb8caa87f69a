"""Grammars for the custom-tool tests: Codex's `apply_patch` Lark grammar (tests/data, Apache-2.0) and a few regexes,
each with an oracle that does not go through llguidance (Python `re`), to check what hotloop accepts and draws."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

APPLY_PATCH = (Path(__file__).parent / "data" / "codex_apply_patch.lark").read_text(encoding="utf-8")

# Codex's grammar is regular: this is it by hand (`.` stops at a newline in Lark, llguidance and `re` alike).
PATCH_ORACLE = re.compile(
    r"\*\*\* Begin Patch\n"
    r"(?:\*\*\* Add File: .+\n(?:\+.*\n)+"
    r"|\*\*\* Delete File: .+\n"
    r"|\*\*\* Update File: .+\n(?:\*\*\* Move to: .+\n)?(?:(?:(?:@@|@@ .+)\n|[-+ ].*\n)+(?:\*\*\* End of File\n)?)?"
    r")+"
    r"\*\*\* End Patch\n?"
)

PHONE = r"\d{3}-\d{4}"
ANSWER = r"(yes|no)( [a-z]+){0,3}"
DATE = r"(19|20)\d{2}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])"
REGEXES = (PHONE, ANSWER, DATE)

GOOD_PATCH = (
    "*** Begin Patch\n"
    "*** Add File: hello.txt\n+Hello, world!\n+\n"
    "*** Update File: src/app.py\n*** Move to: src/main.py\n@@ def greet():\n-    return 1\n+    return 2\n \n"
    "*** End of File\n"
    "*** Delete File: old.txt\n"
    "*** End Patch\n"
)
BAD_PATCHES = (
    GOOD_PATCH.replace("*** Add File: hello.txt", "*** Add File hello.txt"),
    GOOD_PATCH.replace("*** End Patch\n", ""),
    "*** Begin Patch\n*** End Patch\n",  # no hunk
    "*** Begin Patch\n*** Add File: a\n*** End Patch\n",  # an added file has lines
    "*** Begin Patch\n*** Update File: a\n@@ \n*** End Patch\n",  # `@@ ` takes a context
    "simulated input for apply_patch",
)


def patch_ok(text: str) -> bool:
    return PATCH_ORACLE.fullmatch(text) is not None


def lark_tool(name: str = "apply_patch", definition: str = APPLY_PATCH) -> dict[str, Any]:
    return {
        "type": "custom",
        "name": name,
        "description": "Edit files with a patch.",
        "format": {"type": "grammar", "syntax": "lark", "definition": definition},
    }


def regex_tool(name: str, definition: str) -> dict[str, Any]:
    return {"type": "custom", "name": name, "format": {"type": "grammar", "syntax": "regex", "definition": definition}}


# A recursive Lark grammar (no regex can carry it: tools/lark_json.py holds inputs to it), and its oracle.
SUM = 'start: expr\nexpr: NUMBER | "(" expr " + " expr ")"\nNUMBER: /[0-9]{1,3}/\n'


def sum_ok(text: str) -> bool:
    """`text` is a sum as SUM says: a number of 1-3 digits, or `(a + b)` of two sums."""

    def expr(at: int) -> int:
        if text.startswith("(", at):
            middle = expr(at + 1)
            if not text.startswith(" + ", middle):
                raise ValueError(at)
            end = expr(middle + 3)
            if not text.startswith(")", end):
                raise ValueError(end)
            return end + 1
        found = re.compile(r"[0-9]{1,3}").match(text, at)
        if found is None:
            raise ValueError(at)
        return found.end()

    try:
        return expr(0) == len(text)
    except (ValueError, RecursionError):
        return False
