"""Regenerate the settings table of docs/configuration.md and README.md from hotloop.config:
`python scripts/gen_config_doc.py`."""

from __future__ import annotations

from pathlib import Path

from hotloop.config import HELP, Settings

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "docs" / "configuration.md", ROOT / "README.md")
HEADER = "| setting | default | meaning |\n|---|---|---|\n"


def table() -> str:
    defaults = Settings()
    rows = []
    for name in Settings.__struct_fields__:
        value = getattr(defaults, name)
        if isinstance(value, list):
            value = ", ".join(value) or "(empty)"
        shown = value if value != "" else "(see meaning)"
        rows.append(f"| `{name}` | `{shown}` | {HELP[name]} |")
    return HEADER + "\n".join(rows) + "\n"


def main() -> None:
    """Replace each document's table: from its header row to the next `## ` heading."""
    for doc in DOCS:
        text = doc.read_text()
        start = text.index(HEADER)
        end = text.index("\n## ", start)
        doc.write_text(text[:start] + table() + text[end:])


if __name__ == "__main__":
    main()
