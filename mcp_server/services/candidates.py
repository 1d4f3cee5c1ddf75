"""Best of N (design.md "Best of N"): one task run by several agents at once; the best passing branch lands.

The created task is the group. It never runs itself: DEFINED while its candidates run, COMPLETED when one of them
landed (`chosen`), BLOCKED when none passed. Each candidate is a task of its own (`candidate_of` the group), pinned
to a different agent while there are enough. The engine's side (checks without landing, the pick, the landing) is
engine/best_of.py; this module checks the parameters and reads a group's candidates.
"""

from __future__ import annotations

import builtins
import json
from typing import TYPE_CHECKING, Any

from .errors import InvalidInputError, NotFoundError
from .routing import capability_list, covers
from .task_states import CLAIMED, QUEUED

if TYPE_CHECKING:  # import-light: the terminal's reads (cli/reads.py) list a group's candidates too
    from ..store.base import Store

MIN_CANDIDATES, MAX_CANDIDATES = 2, 5
PICKS = ("smallest", "first")
CHECKED = "best_of.checked"  # a candidate's outcome: passed, lines changed, why not (the event's payload)


def pins(store: Store, candidates: int | builtins.list[str] | None, pick: str | None, agent_type: str | None,
         repo_id: str | None, requires_approval: bool, needs: str | None = None) -> builtins.list[str | None] | None:
    """The agent each candidate is pinned to (None: any agent), one per candidate; None without candidates. Refuses
    bad values with what to do, before anything is written."""
    if candidates is None:
        if pick is not None:
            raise InvalidInputError(f"pick={str(pick)[:50]!r} applies only with candidates; give candidates=2..5 or "
                                    "leave pick out.")
        return None
    if pick is not None and pick not in PICKS:
        raise InvalidInputError(f"Unknown pick {str(pick)[:50]!r}. Use 'smallest' (the default) or 'first'.")
    if isinstance(candidates, bool) or not isinstance(candidates, (int, list)):
        raise InvalidInputError("candidates is a number from 2 to 5, or a list of 2 to 5 agent ids.")
    count = candidates if isinstance(candidates, int) else len(candidates)
    if not MIN_CANDIDATES <= count <= MAX_CANDIDATES:
        raise InvalidInputError(f"candidates must be {MIN_CANDIDATES} to {MAX_CANDIDATES} (got {count}); leave it out "
                                "to run the task once.")
    if requires_approval:
        raise InvalidInputError("candidates cannot be combined with requires_approval: the repo's checks pick the "
                                "winner and land it. Leave one of them out.")
    if repo_id is None:
        raise InvalidInputError("candidates need a repo (each candidate works on a branch of its own); this project "
                                "has none. add_repo first, or leave candidates out.")
    if isinstance(candidates, list):
        return _named(store, candidates, agent_type, repo_id, needs)
    rows = store.all("SELECT id, capabilities FROM agents WHERE paused = 0 AND (? IS NULL OR agent_type = ?) "
                     "AND (repo_id IS NULL OR repo_id = ?) ORDER BY state != 'IDLE', id LIMIT 500",
                     (agent_type, agent_type, repo_id))
    chosen: builtins.list[str | None] = [r["id"] for r in rows if covers(json.loads(r["capabilities"] or "[]"),
                                                                          needs)][:count]
    return chosen + [None] * (count - len(chosen))  # fewer agents than candidates: the rest run on any agent


def _named(store: Store, ids: builtins.list[str], agent_type: str | None,
           repo_id: str, needs: str | None) -> builtins.list[str | None]:
    if any(not isinstance(i, str) or not i.strip() for i in ids):
        raise InvalidInputError("candidates lists agent ids such as 'worker-1'; list_agents shows them.")
    if len(set(ids)) != len(ids):
        raise InvalidInputError("candidates names an agent twice; give each agent once (or a number, to let "
                                "AgentQueue pick the agents).")
    for agent_id in ids:
        row = store.one("SELECT agent_type, repo_id, capabilities FROM agents WHERE id = ?", (agent_id,))
        if row is None:
            raise NotFoundError(f"Agent {agent_id[:100]!r} not found. list_agents shows agent ids.")
        if agent_type and row["agent_type"] != agent_type:
            raise InvalidInputError(f"Agent '{agent_id}' is a {row['agent_type']} agent, not {agent_type}; drop "
                                    "agent_type or that agent.")
        if row["repo_id"] and row["repo_id"] != repo_id:
            raise InvalidInputError(f"Agent '{agent_id}' works only in repo '{row['repo_id']}', not '{repo_id}'; "
                                    "choose another agent.")
        if not covers(json.loads(row["capabilities"] or "[]"), needs):
            raise InvalidInputError(f"Agent '{agent_id}' lacks capabilities the task asks for "
                                    f"({', '.join(capability_list(needs))}); choose another agent or edit_agent it.")
    return list(ids)


def outcomes(store: Store, task_ids: builtins.list[str]) -> dict[str, dict[str, Any]]:
    """Each candidate's latest checked outcome (the payload of its newest `best_of.checked` event, with its event id
    as `order`: which was checked first)."""
    found: dict[str, dict[str, Any]] = {}
    for task_id in task_ids:
        row = store.one("SELECT id, payload FROM events WHERE task_id = ? AND event_type = ? ORDER BY id DESC LIMIT 1",
                        (task_id, CHECKED))
        if row:
            payload = row["payload"]
            found[task_id] = {**(payload if isinstance(payload, dict) else json.loads(payload or "{}")),
                              "order": int(row["id"])}
    return found


def rows(store: Store, group_id: str) -> builtins.list[dict[str, Any]]:
    """A group's candidates (created together: by id)."""
    return store.all("SELECT * FROM tasks WHERE candidate_of = ? ORDER BY created_at, id", (group_id,))


def listing(store: Store, group: dict[str, Any]) -> builtins.list[dict[str, Any]]:
    """A group's candidates as get_task shows them (store.models.Candidate's fields): where each is, how it did."""
    found = rows(store, group["id"])
    checked = outcomes(store, [r["id"] for r in found])
    shown = []
    for row in found:
        seen = checked.get(row["id"])
        if row["id"] == group.get("chosen"):
            outcome = "chosen"
        elif row["status"] in CLAIMED | QUEUED or row["status"] in ("PAUSED", "FAILED") and seen is None:
            outcome = "running"
        elif seen and seen.get("passed"):
            outcome = "not_chosen" if group["status"] != "DEFINED" else "passed"
        elif seen is None and group["status"] == "COMPLETED":
            outcome = "not_chosen"  # stopped (or never started) because another candidate won
        else:
            outcome = "failed"
        reason = (seen or {}).get("reason") or (row["reason"] if outcome == "failed" else None)
        agent = row["assigned_agent"] or (seen or {}).get("agent_id")
        shown.append({"task_id": row["id"], "agent_id": agent, "status": row["status"], "outcome": outcome,
                      "lines_changed": (seen or {}).get("lines"), "reason": reason,
                      "branch": None if outcome == "chosen" else row["branch"]})
    return shown
