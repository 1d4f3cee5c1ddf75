"""Permission requests: an agent asks, a person answers later (or the request times out into a deny).

A request is opened by the engine when the policy says `ask` about an agent's tool call; its task
goes WAITING_INPUT while the agent process waits. `answer` (the `answer_request` tool, the board,
`agentqueue chat`) records the decision, optionally remembers it as a rule of the project's policy,
and puts the task back IN_PROGRESS; the engine, polling the row, hands the answer to the agent.
"""

from __future__ import annotations

import builtins
import json
import secrets
from typing import Any, Literal

from ..store.db import Store, iso_in, now_iso
from ..store.models import PermissionRequest
from .errors import ConflictError, InvalidInputError, NotFoundError
from .failures import explain
from .policy import Policies
from .policy_rules import parse_rule
from .tasks import Tasks

Answer = Literal["allow", "deny"]


class Requests:
    def __init__(self, store: Store, tasks: Tasks, policies: Policies) -> None:
        self.store = store
        self.tasks = tasks
        self.policies = policies

    @staticmethod
    def _model(row: dict[str, Any]) -> PermissionRequest:
        return PermissionRequest(**{**row, "input": json.loads(row["input"] or "{}")})

    def get(self, request_id: str) -> PermissionRequest:
        row = self.store.one("SELECT * FROM permission_requests WHERE id = ?", (request_id,))
        if row is None:
            raise NotFoundError(f"Request '{request_id}' not found. get_status and agentqueue://approvals list the "
                                "pending ones.")
        return self._model(row)

    def list(self, status: str | None = "pending", project_id: str | None = None, task_id: str | None = None,
             limit: int = 50) -> list[PermissionRequest]:
        clauses, params = [], []
        for column, value in (("status", status), ("project_id", project_id), ("task_id", task_id)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        where = " AND ".join(clauses) or "1 = 1"
        rows = self.store.all(f"SELECT * FROM permission_requests WHERE {where} ORDER BY created_at DESC, id LIMIT ?",
                              (*params, limit))
        return [self._model(r) for r in rows]

    # -- the agent asks ---------------------------------------------------------------------------
    def open(self, task_id: str, agent_id: str | None, tool: str, tool_input: dict[str, Any], action: str,
             description: str | None, suggested_rule: str | None, timeout_seconds: float,
             told_first: bool = False) -> PermissionRequest:
        """Record the question and put the task WAITING_INPUT, in one transaction. `told_first`: a notifier tells a
        person, and the timeout starts from that (engine/permissions.py), so the task's reason says so."""
        request_id = f"req-{secrets.token_hex(4)}"
        created, expires = now_iso(), iso_in(timeout_seconds)
        with self.store.transaction() as db:
            row = self.tasks.require(task_id)
            db["permission_requests"].insert({
                "id": request_id, "task_id": task_id, "project_id": row["project_id"], "agent_id": agent_id,
                "tool": tool, "input": json.dumps(tool_input)[:100_000], "action": action[:10_000],
                "description": (description or "")[:2000] or None, "suggested_rule": suggested_rule,
                "status": "pending", "created_at": created, "expires_at": expires,
            })
            if row["status"] == "IN_PROGRESS":
                self.tasks.move(row, "WAITING_INPUT", "permission_request",
                                 details={"request_id": request_id, "action": action[:300],
                                          "description": (description or "")[:200], "expires_at": expires,
                                          "told_first": told_first})
            self.store.add_event("request.created", project_id=row["project_id"], task_id=task_id, agent_id=agent_id,
                                 payload={"request_id": request_id, "action": action[:300], "expires_at": expires})
        return self.get(request_id)

    def notified_at(self, request_id: str) -> str | None:
        """When the request's first notification went out (notify/outbox.py), or None."""
        return self.store.scalar("SELECT notified_at FROM permission_requests WHERE id = ?", (request_id,))

    def extend(self, request_id: str, timeout_seconds: float) -> None:
        """A pending request now expires `timeout_seconds` from now (its timeout counts from the first notification);
        its task's reason says until when, no longer that the timeout starts once someone is told (issue 35.8)."""
        with self.store.transaction() as db:
            db.execute("UPDATE permission_requests SET expires_at = ? WHERE id = ? AND status = 'pending'",
                       (iso_in(timeout_seconds), request_id))
            task_id = self.store.scalar("SELECT task_id FROM permission_requests WHERE id = ? AND status = 'pending'",
                                        (request_id,))
            row = self.store.one("SELECT * FROM tasks WHERE id = ?", (task_id,)) if task_id else None
            if row is not None and row["status"] == "WAITING_INPUT":
                self._point_at_next(row)

    # -- a person answers -------------------------------------------------------------------------
    def answer(self, request_id: str, decision: str, remember: bool = False, message: str | None = None,
               by: str = "person") -> PermissionRequest:
        if decision not in ("allow", "deny"):
            raise InvalidInputError(f"decision must be allow or deny (got {decision!r}).")
        request = self.get(request_id)
        if request.status != "pending":
            raise ConflictError(f"Request '{request_id}' is already {request.status}"
                                + (f" ({request.decided_by})" if request.decided_by else "")
                                + "; nothing was changed.")
        if remember:
            # One rule a line: a compound command suggests one per simple command (rules hold no newline).
            rules = (request.suggested_rule or request.action).split("\n")
            for rule in rules:
                parse_rule(rule)  # every rule is checked before any is written
            for rule in rules:
                self.policies.edit(project_id=request.project_id, add_rule=rule,
                                   rule_list="allow" if decision == "allow" else "deny")
        self._settle(request, "allowed" if decision == "allow" else "denied",
                     by + (" (remembered)" if remember else ""), message, resumes=True)
        return self.get(request_id)

    def _point_at_next(self, row: dict[str, Any]) -> None:
        """A task still waiting on another request: its reason and next step name that one (issue 23: the line
        `get_status` shows must not send a person to the request they just answered)."""
        waiting = self.store.one("SELECT id, action, description, expires_at FROM permission_requests "
                                 "WHERE task_id = ? AND status = 'pending' ORDER BY created_at, id LIMIT 1",
                                 (row["id"],))
        if waiting is None:  # the caller saw one still pending in this transaction
            return
        why = explain("permission_request", "WAITING_INPUT", {
            "task_id": row["id"], "from": "IN_PROGRESS", "request_id": waiting["id"], "action": waiting["action"][:300],
            "description": (waiting["description"] or "")[:200], "expires_at": waiting["expires_at"]})
        self.store.db.execute("UPDATE tasks SET reason = ?, next_step = ?, updated_at = ? WHERE id = ?",
                              (why.reason, why.next_step, now_iso(), row["id"]))

    def expire(self, request_id: str, reason: str) -> PermissionRequest | None:
        """A request nobody answered in time (`timeout`: the agent goes on with a deny), or whose run
        ended (`run ended`, `restart`: nobody waits any more)."""
        request = self.get(request_id)
        if request.status != "pending":
            return None
        self._settle(request, "expired", reason, None, resumes=reason == "timeout")
        return self.get(request_id)

    def expire_orphans(self) -> builtins.list[str]:
        """At start: requests left pending by runs that no longer exist (a restart or a crash)."""
        rows = self.store.all("SELECT id FROM permission_requests WHERE status = 'pending'")
        for row in rows:
            self.expire(row["id"], "restart")
        return [r["id"] for r in rows]

    def _settle(self, request: PermissionRequest, status: str, decided_by: str, message: str | None,
                resumes: bool) -> None:
        with self.store.transaction() as db:
            updated = db.execute(
                "UPDATE permission_requests SET status = ?, decided_by = ?, message = ?, answered_at = ? "
                "WHERE id = ? AND status = 'pending'", (status, decided_by, message, now_iso(), request.id))
            if not updated.rowcount:
                raise ConflictError(f"Request '{request.id}' was answered meanwhile; nothing was changed.")
            row = self.tasks.require(request.task_id)
            still_open = self.store.scalar("SELECT 1 FROM permission_requests WHERE task_id = ? AND status = 'pending' "
                                           "LIMIT 1", (request.task_id,))
            # The agent goes on, with the answer or with a deny on timeout (unless its run is gone).
            if row["status"] == "WAITING_INPUT" and not still_open and resumes:
                self.tasks.move(row, "IN_PROGRESS", "answered" if status != "expired" else "timed_out")
            elif row["status"] == "WAITING_INPUT" and still_open and row["reason"] and request.id in row["reason"]:
                self._point_at_next(row)  # its reason named the request just answered
            self.store.add_event("request.answered", project_id=request.project_id, task_id=request.task_id,
                                 agent_id=request.agent_id,
                                 payload={"request_id": request.id, "status": status, "decided_by": decided_by,
                                          "action": request.action[:300]})
