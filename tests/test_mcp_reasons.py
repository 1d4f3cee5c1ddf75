"""Why a task is BLOCKED, FAILED or PAUSED (issue 8 item 5), over MCP: the reason and
next step on the task, in get_agent_error, in get_status warnings and in get_chain_health."""

from __future__ import annotations

import pytest

from agentqueue.services.lifecycle import Lifecycle

from .conftest import ok

pytestmark = pytest.mark.anyio


@pytest.fixture
async def project(client) -> str:
    await ok(client, "create_project", name="Proj")
    return "proj"


async def new_task(client, title: str = "task", **extra) -> dict:
    return await ok(client, "create_task", project_id="proj", title=title, description=f"do {title}", **extra)


async def test_stop_task_records_why_and_what_to_do_and_restart_clears_it(client, project):
    task = await new_task(client)
    assert task["reason"] is None and task["next_step"] is None
    await ok(client, "stop_task", task_id=task["id"])
    held = await ok(client, "get_task", task_id=task["id"])
    assert held["status"] == "BLOCKED"
    assert held["reason"] == "Stopped with stop_task (it was READY)."
    assert f"restart_task {task['id']}" in held["next_step"]

    error = await ok(client, "get_agent_error", task_id=task["id"])
    assert (error["status"], error["error_type"]) == ("BLOCKED", "Stopped")
    assert error["error_message"] == held["reason"] and error["suggested_fix"] == held["next_step"]
    assert error.get("message") is None  # not "No result recorded yet": the task says why it is held

    await ok(client, "restart_task", task_id=task["id"])
    ready = await ok(client, "get_task", task_id=task["id"])
    assert ready["status"] == "READY" and ready["reason"] is None and ready["next_step"] is None


async def test_a_status_set_by_hand_says_so(client, project):
    task = await new_task(client)
    await ok(client, "set_task_status", task_id=task["id"], status="PAUSED")
    paused = await ok(client, "get_task", task_id=task["id"])
    assert paused["reason"] == "Set to PAUSED with set_task_status (it was READY)."
    assert "restart_task" in paused["next_step"]
    await ok(client, "set_task_status", task_id=task["id"], status="COMPLETED")
    done = await ok(client, "get_task", task_id=task["id"])
    assert done["reason"] is None and done["next_step"] is None


async def test_a_merge_refused_after_a_successful_run_is_reported_not_the_run(client, project, services):
    """get_agent_error used to say "The last run succeeded" for a task BLOCKED by its merge."""
    task = await new_task(client)
    await ok(client, "set_task_status", task_id=task["id"], status="IN_PROGRESS")
    with services.store.transaction() as db:
        db["task_results"].insert({"task_id": task["id"], "attempt": 1, "agent_id": "claude", "status": "completed",
                                   "summary": "Wrote a.txt", "files_changed": '["a.txt"]', "created_at": "2025"})
    Lifecycle(services.store, services.tasks, services.usage).blocked(task["id"], "merge_failed", {
        "repo_id": "app", "branch": f"{task['id']}/task", "default_branch": "main", "checkout": "/src/app",
        "dirty": ["a.txt"], "error": "git merge failed"})
    error = await ok(client, "get_agent_error", task_id=task["id"])
    assert error["status"] == "BLOCKED" and error["error_type"] == "Merge failed"
    assert "uncommitted changes to a.txt" in error["error_message"] and "/src/app" in error["error_message"]
    assert "stash" in error["suggested_fix"] and f"restart_task {task['id']}" in error["suggested_fix"]
    assert error["agent_summary"] == "Wrote a.txt"
    assert "succeeded" not in str(error.get("message"))


async def test_get_status_lists_held_tasks_with_reason_and_next_step_capped_at_ten(client, project):
    quiet = await ok(client, "get_status")
    assert not any(" is BLOCKED" in w for w in quiet["warnings"])
    tasks = [await new_task(client, f"t{i}") for i in range(12)]
    for task in tasks[:11]:
        await ok(client, "stop_task", task_id=task["id"])
    await ok(client, "set_task_status", task_id=tasks[11]["id"], status="FAILED")

    warnings = (await ok(client, "get_status"))["warnings"]
    held = [w for w in warnings if w.startswith("Task ")]
    assert len(held) == 10
    newest = held[0]  # the most recently held first
    assert newest.startswith(f"Task {tasks[11]['id']} 't11' is FAILED: Set to FAILED with set_task_status")
    for line in held[1:]:
        assert " is BLOCKED: Stopped with stop_task (it was READY). Next: restart_task " in line
    assert warnings[warnings.index(held[-1]) + 1] == "and 2 more: list_tasks status=BLOCKED"


async def test_chain_health_carries_the_reason(client, project):
    first = await new_task(client, "first")
    await new_task(client, "second", depends_on=[first["id"]])
    await ok(client, "stop_task", task_id=first["id"])
    health = await ok(client, "get_chain_health", task_id=first["id"])
    assert health["stuck_count"] == 1 and health["reason"].startswith("Stopped with stop_task")
    assert f"restart_task {first['id']}" in health["next_step"]
    chain = (await ok(client, "get_chain_health", project_id="proj"))["stuck_chains"][0]
    assert chain["blocked_task"]["id"] == first["id"] and chain["reason"] == health["reason"]
