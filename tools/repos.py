"""Repository tools: register git repos with a project, list them, and change their merge queue settings."""

import logging
from typing import Annotated, Literal

import anyio
import anyio.lowlevel
from mcp.server.mcpserver import Context
from pydantic import Field

from ..store.models import Repo
from .registry import Name, Noted, PathText, ProjectId, project_filter, project_for, services, tool
from .state import caller_path

log = logging.getLogger("agentqueue.tools")


class RepoList(Noted):
    repos: list[Repo]
    total: int


@tool()
def add_repo(
    ctx: Context,
    source: Literal["clone", "link", "init"],
    project_id: ProjectId = None,
    url: PathText | None = None,
    path: PathText | None = None,
    name: Name | None = None,
    default_branch: Name | None = None,
) -> Repo:
    """Register a git repo: clone url, link path, or init."""
    # How the merge queue brings a branch up to date is edit_repo's (the repos toolset): the default list stays lean.
    # git reports progress from its own reader thread: it reaches the event loop through this token.
    loop = anyio.from_thread.run_sync(anyio.lowlevel.current_token)

    def progress(percent: float | None, message: str) -> None:
        try:
            anyio.from_thread.run(ctx.report_progress, percent or 0.0, 100.0, message, token=loop)
        except Exception:  # a client that cannot take progress must not fail the clone
            log.debug("could not report clone progress", exc_info=True)

    return services(ctx).repos.add(project_for(ctx, project_id), source, url, caller_path(ctx, path), name,
                                   default_branch,
                                   progress if source == "clone" else None)


@tool()
def edit_repo(
    ctx: Context,
    repo_id: str,
    update_method: Literal["merge", "rebase"] | None = None,
    merge_batch: Annotated[int | None, Field(description="most tasks landed at once; 1 is off")] = None,
) -> Repo:
    """Change a repo's merge queue settings; fields omitted stay."""
    return services(ctx).repos.edit(repo_id, update_method, merge_batch)


@tool(read_only=True)
def list_repos(ctx: Context, project_id: ProjectId = None) -> RepoList:
    """Registered repos."""
    repos = services(ctx).repos.list(project_filter(ctx, project_id))
    return RepoList(repos=repos, total=len(repos))
