"""Tasks: the state machine enforced, dependencies as a DAG, promotion, chain health, results."""

from __future__ import annotations

import builtins
import json
import logging
from collections import deque
from collections.abc import Iterable
from typing import Any

from ..store.db import Store, now_iso
from ..store.models import Candidate, PermissionRequest, SendBacks, Task, TaskRef, TaskResult, TaskSummary, Tokens
from .agents import release_agents
from . import candidates, routing, send_backs
from .candidates import pins as candidate_pins
from .engine_hooks import EngineHooks
from .errors import ConflictError, InvalidInputError, NotFoundError
from .limits import MAX_COUNT, MAX_RETRIES, check_range, check_title
from .failures import error_report, explain, move_note
from .ids import TaskIds
from .projects import DEFAULT_MERGE_RETRIES, Projects
from .system import task_warning
from .task_states import (CLAIMED, EXPLAINED, NEEDS_PERSON, QUEUED, REPO_FIXED, STATUS_EVENTS, STATUS_NAMES,
                          STOPPABLE, check_transition, in_clause, list_filter, parse_statuses)

AGENT_TYPES = ("claude-code", "codex", "gemini", "command", "acp")

log = logging.getLogger("agentqueue.tasks")



class AmbiguousRepoError(InvalidInputError):
    """A task names no repo and its project has several, none of them the default."""

    def __init__(self, project_id: str, repos: list[str]) -> None:
        self.project_id, self.repos = project_id, repos
        names = ", ".join(repos)
        super().__init__(
            f"Project '{project_id}' has {len(repos)} repos ({names}) and no default repo, so the task's repo is "
            f"ambiguous. Pass repo_id (one of {names}), or set the project's default with "
            "edit_project default_repo_id=<repo id>."
        )


