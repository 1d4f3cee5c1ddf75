"""Agent lifecycle tools: edit, pause, resume and delete an agent, through MCP and in the engine."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from agentqueue.engine.adapters.base import RunResult
from agentqueue.services import Services
from agentqueue.services.lifecycle import Lifecycle

from .conftest import db_snapshot, fail, ok
from .git_fixtures import git_env  # noqa: F401  (fixture)
from .processes import wait_for
from .test_engine_lifecycle import AGENT_COMMAND, engine_running, make_engine, status

pytestmark = pytest.mark.anyio

ECHO = shlex.join([sys.executable, "-c", "print('hi')"])


def agent_events(services: Services, agent_id: str) -> list[str]:
    return [r["event_type"] for r in services.store.all(
        "SELECT event_type FROM events WHERE agent_id = ? ORDER BY id", (agent_id,))]


# -- edit -------------------------------------------------------------------------------------------
async def test_edit_agent_changes_model_command_repo_and_capabilities(client, services, agent_clis, git_env, tmp_path):
    services.projects.create("Demo")
    repo = services.repos.add("demo", "init", name="app")
    await ok(client, "create_agent", name="bot", agent_type="command", command=ECHO, capabilities=["a"])
    edited = await ok(client, "edit_agent", agent_id="bot", model="m-2", command=AGENT_COMMAND, repo_id=repo.id,
                      capabilities=["python", " ", "web"])
    assert (edited["model"], edited["command"], edited["repo_id"], edited["capabilities"]) == \
        ("m-2", AGENT_COMMAND, repo.id, ["python", "web"])
    # Only what is given changes; "" clears model and repo.
    cleared = await ok(client, "edit_agent", agent_id="bot", model="", repo_id="")
    assert (cleared["model"], cleared["repo_id"], cleared["command"], cleared["capabilities"]) == \
        (None, None, AGENT_COMMAND, ["python", "web"])
    assert services.agents.get("bot").command == AGENT_COMMAND  # stored, not just echoed
    assert agent_events(services, "bot").count("agent.updated") == 2

    # A program the daemon cannot run is refused before anything changes.
    before = db_snapshot(services)
    text = await fail(client, "edit_agent", agent_id="bot", command=str(tmp_path / "missing-program"))
    assert "missing-program" in text and "executable" in text
    assert db_snapshot(services) == before

    # A CLI agent's model can change; it has no command to edit.
    await ok(client, "create_agent", name="claude", model="opus")
    assert (await ok(client, "edit_agent", agent_id="claude", model="sonnet"))["model"] == "sonnet"
    assert "only for agent_type 'command'" in await fail(client, "edit_agent", agent_id="claude", command=ECHO)


# -- pause / resume ---------------------------------------------------------------------------------
async def test_pause_and_resume_agent(client, services, agent_clis):
    await ok(client, "create_agent", name="bot", agent_type="command", command=ECHO)
    assert (await ok(client, "pause_agent", agent_id="bot"))["paused"] is True
    assert (await ok(client, "pause_agent", agent_id="bot"))["paused"] is True  # idempotent
    listed = (await ok(client, "list_agents"))["agents"][0]
    assert (listed["paused"], listed["state"]) == (True, "IDLE")
    assert (await ok(client, "resume_agent", agent_id="bot"))["paused"] is False
    assert agent_events(services, "bot") == ["agent.created", "agent.paused", "agent.resumed"]


async def test_a_paused_agent_is_not_claimed(services, agent_clis):
    """The claim itself re-checks the pause: a pause between scheduling and claiming wins."""
    services.projects.create("Demo")
    task = services.tasks.create("demo", "t", "d")
    services.agents.create("bot", "command", command=ECHO)
    services.agents.set_paused("bot", True)
    lifecycle = Lifecycle(services.store, services.tasks, services.usage)
    assert lifecycle.claim(task.id, "bot") is False
    assert status(services, task.id) == "READY"
    services.agents.set_paused("bot", False)
    assert lifecycle.claim(task.id, "bot") is True


# -- delete ---------------------------------------------------------------------------------------------
async def test_delete_agent_is_refused_while_it_runs_and_keeps_its_history(client, services, agent_clis):
    services.projects.create("Demo")
    task = services.tasks.create("demo", "t", "d")
    await ok(client, "create_agent", name="bot", agent_type="command", command=ECHO)
    lifecycle = Lifecycle(services.store, services.tasks, services.usage)
    assert lifecycle.claim(task.id, "bot")
    lifecycle.started(task.id, None)

    before = db_snapshot(services)
    text = await fail(client, "delete_agent", agent_id="bot")
    assert task.id in text and "stop_task" in text
    assert db_snapshot(services) == before

    # The run ends; its result and tokens are recorded under the agent's id.
    lifecycle.record_attempt(task.id, "bot", RunResult("completed", "done it", {"input": 5, "output": 7, "total": 12},
                                                        0.25), 1.5, [])
    lifecycle.free_agent("bot")
    services.tasks.set_status(task.id, "COMPLETED")
    assert await ok(client, "delete_agent", agent_id="bot") == {"deleted": "bot"}
    assert (await ok(client, "list_agents"))["total"] == 0
    assert "'bot' not found" in await fail(client, "pause_agent", agent_id="bot")
    result = await ok(client, "get_task_result", task_id=task.id)
    assert "bot" in str(result) and "done it" in str(result)  # history still reads
    usage = await ok(client, "get_token_usage", project_id="demo")
    assert "12" in str(usage)
    assert agent_events(services, "bot")[-1] == "agent.deleted"
    # The name is free again.
    assert (await ok(client, "create_agent", name="bot", agent_type="command", command=ECHO))["id"] == "bot"


# -- the engine -----------------------------------------------------------------------------------------
async def test_a_paused_agent_finishes_its_run_takes_no_new_task_and_resumes(services: Services,
                                                                              git_env: Path) -> None:
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("worker", "command", command=AGENT_COMMAND)
    first = services.tasks.create("demo", "Slow", "SLEEP 1\nWRITE one.txt one", repo_id="app")
    engine = make_engine(services)
    ticks = 0
    tick = engine.tick

    def counted_tick(full: bool = True) -> list[tuple[str, str]]:
        nonlocal ticks
        claims = tick(full)
        ticks += 1
        return claims

    engine.tick = counted_tick  # type: ignore[method-assign]  # counts the engine's own ticks, changes nothing
    async with engine_running(engine):
        await wait_for(lambda: status(services, first.id) == "IN_PROGRESS", 20, "the first run to start")
        services.agents.set_paused("worker", True)
        second = services.tasks.create("demo", "Next", "WRITE two.txt two", repo_id="app")
        await wait_for(lambda: status(services, first.id) == "COMPLETED", 20, "the running task to finish")
        seen = ticks
        await wait_for(lambda: ticks >= seen + 3, 20, "three engine ticks with the agent paused")
        assert status(services, second.id) == "READY"
        agent = services.agents.get("worker")
        assert (agent.state, agent.paused, agent.current_task) == ("IDLE", True, None)

        services.agents.set_paused("worker", False)
        await wait_for(lambda: status(services, second.id) == "COMPLETED", 20, "the resumed agent to run it")
    _, result = services.tasks.results(second.id)
    assert result is not None and result.agent_id == "worker"
