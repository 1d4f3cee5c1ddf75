"""Git tools: by repo id, and by project (the project's first repo unless repo_id is given)."""

from typing import Annotated, Any

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from ..services import result_size

from .registry import Command, Name, Noted, Offset, PathText, ProjectId, project_for, services, tool

RepoId = Annotated[str | None, Field(description="default: first repo")]


class Committed(BaseModel):
    repo_id: str
    committed: bool
    sha: str | None


class Pushed(BaseModel):
    repo_id: str
    pushed: bool
    branch: str


class BranchResult(BaseModel):
    repo_id: str
    branch: str
    warning: str | None = None


class Merged(BaseModel):
    repo_id: str
    merged: bool
    into: str
    sha: str | None = None
    conflicts: list[str]
    message: str | None = None


class PullRequest(BaseModel):
    repo_id: str
    pr_url: str


class ChangedFiles(Noted):
    repo_id: str
    base: str
    files: list[dict[str, str]]
    count: int


class RepoReports(Noted):
    project_id: str
    repos: list[dict[str, Any]]


def _merged(repo_id: str, outcome: Any) -> Merged:
    return Merged(repo_id=repo_id, merged=outcome.merged, into=outcome.into, sha=outcome.sha,
                  conflicts=outcome.conflicts, message=outcome.message)


# -- by repo id ------------------------------------------------------------------------------------
@tool()
def git_commit(ctx: Context, repo_id: str, message: Command) -> Committed:
    """Stage all changes in a repo and commit."""
    svc = services(ctx)
    committed, sha = svc.vcs.commit(svc.repos.get(repo_id), message)
    return Committed(repo_id=repo_id, committed=committed, sha=sha)


@tool()
def git_push(ctx: Context, repo_id: str, branch: Annotated[Name | None, Field(description="default: current")] = None
             ) -> Pushed:
    """Push a branch to origin."""
    svc = services(ctx)
    return Pushed(repo_id=repo_id, pushed=True, branch=svc.vcs.push(svc.repos.get(repo_id), branch))


@tool()
def git_create_branch(ctx: Context, repo_id: str, branch_name: Name,
                      base: Annotated[Name | None, Field(description="default: HEAD")] = None) -> BranchResult:
    """Create a branch and check it out."""
    svc = services(ctx)
    branch, warning = svc.vcs.create_branch(svc.repos.get(repo_id), branch_name, base)
    return BranchResult(repo_id=repo_id, branch=branch, warning=warning)


@tool()
def git_merge(ctx: Context, repo_id: str, branch_name: Name,
              into: Annotated[Name | None, Field(description="default: the repo's default branch")] = None) -> Merged:
    """Merge a branch; a conflict aborts it and lists the files."""
    svc = services(ctx)
    return _merged(repo_id, svc.vcs.merge(svc.repos.get(repo_id), branch_name, into))


@tool()
def git_create_pr(ctx: Context, repo_id: str, title: Name, body: Command | None = None, branch: Name | None = None,
                  base: Name | None = None) -> PullRequest:
    """Push a branch and open a GitHub pull request with the gh CLI."""
    svc = services(ctx)
    return PullRequest(repo_id=repo_id, pr_url=svc.vcs.create_pr(svc.repos.get(repo_id), title, body, branch, base))


@tool(read_only=True)
def git_changed_files(ctx: Context, repo_id: str, base_branch: Name | None = None, offset: Offset = 0
                      ) -> ChangedFiles:
    """Files changed since base_branch (default branch), uncommitted too."""
    svc = services(ctx)
    repo = svc.repos.get(repo_id)
    files = svc.vcs.changed_files(repo, base_branch)
    return ChangedFiles(repo_id=repo_id, base=base_branch or repo.default_branch, files=files[offset:],
                        count=len(files))


