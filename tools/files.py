"""Workspace file tools, jailed to project workspaces and registered repos (resolved paths)."""

from pathlib import Path
from typing import Annotated, Literal

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from ..services import Services
from ..services.errors import NotFoundError

from .registry import Command, Noted, Offset, PathText, ProjectId, client_state, services, tool


class FileContent(Noted):
    path: str
    content: str
    total_lines: int
    truncated: bool


class SearchResults(BaseModel):
    results: list[str]
    truncated: bool
    note: str | None = None


class CommandOutput(BaseModel):
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool


def _base(svc: Services, project_id: str | None) -> Path | None:
    """Relative paths resolve against the project's workspace (explicit, else active)."""
    if not project_id:
        return None
    return Path(svc.projects.get(project_id).workspace)


@tool(read_only=True)
def read_file(
    ctx: Context,
    path: Annotated[PathText, Field(description="absolute or workspace-relative")],
    project_id: ProjectId = None,
    offset: Offset = 0,
    max_lines: Annotated[int, Field(ge=1, le=5000)] = 200,
) -> FileContent:
    """Read lines of a text file in a workspace or repo."""
    svc = services(ctx)
    found = svc.files.read(path, _base(svc, project_id or client_state(ctx).active_project), offset, max_lines)
    return FileContent(path=found.path, content=found.content, total_lines=found.total_lines,
                       truncated=found.truncated, note=found.note)


@tool(read_only=True)
def search_files(
    ctx: Context,
    pattern: Annotated[PathText, Field(description="regex (grep) or glob (find)")],
    path: PathText,
    mode: Literal["grep", "find"] = "grep",
    max_results: Annotated[int, Field(ge=1, le=1000)] = 50,
    offset: Offset = 0,
) -> SearchResults:
    """Search file contents (grep) or names (find) under a path."""
    svc = services(ctx)
    results, truncated, note = svc.files.search(pattern, path, _base(svc, client_state(ctx).active_project),
                                                mode, max_results, offset)
    return SearchResults(results=results, truncated=truncated, note=note)


@tool(destructive=True)
def run_command(
    ctx: Context,
    command: Command,
    working_dir: Annotated[PathText, Field(description="a path, or a project/repo id")],
    timeout: Annotated[int, Field(ge=1, le=600)] = 30,
) -> CommandOutput:
    """Run a shell command in a workspace or repo, killed after timeout seconds."""
    svc = services(ctx)
    workdir = _working_dir(svc, working_dir, client_state(ctx).active_project)
    result = svc.files.run(command, workdir, timeout)
    return CommandOutput(returncode=result.returncode, stdout=result.stdout, stderr=result.stderr,
                         timed_out=result.timed_out)


def _working_dir(svc: Services, working_dir: str, active: str | None) -> Path:
    if working_dir and "/" not in working_dir and not working_dir.startswith((".", "~")):
        try:
            return svc.files.resolve(svc.projects.get(working_dir).workspace)
        except NotFoundError:
            pass
        try:
            return svc.files.resolve(svc.repos.get(working_dir).checkout_path)
        except NotFoundError:
            pass
    return svc.files.resolve(working_dir, _base(svc, active))
