"""Project tools: create, list, edit, pause/resume, delete, and the connection's active project."""

from typing import Annotated, Literal

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from ..store.models import Project

from .registry import (
    Agents, Command, Limit, Name, Noted, Offset, PathText, Tokens, Weight, client_state, services, tool,
)
from .state import caller_path, remembered_key


VerifyCommand = Command | None  # what it does is said once, in the instructions (the merge queue runs it)


class ProjectList(Noted):
    projects: list[Project]
    total: int


class ProjectDeleted(BaseModel):
    deleted: str
    name: str
    channels_to_archive: list[str] = Field(default_factory=list)


class ActiveProject(BaseModel):
    active_project: str | None
    name: str | None = None
    warning: str | None = None


@tool(read_only=True)
def list_projects(ctx: Context, status: Literal["ACTIVE", "PAUSED"] | None = None,
                        limit: Limit = 50, offset: Offset = 0) -> ProjectList:
    """Projects with their settings and task counts."""
    projects, total = services(ctx).projects.list(status, limit, offset)
    return ProjectList(projects=projects, total=total)


@tool()
def create_project(
    ctx: Context,
    name: Name,
    credit_weight: Weight = 1.0,
    max_concurrent_agents: Agents = 2,
    budget_limit: Annotated[Tokens | None, Field(description="tokens per 24 h")] = None,
    workspace: PathText | None = None,
    auto_create_channels: bool = False,
    verify_command: VerifyCommand = None,
) -> Project:
    """Create a project: a queue with its own workspace."""
    return services(ctx).projects.create(name, credit_weight, max_concurrent_agents, budget_limit,
                                         caller_path(ctx, workspace),
                                         auto_create_channels, verify_command)


@tool(idempotent=True)
def pause_project(ctx: Context, project_id: str) -> Project:
    """Pause a project: none of its tasks start until resumed."""
    return services(ctx).projects.set_status(project_id, "PAUSED")


@tool(idempotent=True)
def resume_project(ctx: Context, project_id: str) -> Project:
    """Resume a paused project."""
    return services(ctx).projects.set_status(project_id, "ACTIVE")


@tool()
def edit_project(
    ctx: Context,
    project_id: str,
    name: Name | None = None,
    credit_weight: Weight | None = None,
    max_concurrent_agents: Agents | None = None,
    budget_limit: Annotated[Tokens | None, Field(description="0 removes it")] = None,
    verify_command: VerifyCommand = None,
    default_repo_id: Annotated[str | None, Field(description='runs tasks without repo_id; "" clears')] = None,
    merge_retries: Annotated[int | None, Field(ge=0, le=10, description="sends back on conflict/failed check")] = None,
    best_of_pick: Annotated[Literal["smallest", "first"] | None,
                            Field(description="best of N lands the smallest passing diff, or the first")] = None,
    instructions: Annotated[str | None, Field(description="added to every task's prompt")] = None,
) -> Project:
    """Change a project's settings; fields omitted stay."""
    return services(ctx).projects.edit(project_id, name, credit_weight, max_concurrent_agents, budget_limit,
                                       verify_command, default_repo_id, merge_retries, best_of_pick, instructions)


@tool(destructive=True)
def delete_project(ctx: Context, project_id: str, archive_channels: bool = False) -> ProjectDeleted:
    """Delete a project with its tasks, repo records, hooks, channels (files stay)."""
    name, channels = services(ctx).projects.delete(project_id)
    state = client_state(ctx)
    if state.active_project == project_id:
        state.active_project = None
    return ProjectDeleted(deleted=project_id, name=name, channels_to_archive=channels if archive_channels else [])


@tool(idempotent=True)
def set_active_project(ctx: Context, project_id: str | None = None) -> ActiveProject:
    """Set the project used when project_id is omitted; omit to clear."""
    state = client_state(ctx)
    name = state.services.projects.get(project_id).name if project_id else None
    warning = None
    if not state.persistent:
        warning = "This HTTP client has no session id, so nothing is remembered: pass project_id to each tool."
    else:
        state.active_project = project_id
        key = remembered_key(ctx.request_context, state)
        if key is not None:  # the client's next connection from this folder starts with it
            with state.services.store.transaction():
                state.services.store.set_setting(key, project_id or "")
    return ActiveProject(active_project=project_id, name=name, warning=warning)
