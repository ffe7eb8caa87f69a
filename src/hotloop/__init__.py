"""hotloop: an open server for agent loops (the OpenAI Responses API over HTTP, SSE and WebSocket mode)."""

__version__ = "0.1.0"