# -- by project ------------------------------------------------------------------------------------
@tool(read_only=True)
def get_git_status(ctx: Context, project_id: ProjectId = None) -> RepoReports:
    """Branch, uncommitted changes and recent commits of every repo of a project."""
    project = project_for(ctx, project_id)
    return RepoReports(project_id=project, repos=services(ctx).vcs.status(project))


@tool(read_only=True)
def git_log(ctx: Context, project_id: ProjectId = None, repo_id: str | None = None,
            count: Annotated[int, Field(ge=1, le=500)] = 10, offset: Offset = 0) -> RepoReports:
    """Recent commits of a project's repos, or of one."""
    project = project_for(ctx, project_id)
    return RepoReports(project_id=project, repos=services(ctx).vcs.log(project, repo_id, count, offset))


@tool(read_only=True)
def git_diff(ctx: Context, project_id: ProjectId = None, repo_id: str | None = None,
             base_branch: Annotated[Name | None, Field(description="default: uncommitted changes")] = None,
             path: Annotated[PathText | None, Field(description="one file")] = None,
             offset: Offset = 0) -> RepoReports:
    """Diff of a project's repos (or one): uncommitted, or since base_branch; paged."""
    project = project_for(ctx, project_id)
    reports = services(ctx).vcs.diff(project, repo_id, base_branch, path, limit=None)
    budget = result_size.PAGE_CHARS // max(1, len(reports))  # the repos share one page
    for report in reports:
        part = result_size.page(report["diff"], offset, budget)
        report.update(diff=part.text, total_chars=part.total, truncated=part.next_offset is not None)
        if part.next_offset is not None:
            report["note"] = (f"{part.span()} shown; call git_diff with repo_id={report['repo_id']} "
                              f"offset={part.next_offset} for the next part, or path=<a file> for one file.")
    return RepoReports(project_id=project, repos=reports)


@tool()
def create_branch(ctx: Context, branch_name: Name, project_id: ProjectId = None, repo_id: RepoId = None
                  ) -> BranchResult:
    """Create a branch in a project's repo and check it out."""
    svc = services(ctx)
    repo = svc.repos.for_project(project_for(ctx, project_id), repo_id)
    branch, warning = svc.vcs.create_branch(repo, branch_name)
    return BranchResult(repo_id=repo.id, branch=branch, warning=warning)


@tool()
def checkout_branch(ctx: Context, branch_name: Name, project_id: ProjectId = None, repo_id: RepoId = None
                    ) -> BranchResult:
    """Check out a branch in a project's repo (not over uncommitted changes)."""
    svc = services(ctx)
    repo = svc.repos.for_project(project_for(ctx, project_id), repo_id)
    branch, warning = svc.vcs.checkout_branch(repo, branch_name)
    return BranchResult(repo_id=repo.id, branch=branch, warning=warning)


@tool()
def commit_changes(ctx: Context, message: Command, project_id: ProjectId = None, repo_id: RepoId = None) -> Committed:
    """Stage all changes in a project's repo and commit."""
    svc = services(ctx)
    repo = svc.repos.for_project(project_for(ctx, project_id), repo_id)
    committed, sha = svc.vcs.commit(repo, message)
    return Committed(repo_id=repo.id, committed=committed, sha=sha)


@tool()
def push_branch(ctx: Context, project_id: ProjectId = None, repo_id: RepoId = None,
                branch_name: Name | None = None) -> Pushed:
    """Push a project repo's branch (default: current) to origin."""
    svc = services(ctx)
    repo = svc.repos.for_project(project_for(ctx, project_id), repo_id)
    return Pushed(repo_id=repo.id, pushed=True, branch=svc.vcs.push(repo, branch_name))


@tool()
def merge_branch(ctx: Context, branch_name: Name, project_id: ProjectId = None, repo_id: RepoId = None) -> Merged:
    """Merge a branch into the repo's default branch; conflicts abort the merge."""
    svc = services(ctx)
    repo = svc.repos.for_project(project_for(ctx, project_id), repo_id)
    return _merged(repo.id, svc.vcs.merge(repo, branch_name))
