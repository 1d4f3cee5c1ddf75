"""Agents, status, events, token usage, the orchestrator switch, and what tools/list advertises."""

from __future__ import annotations

import json

import pytest
from mcp import Client

from agentqueue.server.app import build_server
from agentqueue.server.middleware import TOOL_LISTS
from agentqueue.services import Services
from agentqueue.services.usage import since_iso
from agentqueue.store.db import now_iso

from agentqueue.tools import SPECS
from agentqueue.server.toolsets import DISCOVERY, TOOLSETS, connection_options

from .conftest import fail, ok, person_says_yes

pytestmark = pytest.mark.anyio

EXPECTED_TOOLS = {
    "list_projects", "create_project", "pause_project", "resume_project", "edit_project", "delete_project",
    "set_active_project", "set_project_channel", "set_control_interface", "get_project_channels",
    "get_project_for_channel", "list_tasks", "create_task", "get_task", "edit_task", "stop_task", "restart_task",
    "delete_task", "approve_task", "skip_task", "get_task_result", "get_task_diff", "get_chain_health",
    "set_task_status", "get_agent_error", "list_agents", "create_agent", "get_status", "get_recent_events",
    "get_token_usage", "orchestrator_control", "list_requests", "answer_request", "get_policy", "edit_policy",
    "get_audit_log", "edit_agent", "pause_agent", "resume_agent", "delete_agent", "request_changes",
}
DESTRUCTIVE = {"delete_project", "delete_task", "stop_task", "delete_agent"}


# -- agents -------------------------------------------------------------------------------------

async def test_create_and_list_agents(client, agent_clis):
    assert await ok(client, "list_agents") == {"agents": [], "total": 0}
    agent = await ok(client, "create_agent", name="Claude 1", model="opus", capabilities=["python", " ", "web"])
    assert (agent["id"], agent["name"], agent["agent_type"], agent["state"]) == \
        ("claude-1", "Claude 1", "claude-code", "IDLE")
    assert (agent["model"], agent["capabilities"], agent["current_task"], agent["repo_id"]) == \
        ("opus", ["python", "web"], None, None)
    await ok(client, "create_agent", name="Codex", agent_type="codex")
    listing = await ok(client, "list_agents")
    assert listing["total"] == 2
    assert [a["id"] for a in listing["agents"]] == ["claude-1", "codex"]
    assert {"id", "name", "agent_type", "state", "current_task", "repo_id", "capabilities"} <= \
        listing["agents"][0].keys()
    assert [a["id"] for a in (await ok(client, "list_agents", limit=1, offset=1))["agents"]] == ["codex"]


async def test_command_agent_needs_a_command(client):
    text = await fail(client, "create_agent", name="Script", agent_type="command")
    assert "command" in text and "needs" in text
    agent = await ok(client, "create_agent", name="Script", agent_type="command", command="  ./run-agent.sh ")
    assert (agent["agent_type"], agent["command"]) == ("command", "./run-agent.sh")
    assert "only for agent_type 'command'" in await fail(client, "create_agent", name="Other", command="x")
    assert "already exists" in await fail(client, "create_agent", name="script", agent_type="command", command="./y.sh")
    assert (await ok(client, "list_agents"))["total"] == 1


# -- get_status ---------------------------------------------------------------------------------

async def test_status_counts_and_running_tasks(client):
    await ok(client, "create_project", name="P")
    first = await ok(client, "create_task", project_id="p", title="first", description="d", priority=1)
    await ok(client, "create_task", project_id="p", title="second", description="d", depends_on=[first["id"]])
    running = await ok(client, "create_task", project_id="p", title="running", description="d")
    await ok(client, "set_task_status", task_id=running["id"], status="IN_PROGRESS")
    status = await ok(client, "get_status")
    assert status["projects"] == 1
    assert status["tasks"]["total"] == 3
    assert status["tasks"]["by_status"] == {"DEFINED": 1, "READY": 1, "IN_PROGRESS": 1}
    assert [t["id"] for t in status["tasks"]["in_progress"]] == [running["id"]]
    assert [t["id"] for t in status["tasks"]["ready"]] == [first["id"]]
    assert status["orchestrator"] == {"state": "running", "running_tasks": 1}


async def test_status_warns_when_ready_tasks_have_no_agent(client, agent_clis):
    await ok(client, "create_project", name="P")
    assert (await ok(client, "get_status"))["warnings"] == []
    await ok(client, "create_task", project_id="p", title="t", description="d")
    warnings = (await ok(client, "get_status"))["warnings"]
    assert len(warnings) == 1 and "no agent" in warnings[0] and "create_agent" in warnings[0]

    await ok(client, "create_agent", name="claude")
    assert (await ok(client, "get_status"))["warnings"] == []

    codex_task = await ok(client, "create_task", project_id="p", title="c", description="d", agent_type="codex")
    warnings = (await ok(client, "get_status"))["warnings"]
    assert len(warnings) == 1 and codex_task["id"] in warnings[0] and "codex" in warnings[0]
    assert "1 READY task" in warnings[0]


