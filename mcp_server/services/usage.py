"""The token ledger: what each run cost, summed by project, task or agent."""

from __future__ import annotations

from datetime import datetime, timedelta, UTC
from typing import Any

from ..store.db import Store
from .errors import InvalidInputError
from .limits import MAX_HOURS, check_range

# partial_runs: runs counted up to where they stopped (design.md "Every run is paid for"); unpriced_runs: runs of a
# model whose price is unknown, whose tokens count and whose cost is left out of cost_usd. Each is there only when
# it is not 0, so a ledger of whole, priced runs reads as it always did.
_SUMS = ("sum(input) AS input, sum(output) AS output, sum(cache_read) AS cache_read, "
         "sum(cache_write) AS cache_write, sum(total) AS total, sum(cost_usd) AS cost_usd, "
         "sum(partial) AS partial_runs, count(*) - count(cost_usd) AS unpriced_runs")
_MARKS = ("partial_runs", "unpriced_runs")
_KEYS = ("input", "output", "cache_read", "cache_write", "total", "cost_usd", *_MARKS)


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, int | float] = {k: int(row.get(k) or 0) for k in _KEYS}
    out["cost_usd"] = round(float(row.get("cost_usd") or 0), 6)
    return {k: v for k, v in out.items() if v or k not in _MARKS}


def since_iso(hours: float) -> str:
    return _iso(datetime.now(UTC) - timedelta(hours=hours))


class Usage:
    def __init__(self, store: Store) -> None:
        self.store = store

    def record(self, *, project_id: str | None, task_id: str | None = None, agent_id: str | None = None,
               hook_id: str | None = None, tokens: dict[str, int], cost_usd: float | None, timestamp: str,
               partial: bool = False) -> None:
        """Append one run's usage; call inside `transaction()`. cost_usd None: a model of unknown price. partial: the
        run stopped before its CLI's final accounting, so these are its figures up to then."""
        self.store.db["token_ledger"].insert({
            "project_id": project_id, "task_id": task_id, "agent_id": agent_id, "hook_id": hook_id,
            **{k: int(tokens.get(k, 0)) for k in ("input", "output", "cache_read", "cache_write", "total")},
            "cost_usd": None if cost_usd is None else float(cost_usd), "timestamp": timestamp,
            "partial": int(partial),
        })

    def summary(self, project_id: str | None = None, task_id: str | None = None,
                since_hours: float | None = None) -> dict[str, Any]:
        """Totals plus a breakdown: by agent for a task, by task for a project, else by project."""
        if since_hours is not None and since_hours <= 0:
            raise InvalidInputError(f"since_hours must be greater than 0 (got {since_hours}).")
        if since_hours is not None:
            check_range("since_hours", since_hours, 0, MAX_HOURS)
        clauses: list[str] = []
        params: list[object] = []
        if task_id is not None:
            # A best-of-N group's runs are its candidates' (design.md "Best of N"): every one counts toward it.
            clauses.append("(task_id = ? OR task_id IN (SELECT id FROM tasks WHERE candidate_of = ?))")
            params.extend((task_id, task_id))
            group: tuple[str, ...] = ("agent_id",)
        elif project_id is not None:
            clauses.append("project_id = ?")
            params.append(project_id)
            group = ("task_id", "agent_id")
        else:
            group = ("project_id",)
        if project_id is not None and task_id is not None:
            clauses.append("project_id = ?")
            params.append(project_id)
        if since_hours is not None:
            clauses.append("timestamp >= ?")
            params.append(since_iso(since_hours))
        where = " AND ".join(clauses) or "1 = 1"
        total = self.store.one(f"SELECT {_SUMS} FROM token_ledger WHERE {where}", params) or {}
        cols = ", ".join(group)
        rows = self.store.all(
            f"SELECT {cols}, count(*) AS runs, {_SUMS} FROM token_ledger WHERE {where} "
            f"GROUP BY {cols} ORDER BY sum(total) DESC", params)
        breakdown = [{**{c: r[c] for c in group}, "runs": r["runs"], **_clean(r)} for r in rows]
        return {"total": _clean(total), "breakdown": breakdown}

    def window_totals(self, hours: float = 24) -> dict[str, int]:
        """Tokens per project over the rolling window (the scheduler's fair-share input). The window's whole hours
        come from the trigger-kept `token_hours`, the part of its oldest hour from the ledger itself: the sum is
        exact, and costs the same after a day of ten runs or of a hundred thousand."""
        since = datetime.now(UTC) - timedelta(hours=hours)
        whole = since.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        rows = self.store.all(
            "SELECT project_id, sum(total) AS total FROM ("
            "SELECT project_id, total FROM token_hours WHERE hour >= ? UNION ALL "
            "SELECT project_id, total FROM token_ledger WHERE timestamp >= ? AND timestamp < ? "
            "AND project_id IS NOT NULL) AS recent GROUP BY project_id", (_iso(whole)[:13], _iso(since), _iso(whole)))
        return {r["project_id"]: int(r["total"] or 0) for r in rows}


def _iso(stamp: datetime) -> str:
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")
