"""A remote MCP server for the README's example, on the official `mcp` SDK: `python examples/mcp_server.py [PORT]`
serves its tools over streamable HTTP at http://127.0.0.1:PORT/mcp (PORT 9000 by default)."""

from __future__ import annotations

import sys

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("words")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def word_count(text: str) -> int:
    """How many words `text` has."""
    return len(text.split())


@server.tool()
def shout(text: str) -> str:
    """`text` in capitals."""
    return text.upper()


if __name__ == "__main__":
    server.run("streamable-http", port=int(sys.argv[1]) if len(sys.argv) > 1 else 9000)
