"""Task tools over MCP: creation, dependencies, the state machine, results."""

from __future__ import annotations

import json

import pytest

from agentqueue.services.lifecycle import Lifecycle
from agentqueue.store.db import now_iso

from .conftest import db_snapshot, fail, ok, on_both_backends

pytestmark = pytest.mark.anyio

store_backend = on_both_backends()  # the store's suite: every test here runs on SQLite and on PostgreSQL

TASK_KEYS = {"id", "project_id", "title", "description", "status", "priority", "repo_id", "branch",
             "assigned_agent", "depends_on", "dependents", "retry_count", "max_retries", "requires_approval",
             "pr_url", "created_at", "updated_at"}


@pytest.fixture
async def project(client) -> str:
    await ok(client, "create_project", name="Proj")
    return "proj"


async def new_task(client, title: str = "task", project_id: str = "proj", **extra) -> dict:
    return await ok(client, "create_task", project_id=project_id, title=title, description=f"do {title}", **extra)


async def status_of(client, task_id: str) -> str:
    return (await ok(client, "get_task", task_id=task_id))["status"]


def add_result(services, task_id: str, attempt: int, **fields) -> None:
    row = {"task_id": task_id, "attempt": attempt, "agent_id": "claude", "status": "failed", "summary": None,
           "files_changed": "[]", "error_type": None, "error_message": None, "input": 0, "output": 0,
           "cache_read": 0, "cache_write": 0, "total": 0, "cost_usd": 0.0, "duration_s": 1.0,
           "created_at": now_iso(), **fields}
    with services.store.transaction() as db:
        db["task_results"].insert(row)


# -- creation and dependencies ------------------------------------------------------------------

async def test_task_without_dependencies_starts_ready(client, project):
    task = await ok(client, "create_task", project_id=project, title="  Add login  ",
                    description="Build the login page.")
    assert TASK_KEYS <= task.keys()
    assert task["status"] == "READY"
    assert task["title"] == "Add login"  # trimmed
    assert (task["priority"], task["max_retries"], task["retry_count"]) == (100, 3, 0)
    assert (task["requires_approval"], task["depends_on"], task["dependents"]) == (False, [], [])
    assert task["branch"] is None and task["assigned_agent"] is None
    assert task["created_at"].endswith("Z")
    assert await ok(client, "get_task", task_id=task["id"]) == task


async def test_task_with_unmet_dependency_is_defined(client, project):
    first = await new_task(client, "first")
    second = await new_task(client, "second", depends_on=[first["id"]], priority=5, requires_approval=True,
                            max_retries=0, agent_type="codex")
    assert second["status"] == "DEFINED"
    assert second["depends_on"] == [first["id"]]
    assert (second["priority"], second["requires_approval"], second["max_retries"]) == (5, True, 0)
    assert (await ok(client, "get_task", task_id=first["id"]))["dependents"] == [second["id"]]


async def test_task_whose_dependencies_are_completed_starts_ready(client, project):
    first = await new_task(client, "first")
    await ok(client, "set_task_status", task_id=first["id"], status="COMPLETED")
    assert (await new_task(client, "second", depends_on=[first["id"]]))["status"] == "READY"


async def test_completing_a_dependency_promotes_dependents_when_all_deps_are_done(client, project):
    a = await new_task(client, "a")
    b = await new_task(client, "b")
    only_a = await new_task(client, "only-a", depends_on=[a["id"]])
    both = await new_task(client, "both", depends_on=[a["id"], b["id"]])

    await ok(client, "set_task_status", task_id=a["id"], status="COMPLETED")
    assert await status_of(client, only_a["id"]) == "READY"
    assert await status_of(client, both["id"]) == "DEFINED"  # still waits for b

    await ok(client, "set_task_status", task_id=b["id"], status="COMPLETED")
    assert await status_of(client, both["id"]) == "READY"


