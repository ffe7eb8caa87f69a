"""Tool calls and reasoning in generated text: the `<tool_call>` convention of a text model's output (text.py), the
streaming parsers an upstream `tokens` backend chooses with its `tool_parser` setting (streaming.py), and the
`<think>` reasoning parser in front of them (`reasoning_parser`, thinking.py)."""