async def test_status_warns_when_paused_with_ready_tasks(client, agent_clis):
    await ok(client, "create_project", name="P")
    await ok(client, "create_agent", name="claude")
    await ok(client, "create_task", project_id="p", title="t", description="d")
    await ok(client, "orchestrator_control", action="pause")
    status = await ok(client, "get_status")
    assert status["orchestrator"]["state"] == "paused"
    assert any("paused" in w and "resume" in w for w in status["warnings"])


# -- events -------------------------------------------------------------------------------------

async def test_recent_events_newest_first_and_filters(client):
    await ok(client, "create_project", name="P")
    await ok(client, "create_project", name="Q")
    a = await ok(client, "create_task", project_id="p", title="a", description="d")
    await ok(client, "edit_task", task_id=a["id"], priority=3)
    b = await ok(client, "create_task", project_id="q", title="b", description="d")

    events = (await ok(client, "get_recent_events", limit=50))["events"]
    assert [e["event_type"] for e in events] == \
        ["task.created", "task.updated", "task.created", "project.created", "project.created"]
    ids = [e["id"] for e in events]
    assert ids == sorted(ids, reverse=True)
    assert {"id", "event_type", "project_id", "task_id", "agent_id", "payload", "timestamp"} <= events[0].keys()
    assert events[0]["task_id"] == b["id"] and events[0]["payload"]["title"] == "b"

    assert len((await ok(client, "get_recent_events"))["events"]) == 5  # default limit 10
    assert [e["event_type"] for e in (await ok(client, "get_recent_events", limit=2))["events"]] == \
        ["task.created", "task.updated"]
    by_task = (await ok(client, "get_recent_events", task_id=a["id"]))["events"]
    assert [e["event_type"] for e in by_task] == ["task.updated", "task.created"]
    by_project = (await ok(client, "get_recent_events", project_id="q"))["events"]
    assert [e["event_type"] for e in by_project] == ["task.created", "project.created"]
    exact = (await ok(client, "get_recent_events", event_type="project.created"))["events"]
    assert [e["project_id"] for e in exact] == ["q", "p"]
    family = (await ok(client, "get_recent_events", event_type="task.*"))["events"]
    assert len(family) == 3 and all(e["event_type"].startswith("task.") for e in family)

    await ok(client, "set_active_project", project_id="p")  # the active project scopes the default
    assert {e["project_id"] for e in (await ok(client, "get_recent_events"))["events"]} == {"p"}


# -- token usage --------------------------------------------------------------------------------

def record(services: Services, project_id: str, task_id: str, agent_id: str, total: int, cost: float,
           timestamp: str | None = None) -> None:
    tokens = {"input": total // 2, "output": total // 4, "cache_read": total // 8, "cache_write": total // 8,
              "total": total}
    with services.store.transaction():
        services.usage.record(project_id=project_id, task_id=task_id, agent_id=agent_id, tokens=tokens,
                              cost_usd=cost, timestamp=timestamp or now_iso())


@pytest.fixture
async def ledger(client, services) -> dict[str, str]:
    await ok(client, "create_project", name="P")
    await ok(client, "create_project", name="Q")
    t1 = (await ok(client, "create_task", project_id="p", title="t1", description="d"))["id"]
    t2 = (await ok(client, "create_task", project_id="p", title="t2", description="d"))["id"]
    t3 = (await ok(client, "create_task", project_id="q", title="t3", description="d"))["id"]
    record(services, "p", t1, "claude", 800, 0.10)
    record(services, "p", t1, "codex", 160, 0.02)
    record(services, "p", t2, "claude", 400, 0.05)
    record(services, "q", t3, "claude", 80, 0.01)
    record(services, "p", t2, "claude", 8000, 1.00, timestamp=since_iso(48))  # two days ago
    return {"t1": t1, "t2": t2, "t3": t3}


async def test_token_usage_totals_and_breakdown_by_project(client, ledger):
    usage = await ok(client, "get_token_usage")
    assert usage["total"] == {"input": 4720, "output": 2360, "cache_read": 1180, "cache_write": 1180,
                              "total": 9440, "cost_usd": 1.18}
    assert [(b["project_id"], b["total"], b["runs"]) for b in usage["breakdown"]] == [("p", 9360, 4), ("q", 80, 1)]

    recent = await ok(client, "get_token_usage", since_hours=24)
    assert recent["total"]["total"] == 1440 and recent["total"]["cost_usd"] == 0.18


