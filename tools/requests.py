"""Permission requests: an agent waits for a person's answer (WAITING_INPUT)."""

from typing import Annotated, Literal

from mcp.server.mcpserver import Context
from pydantic import Field

from ..store.models import PermissionRequest
from .registry import Noted, ProjectId, project_filter, services, tool


class RequestList(Noted):
    requests: list[PermissionRequest]
    total: int


@tool(read_only=True)
def list_requests(
    ctx: Context,
    project_id: ProjectId = None,
    status: Literal["pending", "allowed", "denied", "expired"] = "pending",
    limit: Annotated[int, Field(ge=1, le=500)] = 50,
) -> RequestList:
    """Agents' permission requests."""
    svc = services(ctx)
    scope = project_filter(ctx, project_id)
    if scope:
        svc.projects.get(scope)  # an unknown project is an error, not an empty list
    found = svc.requests.list(status, scope, None, limit)
    return RequestList(requests=found, total=len(found))


@tool()
def answer_request(
    ctx: Context,
    request_id: str,
    decision: Literal["allow", "deny"],
    remember: Annotated[bool, Field(description="add the rule to the policy")] = False,
    message: Annotated[str | None, Field(description="for the agent, with deny")] = None,
) -> PermissionRequest:
    """Answer an agent's permission request."""
    return services(ctx).requests.answer(request_id, decision, remember, message, by="person")
