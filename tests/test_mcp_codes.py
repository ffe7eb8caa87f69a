"""hotloop's copy of MCP's numbers (mcp/codes.py) is the SDK's: a new SDK that changes one fails here."""

from __future__ import annotations

import subprocess
import sys

import mcp_types
import mcp_types.version
import pytest

from hotloop.mcp import codes

pytestmark = pytest.mark.fast


@pytest.mark.parametrize(
    "name",
    ["PARSE_ERROR", "INVALID_REQUEST", "METHOD_NOT_FOUND", "INTERNAL_ERROR", "CONNECTION_CLOSED", "REQUEST_TIMEOUT"],
)
def test_each_error_code_is_the_sdks(name: str) -> None:
    assert getattr(codes, name) == getattr(mcp_types, name)


def test_the_protocol_versions_are_the_sdks() -> None:
    assert tuple(mcp_types.version.HANDSHAKE_PROTOCOL_VERSIONS) == codes.HANDSHAKE_PROTOCOL_VERSIONS
    assert codes.LATEST_HANDSHAKE_VERSION == mcp_types.version.LATEST_HANDSHAKE_VERSION


def test_serving_imports_no_mcp_sdk() -> None:
    """The app and its pipeline (the lean MCP client in it) load without the SDK or its types: their pydantic models
    cost every start-up most of a second. The SDK's client is imported when a session needs it (session.py)."""
    probe = (
        "import sys, hotloop.transports.app, hotloop.pipeline.service\n"
        "print(sorted({name.split('.')[0] for name in sys.modules} & {'mcp', 'mcp_types', 'pydantic'}))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]"
