"""The task state machine: which status may follow which, and the named groups of statuses every module uses.

A group answers one question about a task ("is an agent attached?", "may a reviewer send it back?"); each
is defined once here, from the table below, and `tests/test_task_states.py` checks them against it.
"""

from __future__ import annotations

from collections.abc import Iterable

from .errors import ConflictError, InvalidInputError

# Every status, in the order the models list them (store.models.TaskStatus; a test keeps the two equal).
STATUS_NAMES = ["DEFINED", "READY", "ASSIGNED", "IN_PROGRESS", "WAITING_INPUT", "PAUSED", "VERIFYING",
                "AWAITING_APPROVAL", "COMPLETED", "FAILED", "BLOCKED"]
# The event recorded when a task enters a status (the `task.<status>` events of docs/design.md).
STATUS_EVENTS = {
    "DEFINED": "task.waiting", "READY": "task.ready", "ASSIGNED": "task.assigned",
    "IN_PROGRESS": "task.started", "WAITING_INPUT": "task.waiting_input", "PAUSED": "task.paused",
    "VERIFYING": "task.verifying", "AWAITING_APPROVAL": "task.awaiting_approval",
    "COMPLETED": "task.completed", "FAILED": "task.failed", "BLOCKED": "task.blocked",
}

# -- the groups (docs/design.md, "Task model decisions") ----------------------------------------------------
CLAIMED = frozenset({"ASSIGNED", "IN_PROGRESS", "WAITING_INPUT", "VERIFYING"})
"""An agent is attached and the engine owns the run: entered only by a claim, left only when the run ends or is
stopped or recovered. delete_task, restart_task, delete_project, delete_agent and request_changes refuse such
a task ("stop_task it first"); recovery and take-over requeue it. WAITING_INPUT is claimed: its
agent process is alive, waiting for a person's answer to a permission request."""
STARTED = CLAIMED - {"ASSIGNED"}
"""Claimed, and the agent's process was started: the run can end (succeed, fail, pause)."""
WORKING = CLAIMED - {"WAITING_INPUT"}
"""Claimed and not waiting for a person: the terminal's running agents and the board's Running column."""
COUNTS_TOWARD_CONCURRENCY = CLAIMED
"""Counted against a project's max_concurrent_agents: every claimed task holds an agent and a live process,
WAITING_INPUT too (it spends tokens again the moment a person answers), so a project never runs more agents at
once than its cap."""
FOLLOWABLE = CLAIMED | {"READY"}
"""`agentqueue logs -f` keeps following: the run is about to start, or goes on (WAITING_INPUT too: it continues)."""
REPO_FIXED = CLAIMED | {"AWAITING_APPROVAL"}
"""The task's work lives in its repo (a worktree, a branch, a PR) until it ends: edit_task cannot move it elsewhere."""
QUEUED = frozenset({"DEFINED", "READY"})
"""Waiting to be claimed (DEFINED until its dependencies complete): a dependency edit moves it between the two, and
nothing has run since it was queued."""
HELD = frozenset({"BLOCKED", "FAILED", "PAUSED"})
"""Stopped for a reason (a failure, a stop, a rate limit) with no run going on: get_agent_error explains it."""
EXPLAINED = HELD | {"WAITING_INPUT"}
"""The task carries `reason` and `next_step` (written when it enters one of these, cleared when it leaves them)."""
NEEDS_PERSON = frozenset({"BLOCKED", "FAILED"})
"""Nothing moves the task on by itself: skip_task completes it, chain health counts what waits behind it."""
REVIEWABLE = frozenset({"AWAITING_APPROVAL", "COMPLETED", "FAILED", "BLOCKED"})
"""A run happened (or was stopped) and nobody else waits on the task: request_changes may send it back."""


def ordered(group: Iterable[str]) -> tuple[str, ...]:
    """A group's statuses in the table's order (stable texts and SQL)."""
    members = set(group)
    return tuple(s for s in STATUS_NAMES if s in members)


def in_clause(group: Iterable[str], column: str = "status") -> tuple[str, tuple[str, ...]]:
    """`status IN (?, ?, …)` and its parameters, for any group: placeholders, never values pasted into SQL."""
    names = ordered(group)
    return f"{column} IN ({', '.join('?' for _ in names)})", names


