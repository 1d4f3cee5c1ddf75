"""The state changes the engine makes while running tasks, each one transaction.

Retries: a failed run is retried while `retry_count < max_retries` (so max_retries=3 means up to
four runs), then the task is BLOCKED. Rate limits and quota pause the task instead (PAUSED with
`resume_after`), which costs no retry. Failures a retry cannot fix (auth, prompt too long) block
the task at once. Each move passes the details its reason and next step are written from.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from ..store.db import Store, iso_in, now_iso
from . import send_backs
from .agents import occupy_agent, record_pid, release_agents
from .failures import NOT_RETRIED
from .feedback import QUEUE_AUTHOR
from .task_states import CLAIMED, STARTED, can_transition
from .tasks import Tasks
from .usage import Usage

PAUSING_ERRORS = ("rate_limit", "quota")
ROOM_REASONS = ("workspace_failed", "merge_failed")  # what a full disk makes fail (Lifecycle.no_room)
log = logging.getLogger("agentqueue.tasks")


class Lifecycle:
    def __init__(self, store: Store, tasks: Tasks, usage: Usage, owner: str | None = None) -> None:
        self.store = store
        self.tasks = tasks
        self.usage = usage
        self.owner = owner  # this daemon's id (services/team.py): the runs it claims carry it
        # Set by the engine: whether a failure to make or land a task's worktree was the home's disk being full
        # (then the task waits in the queue for room instead of being held); it may tidy the worktree first.
        self.no_room: Callable[[str, str], bool] | None = None

    def owns(self, task_id: str) -> bool:
        """Whether this daemon still owns the task's run: after it lost its lease another daemon took it over,
        and then nothing this one's run does may reach the task."""
        row = self.store.one("SELECT owner FROM tasks WHERE id = ?", (task_id,))
        return self._mine(row)

    def _mine(self, row: dict[str, Any] | None) -> bool:
        return row is not None and (self.owner is None or row.get("owner") in (None, self.owner))

    def claim(self, task_id: str, agent_id: str) -> bool:
        """READY -> ASSIGNED and the agent IDLE -> BUSY, or nothing if either moved (or was paused) meanwhile."""
        with self.store.transaction():
            row = self.store.one("SELECT * FROM tasks WHERE id = ?", (task_id,))
            agent = self.store.one("SELECT state, paused FROM agents WHERE id = ?", (agent_id,))
            if not row or row["status"] != "READY" or not agent or agent["state"] != "IDLE" or agent["paused"]:
                return False
            self.tasks.move(row, "ASSIGNED", "claimed", {"assigned_agent": agent_id, "owner": self.owner},
                             details={"agent_id": agent_id})
            occupy_agent(self.store, agent_id, task_id)
        return True

    def started(self, task_id: str, branch: str | None) -> None:
        with self.store.transaction():
            row = self.tasks.require(task_id)
            if not self._mine(row):
                return
            self.tasks.move(row, "IN_PROGRESS", "agent_started", {"branch": branch}, details={"branch": branch})

    def set_repo(self, task_id: str, repo_id: str) -> None:
        """Record the repo a task without one was resolved to at claim time (before its worktree exists)."""
        with self.store.transaction() as db:
            db["tasks"].update(task_id, {"repo_id": repo_id, "updated_at": now_iso()})

    def set_pid(self, agent_id: str, pid: int | None) -> None:
        with self.store.transaction():
            record_pid(self.store, agent_id, pid)

    def record_attempt(self, task_id: str, agent_id: str | None, result: Any, duration_s: float,
                       files_changed: list[str], warning: str | None = None) -> None:
        """One row in task_results and one in the token ledger per run."""
        row = self.tasks.require(task_id)
        stamp = now_iso()
        with self.store.transaction() as db:
            if not self.owns(task_id):
                return  # taken over by another daemon: its run is the one that counts
            attempt = int(self.store.scalar("SELECT count(*) FROM task_results WHERE task_id = ?", (task_id,))) + 1
            db["task_results"].insert({
                "task_id": task_id, "attempt": attempt, "agent_id": agent_id, "status": result.status,
                "summary": result.summary, "files_changed": json.dumps(files_changed),
                "error_type": result.error_type, "error_message": result.error_message, "warning": warning,
                **{k: int(result.tokens.get(k, 0)) for k in ("input", "output", "cache_read", "cache_write", "total")},
                "cost_usd": result.cost_usd, "duration_s": round(duration_s, 3), "created_at": stamp,
                "partial": int(getattr(result, "partial", False)),
            })
            self.usage.record(project_id=row["project_id"], task_id=task_id, agent_id=agent_id,
                              tokens=result.tokens, cost_usd=result.cost_usd, timestamp=stamp,
                              partial=getattr(result, "partial", False))

    def record_usage(self, task_id: str, agent_id: str | None, result: Any) -> None:
        """Only the ledger row of a run that counts as no attempt (stopped by the daemon's shutdown, or taken over by
        another daemon): the tokens it used were paid for all the same."""
        row = self.tasks.require(task_id)
        with self.store.transaction():
            self.usage.record(project_id=row["project_id"], task_id=task_id, agent_id=agent_id, tokens=result.tokens,
                              cost_usd=result.cost_usd, timestamp=now_iso(), partial=result.partial)

    def free_agent(self, agent_id: str, task_id: str | None = None) -> None:
        """The agent is IDLE again after the run of `task_id`, unless that run was taken over meanwhile (then the
        agent may be busy again on the other daemon's run, and is not this daemon's to free)."""
        with self.store.transaction():
            if task_id is not None and not self.owns(task_id):
                return
            release_agents(self.store, agent_id=agent_id)

    def running(self, task_id: str) -> bool:
        """The task's run is going on, and it is this daemon's."""
        row = self.store.one("SELECT status, owner FROM tasks WHERE id = ?", (task_id,))
        return row is not None and self._mine(row) and row["status"] in STARTED

    def verifying(self, task_id: str) -> None:
        with self.store.transaction():
            row = self.tasks.require(task_id)
            if row["status"] == "IN_PROGRESS" and self._mine(row):
                self.tasks.move(row, "VERIFYING", "agent_completed")

    def succeeded(self, task_id: str, *, awaiting_approval: bool, pr_url: str | None = None,
                  landed: tuple[str | None, str | None] = (None, None), details: dict[str, Any] | None = None,
                  held: tuple[str, str] | None = None) -> None:
        """landed: (the default branch before, the commit it moved to), kept for get_task_diff.
        details: repo_id, default_branch and files (a count), for the log line.
        held: (reason, next_step) of a task that waits for approval for a reason of its own (protected paths)."""
        with self.store.transaction():
            row = self.tasks.require(task_id)
            if not self._mine(row):
                return
            if row["status"] == "IN_PROGRESS":
                self.tasks.move(row, "VERIFYING", "agent_completed")
                row = self.tasks.require(task_id)
            if awaiting_approval:
                self.tasks.move(row, "AWAITING_APPROVAL", "needs_approval", {"pr_url": pr_url},
                                 details={"pr_url": pr_url})
                if held:  # the move clears reason and next_step outside held statuses; this wait has one
                    self.store.db["tasks"].update(task_id, {"reason": held[0], "next_step": held[1]})
            else:
                self.tasks.move(row, "COMPLETED", "merged", {"assigned_agent": None, "base_sha": landed[0],
                                                              "landed_sha": landed[1]}, details=details)

    def pr_settled(self, task_id: str, merged: bool) -> None:
        """A task's PR was merged (COMPLETED) or closed unmerged (BLOCKED) on the forge."""
        with self.store.transaction():
            row = self.tasks.require(task_id)
            if row["status"] == "AWAITING_APPROVAL":
                self.tasks.move(row, "COMPLETED" if merged else "BLOCKED", "pr_merged" if merged else "pr_closed")

    def failed(self, task_id: str, error_type: str | None, message: str | None,
               pause_seconds: float | None = None, agent_type: str | None = None) -> str:
        """Move a failed run's task on; returns the new status. A task stop_task already moved is left alone."""
        with self.store.transaction():
            row = self.tasks.require(task_id)
            if row["status"] not in STARTED or not self._mine(row):
                return row["status"]
            error = {"error_type": error_type, "error_message": message, "agent_type": agent_type}
            if error_type in PAUSING_ERRORS and pause_seconds is not None and can_transition(row["status"], "PAUSED"):
                resume = iso_in(pause_seconds)
                self.tasks.move(row, "PAUSED", error_type, {"resume_after": resume},
                                 details={**error, "resume_after": resume})
                return "PAUSED"
            self.tasks.move(row, "FAILED", error_type or "failed", {"assigned_agent": None}, details=error)
            row = self.tasks.require(task_id)
            if error_type in NOT_RETRIED:  # a retry would fail the same way and spend tokens doing it
                self.tasks.move(row, "BLOCKED", error_type, details=error)
                return "BLOCKED"
            if row["retry_count"] < row["max_retries"]:
                self.tasks.move(row, "READY", "retry", {"retry_count": row["retry_count"] + 1},
                                 details={"retry": row["retry_count"] + 1, "max_retries": row["max_retries"]})
                return "READY"
            self.tasks.move(row, "BLOCKED", "max_retries",
                             details={**error, "runs": row["retry_count"] + 1, "max_retries": row["max_retries"]})
            return "BLOCKED"

    def blocked(self, task_id: str, reason: str, payload: dict[str, Any] | None = None,
                details: dict[str, Any] | None = None) -> None:
        """Hold a task for `reason`. `payload`, when given, is also recorded as a `<reason>` event (merge.conflict);
        the reason's texts are written from `details`, else from `payload`."""
        if reason in ROOM_REASONS and self.no_room is not None and self.no_room(task_id, reason):
            with self.store.transaction():
                row = self.tasks.require(task_id)
                if self._mine(row) and row["status"] in CLAIMED:
                    log.warning("task %s: %s on a full disk: back in the queue until AgentQueue's home has room",
                                task_id, reason)
                    self.tasks.move(row, "READY", "no_room", {"assigned_agent": None},
                                    details={"failed": reason})
                    return
        with self.store.transaction():
            row = self.tasks.require(task_id)
            if not self._mine(row):
                return
            if row["status"] == "IN_PROGRESS":
                self.tasks.move(row, "VERIFYING", "agent_completed")
                row = self.tasks.require(task_id)
            if row["status"] != "BLOCKED":
                self.tasks.move(row, "BLOCKED", reason, {"assigned_agent": None}, details=details or payload)
            if payload:
                self.store.add_event(reason.replace("_", "."), project_id=row["project_id"], task_id=task_id,
                                     payload=payload)

    def send_back(self, task_id: str, agent_id: str | None, comment: str, payload: dict[str, Any]) -> bool:
        """The merge queue sends a task's work back to the agent that did it (VERIFYING -> READY, waiting for that
        agent), with `comment` in its next prompt (services/feedback.py); False when the run was no longer this
        daemon's to move (stopped, taken over)."""
        with self.store.transaction() as db:
            row = self.tasks.require(task_id)
            if row["status"] not in ("IN_PROGRESS", "VERIFYING") or not self._mine(row):
                return False
            if row["status"] == "IN_PROGRESS":  # the fast path found the conflict before any check
                self.tasks.move(row, "VERIFYING", "agent_completed")
                row = self.tasks.require(task_id)
            # The owner stays: in team mode the worktree (and the merge left in progress in it) is this daemon's, so
            # the rerun is too while it lives (engine/queue_state.py).
            self.tasks.move(row, "READY", "sent_back", {"assigned_agent": agent_id}, details={"agent_id": agent_id})
            db["task_feedback"].insert({
                "task_id": task_id, "project_id": row["project_id"], "comment": comment, "file": None, "line": None,
                "author": QUEUE_AUTHOR, "from_status": "VERIFYING", "created_at": now_iso()})
            self.store.add_event("task.sent_back", project_id=row["project_id"], task_id=task_id, agent_id=agent_id,
                                 payload=payload)
        return True

    def sends_back(self, task_id: str) -> int:
        """How many times the merge queue sent the task back since a person last restarted it or asked for
        changes (services/send_backs.py counts them per cap)."""
        return send_backs.count(self.store, task_id).total

    def retold(self, task_id: str, comment: str, payload: dict[str, Any]) -> None:
        """What a task sent back is told, written anew just before its rerun (the merge queue merged the default
        branch again: it moved while the rerun waited): the newest comment, which its prompt shows."""
        with self.store.transaction() as db:
            row = self.tasks.require(task_id)
            db["task_feedback"].insert({
                "task_id": task_id, "project_id": row["project_id"], "comment": comment, "file": None, "line": None,
                "author": QUEUE_AUTHOR, "from_status": row["status"], "created_at": now_iso()})
            self.store.add_event("merge_queue.merged_again", project_id=row["project_id"], task_id=task_id,
                                 payload=payload)

    def check_failed(self, task_id: str, message: str) -> int | None:
        """The newest attempt's result says the checks failed on its work (it completed, then failed them); returns
        that result's id."""
        with self.store.transaction() as db:
            result_id = self.store.scalar("SELECT max(id) FROM task_results WHERE task_id = ?", (task_id,))
            db.execute("UPDATE task_results SET status = 'failed', error_type = 'verify_failed', error_message = ? "
                       "WHERE id = ?", (message, result_id))
        return int(result_id) if result_id is not None else None

    def requeue(self, task_id: str, reason: str, count_retry: bool) -> str:
        """Back to READY after a crash or shutdown (BLOCKED once retries are spent, when they count)."""
        with self.store.transaction():
            row = self.tasks.require(task_id)
            if row["status"] not in CLAIMED or not self._mine(row):
                return row["status"]
            if row["status"] == "VERIFYING":
                self.tasks.move(row, "FAILED", reason, {"assigned_agent": None})
                row = self.tasks.require(task_id)
            retries = row["retry_count"] + (1 if count_retry else 0)
            if count_retry and retries > row["max_retries"]:
                self.tasks.move(row, "BLOCKED", "max_retries", {"assigned_agent": None}, details={
                    "error_type": "recovered", "runs": retries, "max_retries": row["max_retries"],
                    "error_message": "AgentQueue stopped while the agent was running"})
                return "BLOCKED"
            self.tasks.move(row, "READY", reason, {"assigned_agent": None, "retry_count": retries})
            return "READY"

    def resume_due(self) -> list[str]:
        """PAUSED tasks whose resume_after has passed go back to READY."""
        due = self.store.all("SELECT id FROM tasks WHERE status = 'PAUSED' AND resume_after IS NOT NULL "
                             "AND resume_after <= ?", (now_iso(),))
        for row in due:
            with self.store.transaction():
                current = self.tasks.require(row["id"])
                if current["status"] == "PAUSED":
                    new = "READY" if self.tasks.deps_met(row["id"]) else "DEFINED"
                    self.tasks.move(current, new, "resume", {"resume_after": None, "assigned_agent": None})
        return [r["id"] for r in due]

    def consecutive_pauses(self, task_id: str) -> int:
        rows = self.store.all("SELECT error_type FROM task_results WHERE task_id = ? ORDER BY attempt DESC LIMIT 10",
                              (task_id,))
        count = 0
        for row in rows:
            if row["error_type"] not in PAUSING_ERRORS:
                break
            count += 1
        return count
