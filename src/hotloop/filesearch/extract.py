"""A file's text, by its kind: plain text, Markdown and source code as they are, HTML without its markup, JSON
checked and kept, PDF's text layer (pypdf); anything else is refused with the reason (the file's status says it:
`failed`, `last_error`).

A PDF is untrusted input: pypdf refuses a stream that inflates past its limits (a decompression bomb), and the
pages and the text read from one file are bounded here."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import PurePosixPath

TEXT_SUFFIXES = frozenset(
    [
        ".txt",
        ".md",
        ".markdown",
        ".rst",
        ".csv",
        ".tsv",
        ".log",
        ".tex",
        ".py",
        ".pyi",
        ".js",
        ".mjs",
        ".ts",
        ".tsx",
        ".jsx",
        ".java",
        ".kt",
        ".go",
        ".rs",
        ".c",
        ".h",
        ".cc",
        ".cpp",
        ".hpp",
        ".cs",
        ".rb",
        ".php",
        ".swift",
        ".scala",
        ".sh",
        ".bash",
        ".zsh",
        ".ps1",
        ".sql",
        ".yaml",
        ".yml",
        ".toml",
        ".ini",
        ".cfg",
        ".xml",
        ".css",
        ".r",
        ".lua",
        ".pl",
        ".m",
        ".dart",
        ".ex",
        ".exs",
        ".erl",
        ".hs",
        ".clj",
        ".vue",
        ".svelte",
    ]
)
HTML_SUFFIXES = frozenset({".html", ".htm", ".xhtml"})
JSON_SUFFIXES = frozenset({".json", ".jsonl"})
PDF_MAX_PAGES = 5000
PDF_MAX_CHARS = 20_000_000  # ~5M tokens of text from one PDF, at most


class Unextractable(ValueError):
    """The file's text cannot be read; the message says why (it becomes the file's `last_error`)."""


def extract(filename: str, data: bytes) -> str:
    suffix = PurePosixPath(filename.lower()).suffix
    if suffix in HTML_SUFFIXES:
        return _html(_decoded(data))
    if suffix in JSON_SUFFIXES:
        return _json(_decoded(data), suffix)
    if suffix == ".pdf":
        return _pdf(data)
    if suffix in TEXT_SUFFIXES or suffix == "":
        return _decoded(data)
    raise Unextractable(f"Files of type '{suffix}' are not supported for search.")


def _decoded(data: bytes) -> str:
    if b"\x00" in data[:8192]:
        raise Unextractable("The file is binary, not text.")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise Unextractable(f"The file is not UTF-8 text (byte {exc.start}).") from None
    if not text.strip():
        raise Unextractable("The file has no text.")
    return text


def _json(text: str, suffix: str) -> str:
    try:
        if suffix == ".jsonl":
            for line in text.splitlines():
                if line.strip():
                    json.loads(line)
        else:
            json.loads(text)
    except json.JSONDecodeError as exc:
        raise Unextractable(f"The file is not valid JSON (line {exc.lineno}).") from None
    return text


class _Text(HTMLParser):
    """The text of an HTML page: script and style left out, block elements on lines of their own."""

    _SKIP = frozenset({"script", "style", "noscript", "template"})
    _BLOCK = frozenset({"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "section", "article"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._SKIP:
            self._skipping += 1
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self._SKIP and self._skipping:
            self._skipping -= 1

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)


def _html(text: str) -> str:
    parser = _Text()
    parser.feed(text)
    parser.close()
    lines = (" ".join(line.split()) for line in "".join(parser.parts).splitlines())
    body = "\n".join(line for line in lines if line)
    if not body:
        raise Unextractable("The page has no text.")
    return body


def _pdf(data: bytes) -> str:
    import io

    from pypdf import PdfReader  # imported by the first PDF only
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise Unextractable("The PDF is encrypted.")
        if len(reader.pages) > PDF_MAX_PAGES:
            raise Unextractable(f"The PDF has more than {PDF_MAX_PAGES} pages.")
        parts: list[str] = []
        size = 0
        for page in reader.pages:
            text = page.extract_text() or ""
            size += len(text)
            if size > PDF_MAX_CHARS:
                raise Unextractable(f"The PDF holds more than {PDF_MAX_CHARS} characters of text.")
            parts.append(text)
    except (PyPdfError, ValueError, KeyError, TypeError, OSError) as exc:
        if isinstance(exc, Unextractable):
            raise
        raise Unextractable(f"The PDF could not be read: {type(exc).__name__}.") from None
    body = "\n\n".join(part for part in parts if part.strip())
    if not body.strip():
        raise Unextractable("The PDF has no text layer (a scan needs OCR, which hotloop does not run).")
    return body
