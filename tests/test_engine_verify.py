"""A project's verify command gates landing: passing work merges, failing work is retried, then BLOCKED."""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest

from agentqueue.engine.orchestrator import Engine, EngineConfig
from agentqueue.services import Services

from .slowdown import scaled

pytestmark = pytest.mark.anyio

# Writes out.txt saying "good" when the task asks for GOOD work, else "bad".
AGENT = (f"{sys.executable} -c \"import sys; d = sys.stdin.read(); "
         "open('out.txt', 'w').write('good' if 'GOOD' in d else 'bad')\"")


async def test_verify_command_lets_good_work_land_and_blocks_bad_work(services: Services) -> None:
    services.projects.create("Checked", verify_command="grep -q good out.txt")
    services.projects.edit("checked", merge_retries=1)  # sent back once (the merge queue), as max_retries=1 retried
    services.repos.add("checked", "init", name="repo")
    services.agents.create("writer", "command", command=AGENT)
    good = services.tasks.create("checked", "Good", "Do GOOD work", repo_id="repo")
    bad = services.tasks.create("checked", "Bad", "Do BAD work", repo_id="repo", max_retries=1)
    engine = Engine(services, services.home, config=EngineConfig(poll_seconds=0.1))
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        with anyio.fail_after(scaled(60)):
            while {services.tasks.get(t.id).status for t in (good, bad)} - {"COMPLETED", "BLOCKED"}:
                await anyio.sleep(0.1)
        await engine.shutdown()
        tg.cancel_scope.cancel()
    assert services.tasks.get(good.id).status == "COMPLETED"
    assert services.tasks.get(bad.id).status == "BLOCKED"
    attempts, result = services.tasks.results(bad.id)
    assert attempts == 2 and result.error_type == "verify_failed" and "grep -q good" in result.error_message
    repo = services.repos.get("repo").checkout_path
    assert subprocess.run(["git", "show", "main:out.txt"], cwd=repo, capture_output=True, text=True).stdout == "good"
    kinds = [e.event_type for e in services.events.recent(50, task_id=good.id)]
    assert "task.verifying" in kinds and "task.completed" in kinds
    assert "[verify] $ grep -q good out.txt -> 1" in engine.log_path(bad.id).read_text()


async def test_verify_command_is_set_and_cleared_with_edit_project(services: Services) -> None:
    services.projects.create("P")
    assert services.projects.edit("p", verify_command="make test").verify_command == "make test"
    assert services.projects.edit("p", verify_command="").verify_command is None
