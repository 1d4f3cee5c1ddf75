"""The engine on a full disk (issue 34, found by bench/soak.py with AGENTQUEUE_HOME on a tmpfs that filled): a run
whose start failed on the disk left its task ASSIGNED with nothing behind it until a restart; and runs kept being
claimed while the home had no room, each failing at once. Real git, a `command` agent, the engine in-process."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest

from agentqueue.engine.workspaces import Workspaces
from agentqueue.services import Services, system

from .git_fixtures import git_env  # noqa: F401  (fixture)
from .processes import wait_for
from .test_engine_lifecycle import AGENT_COMMAND, engine_running, events, make_engine, status

pytestmark = pytest.mark.anyio


@pytest.fixture
def svc(services: Services, git_env: Path) -> Services:
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("worker", "command", command=AGENT_COMMAND)
    return services


async def test_a_run_whose_failure_could_not_be_recorded_is_requeued_and_lands(
        svc: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worktree's run repository could not be written (ENOSPC) while the task was still ASSIGNED: the engine's
    failure path leaves an ASSIGNED task alone, so it stayed claimed with no run. The sweep requeues it (a retry
    counted, its agent free) and its next run lands."""
    real = Workspaces.expose
    calls: list[str] = []

    def full_once(self: Workspaces, workspace: object) -> None:
        calls.append("expose")
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, workspace)  # type: ignore[arg-type]

    monkeypatch.setattr(Workspaces, "expose", full_once)
    task = svc.tasks.create("demo", "Write", "WRITE out.txt landed", repo_id="app")
    engine = make_engine(svc)
    engine.stranded.every = 0.2
    async with engine_running(engine):
        await wait_for(lambda: status(svc, task.id) == "COMPLETED", 60, "the task to land after the sweep")
    done = svc.tasks.get(task.id)
    assert done.retry_count == 1
    reasons = [e.payload.get("reason") for e in events(svc, task.id, "task.ready")]
    assert "recovered" in reasons, reasons
    assert svc.store.one("SELECT state, current_task FROM agents WHERE id = 'worker'") == {
        "state": "IDLE", "current_task": None}


async def test_no_run_is_claimed_while_the_home_has_no_room(svc: Services, caplog: pytest.LogCaptureFixture,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    task = svc.tasks.create("demo", "Write", "WRITE out.txt landed", repo_id="app")
    engine = make_engine(svc)
    engine.room.min_free = 1 << 62  # more than any disk has: the home is "full"
    with caplog.at_level(logging.WARNING, logger="agentqueue.engine"):
        assert engine.tick() == []
        assert engine.tick() == []
    assert status(svc, task.id) == "READY"
    said = [r.getMessage() for r in caplog.records if "no run starts until space is freed" in r.getMessage()]
    assert len(said) == 1, said  # said once, not at every tick
    monkeypatch.setattr(system, "MIN_FREE_BYTES", 1 << 62)
    warning = svc.system.warnings()[0]  # get_status: the log may be on the full disk
    assert warning.startswith(f"AgentQueue's home {svc.home} has ") and "no run starts until" in warning
    monkeypatch.undo()
    assert not any("AgentQueue's home" in w for w in svc.system.warnings())
    engine.room.min_free = system.MIN_FREE_BYTES
    with caplog.at_level(logging.WARNING, logger="agentqueue.engine"):
        claims = engine.tick()
    assert claims == [(task.id, "worker")]
    assert any("has room again" in r.getMessage() for r in caplog.records)
