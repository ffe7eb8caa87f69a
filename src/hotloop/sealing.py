"""`encrypted_content` blobs (protocol.md §1.3): the item's text, base64url, HMAC-signed with the server secret."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from hotloop.errors import InvalidParam

SECRET_FILE = "secret.key"


def load_secret(data_dir: Path) -> bytes:
    """The persistent server secret: created once, so blobs stay valid across restarts."""
    path = data_dir / SECRET_FILE
    if not path.exists():
        # Replicas starting together on one data_dir must end up with one key: each writes a candidate aside and
        # links it into place, which only the first link does; everyone then reads the winner.
        candidate = data_dir / f".{SECRET_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
        candidate.write_bytes(secrets.token_bytes(32))
        candidate.chmod(0o600)
        try:
            os.link(candidate, path)
        except FileExistsError:
            pass
        finally:
            candidate.unlink()
    return path.read_bytes()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def seal(text: str, secret: bytes) -> str:
    payload = text.encode("utf-8")
    return _b64(payload) + "." + _b64(hmac.new(secret, payload, hashlib.sha256).digest())


def open_blob(blob: str, secret: bytes) -> str:
    """The sealed text; raises 400 `invalid_encrypted_content` for anything this server did not sign."""
    body, _, signature = blob.partition(".")
    try:
        payload, mac = _unb64(body), _unb64(signature)
    except (binascii.Error, ValueError):
        payload, mac = b"", b""
    if not mac or not hmac.compare_digest(mac, hmac.new(secret, payload, hashlib.sha256).digest()):
        raise InvalidParam(
            "The encrypted content could not be verified.", param="input", code="invalid_encrypted_content"
        )
    return payload.decode("utf-8", errors="replace")


def peek(blob: str) -> str:
    """The text of a blob already verified by `open_blob` (rendering runs after validation)."""
    body = blob.partition(".")[0]
    try:
        return _unb64(body).decode("utf-8", errors="replace")
    except (binascii.Error, ValueError):
        return ""
