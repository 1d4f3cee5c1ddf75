"""A full disk under AgentQueue's home (issue 34): a task whose worktree or landing failed for want of space goes
back to the queue, its retries untouched, instead of being held as BLOCKED; any other failure is held as before.
The soak (tests/test_soak.py) fills a real tmpfs under a running daemon; this is the rule on its own."""

from __future__ import annotations

import json
import shlex
import sys

import pytest

from agentqueue.services import Services
from agentqueue.services.agents import release_agents

from .test_engine_lifecycle import make_engine

pytestmark = pytest.mark.anyio

ECHO = shlex.join([sys.executable, "-c", "print('hi')"])
ENOSPC = "git worktree failed: fatal: could not write to '/home/aq/worktrees/app/t/.git': No space left on device"


def run_again(services: Services, life, task_id: str) -> None:  # type: ignore[no-untyped-def]
    """The run's end frees its agent (the engine does it after a failed start); then the task is claimed again."""
    with services.store.transaction():
        release_agents(services.store, agent_id="bot")
    assert life.claim(task_id, "bot")
    life.started(task_id, None)


def moves(services: Services, task_id: str) -> list[tuple[str, str, str]]:
    rows = services.store.all("SELECT payload FROM events WHERE task_id = ? ORDER BY id", (task_id,))
    payloads = [json.loads(r["payload"]) for r in rows if r["payload"]]
    return [(p["to"], p["reason"], p.get("note") or p.get("message") or "") for p in payloads if "to" in p]


async def test_a_failure_for_want_of_disk_space_requeues_the_task_and_any_other_holds_it(services: Services) -> None:
    services.projects.create("Demo")
    services.agents.create("bot", "command", command=ECHO)
    engine = make_engine(services)
    life = engine.lifecycle
    task = services.tasks.create("demo", "t", "d")

    # The home is under its floor: back to READY, no retry spent, and the move says why in plain words.
    engine.room.min_free = 1 << 62
    assert life.claim(task.id, "bot")
    life.started(task.id, None)
    life.blocked(task.id, "workspace_failed", details={"error": ENOSPC})
    again = services.tasks.get(task.id)
    assert (again.status, again.retry_count) == ("READY", 0)
    to, reason, note = moves(services, task.id)[-1]
    assert (to, reason) == ("READY", "no_room") and "disk space" in note and "worktree" in note

    # Git said only "unable to write file": the same, for a landing.
    run_again(services, life, task.id)
    life.blocked(task.id, "merge_failed", details={"error": "error: unable to write file a.txt"})
    assert services.tasks.get(task.id).status == "READY"
    assert "landing" in moves(services, task.id)[-1][2]

    # A run's own words are not the disk's: a file it named "No space left on device" in a failed landing, with
    # room on the disk, does not buy its task a free rerun.
    engine.room.min_free = 0
    run_again(services, life, task.id)
    life.blocked(task.id, "merge_failed", details={"error": "git merge failed: error: unable to write file "
                                                            "'No space left on device'"})
    assert services.tasks.get(task.id).status == "BLOCKED"
    services.tasks.restart(task.id)

    # Room, and an error that is not the disk's: held, as any failed landing is.
    engine.room.min_free = 0
    run_again(services, life, task.id)
    life.blocked(task.id, "merge_failed", details={"error": "error: unable to write file a.txt"})
    assert services.tasks.get(task.id).status == "BLOCKED"
