"""How many characters the server's tokenizer packs into one token of the scenario's text (for sizing inputs)."""

from __future__ import annotations

from typing import Any

from hotloop.bench.scenario import CHARS_PER_TOKEN, MODEL, tool_text, user_message


async def chars_per_token(
    base_url: str, api_key: str | None = None, model: str = MODEL, sample_chars: int = 40_000
) -> float:
    """Measured with POST /v1/responses/input_tokens on a sample of tool output; the ~4.0 assumption on failure."""
    import httpx

    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    text = tool_text(424242, sample_chars)

    def body(content: str) -> dict[str, Any]:
        return {"model": model, "input": [user_message(content)]}

    try:
        async with httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers, timeout=60) as http:
            counts = []
            for content in ("x", text):
                reply = await http.post("/responses/input_tokens", json=body(content))
                reply.raise_for_status()
                counts.append(int(reply.json()["input_tokens"]))
    except (httpx.HTTPError, KeyError, ValueError):
        return CHARS_PER_TOKEN
    added = counts[1] - counts[0]
    return len(text) / added if added > 0 else CHARS_PER_TOKEN
