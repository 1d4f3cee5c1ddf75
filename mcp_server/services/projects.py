"""Projects: named queues with a workspace, a fair-share weight, a concurrency cap and a budget."""

from __future__ import annotations

import builtins
import os
from pathlib import Path
from typing import Any

from ..store.db import Store, now_iso
from ..store.models import Project
from .agents import release_agents
from .errors import ConflictError, InvalidInputError, NotFoundError, unique
from .limits import MAX_AGENTS, MAX_TOKENS, MAX_WEIGHT, check_path, check_range
from .routing import check_instructions
from .ids import slugify
from .task_states import CLAIMED, in_clause


MAX_MERGE_RETRIES = 10  # sends back to the agent per task before it is BLOCKED (design.md "Merge queue")
DEFAULT_MERGE_RETRIES = 2


def _check_limits(
    credit_weight: float | None, max_concurrent_agents: int | None, budget_limit: int | None
) -> None:
    if credit_weight is not None and not credit_weight > 0:
        raise InvalidInputError(f"credit_weight must be greater than 0 (got {credit_weight}); 1.0 is an even share.")
    if max_concurrent_agents is not None and max_concurrent_agents < 1:
        raise InvalidInputError(
            f"max_concurrent_agents must be at least 1 (got {max_concurrent_agents}); "
            "pause_project stops a project instead."
        )
    if budget_limit is not None and budget_limit < 0:
        raise InvalidInputError(f"budget_limit must be a token count ≥ 0 (got {budget_limit}); 0 removes the limit.")
    for parameter, value, high in (("credit_weight", credit_weight, MAX_WEIGHT),
                                   ("max_concurrent_agents", max_concurrent_agents, MAX_AGENTS),
                                   ("budget_limit", budget_limit, MAX_TOKENS)):
        if value is not None:
            check_range(parameter, value, 0, high)


