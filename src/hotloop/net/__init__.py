"""Network clients shared by the backends and the MCP client, which must not import each other: http1.py."""
