"""Repositories registered with projects: cloned into the workspace, linked in place, or created new."""

from __future__ import annotations

import builtins
import shutil
from pathlib import Path
from typing import Any

from ..store.db import Store, now_iso
from ..store.models import Repo
from . import gitops
from .errors import ConflictError, InvalidInputError, NotFoundError
from .ids import slugify
from .limits import check_argument, check_path
from .locks import file_lock
from .projects import Projects
from .task_states import CLAIMED, in_clause

SOURCES = ("clone", "link", "init")
MAX_MERGE_BATCH = 16  # the most tasks one batch of the merge queue lands (design.md "Batches")


def check_merge_batch(merge_batch: object) -> None:
    """A repo's merge_batch: None or 1 (one by one, the default) up to MAX_MERGE_BATCH; anything else is refused."""
    if merge_batch is None:
        return
    if isinstance(merge_batch, bool) or not isinstance(merge_batch, int) or \
            not 1 <= merge_batch <= MAX_MERGE_BATCH:
        raise InvalidInputError(f"merge_batch must be a whole number from 1 (one task at a time, the default) to "
                                f"{MAX_MERGE_BATCH}, got {str(merge_batch)[:40]!r}: the most queued tasks the merge "
                                "queue lands at once.")


def _default_name(source: str, url: str | None, path: str | None, project_id: str) -> str:
    if source == "clone" and url:
        return Path(url.rstrip("/")).name.removesuffix(".git") or f"{project_id}-repo"
    if path:
        return Path(path.rstrip("/")).name or f"{project_id}-repo"
    return f"{project_id}-repo"