async def test_token_usage_for_a_project_and_a_task(client, ledger):
    project = await ok(client, "get_token_usage", project_id="p", since_hours=24)
    assert project["total"]["total"] == 1360 and project["total"]["cost_usd"] == pytest.approx(0.17)
    rows = [(b["task_id"], b["agent_id"], b["total"]) for b in project["breakdown"]]
    assert rows == [(ledger["t1"], "claude", 800), (ledger["t2"], "claude", 400), (ledger["t1"], "codex", 160)]

    task = await ok(client, "get_token_usage", task_id=ledger["t1"])
    assert task["total"]["total"] == 960 and task["total"]["cost_usd"] == pytest.approx(0.12)
    assert [(b["agent_id"], b["total"], b["cost_usd"]) for b in task["breakdown"]] == \
        [("claude", 800, 0.1), ("codex", 160, 0.02)]

    await ok(client, "set_active_project", project_id="q")
    assert (await ok(client, "get_token_usage"))["total"]["total"] == 80


async def test_token_usage_says_which_figures_hold_partial_or_unpriced_runs(client, services, ledger):
    """A run cut short counts what it used, marked partial; a model of unknown price counts its tokens and no cost.
    The figures say so (partial_runs, unpriced_runs), where they hold such runs and only there."""
    stamp = now_iso()
    with services.store.transaction():
        services.usage.record(project_id="q", task_id=ledger["t3"], agent_id="claude", partial=True, timestamp=stamp,
                              tokens={"input": 100, "output": 42, "cache_read": 25, "cache_write": 50, "total": 217},
                              cost_usd=0.0015)
        services.usage.record(project_id="q", task_id=ledger["t3"], agent_id="claude", partial=True, timestamp=stamp,
                              tokens={"input": 10, "output": 0, "cache_read": 0, "cache_write": 0, "total": 10},
                              cost_usd=None)
    usage = await ok(client, "get_token_usage", since_hours=24)
    assert usage["total"]["total"] == 1440 + 227 and usage["total"]["cost_usd"] == pytest.approx(0.18 + 0.0015)
    assert usage["total"]["partial_runs"] == 2 and usage["total"]["unpriced_runs"] == 1
    rows = {b["project_id"]: b for b in usage["breakdown"]}
    assert rows["q"]["partial_runs"] == 2 and rows["q"]["unpriced_runs"] == 1 and rows["q"]["runs"] == 3
    assert "partial_runs" not in rows["p"] and "unpriced_runs" not in rows["p"]
    whole = await ok(client, "get_token_usage", project_id="p")
    assert "partial_runs" not in whole["total"] and "unpriced_runs" not in whole["total"]


async def test_token_usage_is_zero_when_nothing_was_spent(client):
    usage = await ok(client, "get_token_usage")
    assert usage == {"total": {"input": 0, "output": 0, "cache_read": 0, "cache_write": 0, "total": 0,
                               "cost_usd": 0.0}, "breakdown": []}


# -- the orchestrator switch ----------------------------------------------------------------------

async def test_orchestrator_pause_resume_is_persisted(client, home, era):
    assert await ok(client, "orchestrator_control", action="status") == {"state": "running", "running_tasks": 0}
    assert (await ok(client, "orchestrator_control", action="pause"))["state"] == "paused"
    assert (await ok(client, "orchestrator_control", action="status"))["state"] == "paused"

    fresh = Services(home)  # another process on the same home, e.g. the daemon after a restart
    try:
        assert fresh.system.orchestrator_state() == "paused"
        async with Client(build_server(fresh), mode="legacy" if era == "legacy" else "auto") as other:
            assert (await ok(other, "orchestrator_control", action="status"))["state"] == "paused"
            assert (await ok(other, "orchestrator_control", action="resume"))["state"] == "running"
    finally:
        fresh.close()
    assert (await ok(client, "orchestrator_control", action="status"))["state"] == "running"
    events = (await ok(client, "get_recent_events", event_type="orchestrator.*"))["events"]
    assert [e["event_type"] for e in events] == ["orchestrator.resumed", "orchestrator.paused"]


async def test_orchestrator_counts_running_tasks(client):
    await ok(client, "create_project", name="P")
    task = await ok(client, "create_task", project_id="p", title="t", description="d")
    await ok(client, "set_task_status", task_id=task["id"], status="ASSIGNED")
    assert (await ok(client, "orchestrator_control", action="pause"))["running_tasks"] == 1


# -- what tools/list advertises -------------------------------------------------------------------

@pytest.mark.both_eras
async def test_every_tool_is_listed_and_described(client):
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert EXPECTED_TOOLS <= tools.keys()
    for name in EXPECTED_TOOLS:
        tool = tools[name]
        assert tool.description and tool.description.strip(), name
        assert tool.input_schema.get("type") == "object", name
        assert tool.output_schema and tool.output_schema.get("type") == "object", name  # structured results


