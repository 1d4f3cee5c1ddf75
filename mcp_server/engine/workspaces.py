"""Task workspaces: a git worktree per task on `<task_id>/<slug>`, and landing its work afterwards.

Landing never loses work and never leaves a repo mid-merge: leftovers are committed on the task
branch, the default branch is merged *into the task branch inside its worktree* (a conflict is
aborted there and reported), and only then is the default branch fast-forwarded to the result.
The user's checkout is touched only by that fast-forward, which git refuses rather than overwrite
uncommitted changes. Worktrees are removed after landing, and never while they hold uncommitted
work. Runs of one repo end in parallel threads: preparing, landing and removing are serialised per
repo, so a landing always merges the default branch as the previous landing left it.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from ..services import gitops
from ..services.errors import ServiceError
from ..store.models import Repo

log = logging.getLogger("agentqueue.workspaces")


def branch_name(task_id: str, title: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40].rstrip("-") or "task"
    return f"{task_id}/{slug}"


@dataclass
class Workspace:
    path: Path
    branch: str | None = None
    repo: Repo | None = None


@dataclass
class Landing:
    merged: bool
    sha: str | None = None
    base_sha: str | None = None
    pushed: bool = False
    conflicts: list[str] = field(default_factory=list)
    files_changed: list[str] = field(default_factory=list)
    message: str | None = None
    # Files the task changes that have uncommitted edits in the user's checkout (why git refused to move it).
    dirty: list[str] = field(default_factory=list)


class Workspaces:
    def __init__(self, worktrees_root: Path) -> None:
        self.root = worktrees_root
        self._locks: dict[str, threading.RLock] = {}
        self._locks_guard = threading.Lock()

    def repo_lock(self, repo_id: str) -> threading.RLock:
        """Held while git changes a repo's main checkout, branches or worktree list."""
        with self._locks_guard:
            return self._locks.setdefault(repo_id, threading.RLock())

    def path_for(self, repo_id: str, task_id: str) -> Path:
        return self.root / repo_id / task_id

    def prepare(self, repo: Repo, task_id: str, title: str, existing_branch: str | None = None) -> Workspace:
        """Create (or reuse, on a retry) the task's worktree from the freshly updated default branch."""
        with self.repo_lock(repo.id):
            return self._prepare(repo, task_id, title, existing_branch)

    def _prepare(self, repo: Repo, task_id: str, title: str, existing_branch: str | None) -> Workspace:
        main = gitops.Checkout(repo.checkout_path)
        self.refresh_default(main, repo)
        branch = existing_branch or branch_name(task_id, title)
        path = self.path_for(repo.id, task_id)
        if path.exists() and (path / ".git").exists():
            return Workspace(path, branch, repo)  # a retry keeps the earlier attempt's commits
        path.parent.mkdir(parents=True, exist_ok=True)
        main.run("worktree", "prune")
        merged = main.branch_exists(branch) and self._merged(main, branch, repo.default_branch)
        if existing_branch is None and main.branch_exists(branch) and not merged:
            # A branch the task no longer claims (request_changes after its PR was squash-merged): never
            # rewrite a published branch, start a new one.
            branch = next(f"{branch}-{n}" for n in range(2, 1000) if not main.branch_exists(f"{branch}-{n}"))
        if merged:
            # The default branch has all its commits (a rerun of merged work): move it up to the default
            # branch (a fast-forward), so its diff is only the new work.
            main.run("worktree", "add", "--quiet", "-B", branch, str(path), repo.default_branch)
        elif main.branch_exists(branch):
            main.run("worktree", "add", "--quiet", str(path), branch)
        else:
            main.run("worktree", "add", "--quiet", "-b", branch, str(path), repo.default_branch)
        return Workspace(path, branch, repo)

    @staticmethod
    def _merged(main: gitops.Checkout, branch: str, default: str) -> bool:
        try:
            main.run("merge-base", "--is-ancestor", f"refs/heads/{branch}", f"refs/heads/{default}")
            return True
        except ServiceError:
            return False

    @staticmethod
    def refresh_default(main: gitops.Checkout, repo: Repo) -> None:
        """Clone repos: fetch origin and fast-forward the default branch when it is behind (best effort)."""
        if repo.source_type != "clone" or main.remote_url() is None:
            return
        try:
            main.run("fetch", "--quiet", "origin", repo.default_branch)
            remote = f"refs/remotes/origin/{repo.default_branch}"
            if not main.ref_exists(remote):
                return
            if main.current_branch() == repo.default_branch:
                main.run("merge", "--ff-only", "--quiet", remote)
            else:
                main.run("fetch", "--quiet", ".", f"{remote}:refs/heads/{repo.default_branch}")
        except ServiceError as error:
            log.warning("could not refresh %s from origin: %s", repo.id, error)

    def commit_leftovers(self, workspace: Workspace, message: str) -> str | None:
        if workspace.repo is None:
            return None
        checkout = gitops.Checkout(workspace.path)
        committed, sha = checkout.commit_all(message)
        return sha if committed else None

    def land(self, workspace: Workspace) -> Landing:
        """Merge the task branch into the default branch (and push clone repos)."""
        repo = workspace.repo
        assert repo is not None and workspace.branch is not None
        with self.repo_lock(repo.id):
            return self._land(workspace, repo)

    def _land(self, workspace: Workspace, repo: Repo) -> Landing:
        assert workspace.branch is not None
        tree = gitops.Checkout(workspace.path)
        default = repo.default_branch
        tree.require_clean("land the task")
        files = [f["path"] for f in tree.changed_files(default, workspace.branch)]
        outcome = self._merge_default_into_branch(tree, default)
        if outcome is not None:
            return outcome
        new_sha = tree.head_sha()
        main = gitops.Checkout(repo.checkout_path)
        old_sha = main.run("rev-parse", "--verify", f"refs/heads/{default}")
        try:
            if main.current_branch() == default:
                main.run("merge", "--ff-only", "--quiet", workspace.branch)
            else:
                main.run("update-ref", f"refs/heads/{default}", new_sha, old_sha)
        except ServiceError as error:
            dirty = [c["path"] for c in main.changes() if c["path"] in files]
            return Landing(merged=False, dirty=dirty, files_changed=files,
                           message=f"Could not move '{default}' in {repo.checkout_path} to the task's "
                                   f"work ({error}). The task branch '{workspace.branch}' keeps it.")
        pushed = False
        if repo.source_type == "clone" and main.remote_url() is not None:
            main.push(default)
            pushed = True
        return Landing(merged=True, sha=new_sha, base_sha=old_sha, pushed=pushed, files_changed=files)

    @staticmethod
    def _merge_default_into_branch(tree: gitops.Checkout, default: str) -> Landing | None:
        try:
            tree.run("merge-base", "--is-ancestor", default, "HEAD")
            return None  # already contains the default branch: a fast-forward will do
        except ServiceError:
            pass
        outcome = tree.merge(default, tree.current_branch() or "HEAD")
        if outcome.merged:
            return None
        return Landing(merged=False, conflicts=outcome.conflicts,
                       message=f"The task branch conflicts with '{default}' in {', '.join(outcome.conflicts)}; "
                               "the merge was aborted and the branch kept for you to resolve.")

    def remove(self, workspace: Workspace, delete_branch: bool = True) -> bool:
        """Remove a landed worktree; refuses (returns False) if it holds uncommitted work or git can't."""
        if workspace.repo is None:
            return False
        with self.repo_lock(workspace.repo.id):
            return self._remove(workspace, delete_branch)

    def _remove(self, workspace: Workspace, delete_branch: bool) -> bool:
        assert workspace.repo is not None
        if not workspace.path.exists():
            return False
        tree = gitops.Checkout(workspace.path)
        if not tree.is_clean():
            log.warning("keeping worktree %s: it has uncommitted changes", workspace.path)
            return False
        main = gitops.Checkout(workspace.repo.checkout_path)
        try:
            main.run("worktree", "remove", str(workspace.path))
        except ServiceError as error:  # cleanup only: the work has landed, a leftover worktree is harmless
            log.warning("could not remove worktree %s: %s", workspace.path, error)
            return False
        if delete_branch and workspace.branch:
            try:
                main.run("branch", "-d", "--", workspace.branch)
            except ServiceError as error:
                log.info("kept branch %s: %s", workspace.branch, error)
        return True
