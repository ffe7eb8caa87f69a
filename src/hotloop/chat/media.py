"""Images and files in the input, sized in-process (protocol.md §1.3): no service hop, no network fetch.

Text-only models see a short placeholder; the image's token cost follows OpenAI's tiling rule so that
`/input_tokens` and image-capable backends agree with what users are billed elsewhere.
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import urllib.parse
from fractions import Fraction

from PIL import Image, UnidentifiedImageError

from hotloop.errors import InvalidParam
from hotloop.wire.items import InputFile, InputImage

# A text file's content is shown inline up to this size; larger or binary files become a placeholder.
INLINE_FILE_CHARS = 20_000
_TEXT_SUFFIXES = (
    ".txt",
    ".md",
    ".py",
    ".json",
    ".csv",
    ".toml",
    ".yaml",
    ".yml",
    ".js",
    ".ts",
    ".rs",
    ".go",
    ".html",
)


def _decode_data_url(url: str, param: str) -> tuple[str, bytes]:
    header, _, payload = url.partition(",")
    if not header.startswith("data:") or not payload:
        raise InvalidParam("Malformed data URL.", param=param)
    try:
        if header.endswith(";base64"):
            return header[5:-7], base64.b64decode(payload, validate=True)
        return header[5:], urllib.parse.unquote_to_bytes(payload)
    except (binascii.Error, ValueError):
        raise InvalidParam("The data URL's base64 payload is invalid.", param=param) from None


def image_size(part: InputImage, param: str) -> tuple[int, int] | None:
    """Pixel dimensions of a data-URL image (header only); None for remote URLs and file ids."""
    if not part.image_url or not part.image_url.startswith("data:"):
        return None
    _, data = _decode_data_url(part.image_url, param)
    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.size
    except (UnidentifiedImageError, OSError):
        raise InvalidParam("The image could not be decoded.", param=param) from None


def image_tokens(width: int, height: int, detail: str | None) -> int:
    """OpenAI's rule: `low` is 85 tokens; otherwise fit in 2048², shortest side 768, 170 per 512-px tile + 85.

    Exact arithmetic: with floats, e.g. 3320x1660 lands a hair above a tile edge and gets an extra row of tiles.
    """
    if detail == "low":
        return 85
    scale = min(Fraction(1), Fraction(2048, max(width, height)))
    scale *= min(Fraction(1), Fraction(768) / (min(width, height) * scale))
    return 170 * math.ceil(width * scale / 512) * math.ceil(height * scale / 512) + 85


def describe_image(part: InputImage, param: str) -> str:
    size = image_size(part, param)
    if size is None:
        source = part.file_id or (part.image_url or "")[:100]
        return f"[image: {source}]"
    width, height = size
    return f"[image: {width}x{height}, {image_tokens(width, height, part.detail)} tokens]"


def describe_file(part: InputFile, param: str) -> str:
    name = part.filename or part.file_id or (part.file_url or "file")
    if not part.file_data:
        return f"[file: {name}]"
    if part.file_data.startswith("data:"):
        _, data = _decode_data_url(part.file_data, param)
    else:
        try:
            data = base64.b64decode(part.file_data, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidParam("file_data must be base64 or a data URL.", param=param) from None
    if name.lower().endswith(_TEXT_SUFFIXES):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None and len(text) <= INLINE_FILE_CHARS:
            return f"[file: {name}]\n{text}"
    return f"[file: {name}, {len(data)} bytes]"
