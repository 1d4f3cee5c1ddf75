"""Repository tools: register git repos with a project and list them."""

from typing import Literal

from mcp.server.mcpserver import Context
from pydantic import BaseModel

from ..store.models import Repo

from .registry import ProjectId, project_filter, project_for, services, tool


class RepoList(BaseModel):
    repos: list[Repo]
    total: int


@tool()
def add_repo(
    ctx: Context,
    source: Literal["clone", "link", "init"],
    project_id: ProjectId = None,
    url: str | None = None,
    path: str | None = None,
    name: str | None = None,
    default_branch: str | None = None,
) -> Repo:
    """Register a git repo: clone a url into the workspace, link an existing checkout (path), or init a new one."""
    return services(ctx).repos.add(project_for(ctx, project_id), source, url, path, name, default_branch)


@tool(read_only=True)
def list_repos(ctx: Context, project_id: ProjectId = None) -> RepoList:
    """List registered repos (no project and no active project: all)."""
    repos = services(ctx).repos.list(project_filter(ctx, project_id))
    return RepoList(repos=repos, total=len(repos))
