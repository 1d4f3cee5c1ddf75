"""Policy tools: read and change the permission policy, and read the audit log.

edit_policy is itself an action (`tool:edit_policy`): the standard preset asks a person first, and
the readonly preset refuses it, so a policy cannot be loosened from a chat without a person.
"""

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from ..services.policy_rules import PRESETS
from ..store.models import AuditEntry

from .registry import Hours, Limit, Noted, project_filter, services, tool


class PolicyView(BaseModel):
    project_id: str | None  # None: the global policy
    preset: str
    summary: str
    agent_default: str
    tool_default: str
    ask_timeout_seconds: float
    deny: list[dict[str, str]]
    allow: list[dict[str, str]]
    ask: list[dict[str, str]]
    presets: dict[str, str]
    file: str


class AuditLog(Noted):
    entries: list[AuditEntry]


def _view(ctx: Context, project_id: str | None) -> PolicyView:
    svc = services(ctx)
    described: dict[str, Any] = svc.policies.effective(project_id).describe()
    return PolicyView(project_id=project_id, **described, presets={p.name: p.summary for p in PRESETS.values()},
                      file=str(svc.policies.path))


@tool(read_only=True)
def get_policy(ctx: Context, project_id: Annotated[str | None, Field(description="default: active, else global")]
               = None) -> PolicyView:
    """The policy that applies: preset, defaults, rules (deny→allow→ask)."""
    project = project_filter(ctx, project_id)
    if project:
        services(ctx).projects.get(project)
    return _view(ctx, project)


@tool()
def edit_policy(
    ctx: Context,
    project_id: Annotated[str | None, Field(description="omit: global")] = None,
    preset: Annotated[str | None, Field(description="readonly|standard|autonomous")] = None,
    add_rule: Annotated[str | None, Field(description="e.g. Bash(npm test:*), tool:git_push")] = None,
    remove_rule: str | None = None,
    list: Literal["allow", "ask", "deny"] = "allow",
    ask_timeout: Annotated[str | None, Field(description='e.g. "30m"')] = None,
) -> PolicyView:
    """Change the global or a project's policy (a person approves)."""
    svc = services(ctx)
    if project_id:
        svc.projects.get(project_id)
    svc.policies.edit(project_id, preset, add_rule, remove_rule, list, ask_timeout)
    return _view(ctx, project_id)


@tool(read_only=True)
def get_audit_log(
    ctx: Context,
    limit: Limit = 20,
    project_id: str | None = None,
    task_id: str | None = None,
    action: Annotated[str | None, Field(description="glob, e.g. tool:run_command*")] = None,
    decision: Annotated[str | None, Field(description="e.g. deny, ask→accept")] = None,
    since_hours: Hours | None = None,
) -> AuditLog:
    """Audit log, newest first: tool calls and agent permission decisions."""
    return AuditLog(entries=services(ctx).audit.query(limit, project_id, task_id, action, decision, since_hours))