# from-status -> {to-status: the event that moves it}; everything else is refused.
TRANSITIONS: dict[str, dict[str, str]] = {
    "DEFINED": {"READY": "deps_met", "BLOCKED": "stop"},
    "READY": {"ASSIGNED": "assigned", "DEFINED": "deps_added", "BLOCKED": "stop"},
    "ASSIGNED": {"IN_PROGRESS": "agent_started", "READY": "recovered", "BLOCKED": "stop"},
    "IN_PROGRESS": {
        "VERIFYING": "agent_completed", "FAILED": "agent_failed", "PAUSED": "rate_limited",
        "WAITING_INPUT": "agent_question", "BLOCKED": "stop", "READY": "recovered",
    },
    # The agent process is alive and waits for a person's answer to a permission request.
    "WAITING_INPUT": {"IN_PROGRESS": "human_replied", "PAUSED": "input_timeout", "BLOCKED": "stop",
                      "FAILED": "agent_failed", "READY": "recovered"},
    "PAUSED": {"READY": "resume", "DEFINED": "deps_added", "BLOCKED": "stop"},
    # READY: the merge queue sent the work back to its agent (a conflict, a failing check; design.md "Merge queue").
    "VERIFYING": {
        "COMPLETED": "verified", "FAILED": "verify_failed", "AWAITING_APPROVAL": "needs_approval",
        "BLOCKED": "stop", "READY": "sent_back",
    },
    "AWAITING_APPROVAL": {"COMPLETED": "approved", "BLOCKED": "pr_closed"},
    "FAILED": {"READY": "retry", "BLOCKED": "max_retries", "COMPLETED": "skipped"},
    "BLOCKED": {"COMPLETED": "skipped"},
    "COMPLETED": {},
}
for _status in TRANSITIONS:
    # restart_task: anything not claimed goes back to the queue (READY, or DEFINED if deps are unmet).
    if _status not in CLAIMED:
        TRANSITIONS[_status].setdefault("READY", "restart")
        TRANSITIONS[_status].setdefault("DEFINED", "restart")
    TRANSITIONS[_status].pop(_status, None)

TERMINAL = frozenset({"COMPLETED", "BLOCKED"})
# stop_task holds a task as BLOCKED from any state where work is queued, running or about to retry.
STOPPABLE = frozenset(s for s, targets in TRANSITIONS.items() if targets.get("BLOCKED") in ("stop", "max_retries"))


def can_transition(current: str, new: str) -> bool:
    return new in TRANSITIONS.get(current, {})


def check_transition(task_id: str, current: str, new: str) -> None:
    """Raise a ConflictError that names the allowed moves when `current -> new` is not one."""
    if can_transition(current, new):
        return
    allowed = ", ".join(sorted(TRANSITIONS.get(current, {}))) or "none"
    raise ConflictError(
        f"Task '{task_id}' cannot go from {current} to {new} (allowed from {current}: {allowed}). "
        "set_task_status overrides the state machine if you are sure."
    )


def parse_statuses(status: str | list[str] | None) -> list[str] | None:
    """Accept one status, a comma list, or a list; refuse unknown names with the valid ones."""
    if status is None:
        return None
    items = status.split(",") if isinstance(status, str) else list(status)
    names = [s.strip().upper() for s in items if s.strip()]
    bad = [s for s in names if s not in STATUS_NAMES]
    if bad:
        # Echo at most 200 characters of what was sent: a 1 MB "status" is not worth repeating to the model.
        raise InvalidInputError(f"Unknown status {', '.join(bad)[:200]}. Valid statuses: {', '.join(STATUS_NAMES)}.")
    return names or None


def list_filter(project_id: str | None, statuses: list[str] | None, include_completed: bool,
                counts: dict[str, int]) -> tuple[str, list[object], int, int]:
    """list_tasks' WHERE clause and parameters, the total matching and the completed tasks hidden, from the
    per-status counts: one rule for the service and the terminal's import-free reader."""
    clauses: list[str] = []
    params: list[object] = []
    if project_id is not None:
        clauses.append("project_id = ?")
        params.append(project_id)
    hidden = 0
    if statuses:
        clauses.append(f"status IN ({','.join('?' * len(statuses))})")
        params.extend(statuses)
        total = sum(counts.get(s, 0) for s in statuses)
    elif not include_completed:
        hidden = counts.get("COMPLETED", 0)
        clauses.append("status != 'COMPLETED'")  # verbatim: it selects the partial index of open tasks
        total = sum(counts.values()) - hidden
    else:
        total = sum(counts.values())
    return " AND ".join(clauses) or "1 = 1", params, total, hidden
