"""The merge queue's send-backs of a task as its `task.sent_back` events record them (design.md "Merge queue").

Counted since a person last restarted the task or asked for changes, each kind against its own cap:
- a failing check spends one of the project's `merge_retries`;
- a conflict its agent's last run brought no new resolution for (the merge it was given is not in its branch), or
  conflict markers a run left, spends one of the same number, counted apart ("without a new resolution");
- a conflict with work that landed after the branch last took in the default branch, when the agent resolved the
  one before (or it is the first), spends none: it is the queue's own doing. At most FREE_CONFLICTS of those.

Also read here: the reruns that wait for another task's rerun on the same files (`held_reruns`: the queue lands
them one after another instead of racing them again), and the check failure a rerun still has to fix
(`failed_check`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ..store.base import Store
from .task_states import CLAIMED, in_clause

FREE_CONFLICTS = 10  # conflict send-backs that follow a new resolution, per task: each follows another landing
RESETS = ("task.restarted", "task.changes_requested")
FILES_KEPT = 200  # paths a send-back records of what the branch changes (to tell which reruns share files)


def payload_of(row: dict[str, Any]) -> dict[str, Any]:
    payload = row.get("payload")
    if isinstance(payload, dict):
        return payload
    return json.loads(payload or "{}")


def since_reset(store: Store, task_id: str) -> list[dict[str, Any]]:
    """The task's send-backs since a person last restarted it or asked for changes, oldest first: each one's payload,
    with `event_id` added."""
    rows = store.all(
        "SELECT id, payload FROM events WHERE task_id = ? AND event_type = 'task.sent_back' AND id > coalesce(("
        "SELECT max(id) FROM events WHERE task_id = ? AND event_type IN (?, ?)), 0) ORDER BY id",
        (task_id, task_id, *RESETS))
    return [{**payload_of(row), "event_id": row["id"]} for row in rows]


def spends(payload: dict[str, Any]) -> str | None:
    """Which cap a send-back counts against: "check", "conflict" (without a new resolution), or None (free). A send-back
    recorded before the caps were apart says nothing: its kind decides (every one of them counted)."""
    if "spends" in payload:
        value = payload["spends"]
        return value if value in ("check", "conflict") else None
    return "check" if payload.get("kind") == "check" else "conflict"


@dataclass
class SendBacks:
    """A task's send-backs since its last reset, per cap."""

    check: int = 0  # for a failing check
    conflict: int = 0  # for a conflict without a new resolution, or markers left
    free: int = 0  # for a conflict with work that landed after the agent's last resolution
    sends: list[dict[str, Any]] = field(default_factory=list)  # their payloads, oldest first

    @property
    def total(self) -> int:
        return len(self.sends)

    @property
    def given(self) -> str | None:
        """The newest default-branch commit a send-back merged (or left merging) into the branch: a rerun that
        resolved it has it in its branch."""
        for payload in reversed(self.sends):
            if isinstance(payload.get("target"), str):
                return str(payload["target"])
        return None


def count(store: Store, task_id: str) -> SendBacks:
    counted = SendBacks(sends=since_reset(store, task_id))
    for payload in counted.sends:
        kind = spends(payload)
        if kind == "check":
            counted.check += 1
        elif kind == "conflict":
            counted.conflict += 1
        else:
            counted.free += 1
    return counted


def files_of(payload: dict[str, Any]) -> set[str]:
    """What a send-back's branch changes (or, recorded before that was kept, the files it conflicted in)."""
    return {str(f) for f in (payload.get("touched") or payload.get("conflicts") or [])}


def held_reruns(store: Store, repo_id: str | None = None) -> dict[str, list[str]]:
    """The tasks sent back for a conflict whose rerun waits (READY, not given to their agent yet), each with the
    tasks it waits for: the reruns, in flight in the same repo, of tasks whose work shares files with it. A rerun in
    flight is a task sent back since its last reset that is READY or claimed; of the waiting ones, only those sent
    back earlier count, once they are no longer waiting themselves. So the reruns of tasks on the same lines run
    one after another, each merging what the one before it landed, in the order they were sent back; nothing waits
    for a task that waits."""
    where, params = ("AND repo_id = ?", (repo_id,)) if repo_id else ("", ())
    pinned = store.all("SELECT id, repo_id FROM tasks WHERE status = 'READY' AND assigned_agent IS NOT NULL "
                       f"AND repo_id IS NOT NULL {where} LIMIT 200", params)
    candidates: list[tuple[int, str, str, set[str]]] = []
    for row in pinned:
        sends = since_reset(store, row["id"])
        if sends and sends[-1].get("kind") == "conflict":
            candidates.append((int(sends[-1]["event_id"]), row["id"], row["repo_id"], files_of(sends[-1])))
    if not candidates:
        return {}
    waiting = {c[1] for c in candidates}
    repos = sorted({c[2] for c in candidates})
    active, status_params = in_clause(CLAIMED | {"READY"})
    in_flight: list[tuple[str, str, set[str]]] = []
    for row in store.all(f"SELECT id, repo_id FROM tasks WHERE {active} AND repo_id IN "
                         f"({', '.join('?' for _ in repos)}) LIMIT 500", (*status_params, *repos)):
        if row["id"] in waiting:
            continue
        sends = since_reset(store, row["id"])
        if sends:
            in_flight.append((row["id"], row["repo_id"], files_of(sends[-1])))
    held: dict[str, list[str]] = {}
    for _, task_id, repo, files in sorted(candidates):
        blockers = [other for other, other_repo, other_files in in_flight
                    if other_repo == repo and files & other_files]
        if blockers:
            held[task_id] = blockers
        else:
            in_flight.append((task_id, repo, files))  # its rerun goes now: the ones sent back after it wait for it
    return held


def failed_check(store: Store, task_id: str) -> str | None:
    """The output of the checks that failed on the task's newest checked work, when its next run must still fix it and
    the newest send-back's own text does not carry it already: a conflict came first since (its rerun is not checked
    yet), or its run failed its checks outside the queue (retried like any failure)."""
    sends = since_reset(store, task_id)
    if sends and sends[-1].get("kind") == "check":
        return None  # the newest send-back is that failure: its text, in the prompt, has the output
    for payload in reversed(sends):
        if payload.get("checked"):
            return None  # the checks passed since (the default branch moved before it landed)
        if payload.get("kind") == "check":
            result_id = payload.get("result_id")
            row = store.one("SELECT error_message FROM task_results WHERE id = ?", (result_id,)) if result_id else \
                None
            return (row or {}).get("error_message") or None
    newest = store.one("SELECT error_type, error_message FROM task_results WHERE task_id = ? ORDER BY id DESC "
                       "LIMIT 1", (task_id,))
    if not sends and newest and newest["error_type"] == "verify_failed":
        return newest["error_message"] or None
    return None