class Projects:
    def __init__(self, store: Store, workspaces_root: Path) -> None:
        self.store = store
        self.workspaces_root = workspaces_root

    # -- reads --------------------------------------------------------------------------------
    def require(self, project_id: str) -> dict[str, Any]:
        """A project's stored row; a NotFoundError that says where project ids are when there is none."""
        row = self.store.one("SELECT * FROM projects WHERE id = ?", (project_id,))
        if row is None:
            raise NotFoundError(f"Project '{project_id}' not found. list_projects shows project ids.")
        return row

    def _model(self, row: dict[str, Any]) -> Project:
        counts = {r["status"]: int(r["n"]) for r in self.store.all(  # trigger-kept counts: no table scan
            "SELECT status, n FROM task_counts WHERE project_id = ? AND n > 0", (row["id"],))}
        return Project(**row, task_counts=counts)

    def get(self, project_id: str) -> Project:
        return self._model(self.require(project_id))

    def exists(self, project_id: str) -> bool:
        return self.store.scalar("SELECT 1 FROM projects WHERE id = ?", (project_id,)) is not None

    def list(self, status: str | None = None, limit: int = 50, offset: int = 0) -> tuple[list[Project], int]:
        where, params = ("WHERE status = ?", (status,)) if status else ("", ())
        total = self.store.scalar(f"SELECT count(*) FROM projects {where}", params)
        rows = self.store.all(
            f"SELECT * FROM projects {where} ORDER BY created_at, id LIMIT ? OFFSET ?", (*params, limit, offset)
        )
        return [self._model(r) for r in rows], int(total)

    # -- writes -------------------------------------------------------------------------------
    def create(
        self,
        name: str,
        credit_weight: float = 1.0,
        max_concurrent_agents: int = 2,
        budget_limit: int | None = None,
        workspace: str | None = None,
        auto_create_channels: bool = False,
        verify_command: str | None = None,
    ) -> Project:
        if not name.strip():
            raise InvalidInputError("Project name is empty. Give a name such as 'Web App'.")
        project_id = slugify(name, what="project name")
        _check_limits(credit_weight, max_concurrent_agents, budget_limit)
        if self.exists(project_id):
            raise ConflictError(
                f"A project with id '{project_id}' already exists. Choose another name, or use edit_project."
            )
        if workspace:
            check_path("workspace", workspace)
            path = Path(workspace).expanduser()
            if not path.is_absolute():
                raise InvalidInputError(f"workspace must be an absolute path (got {workspace!r}).")
            if path.exists() and not path.is_dir():
                raise InvalidInputError(f"workspace {workspace!r} exists and is not a directory.")
            home = Path(os.path.realpath(self.workspaces_root.parent))
            real = Path(os.path.realpath(path))
            if (real == home or real.is_relative_to(home)) and not real.is_relative_to(
                    os.path.realpath(self.workspaces_root)):
                raise InvalidInputError(f"workspace {workspace!r} is AgentQueue's own folder ({home}), which holds its "
                                        "database and token; it is never a workspace. Omit workspace for the default "
                                        f"({self.workspaces_root}/<id>), or give a folder outside it.")
        else:
            path = self.workspaces_root / project_id
        stamp = now_iso()
        taken = f"A project with id '{project_id}' already exists. Choose another name, or use edit_project."
        with unique(taken), self.store.transaction() as db:
            db["projects"].insert({
                "id": project_id, "name": name.strip(), "status": "ACTIVE",
                "credit_weight": float(credit_weight), "max_concurrent_agents": max_concurrent_agents,
                "budget_limit": budget_limit or None, "workspace": str(path),
                "verify_command": (verify_command or "").strip() or None,
                "created_at": stamp, "updated_at": stamp,
            })
            if auto_create_channels:
                channel_id = f"#{project_id}"
                if self.store.scalar("SELECT 1 FROM project_channels WHERE channel_id = ?", (channel_id,)):
                    raise ConflictError(f"Channel '{channel_id}' already belongs to another project.")
                db["project_channels"].insert({
                    "channel_id": channel_id, "project_id": project_id, "channel_name": channel_id,
                    "is_control": 1, "created_at": stamp,
                })
            self.store.add_event("project.created", project_id=project_id, payload={"name": name.strip()})
            # Last inside the transaction: if the directory can't be made, nothing is recorded.
            try:
                path.mkdir(parents=True, exist_ok=True)
            except OSError as error:
                raise InvalidInputError(
                    f"workspace {str(path)!r} cannot be created ({error.strerror or error}). "
                    "Give a directory you can write to, or omit workspace for the default."
                ) from None
        return self.get(project_id)

    def edit(
        self,
        project_id: str,
        name: str | None = None,
        credit_weight: float | None = None,
        max_concurrent_agents: int | None = None,
        budget_limit: int | None = None,
        verify_command: str | None = None,
        default_repo_id: str | None = None,
        merge_retries: int | None = None,
        best_of_pick: str | None = None,
        instructions: str | None = None,
    ) -> Project:
        """None leaves a field alone. `instructions`: standing instructions added to every prompt of the project's
        tasks ("" clears them)."""
        self.require(project_id)
        _check_limits(credit_weight, max_concurrent_agents, budget_limit)
        changes: dict[str, Any] = {}
        if name is not None:
            if not name.strip():
                raise InvalidInputError("name is empty. Give a new name, or leave it out to keep the current one.")
            changes["name"] = name.strip()
        if credit_weight is not None:
            changes["credit_weight"] = float(credit_weight)
        if max_concurrent_agents is not None:
            changes["max_concurrent_agents"] = max_concurrent_agents
        if budget_limit is not None:
            changes["budget_limit"] = budget_limit or None
        if verify_command is not None:
            changes["verify_command"] = verify_command.strip() or None  # "" removes it
        if default_repo_id is not None:
            changes["default_repo_id"] = self._default_repo(project_id, default_repo_id.strip()) or None  # "" clears
        if merge_retries is not None:
            if not 0 <= merge_retries <= MAX_MERGE_RETRIES:
                raise InvalidInputError(f"merge_retries must be 0 to {MAX_MERGE_RETRIES} (got {merge_retries}); 0 "
                                        "blocks a conflicting or failing task at once, as before the merge queue.")
            changes["merge_retries"] = merge_retries
        if best_of_pick is not None:
            if best_of_pick not in ("smallest", "first"):
                raise InvalidInputError(f"best_of_pick is 'smallest' (the passing candidate with the smallest diff, "
                                        f"once all ended) or 'first' (the first to pass); got {best_of_pick[:50]!r}.")
            changes["best_of_pick"] = best_of_pick
        if instructions is not None:
            changes["instructions"] = check_instructions(instructions, "instructions")
        if not changes:
            raise InvalidInputError(
                "Nothing to change. Give at least one of name, credit_weight, max_concurrent_agents, budget_limit, "
                "verify_command, default_repo_id, merge_retries, best_of_pick, instructions."
            )
        with self.store.transaction() as db:
            db["projects"].update(project_id, {**changes, "updated_at": now_iso()})
            self.store.add_event("project.updated", project_id=project_id, payload={"fields": sorted(changes)})
        return self.get(project_id)

    def _default_repo(self, project_id: str, repo_id: str) -> str:
        """A default repo must be one of the project's own repos ("" passes: it clears the default)."""
        if not repo_id:
            return repo_id
        owner = self.store.scalar("SELECT project_id FROM repos WHERE id = ?", (repo_id,))
        ours = [r["id"] for r in self.store.all("SELECT id FROM repos WHERE project_id = ? ORDER BY created_at, id",
                                                (project_id,))]
        choices = f"Its repos: {', '.join(ours)}." if ours else "It has no repos yet: add_repo registers one."
        if owner is None:
            raise NotFoundError(f"Repo '{repo_id}' not found. {choices}")
        if owner != project_id:
            raise InvalidInputError(f"Repo '{repo_id}' belongs to project '{owner}', not '{project_id}'. {choices}")
        return repo_id

    def set_status(self, project_id: str, status: str) -> Project:
        row = self.require(project_id)
        if row["status"] != status:
            with self.store.transaction() as db:
                db["projects"].update(project_id, {"status": status, "updated_at": now_iso()})
                kind = "project.paused" if status == "PAUSED" else "project.resumed"
                self.store.add_event(kind, project_id=project_id)
        return self.get(project_id)

    def delete(self, project_id: str) -> tuple[str, builtins.list[str]]:
        """Remove a project and everything recorded for it; files on disk are left alone."""
        row = self.require(project_id)
        claimed, params = in_clause(CLAIMED)
        running = self.store.all(f"SELECT id FROM tasks WHERE project_id = ? AND {claimed}", (project_id, *params))
        if running:
            ids = ", ".join(r["id"] for r in running)
            raise ConflictError(
                f"Project '{project_id}' has {len(running)} running task(s) ({ids}). stop_task them first."
            )
        channels = [r["channel_id"] for r in self.store.all(
            "SELECT channel_id FROM project_channels WHERE project_id = ?", (project_id,))]
        task_ids = "SELECT id FROM tasks WHERE project_id = :p"
        with self.store.transaction() as db:
            db.execute(f"DELETE FROM task_dependencies WHERE task_id IN ({task_ids}) OR depends_on IN ({task_ids})",
                       {"p": project_id})
            db.execute(f"DELETE FROM task_results WHERE task_id IN ({task_ids})", {"p": project_id})
            release_agents(self.store, project_id=project_id)
            db.execute("DELETE FROM tasks WHERE project_id = :p", {"p": project_id})
            db.execute("DELETE FROM hook_runs WHERE hook_id IN (SELECT id FROM hooks WHERE project_id = :p)",
                       {"p": project_id})
            db.execute("DELETE FROM hooks WHERE project_id = :p", {"p": project_id})
            db.execute("UPDATE agents SET repo_id = NULL WHERE repo_id IN "
                       "(SELECT id FROM repos WHERE project_id = :p)", {"p": project_id})
            db.execute("DELETE FROM repos WHERE project_id = :p", {"p": project_id})
            db.execute("DELETE FROM project_channels WHERE project_id = :p", {"p": project_id})
            db.execute("DELETE FROM projects WHERE id = :p", {"p": project_id})
            self.store.add_event("project.deleted", project_id=project_id,
                                 payload={"name": row["name"], "workspace": row["workspace"]})
        return row["name"], channels