class Tasks:
    """The task state machine behind a public API: `require` reads a task's row, `move` is the one place a status
    changes, `deps_met` and `entry_status` say where a task (re)enters the queue. The engine's moves of a run are
    services/lifecycle.py, written with these."""

    def __init__(self, store: Store, projects: Projects, engine: EngineHooks | None = None) -> None:
        self.store = store
        self.projects = projects
        self.ids = TaskIds(self.was_used)
        self.engine = engine or EngineHooks()  # stop_task kills the run, approve_task lands the branch, through it
        store.on_commit(self._log_moves)

    # -- reads --------------------------------------------------------------------------------
    def require(self, task_id: str) -> dict[str, Any]:
        """A task's stored row; a NotFoundError that says where task ids are when there is none."""
        row = self.store.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
        if row is None:
            raise NotFoundError(f"Task '{task_id}' not found. list_tasks shows task ids.")
        return row

    def _deps(self, task_id: str) -> list[str]:
        return [r["depends_on"] for r in self.store.all(
            "SELECT depends_on FROM task_dependencies WHERE task_id = ? ORDER BY depends_on", (task_id,))]

    def _dependents(self, task_id: str) -> list[str]:
        return [r["task_id"] for r in self.store.all(
            "SELECT task_id FROM task_dependencies WHERE depends_on = ? ORDER BY task_id", (task_id,))]

    def _check_repo(self, project_id: str, repo_id: str) -> None:
        repo = self.store.one("SELECT project_id FROM repos WHERE id = ?", (repo_id,))
        if repo is None:
            raise NotFoundError(f"Repo '{repo_id}' not found. list_repos shows repo ids; add_repo registers one.")
        if repo["project_id"] != project_id:
            raise InvalidInputError(
                f"Repo '{repo_id}' belongs to project '{repo['project_id']}', not '{project_id}'."
            )

    def resolve_repo(self, project_id: str) -> str | None:
        """Where a task that names no repo runs: the project's default repo, else its only repo, else (no
        repos) None, the project workspace. Several repos and no default: an error naming them."""
        project = self.projects.require(project_id)
        if project.get("default_repo_id"):
            return str(project["default_repo_id"])
        repos = [r["id"] for r in self.store.all(
            "SELECT id FROM repos WHERE project_id = ? ORDER BY created_at, id", (project_id,))]
        if len(repos) <= 1:
            return repos[0] if repos else None
        raise AmbiguousRepoError(project_id, repos)

    def get(self, task_id: str) -> Task:
        row = self.require(task_id)
        pending = [PermissionRequest(**{**r, "input": json.loads(r["input"] or "{}")}) for r in self.store.all(
            "SELECT * FROM permission_requests WHERE task_id = ? AND status = 'pending' ORDER BY created_at",
            (task_id,))]
        refused = [r["message"] for r in self.store.all(
            "SELECT message FROM audit_log WHERE task_id = ? AND action = 'sandbox:deny' ORDER BY time DESC LIMIT 20",
            (task_id,))]
        return Task(**{**row, "requires_approval": bool(row["requires_approval"]),
                       "capabilities": routing.capability_list(row.get("capabilities"))},
                    depends_on=self._deps(task_id), dependents=self._dependents(task_id), pending_requests=pending,
                    sandbox_denials=refused, warning=task_warning(self.store, row), send_backs=self._send_backs(row),
                    candidates=[Candidate(**c) for c in candidates.listing(self.store, row)] if row["best_of"] else [])

    def _send_backs(self, row: dict[str, Any]) -> SendBacks | None:
        """The merge queue's send-backs since the last reset, per cap (services/send_backs.py); None before any."""
        counted = send_backs.count(self.store, row["id"])
        if not counted.total:
            return None
        retries = self.store.scalar("SELECT merge_retries FROM projects WHERE id = ?", (row["project_id"],))
        waits = send_backs.held_reruns(self.store, row["repo_id"]).get(row["id"], []) \
            if row["status"] == "READY" and row["repo_id"] else []
        return SendBacks(check=counted.check, conflict=counted.conflict,
                         cap=DEFAULT_MERGE_RETRIES if retries is None else int(retries), free=counted.free,
                         free_cap=send_backs.FREE_CONFLICTS, waits_for=waits)

    def exists(self, task_id: str) -> bool:
        return self.store.scalar("SELECT 1 FROM tasks WHERE id = ?", (task_id,)) is not None

    def was_used(self, task_id: str) -> bool:
        """Whether an id names a task now or ever did (its events, ledger rows and log outlive it)."""
        # Every task ever created has events (task.created, task.deleted), indexed by task_id.
        return self.exists(task_id) or \
            self.store.scalar("SELECT 1 FROM events WHERE task_id = ? LIMIT 1", (task_id,)) is not None

    def status_counts(self, project_id: str | None = None) -> dict[str, int]:
        """Tasks per status (of one project, or all), from the trigger-kept counts: no table scan."""
        where, params = ("WHERE project_id = ?", (project_id,)) if project_id is not None else ("", ())
        return {r["status"]: int(r["n"]) for r in self.store.all(
            f"SELECT status, sum(n) AS n FROM task_counts {where} GROUP BY status HAVING sum(n) > 0", params)}

    def list(
        self,
        project_id: str | None = None,
        status: str | list[str] | None = None,
        include_completed: bool = False,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[TaskSummary], int, int]:
        """(page, total matching, completed tasks hidden by the default filter)."""
        statuses = parse_statuses(status)
        if project_id is not None:
            self.projects.require(project_id)
        where, params, total, hidden = list_filter(project_id, statuses, include_completed,
                                                   self.status_counts(project_id))
        rows = self.store.all(
            f"SELECT id, project_id, title, status, priority, assigned_agent FROM tasks WHERE {where} "
            "ORDER BY priority, created_at, id LIMIT ? OFFSET ?", (*params, limit, offset))
        deps: dict[str, list[str]] = {r["id"]: [] for r in rows}
        if rows:
            marks = ",".join("?" * len(rows))
            for d in self.store.all(
                f"SELECT task_id, depends_on FROM task_dependencies WHERE task_id IN ({marks}) ORDER BY depends_on",
                [r["id"] for r in rows],
            ):
                deps[d["task_id"]].append(d["depends_on"])
        return [TaskSummary(**r, depends_on=deps[r["id"]]) for r in rows], total, hidden

    # -- dependency graph ---------------------------------------------------------------------
    def _check_deps(self, task_id: str | None, depends_on: Iterable[str]) -> builtins.list[str]:
        """Validate a dependency list: known ids, no self-edge, no cycle (the cycle is named)."""
        deps = list(dict.fromkeys(d.strip() for d in depends_on))
        if any(not d for d in deps):
            raise InvalidInputError("depends_on contains an empty task id. Give task ids such as 'swift-falcon'.")
        missing = [d for d in deps if not self.exists(d)]
        if missing:
            raise NotFoundError(
                f"depends_on names unknown task(s): {', '.join(missing)}. list_tasks shows task ids."
            )
        if task_id is None:
            return deps
        if task_id in deps:
            raise InvalidInputError(f"Task '{task_id}' cannot depend on itself. Remove it from depends_on.")
        for dep in deps:
            path = self._path_to(dep, task_id)
            if path:
                cycle = " -> ".join([task_id, *path])
                raise ConflictError(
                    f"Dependency cycle: {cycle}. Remove '{dep}' from depends_on, or drop one of those edges first."
                )
        return deps

    def _path_to(self, start: str, target: str) -> builtins.list[str] | None:
        """A depends_on path start -> ... -> target, if one exists (BFS, shortest)."""
        parents: dict[str, str | None] = {start: None}
        queue = deque([start])
        while queue:
            node = queue.popleft()
            if node == target:
                path = [node]
                while parents[path[-1]] is not None:
                    path.append(parents[path[-1]])  # type: ignore[arg-type]
                return list(reversed(path))
            for nxt in self._deps(node):
                if nxt not in parents:
                    parents[nxt] = node
                    queue.append(nxt)
        return None

    def deps_met(self, task_id: str) -> bool:
        """Every dependency of the task is COMPLETED (or it has none)."""
        return not self.store.scalar(
            "SELECT 1 FROM task_dependencies d JOIN tasks t ON t.id = d.depends_on "
            "WHERE d.task_id = ? AND t.status != 'COMPLETED' LIMIT 1", (task_id,))

    # -- the one place statuses change ----------------------------------------------------------
    def move(self, row: dict[str, Any], new: str, reason: str, fields: dict[str, Any] | None = None,
             *, override: bool = False, details: dict[str, Any] | None = None) -> builtins.list[TaskRef]:
        """Set a task's status inside a transaction; returns dependents promoted to READY.

        `reason` is the move's code (stopped, max_retries, merge_failed…); `details` what the
        texts need (the run's error, the branch and files…). Entering an EXPLAINED status (BLOCKED,
        FAILED, PAUSED, WAITING_INPUT) records the reason and next step on the task; leaving them clears both."""
        old = row["status"]
        if not override:
            check_transition(row["id"], old, new)
        facts = {"task_id": row["id"], "from": old, "pr_url": row.get("pr_url"), **(details or {})}
        payload: dict[str, Any] = {"from": old, "to": new, "reason": reason, "title": row["title"]}
        if new in EXPLAINED:
            why = explain(reason, new, facts)
            held: dict[str, str | None] = {"reason": why.reason, "next_step": why.next_step}
            payload["message"] = why.reason
        else:
            held = {"reason": None, "next_step": None}
            payload["note"] = move_note(reason, new, facts)
        changes = {**(fields or {}), **held, "status": new, "updated_at": now_iso()}
        # Plain SQL (the columns are this module's own names): sqlite-utils' update reads the table's keys first.
        self.store.db.execute(f"UPDATE tasks SET {', '.join(f'{c} = ?' for c in changes)} WHERE id = ?",
                              (*changes.values(), row["id"]))
        self.store.add_event(STATUS_EVENTS[new], project_id=row["project_id"], task_id=row["id"],
                             agent_id=row.get("assigned_agent") or (fields or {}).get("assigned_agent"),
                             payload=payload)
        return self._promote(self._dependents(row["id"])) if new == "COMPLETED" else []

    @staticmethod
    def _log_moves(events: builtins.list[dict[str, Any]]) -> None:
        """One daemon log line per committed status change (a rolled-back move is never logged)."""
        for event in events:
            payload = event["payload"]
            if event["event_type"] in STATUS_EVENTS.values() and "to" in payload and "from" in payload:
                detail = (f"{payload['reason']}: {payload['message']}" if "message" in payload
                          else payload.get("note") or payload["reason"])
                log.info("task %s %s → %s (%s)", event["task_id"], payload["from"], payload["to"], detail)

    def _promote(self, dependents: builtins.list[str]) -> builtins.list[TaskRef]:
        """DEFINED dependents whose last unmet dependency just completed (or went away) become READY."""
        promoted = []
        for dep_id in dependents:
            dep = self.require(dep_id)
            if dep["status"] == "DEFINED" and self.entry_status(dep_id) == "READY":
                self.move(dep, "READY", "deps_met")
                promoted.append(TaskRef(id=dep_id, title=dep["title"], status="READY"))
        return promoted

    def entry_status(self, task_id: str) -> str:
        """Where the task enters the queue: READY, or DEFINED while a dependency is not COMPLETED. A best-of-N group
        never runs itself: it waits, DEFINED, for its candidates."""
        if self.store.scalar("SELECT best_of FROM tasks WHERE id = ?", (task_id,)):
            return "DEFINED"
        return "READY" if self.deps_met(task_id) else "DEFINED"

    # -- writes -------------------------------------------------------------------------------
    def create(
        self,
        project_id: str,
        title: str,
        description: str,
        priority: int = 100,
        repo_id: str | None = None,
        requires_approval: bool = False,
        depends_on: builtins.list[str] | None = None,
        max_retries: int = 3,
        agent_type: str | None = None,
        created_by_hook: str | None = None,
        parent_task_id: str | None = None,
        max_depth: int | None = None,
        candidates: int | builtins.list[str] | None = None,
        pick: str | None = None,
        capabilities: builtins.list[str] | None = None,
        model: str | None = None,
    ) -> Task:
        """`parent_task_id`: the running task whose agent queues this one; the new task depends on it and
        sits one level deeper, refused beyond `max_depth` (agents must not spawn tasks without end).
        `candidates`: best of N (services/candidates.py): the task becomes a group of N candidate tasks, each
        pinned to an agent (the ids given, or that many picked), and `pick` says how the winner is chosen (default:
        the project's best_of_pick, else "smallest")."""
        project_row = self.projects.require(project_id)
        depth = 0
        if parent_task_id is not None:
            parent = self.require(parent_task_id)
            depth = int(parent.get("depth") or 0) + 1
            if max_depth is not None and depth > max_depth:
                raise ConflictError(
                    f"Task '{parent_task_id}' is already {depth - 1} level(s) below a task a person queued; agents "
                    f"may queue follow-ups only {max_depth} level(s) deep. Finish this task and describe the rest "
                    "in your summary instead.")
            project_id = parent["project_id"]
            depends_on = list(dict.fromkeys([*(depends_on or []), parent_task_id]))
        if not title.strip():
            raise InvalidInputError("Task title is empty. Give a short title such as 'Add login page'.")
        check_title(title.strip())
        if not description.strip():
            raise InvalidInputError(
                "Task description is empty. Describe the work so an agent can do it without this conversation."
            )
        if max_retries < 0:
            raise InvalidInputError(f"max_retries must be 0 or more (got {max_retries}).")
        check_range("max_retries", max_retries, 0, MAX_RETRIES)
        check_range("priority", priority, -MAX_COUNT, MAX_COUNT)  # a hook's task_template reaches here too
        if agent_type is not None and agent_type not in AGENT_TYPES:
            raise InvalidInputError(f"Unknown agent_type {agent_type!r}. Use one of: {', '.join(AGENT_TYPES)}.")
        needs, model = routing.stored_capabilities(capabilities), routing.check_model(model)
        if repo_id is not None:
            self._check_repo(project_id, repo_id)
        else:
            repo_id = self.resolve_repo(project_id)
        deps = self._check_deps(None, depends_on or [])
        pinned = candidate_pins(self.store, candidates, pick, agent_type, repo_id, requires_approval, needs)
        if pinned is not None and pick is None:  # the project's rule (edit_project best_of_pick)
            pick = (self.projects.require(project_id) if parent_task_id else project_row).get("best_of_pick") \
                or "smallest"
        stamp = now_iso()
        with self.store.transaction():
            task_id = self.ids.new()
            row = {"id": task_id, "project_id": project_id, "title": title.strip(),
                   "description": description.strip(), "status": "DEFINED" if deps else "READY", "priority": priority,
                   "repo_id": repo_id, "retry_count": 0, "max_retries": max_retries,
                   "requires_approval": int(requires_approval), "agent_type": agent_type,
                   "parent_task_id": parent_task_id, "depth": depth, "created_at": stamp, "updated_at": stamp,
                   "capabilities": needs, "model": model}
            origin = {"created_by_hook": created_by_hook} if created_by_hook else {}
            if parent_task_id:
                origin["created_by_task"] = parent_task_id
            if pinned is None:
                self._insert(row, deps, origin)
            else:  # the group never runs itself: its candidates do, each carrying its dependencies
                members: builtins.list[str] = []
                while len(members) < len(pinned):  # ids not yet inserted: never the same one twice
                    member = self.ids.new()
                    if member != task_id and member not in members:
                        members.append(member)
                self._insert({**row, "status": "DEFINED", "best_of": len(pinned), "pick": pick}, [],
                             {**origin, "candidates": members})
                for member, agent in zip(members, pinned, strict=True):
                    self._insert({**row, "id": member, "candidate_of": task_id, "assigned_agent": agent}, deps,
                                 {"candidate_of": task_id, "agent_id": agent})
        return self.get(task_id)

    def _insert(self, row: dict[str, Any], deps: builtins.list[str], origin: dict[str, Any]) -> None:
        """One new task's row, its dependencies and its `task.created` event, inside the caller's transaction."""
        db = self.store.db
        # Plain SQL: sqlite-utils' insert and update read the table's columns and keys first, on every call.
        db.execute(f"INSERT INTO tasks ({', '.join(row)}) VALUES ({', '.join(':' + k for k in row)})", row)
        for dep in deps:
            db.execute("INSERT INTO task_dependencies (task_id, depends_on) VALUES (?, ?)", (row["id"], dep))
        status = self.entry_status(row["id"]) if deps else row["status"]
        if status != row["status"]:
            db.execute("UPDATE tasks SET status = ? WHERE id = ?", (status, row["id"]))
        self.store.add_event("task.created", project_id=row["project_id"], task_id=row["id"],
                             payload={"title": row["title"], "status": status, "depends_on": deps, **origin})

    def edit(
        self,
        task_id: str,
        title: str | None = None,
        description: str | None = None,
        priority: int | None = None,
        depends_on: builtins.list[str] | None = None,
        requires_approval: bool | None = None,
        repo_id: str | None = None,
    ) -> Task:
        row = self.require(task_id)
        changes: dict[str, Any] = {}
        if repo_id is not None and repo_id != row["repo_id"]:
            self._check_repo_move(row, repo_id)
            changes["repo_id"] = repo_id
        if title is not None:
            if not title.strip():
                raise InvalidInputError("title is empty. Give a new title, or leave it out to keep the current one.")
            check_title(title.strip())
            changes["title"] = title.strip()
        if description is not None:
            if not description.strip():
                raise InvalidInputError("description is empty. Give a new description, or leave it out.")
            changes["description"] = description.strip()
        if priority is not None:
            check_range("priority", priority, -MAX_COUNT, MAX_COUNT)
            changes["priority"] = priority
        if requires_approval is not None:
            changes["requires_approval"] = int(requires_approval)
        deps = self._check_deps(task_id, depends_on) if depends_on is not None else None
        if not changes and deps is None:
            raise InvalidInputError(
                "Nothing to change. Give at least one of title, description, priority, depends_on, requires_approval, "
                "repo_id."
            )
        with self.store.transaction() as db:
            if changes:
                db["tasks"].update(task_id, {**changes, "updated_at": now_iso()})
            if deps is not None:
                db.execute("DELETE FROM task_dependencies WHERE task_id = ?", (task_id,))
                for dep in deps:
                    db["task_dependencies"].insert({"task_id": task_id, "depends_on": dep})
                fields = [*changes, "depends_on"]
            else:
                fields = list(changes)
            self.store.add_event("task.updated", project_id=row["project_id"], task_id=task_id,
                                 payload={"fields": sorted(fields)})
            if deps is not None and row["status"] in QUEUED:
                wanted = self.entry_status(task_id)
                if wanted != row["status"]:
                    self.move(self.require(task_id), wanted, "deps_met" if wanted == "READY" else "deps_added")
        return self.get(task_id)

    def _check_repo_move(self, row: dict[str, Any], repo_id: str) -> None:
        """edit_task repo_id: a repo of the task's project, and a task whose work is not tied to its repo now."""
        self._check_repo(row["project_id"], repo_id)
        if row.get("best_of") or row.get("candidate_of"):
            raise ConflictError(f"Task '{row['id']}' is part of a best-of-N task: its candidates work in repo "
                                f"'{row['repo_id']}'. Create a new task with repo_id instead.")
        if row["status"] in REPO_FIXED:
            raise ConflictError(
                f"Task '{row['id']}' is {row['status']}: its work is in repo '{row['repo_id']}' until it ends, so "
                "its repo cannot change now. stop_task it first if it should run elsewhere."
            )

    def stop(self, task_id: str) -> tuple[str, bool]:
        """Block a task and kill its agent if one runs; returns (previous status, killed). A best-of-N group's
        candidates that have not ended are stopped with it."""
        row = self.require(task_id)
        if row["status"] not in STOPPABLE:
            raise ConflictError(
                f"Task '{task_id}' is {row['status']}; only {', '.join(sorted(STOPPABLE))} tasks can be stopped."
            )
        killed = False
        if row.get("best_of"):
            for member in candidates.rows(self.store, task_id):
                if member["status"] in STOPPABLE:
                    killed = self.stop(member["id"])[1] or killed
        killed = self.engine.stop_run(task_id) or killed
        with self.store.transaction():
            self.move(self.require(task_id), "BLOCKED", "stopped", {"assigned_agent": None})
            if row["assigned_agent"]:
                release_agents(self.store, agent_id=row["assigned_agent"])
        return row["status"], killed

    def restart(self, task_id: str) -> tuple[str, str]:
        row = self.require(task_id)
        if row["status"] in CLAIMED:
            raise ConflictError(f"Task '{task_id}' is {row['status']}. stop_task it first, then restart_task.")
        group = self.require(row["candidate_of"]) if row.get("candidate_of") else None
        if row.get("best_of") and row["status"] != "DEFINED":
            group = row  # a group that ended: its candidates that did not land run again
        new = self.entry_status(task_id)
        with self.store.transaction():
            if row["status"] == new:
                self.store.db["tasks"].update(task_id, {"retry_count": 0, "resume_after": None,
                                                        "updated_at": now_iso()})
            else:
                self.move(row, new, "restart", {"retry_count": 0, "assigned_agent": None, "resume_after": None})
            self.store.add_event("task.restarted", project_id=row["project_id"], task_id=task_id,
                                 payload={"from": row["status"], "to": new})
            if group is not None:
                self._reopen(group, restart_all=group is row)
        return row["status"], new

    def _reopen(self, group: dict[str, Any], restart_all: bool) -> None:
        """A restarted group or candidate: the group waits for its candidates again (DEFINED, no winner), and with
        `restart_all` every candidate that did not land (held, or passed and not chosen) runs again."""
        current = self.require(group["id"])
        if current["status"] != "DEFINED":
            self.move(current, "DEFINED", "restart", {"chosen": None}, override=True)
        elif current["chosen"]:
            self.store.db.execute("UPDATE tasks SET chosen = NULL WHERE id = ?", (group["id"],))
        if not restart_all:
            return
        for member in candidates.rows(self.store, group["id"]):
            if member["status"] in CLAIMED or member["status"] in QUEUED or member.get("landed_sha"):
                continue
            self.move(member, self.entry_status(member["id"]), "restart",
                      {"retry_count": 0, "assigned_agent": None, "resume_after": None}, override=True)
            self.store.add_event("task.restarted", project_id=member["project_id"], task_id=member["id"],
                                 payload={"from": member["status"], "to": "READY"})

    def delete(self, task_id: str) -> builtins.list[TaskRef]:
        """Delete a task; dependents lose the edge and are promoted if that was their last blocker. A best-of-N
        candidate's kept branch is discarded with it; a group goes with all its candidates."""
        row = self.require(task_id)
        if row["status"] in CLAIMED:
            raise ConflictError(f"Task '{task_id}' is {row['status']}. stop_task it first, then delete_task.")
        members = candidates.rows(self.store, task_id) if row.get("best_of") else []
        running = [m["id"] for m in members if m["status"] in CLAIMED]
        if running:
            raise ConflictError(f"Candidate(s) {', '.join(running)} of task '{task_id}' are running. stop_task them "
                                "first, then delete_task.")
        unblocked = []
        for member in members:
            unblocked += self.delete(member["id"])
        if row.get("candidate_of") and row.get("branch") and not row.get("landed_sha"):
            self.engine.discard_branch(self.get(task_id))  # the person asked: the kept branch goes too
        dependents = self._dependents(task_id)
        with self.store.transaction() as db:
            db.execute("DELETE FROM task_dependencies WHERE task_id = ? OR depends_on = ?", (task_id, task_id))
            db.execute("DELETE FROM task_results WHERE task_id = ?", (task_id,))
            release_agents(self.store, task_id=task_id)
            db.execute("DELETE FROM tasks WHERE id = ?", (task_id,))
            self.store.add_event("task.deleted", project_id=row["project_id"], task_id=task_id,
                                 payload={"title": row["title"]})
            return unblocked + self._promote(dependents)

    def approve(self, task_id: str) -> Task:
        row = self.require(task_id)
        if row["status"] != "AWAITING_APPROVAL":
            raise ConflictError(
                f"Task '{task_id}' is {row['status']}, not AWAITING_APPROVAL; there is nothing to approve."
            )
        self.engine.land_approved(self.get(task_id))
        with self.store.transaction():
            self.move(row, "COMPLETED", "approved")
        return self.get(task_id)

    def skip(self, task_id: str) -> builtins.list[TaskRef]:
        row = self.require(task_id)
        if row["status"] not in NEEDS_PERSON:
            raise ConflictError(
                f"Task '{task_id}' is {row['status']}; only BLOCKED or FAILED tasks can be skipped."
            )
        with self.store.transaction():
            return self.move(row, "COMPLETED", "skipped")

    def set_status(self, task_id: str, status: str) -> tuple[str, str]:
        """The override: any status, recorded as `task.status_overridden`."""
        new = (parse_statuses(status) or [""])[0]
        if not new or "," in status:
            raise InvalidInputError(f"Give exactly one status. Valid statuses: {', '.join(STATUS_NAMES)}.")
        row = self.require(task_id)
        with self.store.transaction():
            if row["status"] != new:
                self.move(row, new, "set_task_status", override=True)
            self.store.add_event("task.status_overridden", project_id=row["project_id"], task_id=task_id,
                                 payload={"from": row["status"], "to": new})
        return row["status"], new

    # -- chain health -------------------------------------------------------------------------
    def stuck_downstream(self, task_id: str) -> builtins.list[TaskRef]:
        """DEFINED tasks that wait, directly or through other DEFINED tasks, on this one."""
        seen: set[str] = set()
        stuck: list[TaskRef] = []
        queue = deque([task_id])
        while queue:
            for dep_id in self._dependents(queue.popleft()):
                if dep_id in seen:
                    continue
                seen.add(dep_id)
                dep = self.require(dep_id)
                if dep["status"] == "DEFINED":
                    stuck.append(TaskRef(id=dep_id, title=dep["title"], status="DEFINED"))
                    queue.append(dep_id)
        return stuck

    def stuck_chains(self, project_id: str | None) -> builtins.list[dict[str, Any]]:
        """Every task that needs a person (BLOCKED, FAILED) with the DEFINED tasks waiting on it, directly or through
        other DEFINED ones (as `stuck_downstream`), nearest first: one recursive query for all of them, so the cost is
        what is returned, not a round trip per task (which a database server would charge for)."""
        held, held_params = in_clause(NEEDS_PERSON, "r.status")
        where, params = (f"{held} AND r.project_id = ?", (*held_params, project_id)) if project_id \
            else (held, held_params)
        rows = self.store.all(
            "WITH RECURSIVE down(root, id, depth) AS ("
            "  SELECT d.depends_on, d.task_id, 1 FROM task_dependencies d JOIN tasks r ON r.id = d.depends_on "
            f"  WHERE {where}"
            "  UNION"
            "  SELECT down.root, d.task_id, down.depth + 1 FROM down JOIN tasks t ON t.id = down.id "
            "  JOIN task_dependencies d ON d.depends_on = down.id WHERE t.status = 'DEFINED' AND down.depth < 10000"
            ") SELECT down.root, t.id, t.title, min(down.depth) AS depth FROM down JOIN tasks t ON t.id = down.id "
            "WHERE t.status = 'DEFINED' GROUP BY down.root, t.id, t.title ORDER BY down.root, depth, t.id", params)
        stuck: dict[str, list[TaskRef]] = {}
        for row in rows:
            stuck.setdefault(row["root"], []).append(TaskRef(id=row["id"], title=row["title"], status="DEFINED"))
        chains = []
        for row in self.store.all(
            f"SELECT id, title, status, reason, next_step FROM tasks r WHERE {where} ORDER BY priority, created_at",
            params):
            if row["id"] in stuck:
                chains.append({"blocked_task": TaskRef(id=row["id"], title=row["title"], status=row["status"]),
                               "reason": row["reason"], "next_step": row["next_step"],
                               "stuck_downstream": stuck[row["id"]], "stuck_count": len(stuck[row["id"]])})
        return chains

    # -- results ------------------------------------------------------------------------------
    def results(self, task_id: str) -> tuple[int, TaskResult | None]:
        self.require(task_id)
        attempts = int(self.store.scalar("SELECT count(*) FROM task_results WHERE task_id = ?", (task_id,)))
        row = self.store.one("SELECT * FROM task_results WHERE task_id = ? ORDER BY attempt DESC, id DESC LIMIT 1",
                             (task_id,))
        if row is None:
            return attempts, None
        tokens = Tokens(**{k: row[k] or 0 for k in ("input", "output", "cache_read", "cache_write", "total")})
        return attempts, TaskResult(
            status=row["status"], summary=row["summary"], files_changed=json.loads(row["files_changed"] or "[]"),
            error_type=row["error_type"], error_message=row["error_message"], warning=row.get("warning"),
            tokens=tokens,
            cost_usd=row["cost_usd"], partial=bool(row.get("partial")), duration_s=row["duration_s"],
            agent_id=row["agent_id"], attempt=row["attempt"], created_at=row["created_at"],
        )

    def _held_code(self, row: dict[str, Any]) -> str | None:
        """The reason code of the move that put the task in its current status (from its event)."""
        payload = self.store.scalar("SELECT payload FROM events WHERE task_id = ? AND event_type = ? "
                                    "ORDER BY id DESC LIMIT 1", (row["id"], STATUS_EVENTS[row["status"]]))
        return json.loads(payload).get("reason") if payload else None

    def agent_error(self, task_id: str) -> dict[str, Any]:
        row = self.require(task_id)
        _, result = self.results(task_id)
        code = self._held_code(row) if row["status"] in EXPLAINED and row["reason"] else None
        return error_report(row, result.model_dump() if result is not None else None, code)
