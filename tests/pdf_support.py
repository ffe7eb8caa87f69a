"""Small PDFs made by hand for the extraction tests: one page whose content stream is given (optionally deflated),
and nothing else, so a test controls every byte (a decompression bomb is one deflated stream)."""

from __future__ import annotations

import io
import zlib


def make_pdf(content: bytes, deflate: bool = False) -> bytes:
    body = zlib.compress(content, 9) if deflate else content
    flate = b"/Filter /FlateDecode " if deflate else b""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< " + flate + b"/Length " + str(len(body)).encode() + b" >>\nstream\n" + body + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, obj in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(f"{number} 0 obj\n".encode() + obj + b"\nendobj\n")
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for offset in offsets:
        out.write(f"{offset:010d} 00000 n \n".encode())
    out.write(f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


def text_pdf(text: str) -> bytes:
    return make_pdf(b"BT /F1 12 Tf 72 720 Td (" + text.encode("latin-1") + b") Tj ET", deflate=True)