async def test_skip_task_unblocks_dependents(client, project):
    a = await new_task(client, "a")
    b = await new_task(client, "b", depends_on=[a["id"]])
    stopped = await ok(client, "stop_task", task_id=a["id"])
    assert stopped["status"] == "BLOCKED"
    skipped = await ok(client, "skip_task", task_id=a["id"])
    assert skipped["skipped"] == a["id"]
    assert [(u["id"], u["title"]) for u in skipped["unblocked"]] == [(b["id"], "b")]
    assert await status_of(client, a["id"]) == "COMPLETED"
    assert await status_of(client, b["id"]) == "READY"


async def test_skip_task_works_on_failed_tasks(client, project):
    a = await new_task(client, "a")
    await ok(client, "set_task_status", task_id=a["id"], status="FAILED")
    assert (await ok(client, "skip_task", task_id=a["id"]))["unblocked"] == []
    assert await status_of(client, a["id"]) == "COMPLETED"


async def test_approve_task_completes_and_promotes(client, project):
    a = await new_task(client, "a", requires_approval=True)
    b = await new_task(client, "b", depends_on=[a["id"]])
    await ok(client, "set_task_status", task_id=a["id"], status="AWAITING_APPROVAL")
    approved = await ok(client, "approve_task", task_id=a["id"])
    assert approved["id"] == a["id"] and approved["status"] == "COMPLETED"
    assert await status_of(client, b["id"]) == "READY"


async def test_dependency_cycle_is_refused_and_named(client, project, services):
    a = await new_task(client, "a")
    b = await new_task(client, "b", depends_on=[a["id"]])
    c = await new_task(client, "c", depends_on=[b["id"]])
    before = db_snapshot(services)
    text = await fail(client, "edit_task", task_id=a["id"], depends_on=[c["id"]])
    assert f"{a['id']} -> {c['id']} -> {b['id']} -> {a['id']}" in text
    assert "cycle" in text.lower()
    assert db_snapshot(services) == before
    assert (await ok(client, "get_task", task_id=a["id"]))["depends_on"] == []


async def test_two_task_cycle_is_refused(client, project):
    a = await new_task(client, "a")
    b = await new_task(client, "b", depends_on=[a["id"]])
    text = await fail(client, "edit_task", task_id=a["id"], depends_on=[b["id"]])
    assert f"{a['id']} -> {b['id']} -> {a['id']}" in text


async def test_self_dependency_is_refused(client, project):
    a = await new_task(client, "a")
    text = await fail(client, "edit_task", task_id=a["id"], depends_on=[a["id"]])
    assert a["id"] in text and "itself" in text


async def test_edit_task_dependencies_move_between_ready_and_defined(client, project):
    a = await new_task(client, "a")
    x = await new_task(client, "x")
    edited = await ok(client, "edit_task", task_id=x["id"], depends_on=[a["id"]])
    assert edited["status"] == "DEFINED" and edited["depends_on"] == [a["id"]]
    edited = await ok(client, "edit_task", task_id=x["id"], depends_on=[])
    assert edited["status"] == "READY" and edited["depends_on"] == []


async def test_edit_task_fields(client, project):
    t = await new_task(client, "old")
    edited = await ok(client, "edit_task", task_id=t["id"], title="new", description="better", priority=7,
                      requires_approval=True)
    assert (edited["title"], edited["description"], edited["priority"], edited["requires_approval"]) == \
        ("new", "better", 7, True)
    assert edited["status"] == "READY"
    assert "Nothing to change" in await fail(client, "edit_task", task_id=t["id"])


# -- the state machine --------------------------------------------------------------------------

@pytest.mark.parametrize(("tool", "status", "needle"), [
    ("approve_task", "READY", "not AWAITING_APPROVAL"),
    ("skip_task", "READY", "only BLOCKED or FAILED"),
    ("restart_task", "IN_PROGRESS", "stop_task it first"),
    ("delete_task", "IN_PROGRESS", "stop_task it first"),
    ("stop_task", "COMPLETED", "can be stopped"),
    ("approve_task", "COMPLETED", "not AWAITING_APPROVAL"),
])
async def test_invalid_transitions_are_refused(client, project, services, tool, status, needle):
    t = await new_task(client, "t")
    if status != "READY":
        await ok(client, "set_task_status", task_id=t["id"], status=status)
    before = db_snapshot(services)
    text = await fail(client, tool, task_id=t["id"])
    assert needle in text and t["id"] in text and status in text
    assert db_snapshot(services) == before
    assert await status_of(client, t["id"]) == status


