"""What each board page shows, read from the services and the store (plain data; templates render it)."""

from __future__ import annotations

import json
import re
from datetime import datetime, UTC
from typing import Any

from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import DiffLexer

from .. import paths
from ..services import Services
from ..services.errors import InvalidInputError, ServiceError
from ..services.task_states import HELD, NEEDS_PERSON, WORKING, ordered
from ..store.models import TaskSummary

# The kanban's columns, left to right, and the statuses each one holds.
COLUMNS: list[tuple[str, tuple[str, ...]]] = [
    ("Defined", ("DEFINED",)),
    ("Ready", ("READY",)),
    ("Running", ordered(WORKING)),
    ("Waiting", ("WAITING_INPUT", "PAUSED")),
    ("Review", ("AWAITING_APPROVAL",)),
    ("Stuck", ordered(NEEDS_PERSON)),
    ("Done", ("COMPLETED",)),
]
COLUMN_OF = {status: name for name, statuses in COLUMNS for status in statuses}
STATUSES_OF = dict(COLUMNS)
MAX_CARDS = 5000
COLUMN_CARDS = 50  # cards a column shows on the board; the rest are on the column's own page
COLUMN_PAGE = 200  # cards a column's own page shows at a time
LOG_TAIL = 64_000
DIFF_LIMIT = 400_000
# A task id as ids.new_task_id makes them (adjective-noun, maybe -NN): never a path.
TASK_ID = re.compile(r"[a-z0-9]{1,32}(?:-[a-z0-9]{1,32}){0,3}")


def overview(svc: Services) -> dict[str, Any]:
    projects, _ = svc.projects.list(limit=500)
    tokens = {r["project_id"]: r for r in svc.usage.summary()["breakdown"]}
    running = svc.store.all("SELECT a.id, a.name, a.current_task, t.title, t.project_id FROM agents a "
                            "JOIN tasks t ON t.id = a.current_task ORDER BY a.name")
    return {"projects": [{"project": p, "tokens": (tokens.get(p.id) or {}).get("total", 0),
                          "cost": (tokens.get(p.id) or {}).get("cost_usd", 0.0),
                          "partial_runs": (tokens.get(p.id) or {}).get("partial_runs", 0),
                          "unpriced_runs": (tokens.get(p.id) or {}).get("unpriced_runs", 0),
                          "running": [r for r in running if r["project_id"] == p.id],
                          "columns": {name: sum(p.task_counts.get(s, 0) for s in statuses)
                                      for name, statuses in COLUMNS},
                          "sandbox": svc.sandbox.weakened(p.id)} for p in projects],
            "orchestrator": svc.system.orchestrator_state(), "running": running,
            "pending_requests": len(svc.requests.list("pending", limit=500)),
            "sandbox": svc.sandbox.weakened(None), "merge_queue": svc.system.merge_queue(),
            "parked": svc.parking.status()}


def kanban(svc: Services, project_id: str, query: str = "", agent: str = "", column: str | None = None,
           offset: int = 0) -> dict[str, Any]:
    """The board of a project: each column's first COLUMN_CARDS cards and how many it holds in all; with
    `column`, that column alone, COLUMN_PAGE cards from `offset` (a long column is one link away, not
    64,000 pixels down)."""
    project = svc.projects.get(project_id)
    if column is not None and column not in COLUMN_OF.values():
        raise InvalidInputError(f"Unknown column {column!r}: one of {', '.join(name for name, _ in COLUMNS)}.")
    names = [name for name, _ in COLUMNS if column in (None, name)]
    limit = COLUMN_PAGE if column else COLUMN_CARDS
    totals: dict[str, int] = {}
    cards: dict[str, list[TaskSummary]] = {}
    if query.strip() or agent:  # a filter reads every card of the project, as before, and keeps the matches
        tasks, _, _ = svc.tasks.list(project_id, None, True, MAX_CARDS, 0)
        matching: dict[str, list[TaskSummary]] = {name: [] for name, _ in COLUMNS}
        for task in tasks:
            if _matches(task, query, agent):
                matching[COLUMN_OF.get(task.status, "Stuck")].append(task)
        totals = {name: len(matching[name]) for name in names}
        cards = {name: matching[name][offset:offset + limit] for name in names}
        choices = [(t.id, t.title) for t in tasks if t.status != "COMPLETED"][:500]
    else:  # each column's first cards, in the list's order; its count from the trigger-kept counts
        counts = svc.tasks.status_counts(project_id)
        for name in names:
            statuses = STATUSES_OF[name]
            totals[name] = sum(counts.get(s, 0) for s in statuses)
            cards[name] = (svc.tasks.list(project_id, list(statuses), True, limit, offset)[0]
                           if totals[name] > offset else [])
        choices = [(r["id"], r["title"]) for r in svc.store.all(  # what list_tasks shows first: the open tasks
            "SELECT id, title FROM tasks WHERE project_id = ? AND status != 'COMPLETED' "
            "ORDER BY priority, created_at, id LIMIT 500", (project_id,))]
    agents, _ = svc.agents.list(limit=500)
    return {"project": project, "columns_shown": names, "cards_by_column": cards, "column_totals": totals,
            "shown": sum(totals.values()), "column": column, "offset": offset, "limit": limit,
            "query": query, "agent": agent, "agents": agents, "choices": choices,
            "orchestrator": svc.system.orchestrator_state()}


