"""The chat format of a `tokens` upstream: a Hugging Face `tokenizer.json` and the model's Jinja chat template.

`tokenizer` names a tokenizer.json file or a model directory holding one. The template comes from `chat_template`
(a Jinja file) or else the directory's `chat_template.jinja` or `tokenizer_config.json` (`chat_template`), which
also gives the `bos_token` / `eos_token` the template may use. Empty `tokenizer`: SmolLM2's (the built-in models').
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hotloop.backends.rust_tokenizer import RustTokenizer
from hotloop.chat.format import ChatFormat
from hotloop.chat.harmony import harmony_format
from hotloop.chat.specs import Tokenizer
from hotloop.config import Upstream


def load_chat_format(name: str, upstream: Upstream) -> ChatFormat:
    """The upstream's ChatFormat; raises `ValueError` naming the missing file. A harmony model (gpt-oss) is
    rendered by hotloop's harmony template (chat/harmony.py) with the model's tokenizer: its own template is not
    read."""
    harmony = upstream.reasoning_parser == "harmony"
    if harmony and upstream.chat_template:
        raise ValueError(f"upstreams.{name}.chat_template: a harmony model is rendered by hotloop (leave it empty)")
    if not upstream.tokenizer:
        if upstream.chat_template:
            raise ValueError(f"upstreams.{name}: chat_template needs a tokenizer")
        from hotloop.backends.local.gguf import smollm2_chat_format

        smollm2 = smollm2_chat_format()
        return harmony_format(smollm2.tokenizer) if harmony else smollm2
    path = Path(upstream.tokenizer).expanduser()
    folder = path if path.is_dir() else path.parent
    file = folder / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise ValueError(f"upstreams.{name}.tokenizer: no tokenizer.json at {file}")
    tokenizer: Tokenizer = RustTokenizer.from_file(file)
    if harmony:
        return harmony_format(tokenizer)
    config = _read_json(folder / "tokenizer_config.json")
    template = _template(name, upstream, folder, config)
    return ChatFormat(template, tokenizer, bos_token=_token(config, "bos_token"), eos_token=_token(config, "eos_token"))


def _template(name: str, upstream: Upstream, folder: Path, config: dict[str, Any]) -> str:
    if upstream.chat_template:
        path = Path(upstream.chat_template).expanduser()
        if not path.is_file():
            raise ValueError(f"upstreams.{name}.chat_template: no file at {path}")
        return path.read_text()
    if (folder / "chat_template.jinja").is_file():  # newer transformers save the template beside the config
        return (folder / "chat_template.jinja").read_text()
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        template = next((entry.get("template") for entry in template if entry.get("name") == "default"), None)
    if not isinstance(template, str) or not template:
        raise ValueError(f"upstreams.{name}: no chat template in {folder} (set chat_template to a Jinja file)")
    return template


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return data if isinstance(data, dict) else {}


def _token(config: dict[str, Any], key: str) -> str:
    value = config.get(key)
    if isinstance(value, dict):  # {"content": "<s>", …} in older configs
        value = value.get("content")
    return value if isinstance(value, str) else ""