async def test_stop_task_blocks(client, project):
    t = await new_task(client, "t")
    await ok(client, "set_task_status", task_id=t["id"], status="IN_PROGRESS")
    stopped = await ok(client, "stop_task", task_id=t["id"])
    assert (stopped["task_id"], stopped["status"], stopped["previous_status"]) == (t["id"], "BLOCKED", "IN_PROGRESS")
    assert stopped["killed"] is False  # no engine, so no agent process to kill
    assert await status_of(client, t["id"]) == "BLOCKED"
    events = (await ok(client, "get_recent_events", task_id=t["id"], limit=1))["events"]
    assert events[0]["event_type"] == "task.blocked" and events[0]["payload"]["reason"] == "stopped"


async def test_restart_task_requeues(client, project, services):
    a = await new_task(client, "a")
    b = await new_task(client, "b", depends_on=[a["id"]])
    await ok(client, "stop_task", task_id=a["id"])
    with services.store.transaction() as db:
        db["tasks"].update(a["id"], {"retry_count": 2})
    restarted = await ok(client, "restart_task", task_id=a["id"])
    assert (restarted["previous_status"], restarted["status"]) == ("BLOCKED", "READY")
    assert (await ok(client, "get_task", task_id=a["id"]))["retry_count"] == 0

    await ok(client, "stop_task", task_id=b["id"])  # b still waits on a
    assert (await ok(client, "restart_task", task_id=b["id"]))["status"] == "DEFINED"


async def test_delete_task_unblocks_dependents(client, project):
    a = await new_task(client, "a")
    b = await new_task(client, "b", depends_on=[a["id"]])
    deleted = await ok(client, "delete_task", task_id=a["id"])
    assert deleted["deleted"] == a["id"]
    assert [u["id"] for u in deleted["unblocked"]] == [b["id"]]
    assert "not found" in await fail(client, "get_task", task_id=a["id"])
    b_now = await ok(client, "get_task", task_id=b["id"])
    assert (b_now["status"], b_now["depends_on"]) == ("READY", [])


async def test_set_task_status_override_is_recorded(client, project):
    t = await new_task(client, "t")
    change = await ok(client, "set_task_status", task_id=t["id"], status="COMPLETED")  # READY -> COMPLETED: not a
    assert change == {"task_id": t["id"], "old_status": "READY", "new_status": "COMPLETED"}  # normal transition
    assert await status_of(client, t["id"]) == "COMPLETED"
    events = (await ok(client, "get_recent_events", task_id=t["id"], event_type="task.status_overridden"))["events"]
    assert len(events) == 1
    assert events[0]["payload"] == {"from": "READY", "to": "COMPLETED"}
    assert events[0]["project_id"] == project


# -- chain health -------------------------------------------------------------------------------

async def test_chain_health_for_a_task(client, project):
    a = await new_task(client, "a")
    b = await new_task(client, "b", depends_on=[a["id"]])
    c = await new_task(client, "c", depends_on=[b["id"]])
    await new_task(client, "unrelated")
    healthy = await ok(client, "get_chain_health", task_id=a["id"])
    assert healthy["stuck_count"] == 0 and healthy["stuck_downstream"] == []

    await ok(client, "stop_task", task_id=a["id"])
    health = await ok(client, "get_chain_health", task_id=a["id"])
    assert health["task_id"] == a["id"] and health["status"] == "BLOCKED"
    assert {s["id"] for s in health["stuck_downstream"]} == {b["id"], c["id"]}
    assert health["stuck_count"] == 2


