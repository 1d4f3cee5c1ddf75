"""Git on registered repos: what the git tools do, with events (gitops does the git itself)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Literal

from ..settings import Settings
from ..store.db import Store
from ..store.models import Repo, Task
from . import gitops
from .errors import ConflictError, InvalidInputError, ServiceError
from .limits import check_path
from .repos import Repos


PrState = Literal["open", "merged", "closed"]


def find_gh(settings: Settings) -> str | None:
    """`gh`: config.toml [cli] gh or AGENTQUEUE_GH_BIN, else the search path."""
    return settings.find("gh")


class Vcs:
    def __init__(self, store: Store, repos: Repos, settings: Settings) -> None:
        self.store = store
        self.repos = repos
        self.settings = settings

    def _event(self, kind: str, repo: Repo, **payload: Any) -> None:
        with self.store.transaction():
            self.store.add_event(kind, project_id=repo.project_id, task_id=payload.pop("task_id", None),
                                 payload={"repo_id": repo.id, **payload})

    # -- writes --------------------------------------------------------------------------------
    def commit(self, repo: Repo, message: str) -> tuple[bool, str | None]:
        committed, sha = self.repos.checkout(repo).commit_all(message)
        if committed:
            self._event("git.committed", repo, sha=sha, message=message.strip()[:200])
        return committed, sha

    def push(self, repo: Repo, branch: str | None = None) -> str:
        checkout = self.repos.checkout(repo)
        branch = branch or checkout.current_branch()
        if not branch:
            raise ConflictError(f"Repo '{repo.id}' is on a detached HEAD; name the branch to push.")
        pushed = checkout.push(branch)
        self._event("git.pushed", repo, branch=pushed)
        return pushed

    def running_warning(self, repo: Repo) -> str | None:
        """Said when a checkout switches branch while agents are at work on the same repo."""
        running = self.repos.running_tasks(repo.id)
        if not running:
            return None
        return (f"{len(running)} task(s) are running on repo '{repo.id}' ({', '.join(running)}). Agents work in "
                "their own worktrees, but merges land on the default branch: switch back when you are done.")

    def create_branch(self, repo: Repo, branch: str, base: str | None = None) -> tuple[str, str | None]:
        """Create and check out a branch; returns (branch, warning)."""
        created = self.repos.checkout(repo).create_branch(branch, base)
        self._event("git.branch_created", repo, branch=created, base=base)
        return created, self.running_warning(repo)

    def checkout_branch(self, repo: Repo, branch: str) -> tuple[str, str | None]:
        switched = self.repos.checkout(repo).checkout(branch)
        return switched, self.running_warning(repo)

    def merge(self, repo: Repo, branch: str, into: str | None = None) -> gitops.MergeOutcome:
        outcome = self.repos.checkout(repo).merge(branch, into or repo.default_branch)
        if outcome.merged:
            self._event("git.merged", repo, branch=branch, into=outcome.into, sha=outcome.sha)
        else:
            self._event("merge.conflict", repo, branch=branch, into=outcome.into, conflicts=outcome.conflicts)
        return outcome

    def create_pr(self, repo: Repo, title: str, body: str | None = None, branch: str | None = None,
                  base: str | None = None, *, task_id: str | None = None, checkout_path: Path | None = None) -> str:
        """Push `branch` and open a PR with `gh`; `task_id` (the engine's) ties the `pr.created` event to it, and
        `checkout_path` is the engine's own checkout of the repo (each daemon of a team has its own)."""
        if not title or not title.strip():
            raise InvalidInputError("title is empty. Give the pull request a title.")
        checkout = gitops.Checkout(checkout_path) if checkout_path else self.repos.checkout(repo)
        gh = find_gh(self.settings)
        if gh is None:
            raise ServiceError("The GitHub CLI `gh` is not installed (or not on PATH for the AgentQueue daemon); "
                               "install it and run `gh auth login`, or set AGENTQUEUE_GH_BIN.")
        if checkout.remote_url() is None:
            raise InvalidInputError(f"Repo '{repo.id}' has no 'origin' remote, so there is nowhere to open a pull "
                                    "request. Add a GitHub remote first.")
        branch = branch or checkout.current_branch()
        if not branch:
            raise ConflictError(f"Repo '{repo.id}' is on a detached HEAD; name the branch for the pull request.")
        base = checkout.verify_ref(base or repo.default_branch, "base branch")
        if branch == base:
            raise InvalidInputError(f"branch and base are both '{base}'; open the PR from a feature branch.")
        checkout.push(branch)
        done = subprocess.run(
            [gh, "pr", "create", "--title", title.strip(), "--body", (body or "").strip() or title.strip(),
             "--base", base, "--head", branch],
            cwd=checkout.path, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise ServiceError(f"gh pr create failed: {(done.stderr or done.stdout).strip()[:1000]}. "
                               "Check `gh auth status` in that repo.")
        urls = [word for word in done.stdout.split() if word.startswith(("https://", "http://"))]
        if not urls:
            raise ServiceError(f"gh pr create printed no PR URL: {done.stdout.strip()[:500]}")
        self._event("pr.created", repo, task_id=task_id, branch=branch, base=base, pr_url=urls[-1])
        return urls[-1]

    def pr_state(self, pr_url: str, cwd: Path | None = None) -> PrState:
        """What GitHub says of a PR (`gh pr view`, run in `cwd`, a checkout of its repo): open, merged or closed.

        Raises ServiceError when `gh` could not be asked; an answer it did not understand reads as open."""
        gh = find_gh(self.settings)
        if gh is None:
            raise ServiceError("The GitHub CLI `gh` is not installed (or not on PATH for the AgentQueue daemon).")
        try:
            done = subprocess.run([gh, "pr", "view", pr_url, "--json", "state,mergedAt"], cwd=cwd,
                                  capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
            state = json.loads(done.stdout or "{}")
        except (OSError, ValueError, subprocess.TimeoutExpired) as error:
            raise ServiceError(f"gh pr view {pr_url} failed: {error}") from error
        if state.get("state") == "MERGED" or state.get("mergedAt"):
            return "merged"
        return "closed" if state.get("state") == "CLOSED" else "open"

    # -- reads ---------------------------------------------------------------------------------
    def changed_files(self, repo: Repo, base: str | None = None) -> list[dict[str, str]]:
        checkout = self.repos.checkout(repo)
        return checkout.changed_files(checkout.verify_ref(base or repo.default_branch, "base branch"))

    def _repos(self, project_id: str, repo_id: str | None) -> list[Repo]:
        return [self.repos.for_project(project_id, repo_id)] if repo_id else self.repos.list(project_id)

    def status(self, project_id: str) -> list[dict[str, Any]]:
        report = []
        for repo in self.repos.list(project_id):
            entry: dict[str, Any] = {"repo_id": repo.id, "path": repo.checkout_path}
            try:
                checkout = self.repos.checkout(repo)
                entry.update(branch=checkout.current_branch(), changes=checkout.changes(),
                             recent_commits=[f"{c['sha'][:8]} {c['message']}" for c in checkout.log(5)])
                entry["clean"] = not entry["changes"]
            except ServiceError as error:  # a repo missing on disk is reported, not fatal
                entry.update(branch=None, clean=None, changes=[], recent_commits=[], error=str(error))
            report.append(entry)
        return report

    def log(self, project_id: str, repo_id: str | None, count: int = 10, skip: int = 0) -> list[dict[str, Any]]:
        if not 1 <= count <= 500:
            raise InvalidInputError(f"count must be between 1 and 500 (got {count}).")
        report = []
        for repo in self._repos(project_id, repo_id):
            try:
                checkout = self.repos.checkout(repo)
                report.append({"repo_id": repo.id, "branch": checkout.current_branch(),
                               "commits": checkout.log(count, skip=skip)})
            except ServiceError as error:
                if repo_id:
                    raise
                report.append({"repo_id": repo.id, "branch": None, "commits": [], "error": str(error)})
        return report

    def diff(self, project_id: str, repo_id: str | None, base: str | None = None, path: str | None = None,
             limit: int | None = gitops.DIFF_LIMIT) -> list[dict[str, Any]]:
        if base is not None:  # a bad name is the caller's error, not a per-repo one
            base = gitops.check_ref_name(base, "base branch")
        paths = _paths(path)
        report = []
        for repo in self._repos(project_id, repo_id):
            try:
                checkout = self.repos.checkout(repo)
                ref = checkout.verify_ref(base, "base branch") if base else None
                text, truncated = checkout.diff(ref, paths=paths, limit=limit)
                report.append({"repo_id": repo.id, "base": ref or "HEAD (uncommitted changes)", "diff": text,
                               "truncated": truncated})
            except ServiceError as error:
                if repo_id:
                    raise
                report.append({"repo_id": repo.id, "base": base, "diff": "", "error": str(error)})
        return report

    def task_diff(self, task: Task, path: str | None = None) -> dict[str, Any]:
        """A task's branch against its repo's default branch (committed work on the branch), whole;
        path narrows the diff to one file (files_changed stays the whole list)."""
        if not task.branch:
            raise ConflictError(
                f"Task '{task.id}' has no branch yet ({task.status}): a branch exists once an agent has "
                "started on it in a repo. get_task_result shows what a run produced."
            )
        if not task.repo_id:
            raise ConflictError(f"Task '{task.id}' ran without a repo (in the project workspace); it has no diff.")
        paths = _paths(path)
        repo = self.repos.get(task.repo_id)
        checkout = self.repos.checkout(repo)
        row = self.store.one("SELECT base_sha, landed_sha FROM tasks WHERE id = ?", (task.id,)) or {}
        if row.get("landed_sha") and row.get("base_sha"):
            # Landed: the branch may be gone, the range it added to the default branch is not.
            span = f"{row['base_sha']}..{row['landed_sha']}"
            text = checkout.run("diff", span, "--", *paths)
            files = checkout.run("diff", "--name-only", span, "--").splitlines()
            return {"task_id": task.id, "branch": task.branch, "base": row["base_sha"], "diff": text,
                    "files_changed": files}
        branch = checkout.verify_ref(task.branch)
        base = checkout.verify_ref(repo.default_branch, "default branch")
        text, _ = checkout.diff(base, branch, paths=paths, limit=None)
        files = [f["path"] for f in checkout.changed_files(base, branch)]
        return {"task_id": task.id, "branch": branch, "base": base, "diff": text, "files_changed": files}


def _paths(path: str | None) -> tuple[str, ...]:
    """One file to narrow a diff to, taken literally (no pathspec magic such as ':(glob)')."""
    if not path:
        return ()
    check_path("path", path)
    return (f":(literal){path}",)