@pytest.mark.both_eras
async def test_tool_annotations(client):
    tools = {t.name: t for t in (await client.list_tools()).tools}
    for name in EXPECTED_TOOLS:
        hints = tools[name].annotations
        assert hints is not None, name
        reads = name.startswith(("list_", "get_"))
        assert bool(hints.read_only_hint) is reads, name  # and every tool that writes says so
        if reads:
            assert not hints.destructive_hint, name
    for name in DESTRUCTIVE:
        assert tools[name].annotations.destructive_hint is True, name


@pytest.mark.both_eras
async def test_required_parameters_are_advertised(client):
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools["create_task"].input_schema["required"]) == {"title", "description"}
    assert set(tools["create_project"].input_schema["required"]) == {"name"}
    assert set(tools["set_task_status"].input_schema["required"]) == {"task_id", "status"}
    assert tools["list_tasks"].input_schema["properties"]["limit"]["maximum"] == 500


@pytest.mark.both_eras
async def test_every_required_parameter_is_described(client):
    """A parameter named like a schema keyword (`title`) must survive the schema trimming."""
    for tool in (await client.list_tools()).tools:
        schema = tool.input_schema
        assert set(schema.get("required", [])) <= set(schema.get("properties", {})), tool.name
    tools = {t.name: t for t in (await client.list_tools()).tools}
    for name in ("create_task", "edit_task", "write_note", "read_note", "append_note", "delete_note", "git_create_pr"):
        assert tools[name].input_schema["properties"]["title"]["type"] == "string", name


@pytest.mark.both_eras
async def test_tool_definitions_fit_the_token_budget(client):
    """What a client puts in its model's context for the tools: ≤ 120 tokens per tool on average."""
    tools = (await client.list_tools()).tools
    assert len(tools) >= len(EXPECTED_TOOLS)
    definitions = json.dumps([{"name": t.name, "description": t.description, "inputSchema": t.input_schema}
                              for t in tools])
    approx_tokens = len(definitions) // 4
    assert approx_tokens / len(tools) <= 120, f"{approx_tokens} tokens for {len(tools)} tools"


# -- tools/list, built once per selection ---------------------------------------------------------
async def listed_twice(client: Client) -> list[str]:
    """The tool names a connection is offered, asked twice: the second answer must come from the daemon's kept
    answers (middleware.TOOL_LISTS) and be the same list."""
    first = [t.name for t in (await client.list_tools()).tools]
    hits = TOOL_LISTS.hits
    second = [t.name for t in (await client.list_tools()).tools]
    assert TOOL_LISTS.hits == hits + 1, "the second tools/list was built again instead of answered from the cache"
    assert second == first
    return first


@pytest.mark.both_eras
async def test_each_selection_gets_its_own_correct_tool_list_from_the_cache(services, era):
    mode = "legacy" if era == "legacy" else "auto"
    selections = {
        # Toolsets a person fixed are all the connection gets: enable_toolsets is not offered to it.
        "every group": (connection_options(toolsets=list(TOOLSETS)), set(SPECS) - {DISCOVERY}),
        "read-only": (connection_options(read_only=True, toolsets=list(TOOLSETS)),
                      {s.name for s in SPECS.values() if s.read_only} - {DISCOVERY}),
        "tasks": (connection_options(toolsets=["tasks"]), {s.name for s in SPECS.values() if s.group == "tasks"}),
        "read-only tasks and notes": (
            connection_options(read_only=True, toolsets=["tasks", "notes"]),
            {s.name for s in SPECS.values() if s.group in ("tasks", "notes") and s.read_only}),
    }
    # Two rounds of connections: a selection met again is answered from the cache, and stays its own.
    for _ in range(2):
        for what, (options, expected) in selections.items():
            async with Client(build_server(services, options), mode=mode) as client:
                names = await listed_twice(client)
                assert set(names) == expected and len(names) == len(expected), what


@pytest.mark.both_eras
async def test_a_connection_whose_selection_changes_gets_the_new_list(services, era):
    """The policy denying a tool outright takes it off this very connection's list; lifting the rule puts it back."""
    options = connection_options(toolsets=["projects", "policy"])
    async with Client(build_server(services, options), mode="legacy" if era == "legacy" else "auto",
                      elicitation_callback=person_says_yes) as client:
        before = await listed_twice(client)
        assert "delete_project" in before
        await ok(client, "edit_policy", add_rule="tool:delete_project", list="deny")
        denied = await listed_twice(client)
        assert denied == [name for name in before if name != "delete_project"]
        await ok(client, "edit_policy", remove_rule="tool:delete_project", list="deny")
        assert await listed_twice(client) == before