async def test_chain_health_for_projects(client, project):
    await ok(client, "create_project", name="Other")
    a = await new_task(client, "a")
    b = await new_task(client, "b", depends_on=[a["id"]])
    o = await new_task(client, "o", project_id="other")
    await new_task(client, "o2", project_id="other", depends_on=[o["id"]])
    await ok(client, "stop_task", task_id=a["id"])
    await ok(client, "set_task_status", task_id=o["id"], status="FAILED")
    lone = await new_task(client, "lone")
    await ok(client, "stop_task", task_id=lone["id"])  # blocked, but nothing waits on it

    health = await ok(client, "get_chain_health", project_id=project)
    assert health["project_id"] == project and health["total_stuck_chains"] == 1
    chain = health["stuck_chains"][0]
    assert chain["blocked_task"]["id"] == a["id"] and chain["stuck_count"] == 1
    assert [s["id"] for s in chain["stuck_downstream"]] == [b["id"]]

    everywhere = await ok(client, "get_chain_health")  # no project, no active project: all of them
    assert everywhere["total_stuck_chains"] == 2
    await ok(client, "set_active_project", project_id="other")
    assert (await ok(client, "get_chain_health"))["stuck_chains"][0]["blocked_task"]["id"] == o["id"]


# -- results and errors -------------------------------------------------------------------------

async def test_result_and_error_before_any_run(client, project):
    t = await new_task(client, "t")
    result = await ok(client, "get_task_result", task_id=t["id"])
    assert (result["task_id"], result["attempts"], result["result"]) == (t["id"], 0, None)
    assert "No result recorded yet" in result["message"]
    error = await ok(client, "get_agent_error", task_id=t["id"])
    assert (error["status"], error["error_type"], error["suggested_fix"]) == ("READY", None, None)
    assert error["retries"] == "0 / 3"
    assert "No result recorded yet" in error["message"]


async def test_task_result_shape(client, project, services):
    t = await new_task(client, "t")
    add_result(services, t["id"], 1, error_type="crashed", error_message="boom")
    add_result(services, t["id"], 2, status="completed", summary="Added the page",
               files_changed=json.dumps(["app/login.py", "tests/test_login.py"]), input=1000, output=200,
               cache_read=50, cache_write=10, total=1260, cost_usd=0.0123, duration_s=42.5)
    info = await ok(client, "get_task_result", task_id=t["id"])
    assert info["attempts"] == 2 and info.get("message") is None
    r = info["result"]
    assert {"status", "summary", "files_changed", "error_message", "tokens", "cost_usd", "duration_s", "agent_id",
            "created_at"} <= r.keys()
    assert (r["status"], r["summary"], r["attempt"], r["agent_id"]) == ("completed", "Added the page", 2, "claude")
    assert r["files_changed"] == ["app/login.py", "tests/test_login.py"]
    assert r["tokens"] == {"input": 1000, "output": 200, "cache_read": 50, "cache_write": 10, "total": 1260}
    assert (r["cost_usd"], r["duration_s"]) == (0.0123, 42.5)

    error = await ok(client, "get_agent_error", task_id=t["id"])
    assert error["error_type"] is None and error["agent_summary"] == "Added the page"
    assert "succeeded" in error["message"]


async def test_agent_error_rate_limit(client, project, services):
    t = await new_task(client, "t")
    await ok(client, "set_task_status", task_id=t["id"], status="IN_PROGRESS")
    add_result(services, t["id"], 1, error_type="rate_limit", error_message="429 Too Many Requests",
               summary="partial work")
    # What the engine does with a rate-limited run: a pause with a resume time, no retry spent.
    assert Lifecycle(services.store, services.tasks, services.usage).failed(
        t["id"], "rate_limit", "429 Too Many Requests", pause_seconds=60) == "PAUSED"
    error = await ok(client, "get_agent_error", task_id=t["id"])
    assert (error["task_id"], error["status"], error["retries"]) == (t["id"], "PAUSED", "0 / 3")
    assert error["error_type"] == "Rate limited"
    assert error["error_message"] == "429 Too Many Requests"
    assert "backoff" in error["suggested_fix"] and "max_concurrent_agents" in error["suggested_fix"]
    assert error["agent_summary"] == "partial work"


