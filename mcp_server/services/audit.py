"""The audit log: who did or tried what, what the policy decided and by what, how it ended.

One append-only row per MCP tool call (written after the call, in its own transaction, so a
refused or failed call is recorded too) and per agent permission decision (written by the
engine). Arguments are stored as JSON with secrets redacted and long values cut. Rows older than
`[audit] retention_days` are pruned by the daemon.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from ..store.db import Store, now_iso
from ..store.models import AuditEntry
from .errors import InvalidInputError
from .limits import MAX_HOURS, check_range
from .usage import since_iso

# Keys whose values never reach the log: api_key, X-Auth-Token, client_secret, password, Authorization…
SECRET_KEY = re.compile(r"key|token|secret|passw|authorization|credential|cookie", re.I)
REDACTED = "[redacted]"
MAX_VALUE = 500  # characters of one string value kept
MAX_ARGUMENTS = 8000  # characters of the whole JSON kept
MAX_MESSAGE = 500
DECISIONS = ("allow", "deny", "ask→accept", "ask→decline", "ask→cancel", "ask→refused", "ask→timeout", "none")
OUTCOMES = ("ok", "error", "refused")


def redact(value: Any, depth: int = 0) -> Any:
    """A copy of `value` safe to keep: secret-named keys masked, long strings cut, deep nesting elided."""
    if depth > 8:
        return "[…]"
    if isinstance(value, dict):
        return {str(k): REDACTED if SECRET_KEY.search(str(k)) and v not in (None, "") else redact(v, depth + 1)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v, depth + 1) for v in value[:100]] + ([f"[… {len(value) - 100} more]"] if len(value) > 100
                                                               else [])
    if isinstance(value, str) and len(value) > MAX_VALUE:
        return value[:MAX_VALUE] + f"[… {len(value) - MAX_VALUE} more characters]"
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return redact(str(value), depth + 1)


class Audit:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._listeners: list[Callable[[], None]] = []

    def on_record(self, listener: Callable[[], None]) -> None:
        """Call `listener()` after each row is written (the server marks agentqueue://audit changed)."""
        self._listeners.append(listener)

    def record(self, *, actor: str, action: str, decision: str, decided_by: str = "", outcome: str = "ok",
               message: str | None = None, project_id: str | None = None, task_id: str | None = None,
               arguments: dict[str, Any] | None = None, duration_ms: int | None = None, wait: bool = True) -> int:
        """Append one row in its own transaction; for tool calls (client:<name>) and agents (agent:<id>) alike.
        `wait=False` raises StoreBusy instead of waiting for another writer (the caller writes it later)."""
        text = json.dumps(redact(arguments or {}), ensure_ascii=False, default=str)
        if len(text) > MAX_ARGUMENTS:
            text = json.dumps({"_truncated": text[:MAX_ARGUMENTS]}, ensure_ascii=False)
        row = {"time": now_iso(), "actor": actor, "project_id": project_id, "task_id": task_id, "action": action,
               "arguments": text, "decision": decision, "decided_by": decided_by or "", "outcome": outcome,
               "message": (message or "")[:MAX_MESSAGE] or None, "duration_ms": duration_ms}
        # A lone surrogate a client sent (JSON allows the escape) fits no UTF-8 column or answer: store U+FFFD.
        row = {k: v.encode("utf-8", "surrogatepass").decode("utf-8", "replace") if isinstance(v, str) else v
               for k, v in row.items()}
        with self.store.transaction(wait=wait) as db:
            cursor = db.execute(
                "INSERT INTO audit_log (time, actor, project_id, task_id, action, arguments, decision, decided_by, "
                "outcome, message, duration_ms) VALUES (:time, :actor, :project_id, :task_id, :action, :arguments, "
                ":decision, :decided_by, :outcome, :message, :duration_ms) RETURNING id", row)
            row_id = int(cursor.fetchone()[0])
        for listener in list(self._listeners):
            listener()
        return row_id

    def query(self, limit: int = 50, project_id: str | None = None, task_id: str | None = None,
              action: str | None = None, decision: str | None = None, since_hours: float | None = None,
              actor: str | None = None) -> list[AuditEntry]:
        """Newest first. `action` is a glob (`tool:run_command*`); `decision` is exact (`deny`, `ask→accept`)."""
        if not 1 <= limit <= 1000:
            raise InvalidInputError(f"limit must be between 1 and 1000 (got {limit}).")
        if since_hours is not None and since_hours <= 0:
            raise InvalidInputError(f"since_hours must be more than 0 (got {since_hours}).")
        if since_hours is not None:
            check_range("since_hours", since_hours, 0, MAX_HOURS)
        if decision is not None and decision not in DECISIONS:
            raise InvalidInputError(f"decision {decision!r} is not one of {', '.join(DECISIONS)}.")
        clauses, params = [], []
        for column, value in (("project_id", project_id), ("task_id", task_id), ("decision", decision),
                              ("actor", actor)):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        if action:
            clauses.append("action LIKE ? ESCAPE '\\'")
            params.append(glob_to_like(action if any(c in action for c in "*?") else action + "*"))
        if since_hours is not None:
            clauses.append("time >= ?")
            params.append(since_iso(since_hours))
        where = " AND ".join(clauses) or "1 = 1"
        rows = self.store.all(f"SELECT * FROM audit_log WHERE {where} ORDER BY id DESC LIMIT ?", (*params, limit))
        return [AuditEntry(**{**r, "arguments": json.loads(r["arguments"] or "{}")}) for r in rows]

    def prune(self, retention_days: float) -> int:
        """Delete rows older than `retention_days`; returns how many went."""
        cutoff = since_iso(retention_days * 24)
        with self.store.transaction() as db:
            cursor = db.execute("DELETE FROM audit_log WHERE time < ?", (cutoff,))
        return int(cursor.rowcount or 0)


def glob_to_like(pattern: str) -> str:
    """A shell glob (`*`, `?`) as a LIKE pattern with `\\` escapes, which both store backends understand."""
    escaped = pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%").replace("?", "_")
