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
MIN_SECRET_BYTES = 32


def load_secret(data_dir: Path, given: str = "") -> bytes:
    """The persistent server secret: `given` (a file every replica is handed: `secret_key_file`), else
    data_dir's, created once, so blobs stay valid across restarts."""
    if given:
        return read_given(Path(given))
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


def read_given(path: Path) -> bytes:
    """A secret made elsewhere (a Kubernetes Secret's file): never created here, and long enough to sign with;
    raises `ValueError` saying what is wrong (the secret itself never appears)."""
    try:
        secret = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"secret_key_file {path}: {exc.strerror or exc}") from exc
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(
            f"secret_key_file {path}: holds {len(secret)} bytes; at least {MIN_SECRET_BYTES} are needed "
            "(head -c 32 /dev/urandom > secret.key)"
        )
    return secret


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