async def test_agent_error_of_an_unknown_kind_points_at_the_task_log(client, project, services):
    t = await new_task(client, "t")
    add_result(services, t["id"], 1, error_type="weird", error_message="x" * 5000)
    error = await ok(client, "get_agent_error", task_id=t["id"])
    assert error["error_type"] == "weird"
    assert f"agentqueue://tasks/{t['id']}/log" in error["suggested_fix"]
    assert len(error["error_message"]) == 2000  # long output is cut for the model


async def test_task_diff_without_a_branch_is_a_clear_error(client, project):
    t = await new_task(client, "t")
    text = await fail(client, "get_task_diff", task_id=t["id"])
    assert t["id"] in text and "no branch" in text


# -- list_tasks ---------------------------------------------------------------------------------

async def make_mix(client) -> dict[str, str]:
    """One task per status of interest in 'proj', plus one in 'other'; returns title -> id."""
    await ok(client, "create_project", name="Other")
    ids = {}
    for title, prio, status in [("ready", 30, None), ("blocked", 10, "BLOCKED"), ("done1", 20, "COMPLETED"),
                                ("done2", 40, "COMPLETED"), ("failed", 50, "FAILED")]:
        ids[title] = (await new_task(client, title, priority=prio))["id"]
        if status:
            await ok(client, "set_task_status", task_id=ids[title], status=status)
    ids["waiting"] = (await new_task(client, "waiting", priority=60, depends_on=[ids["ready"]]))["id"]
    ids["elsewhere"] = (await new_task(client, "elsewhere", project_id="other", priority=1))["id"]
    return ids


def titles(listing: dict) -> list[str]:
    return [t["title"] for t in listing["tasks"]]


async def test_list_tasks_hides_completed_by_default(client, project):
    ids = await make_mix(client)
    listing = await ok(client, "list_tasks", project_id=project)
    assert titles(listing) == ["blocked", "ready", "failed", "waiting"]  # by priority
    assert listing["total"] == 4 and listing["hidden_completed"] == 2
    row = listing["tasks"][3]
    assert {"id", "project_id", "title", "status", "priority", "assigned_agent", "depends_on"} <= row.keys()
    assert row["depends_on"] == [ids["ready"]] and row["status"] == "DEFINED"

    everything = await ok(client, "list_tasks", project_id=project, include_completed=True)
    assert titles(everything) == ["blocked", "done1", "ready", "done2", "failed", "waiting"]
    assert everything["total"] == 6 and everything["hidden_completed"] == 0


@pytest.mark.parametrize(("status", "expected"), [
    ("FAILED", ["failed"]),
    (["READY", "BLOCKED"], ["blocked", "ready"]),
    ("ready, blocked", ["blocked", "ready"]),
    ("COMPLETED", ["done1", "done2"]),
])
async def test_list_tasks_status_filter(client, project, status, expected):
    await make_mix(client)
    listing = await ok(client, "list_tasks", project_id=project, status=status)
    assert titles(listing) == expected and listing["total"] == len(expected)


async def test_list_tasks_pagination(client, project):
    await make_mix(client)
    page = await ok(client, "list_tasks", project_id=project, include_completed=True, limit=2, offset=1)
    assert titles(page) == ["done1", "ready"] and page["total"] == 6
    last = await ok(client, "list_tasks", project_id=project, include_completed=True, limit=2, offset=5)
    assert titles(last) == ["waiting"] and last["total"] == 6
    beyond = await ok(client, "list_tasks", project_id=project, offset=100)
    assert beyond["tasks"] == [] and beyond["total"] == 4


async def test_list_tasks_project_scope(client, project):
    await make_mix(client)
    everywhere = await ok(client, "list_tasks")  # no project and no active project: every project
    assert titles(everywhere)[0] == "elsewhere" and everywhere["total"] == 5
    assert {t["project_id"] for t in everywhere["tasks"]} == {"proj", "other"}
    assert titles(await ok(client, "list_tasks", project_id="other")) == ["elsewhere"]

    await ok(client, "set_active_project", project_id="other")
    assert titles(await ok(client, "list_tasks")) == ["elsewhere"]
    assert (await ok(client, "list_tasks", project_id=project))["total"] == 4  # explicit wins
