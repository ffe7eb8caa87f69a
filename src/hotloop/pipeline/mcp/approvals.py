"""Approvals (protocol.md §1.10): a call to a tool that asks for approval ends its response with an
`mcp_approval_request`; the next create answers it with an `mcp_approval_response`. Approved, the call runs
before that create generates (its `mcp_call` carries `approval_request_id`); refused, the model reads the refusal
(chat/hosted.py renders it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hotloop.errors import InvalidParam
from hotloop.ids import new_id
from hotloop.wire.items import ContextItem, McpApprovalRequest, McpApprovalResponse, McpCall


def approved_calls(context: Iterable[ContextItem], fresh: Sequence[ContextItem]) -> list[McpCall]:
    """The calls this create's approval responses approve; raises `InvalidParam` (param `input`) for a response
    to an unknown request, or to one already answered. Reads the context only when the input answers one."""
    answers = [(index, item) for index, item in enumerate(fresh) if isinstance(item, McpApprovalResponse)]
    if not answers:
        return []
    requests: dict[str, McpApprovalRequest] = {}
    answered: set[str] = set()
    for item in (*context, *fresh):
        if isinstance(item, McpApprovalRequest):
            requests[item.id] = item
        elif isinstance(item, McpCall) and item.approval_request_id is not None:
            answered.add(item.approval_request_id)
    for item in context:
        if isinstance(item, McpApprovalResponse):
            answered.add(item.approval_request_id)
    calls: list[McpCall] = []
    for _index, answer in answers:
        wanted = answer.approval_request_id
        request = requests.get(wanted)
        if request is None:
            raise InvalidParam(f"No mcp_approval_request with id '{wanted}' to answer.", param="input")
        if wanted in answered:
            raise InvalidParam(f"The approval request '{wanted}' is already answered.", param="input")
        answered.add(wanted)
        if answer.approve:
            calls.append(_call(request))
    return calls


def _call(request: McpApprovalRequest) -> McpCall:
    return McpCall(
        id=new_id("mcp"),
        server_label=request.server_label,
        name=request.name,
        arguments=request.arguments,
        status="in_progress",
        approval_request_id=request.id,
    )
