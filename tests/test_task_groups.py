"""The status groups at work: what a claimed task (an agent attached, VERIFYING and WAITING_INPUT too) may not
have done to it, and what it counts toward. Tasks reach their states by the engine's own moves (services/lifecycle.py),
and the refusals are asked for through the official MCP client."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentqueue import paths
from agentqueue.engine.orchestrator import Engine
from agentqueue.services import Services
from agentqueue.services.lifecycle import Lifecycle

from .cli_helpers import Output, cli_env
from .conftest import db_snapshot, fail, ok

pytestmark = pytest.mark.anyio


def started(services: Services, title: str, project_id: str = "proj", agent: str = "worker",
            repo_id: str | None = None) -> str:
    """A task claimed by `agent` and started, as the engine does it (READY -> ASSIGNED -> IN_PROGRESS)."""
    task = services.tasks.create(project_id, title, f"do {title}", repo_id=repo_id)
    lifecycle = Lifecycle(services.store, services.tasks, services.usage)
    assert lifecycle.claim(task.id, agent)
    lifecycle.started(task.id, None)
    return task.id


def verifying(services: Services, title: str) -> str:
    task_id = started(services, title)
    Lifecycle(services.store, services.tasks, services.usage).verifying(task_id)
    assert services.tasks.get(task_id).status == "VERIFYING"
    return task_id


def waiting_input(services: Services, task_id: str) -> None:
    services.requests.open(task_id, "worker", "Bash", {"command": "npm install"}, "Bash(npm install)", None, None, 600)
    assert services.tasks.get(task_id).status == "WAITING_INPUT"


@pytest.fixture
def project(services: Services) -> str:
    services.projects.create("Proj")
    services.agents.create("worker", "command", command="true")
    return "proj"


@pytest.mark.parametrize(("tool", "args"), [
    ("delete_task", {}), ("restart_task", {}), ("delete_project", {"project_id": "proj"}),
])
async def test_a_verifying_task_is_neither_deleted_restarted_nor_its_project_deleted(client, services, project,
                                                                                      tool, args):
    """Its agent's work is being verified and landed: docs/design.md's "stop_task it first" holds for it too."""
    task_id = verifying(services, "landing")
    before = db_snapshot(services)
    text = await fail(client, tool, **({"task_id": task_id} if not args else args))
    assert "stop_task" in text and task_id in text
    assert db_snapshot(services) == before
    await ok(client, "stop_task", task_id=task_id)  # the way out the refusal names works
    await ok(client, tool, **({"task_id": task_id} if not args else args))


async def test_a_task_waiting_for_input_keeps_its_repo(client, services, project):
    """Its agent is alive in a worktree of its repo: edit_task must not move the task to another repo."""
    app = services.repos.add(project, "init", name="app")
    services.repos.add(project, "init", name="lib")
    task_id = started(services, "asks", repo_id=app.id)
    waiting_input(services, task_id)
    before = db_snapshot(services)
    text = await fail(client, "edit_task", task_id=task_id, repo_id="lib")
    assert "WAITING_INPUT" in text and "stop_task" in text
    assert db_snapshot(services) == before


async def test_a_task_waiting_for_input_counts_toward_its_projects_cap(services: Services):
    """max_concurrent_agents=1: while the one run waits for a person, a second agent does not start another."""
    services.projects.create("Capped", max_concurrent_agents=1)
    services.agents.create("worker", "command", command="true")
    services.agents.create("spare", "command", command="true")
    first = started(services, "asks", project_id="capped")
    waiting_input(services, first)
    second = services.tasks.create("capped", "next", "do next")
    assert Engine(services, services.home).tick(full=True) == []
    assert services.tasks.get(second.id).status == "READY"
    services.requests.answer(services.requests.list(task_id=first)[0].id, "allow")  # back to work: still one
    assert Engine(services, services.home).tick(full=True) == []


async def test_a_verifying_run_is_counted_as_running(client, services, project):
    """orchestrator_control and get_status count every claimed task: a run being verified has not ended."""
    task_id = verifying(services, "landing")
    state = await ok(client, "orchestrator_control", action="status")
    assert state["running_tasks"] == 1
    status = await ok(client, "get_status")
    assert [t["id"] for t in status["tasks"]["in_progress"]] == [task_id]


def test_logs_follow_keeps_following_a_task_that_waits_for_input(services: Services, project: str,
                                                                 tmp_path: Path) -> None:
    """Its run goes on once a person answers: `agentqueue logs -f` must not stop at the question."""
    task_id = started(services, "asks")
    waiting_input(services, task_id)
    log = paths.task_log(services.home, task_id)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("first line\n")
    follower = subprocess.Popen([sys.executable, "-m", "agentqueue", "logs", task_id, "-f"],
                                env=cli_env(services.home, tmp_path / "user"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    out = Output(follower.stdout)
    try:
        out.read_until(b"first line")
        with log.open("a") as handle:
            handle.write("second line\n")
        out.read_until(b"second line")
        services.requests.answer(services.requests.list(task_id=task_id)[0].id, "allow")
        Lifecycle(services.store, services.tasks, services.usage).succeeded(task_id, awaiting_approval=False)
        assert follower.wait(timeout=60) == 0  # and it still ends by itself once the task is done
        assert f"[{task_id} is COMPLETED]" in follower.stderr.read().decode()
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()


def test_get_status_points_at_every_kind_of_explained_task_it_leaves_out(services: Services, project: str) -> None:
    """Past the first ten, the warning names a list_tasks filter that finds the rest: waiting ones too."""
    for n in range(11):
        waiting_input(services, started(services, f"asks {n}", agent=services.agents.create(f"w{n}", "command",
                                                                                            command="true").id))
    more = [line for line in services.system.warnings() if line.startswith("and ")]
    assert more == ["and 1 more: list_tasks status=WAITING_INPUT"]
    _, total, _ = services.tasks.list(status="WAITING_INPUT")
    assert total == 11