class Repos:
    def __init__(self, store: Store, projects: Projects, locks_dir: Path) -> None:
        self.store = store
        self.projects = projects
        self.locks_dir = locks_dir  # this machine's lock files (a clone in progress), beside the home's data

    # -- reads --------------------------------------------------------------------------------
    def get(self, repo_id: str) -> Repo:
        row = self.store.one("SELECT * FROM repos WHERE id = ?", (repo_id,))
        if row is None:
            raise NotFoundError(f"Repo '{repo_id}' not found. list_repos shows repo ids; add_repo registers one.")
        return Repo(**row)

    def list(self, project_id: str | None = None) -> list[Repo]:
        if project_id is not None:
            self.projects.require(project_id)
            rows = self.store.all("SELECT * FROM repos WHERE project_id = ? ORDER BY created_at, id", (project_id,))
        else:
            rows = self.store.all("SELECT * FROM repos ORDER BY project_id, created_at, id")
        return [Repo(**r) for r in rows]

    def for_project(self, project_id: str, repo_id: str | None = None) -> Repo:
        """The repo a project-scoped git tool acts on: the one named, else the project's first."""
        self.projects.require(project_id)
        if repo_id:
            repo = self.get(repo_id)
            if repo.project_id != project_id:
                raise InvalidInputError(f"Repo '{repo_id}' belongs to project '{repo.project_id}', not '{project_id}'.")
            return repo
        repos = self.list(project_id)
        if not repos:
            raise NotFoundError(f"Project '{project_id}' has no repos. add_repo registers one (clone, link or init).")
        return repos[0]

    def checkout(self, repo: Repo) -> gitops.Checkout:
        if not Path(repo.checkout_path).exists():
            raise NotFoundError(f"Repo '{repo.id}' is missing on disk ({repo.checkout_path}). Restore it, or "
                                "register it again with add_repo.")
        return gitops.Checkout(repo.checkout_path)

    def running_tasks(self, repo_id: str) -> builtins.list[str]:
        """The repo's claimed tasks: an agent works (or waits, or lands) in a worktree of it."""
        claimed, params = in_clause(CLAIMED)
        return [r["id"] for r in self.store.all(f"SELECT id FROM tasks WHERE repo_id = ? AND {claimed}",
                                                (repo_id, *params))]

    # -- add ----------------------------------------------------------------------------------
    def add(self, project_id: str, source: str, url: str | None = None, path: str | None = None,
            name: str | None = None, default_branch: str | None = None,
            progress: gitops.Progress | None = None, update_method: str | None = None,
            merge_batch: int | None = None) -> Repo:
        project = self.projects.get(project_id)
        if update_method not in (None, "merge", "rebase"):
            raise InvalidInputError(f"Unknown update_method {str(update_method)[:40]!r}. Use merge (the default) or "
                                    "rebase: how the merge queue brings a task's branch up to date.")
        check_merge_batch(merge_batch)
        if source not in SOURCES:
            raise InvalidInputError(f"Unknown source {source!r}. Use clone (url), link (path) or init.")
        if source == "clone" and not (url and url.strip()):
            raise InvalidInputError("source=clone needs `url`: a git URL or the path of a local repository.")
        if source == "link" and not (path and path.strip()):
            raise InvalidInputError("source=link needs `path`: the absolute path of an existing checkout.")
        if name is not None and not name.strip():
            raise InvalidInputError("name is empty. Give a repo name, or leave it out to derive one.")
        if default_branch is not None:
            gitops.check_ref_name(default_branch, "default branch")
        check_argument("url", url)
        check_path("path", path)
        repo_id = slugify(name or _default_name(source, url, path, project_id), what="repo name")
        # Check, create and register under one lock: a racing add of the same id waits, then is told it exists
        # (it never creates, so its cleanup can never remove the winner's checkout).
        with file_lock(self.locks_dir / f"repo-{repo_id}.lock"):
            if self.store.scalar("SELECT 1 FROM repos WHERE id = ?", (repo_id,)):
                raise ConflictError(f"A repo with id '{repo_id}' already exists. Pass another `name`.")
            if path is not None and not Path(path).expanduser().is_absolute():
                raise InvalidInputError(f"path must be absolute (got {path!r}): this connection does not say which "
                                        "folder its client runs in (an HTTP client, or not Linux). Give the full "
                                        "path, e.g. /home/you/code/app.")
            target = Path(path).expanduser() if path else Path(project.workspace) / "repos" / repo_id
            created = False
            if source == "clone":
                gitops.require_free(target, "pass another `name`")
                checkout = gitops.clone((url or "").strip(), target, progress)  # checked above: a clone has a url
                created = True
            elif source == "link":
                checkout = self._linkable(target)
            else:
                created = not target.exists()  # an existing folder is the user's: never removed on failure
                checkout = gitops.init(target, default_branch or "main")
            try:
                branch = default_branch or checkout.remote_default_branch() or checkout.current_branch() or "main"
                if source == "clone" and not checkout.branch_exists(branch) and \
                        checkout.ref_exists(f"refs/remotes/origin/{branch}"):
                    checkout.run("switch", "-q", "--track", "-c", branch, f"origin/{branch}")  # like clone -b
                if source != "init" and not checkout.branch_exists(branch):
                    raise NotFoundError(f"The repo has no branch '{branch}'; pass default_branch with one it has.")
                row: dict[str, Any] = {
                    "id": repo_id, "project_id": project_id, "source_type": source,
                    "url": url.strip() if url else checkout.remote_url(),
                    "source_path": str(target) if source == "link" else None,
                    "default_branch": branch, "checkout_path": str(target), "created_at": now_iso(),
                    "update_method": update_method,
                    "merge_batch": merge_batch,
                }
                with self.store.transaction() as db:
                    db["repos"].insert(row)
                    self.store.add_event("repo.added", project_id=project_id,
                                         payload={"repo_id": repo_id, "source_type": source, "path": str(target)})
            except BaseException:
                if created:  # never leave a half-registered clone behind
                    shutil.rmtree(target, ignore_errors=True)
                raise
        return self.get(repo_id)

    # -- edit ---------------------------------------------------------------------------------
    def edit(self, repo_id: str, update_method: str | None = None, merge_batch: int | None = None) -> Repo:
        """Change a repo's merge queue settings; fields left out stay. Checked before anything is written."""
        self.get(repo_id)
        changes: dict[str, Any] = {}
        if update_method is not None:
            if update_method not in ("merge", "rebase"):
                raise InvalidInputError(f"Unknown update_method {str(update_method)[:40]!r}. Use merge (the default) "
                                        "or rebase: how the merge queue brings a task's branch up to date.")
            changes["update_method"] = update_method
        if merge_batch is not None:
            check_merge_batch(merge_batch)
            changes["merge_batch"] = merge_batch
        if not changes:
            raise InvalidInputError("Nothing to change. Give update_method or merge_batch.")
        with self.store.transaction() as db:
            db["repos"].update(repo_id, changes)
            self.store.add_event("repo.updated", project_id=self.get(repo_id).project_id,
                                 payload={"repo_id": repo_id, "fields": sorted(changes)})
        return self.get(repo_id)

    def _linkable(self, target: Path) -> gitops.Checkout:
        if not target.is_dir():
            raise NotFoundError(f"{target} does not exist or is not a directory. source=link registers an "
                                "existing checkout; use source=init to create a repo.")
        return gitops.Checkout(target)
