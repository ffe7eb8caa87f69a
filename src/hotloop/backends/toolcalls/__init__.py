"""Tool calls in generated text: the `<tool_call>` convention of a text model's output (text.py) and the streaming
parsers an upstream `tokens` backend chooses with its `tool_parser` setting (streaming.py)."""
