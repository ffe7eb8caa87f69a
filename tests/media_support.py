"""A real image as tests send it: a PNG data URL (test_http_inputs.py, test_render.py, the typed tools' tests)."""

from __future__ import annotations

import base64
import io
from functools import cache

from PIL import Image


@cache
def png_data_url(width: int = 8, height: int = 8) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()