def column_totals(svc: Services, project_id: str) -> dict[str, int]:
    """How many tasks each column of a project's board holds (what a live page's counts are set to)."""
    counts = svc.tasks.status_counts(project_id)
    return {name: sum(counts.get(s, 0) for s in statuses) for name, statuses in COLUMNS}


def _matches(task: TaskSummary, query: str, agent: str) -> bool:
    if agent and task.assigned_agent != agent:
        return False
    needle = query.strip().lower()
    return not needle or needle in task.title.lower() or needle in task.id.lower()


def card(svc: Services, task_id: str) -> TaskSummary | None:
    task = svc.tasks.get(task_id)
    return TaskSummary(id=task.id, project_id=task.project_id, title=task.title, status=task.status,
                       priority=task.priority, assigned_agent=task.assigned_agent, depends_on=task.depends_on)


def agents(svc: Services) -> list[dict[str, Any]]:
    listed, _ = svc.agents.list(limit=500)
    tokens = {r["agent_id"]: r for r in svc.store.all(
        "SELECT agent_id, sum(total) AS total, sum(cost_usd) AS cost FROM token_ledger GROUP BY agent_id")}
    rows = []
    for agent in listed:
        started = None
        if agent.current_task:
            started = svc.store.scalar("SELECT max(timestamp) FROM events WHERE task_id = ? AND event_type IN "
                                       "('task.assigned', 'task.started')", (agent.current_task,))
        rows.append({"agent": agent, "started": started, "elapsed": _elapsed(started),
                     "tokens": (tokens.get(agent.id) or {}).get("total") or 0,
                     "cost": (tokens.get(agent.id) or {}).get("cost") or 0.0})
    return rows


def _elapsed(since: str | None) -> str:
    if not since:
        return ""
    seconds = int((datetime.now(UTC) - datetime.fromisoformat(since.replace("Z", "+00:00"))).total_seconds())
    if seconds >= 3600:
        return f"{seconds // 3600}h {seconds // 60 % 60:02d}m"
    return f"{seconds // 60}m {seconds % 60:02d}s"


def task_page(svc: Services, task_id: str) -> dict[str, Any]:
    task = svc.tasks.get(task_id)
    attempts = svc.store.all("SELECT attempt, status, summary, error_type, error_message, total, cost_usd, "
                             "partial, duration_s, created_at FROM task_results WHERE task_id = ? ORDER BY id DESC",
                             (task_id,))
    diff: dict[str, Any] | None = None
    diff_note = None
    try:
        diff = svc.vcs.task_diff(task)
    except ServiceError as error:
        diff_note = str(error)
    html_diff = None
    if diff and diff["diff"]:
        text = diff["diff"]
        if len(text) > DIFF_LIMIT:
            diff_note = (f"The diff is {len(text):,} characters; the first {DIFF_LIMIT:,} are shown "
                         "(get_task_diff has all).")
            text = text[:DIFF_LIMIT]
        html_diff = highlight(text, DiffLexer(), HtmlFormatter(nowrap=True))
    error = svc.tasks.agent_error(task_id) if task.status in HELD else None
    log, offset = log_tail(svc, task_id)
    return {"task": task, "attempts": attempts, "comments": svc.feedback.comments(task_id), "diff": diff,
            "diff_html": html_diff, "diff_note": diff_note,
            "error": error, "log": log, "log_offset": offset,
            "project": svc.projects.get(task.project_id), "column": COLUMN_OF.get(task.status, "Stuck")}


def log_tail(svc: Services, task_id: str, offset: int | None = None) -> tuple[str, int]:
    """The log from `offset` (or its last LOG_TAIL bytes), and the offset to read from next."""
    if not TASK_ID.fullmatch(task_id):  # the id names a file: nothing else may reach open()
        return "", 0
    path = paths.task_log(svc.home, task_id)
    try:
        with open(path, "rb") as log:
            size = log.seek(0, 2)
            start = max(0, size - LOG_TAIL) if offset is None or offset > size else offset
            log.seek(start)
            data = log.read(size - start)
    except FileNotFoundError:
        return "", 0
    return data.decode("utf-8", errors="replace"), start + len(data)


def usage_by_day(svc: Services, days: int = 30) -> dict[str, Any]:
    rows = svc.store.all(
        "SELECT substr(timestamp, 1, 10) AS day, coalesce(project_id, '(none)') AS project, sum(total) AS tokens, "
        "sum(cost_usd) AS cost, sum(partial) AS partial_runs, count(*) - count(cost_usd) AS unpriced_runs "
        "FROM token_ledger WHERE timestamp >= date('now', ?) GROUP BY day, project ORDER BY day",
        (f"-{days} days",))
    dates = sorted({r["day"] for r in rows})
    projects = sorted({r["project"] for r in rows})
    cell = {(r["day"], r["project"]): r for r in rows}
    series = {p: {"tokens": [int((cell.get((d, p)) or {}).get("tokens") or 0) for d in dates],
                  "cost": [round(float((cell.get((d, p)) or {}).get("cost") or 0.0), 4) for d in dates]}
              for p in projects}
    stamps = [int(datetime.fromisoformat(d).replace(tzinfo=UTC).timestamp()) for d in dates]
    return {"dates": dates, "stamps": stamps, "series": series, "rows": rows,
            "json": json.dumps({"x": stamps, "series": series})}


def diff_css() -> str:
    return HtmlFormatter().get_style_defs(".diff")
