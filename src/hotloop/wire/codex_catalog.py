"""Codex CLI's model catalog: the body of `GET /v1/models?client_version=…` (docs/protocol-notes.md, "Codex CLI").

Codex fetches it only when a custom provider sets `model_catalog_url`, and decodes `{"models": [ModelInfo]}`, not the
OpenAI list. The fields below are the ones Codex 0.171.0 requires (found by removing fields one at a time from a
bundled entry until `codex debug models` stopped listing it) plus those that describe a hotloop model truthfully;
Codex defaults the rest.
"""

from __future__ import annotations

from typing import Literal

import msgspec

# Marks Codex's catalog request; the OpenAI SDKs never send it.
CLIENT_VERSION_PARAM = "client_version"
# Codex's own default for tool output kept in the context (what its bundled models declare).
TOOL_OUTPUT_TOKEN_LIMIT = 10_000
# Sent as the model's base instructions: the catalog cannot leave them out, and Codex's built-in prompt (used
# under fallback metadata) is its own text, not hotloop's to serve.
BASE_INSTRUCTIONS = (
    "You are a coding agent running in the Codex CLI. Use the shell tool to inspect and change files in the "
    "workspace, then answer the user concisely."
)


class TruncationPolicy(msgspec.Struct):
    mode: Literal["tokens"] = "tokens"
    limit: int = TOOL_OUTPUT_TOKEN_LIMIT


class CodexModel(msgspec.Struct):
    """One catalog entry (Codex's `ModelInfo`)."""

    slug: str
    display_name: str
    description: str
    context_window: int
    priority: int
    base_instructions: str = BASE_INSTRUCTIONS
    # Required. `unified_exec` names what Codex 0.171.0 offers anyway (exec_command + write_stdin): with
    # `shell_command` here, or under fallback metadata, its tool list was the same.
    shell_type: Literal["unified_exec"] = "unified_exec"
    visibility: Literal["list"] = "list"
    supported_in_api: bool = True
    supported_reasoning_levels: list[dict[str, str]] = msgspec.field(default_factory=list)
    supports_reasoning_summaries: bool = False
    support_verbosity: bool = False
    supports_parallel_tool_calls: bool = True
    input_modalities: list[str] = msgspec.field(default_factory=lambda: ["text", "image"])
    truncation_policy: TruncationPolicy = msgspec.field(default_factory=TruncationPolicy)
    experimental_supported_tools: list[str] = msgspec.field(default_factory=list)
    # `freeform`: Codex offers `apply_patch` as a custom tool with its Lark grammar, which the model's input must
    # follow; given only for a model hotloop makes follow Lark grammars (otherwise Codex's default).
    apply_patch_tool_type: Literal["freeform"] | msgspec.UnsetType = msgspec.UNSET


class CodexCatalog(msgspec.Struct):
    models: list[CodexModel]


def codex_catalog(models: list[tuple[str, int, bool]]) -> CodexCatalog:
    """The catalog for served models, given as (id, context window, follows Codex's apply_patch grammar) in order."""
    return CodexCatalog(
        models=[
            CodexModel(
                slug=model_id,
                display_name=model_id,
                description=f"{model_id}, served by hotloop",
                context_window=context_window,
                priority=rank,
                apply_patch_tool_type="freeform" if lark else msgspec.UNSET,
            )
            for rank, (model_id, context_window, lark) in enumerate(models)
        ]
    )
