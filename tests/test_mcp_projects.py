"""Project and channel tools over MCP (the active project, per connection, in both protocol eras)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from .conftest import fail, ok

pytestmark = pytest.mark.anyio

PROJECT_KEYS = {"id", "name", "status", "credit_weight", "max_concurrent_agents", "budget_limit", "workspace",
                "task_counts"}


async def test_create_project_defaults(client, home: Path):
    project = await ok(client, "create_project", name="Web App")
    assert PROJECT_KEYS <= project.keys()
    assert project["id"] == "web-app"
    assert project["name"] == "Web App"
    assert project["status"] == "ACTIVE"
    assert project["credit_weight"] == 1.0
    assert project["max_concurrent_agents"] == 2
    assert project["budget_limit"] is None
    assert project["task_counts"] == {}
    workspace = Path(project["workspace"])
    assert workspace.is_dir() and workspace.is_relative_to(home)


async def test_create_project_with_options(client, tmp_path: Path):
    ws = tmp_path / "elsewhere" / "ws"
    project = await ok(client, "create_project", name="Data Pipeline", credit_weight=2.5, max_concurrent_agents=4,
                       budget_limit=100_000, workspace=str(ws), auto_create_channels=True)
    assert (project["credit_weight"], project["max_concurrent_agents"], project["budget_limit"]) == (2.5, 4, 100_000)
    assert project["workspace"] == str(ws) and ws.is_dir()
    channels = await ok(client, "get_project_channels", project_id="data-pipeline")
    assert channels["channels"] == [{"channel_id": "#data-pipeline", "channel_name": "#data-pipeline"}]
    found = await ok(client, "get_project_for_channel", channel_id="#data-pipeline")
    assert found == {"channel_id": "#data-pipeline", "project_id": "data-pipeline", "project_name": "Data Pipeline"}


async def test_duplicate_project_id_is_refused(client):
    await ok(client, "create_project", name="Web App")
    text = await fail(client, "create_project", name="web-app!")
    assert "'web-app' already exists" in text
    assert (await ok(client, "list_projects"))["total"] == 1


async def test_list_projects_filter_pagination_and_task_counts(client):
    for name in ("Alpha", "Bravo", "Charlie"):  # same-millisecond created_at ties fall back to id order
        await ok(client, "create_project", name=name)
    await ok(client, "pause_project", project_id="bravo")
    first = await ok(client, "create_task", project_id="alpha", title="a", description="do a")
    await ok(client, "create_task", project_id="alpha", title="b", description="do b", depends_on=[first["id"]])

    everything = await ok(client, "list_projects")
    assert [p["id"] for p in everything["projects"]] == ["alpha", "bravo", "charlie"]
    assert everything["total"] == 3
    assert everything["projects"][0]["task_counts"] == {"READY": 1, "DEFINED": 1}

    paused = await ok(client, "list_projects", status="PAUSED")
    assert [p["id"] for p in paused["projects"]] == ["bravo"] and paused["total"] == 1

    page = await ok(client, "list_projects", limit=2, offset=2)
    assert [p["id"] for p in page["projects"]] == ["charlie"] and page["total"] == 3


async def test_pause_and_resume_project(client):
    await ok(client, "create_project", name="Web App")
    assert (await ok(client, "pause_project", project_id="web-app"))["status"] == "PAUSED"
    assert (await ok(client, "pause_project", project_id="web-app"))["status"] == "PAUSED"  # idempotent
    assert (await ok(client, "resume_project", project_id="web-app"))["status"] == "ACTIVE"
    events = await ok(client, "get_recent_events", project_id="web-app", event_type="project.*")
    # newest first; the second pause changed nothing, so recorded nothing
    assert [e["event_type"] for e in events["events"]] == ["project.resumed", "project.paused", "project.created"]


async def test_edit_project(client):
    await ok(client, "create_project", name="Web App", budget_limit=500)
    edited = await ok(client, "edit_project", project_id="web-app", name="Website", credit_weight=3,
                      max_concurrent_agents=5)
    assert (edited["id"], edited["name"], edited["credit_weight"], edited["max_concurrent_agents"]) == \
        ("web-app", "Website", 3.0, 5)
    assert edited["budget_limit"] == 500
    assert (await ok(client, "edit_project", project_id="web-app", budget_limit=0))["budget_limit"] is None
    listed = (await ok(client, "list_projects"))["projects"][0]
    assert (listed["name"], listed["budget_limit"]) == ("Website", None)


async def test_delete_project_removes_its_tasks_and_channels(client, services):
    await ok(client, "create_project", name="Doomed")
    await ok(client, "create_project", name="Keeper")
    task = await ok(client, "create_task", project_id="doomed", title="t", description="d")
    kept = await ok(client, "create_task", project_id="keeper", title="k", description="d")
    await ok(client, "set_project_channel", project_id="doomed", channel_id="C1", channel_name="#doomed")

    gone = await ok(client, "delete_project", project_id="doomed", archive_channels=True)
    assert gone["deleted"] == "doomed" and gone["name"] == "Doomed"
    assert gone["channels_to_archive"] == ["C1"]

    assert [p["id"] for p in (await ok(client, "list_projects"))["projects"]] == ["keeper"]
    assert "not found" in await fail(client, "get_task", task_id=task["id"])
    assert (await ok(client, "get_task", task_id=kept["id"]))["title"] == "k"
    assert (await ok(client, "get_project_for_channel", channel_id="C1"))["project_id"] is None
    assert services.store.scalar("SELECT count(*) FROM tasks WHERE project_id = 'doomed'") == 0


async def test_delete_project_without_archive_lists_no_channels(client):
    await ok(client, "create_project", name="Doomed", auto_create_channels=True)
    gone = await ok(client, "delete_project", project_id="doomed")
    assert gone["channels_to_archive"] == []


async def test_delete_project_refused_while_a_task_runs(client):
    await ok(client, "create_project", name="Busy")
    task = await ok(client, "create_task", project_id="busy", title="t", description="d")
    await ok(client, "set_task_status", task_id=task["id"], status="IN_PROGRESS")
    text = await fail(client, "delete_project", project_id="busy")
    assert task["id"] in text and "stop_task" in text
    assert (await ok(client, "list_projects"))["total"] == 1
    await ok(client, "stop_task", task_id=task["id"])
    assert (await ok(client, "delete_project", project_id="busy"))["deleted"] == "busy"


@pytest.mark.both_eras
async def test_active_project_is_used_when_project_id_is_omitted(client):
    await ok(client, "create_project", name="Alpha")
    await ok(client, "create_project", name="Beta")
    assert "No project_id given" in await fail(client, "create_task", title="t", description="d")

    active = await ok(client, "set_active_project", project_id="alpha")
    assert active["active_project"] == "alpha" and active["name"] == "Alpha"
    in_alpha = await ok(client, "create_task", title="t", description="d")
    assert in_alpha["project_id"] == "alpha"
    explicit = await ok(client, "create_task", title="t2", description="d", project_id="beta")
    assert explicit["project_id"] == "beta"  # an explicit project_id wins
    listed = await ok(client, "list_tasks")
    assert [t["id"] for t in listed["tasks"]] == [in_alpha["id"]]

    cleared = await ok(client, "set_active_project")
    assert cleared["active_project"] is None
    assert "No project_id given" in await fail(client, "create_task", title="t", description="d")


@pytest.mark.both_eras
async def test_active_project_is_per_connection(client, server, era):
    await ok(client, "create_project", name="Alpha")
    await ok(client, "set_active_project", project_id="alpha")
    async with Client(server, mode="legacy" if era == "legacy" else "auto") as other:
        assert "No project_id given" in await fail(other, "create_task", title="t", description="d")
    assert (await ok(client, "create_task", title="t", description="d"))["project_id"] == "alpha"


@pytest.mark.both_eras
async def test_deleting_the_active_project_clears_it(client):
    await ok(client, "create_project", name="Alpha")
    await ok(client, "set_active_project", project_id="alpha")
    await ok(client, "delete_project", project_id="alpha")
    await ok(client, "create_project", name="Alpha")  # same id again: must not be silently active
    assert "No project_id given" in await fail(client, "create_task", title="t", description="d")


# -- channels -----------------------------------------------------------------------------------

async def test_set_project_channel_links_and_relinks(client):
    await ok(client, "create_project", name="Alpha")
    await ok(client, "create_project", name="Beta")
    linked = await ok(client, "set_project_channel", project_id="alpha", channel_id="C123", channel_name="#dev")
    assert (linked["project_id"], linked["channel_id"], linked["previous_project_id"]) == ("alpha", "C123", None)
    assert (await ok(client, "get_project_channels", project_id="alpha"))["channels"] == \
        [{"channel_id": "C123", "channel_name": "#dev"}]
    assert await ok(client, "get_project_for_channel", channel_id="C123") == \
        {"channel_id": "C123", "project_id": "alpha", "project_name": "Alpha"}

    moved = await ok(client, "set_project_channel", project_id="beta", channel_id="C123")
    assert moved["previous_project_id"] == "alpha"
    assert (await ok(client, "get_project_channels", project_id="alpha"))["channels"] == []
    # a relink without a name keeps the name it had
    assert (await ok(client, "get_project_channels", project_id="beta"))["channels"] == \
        [{"channel_id": "C123", "channel_name": "#dev"}]
    assert (await ok(client, "get_project_for_channel", channel_id="C123"))["project_id"] == "beta"


async def test_set_control_interface(client):
    await ok(client, "create_project", name="Alpha")
    await ok(client, "set_project_channel", project_id="alpha", channel_id="C1", channel_name="#general")
    control = await ok(client, "set_control_interface", project_id="alpha", channel_name="ops")
    assert control == {"project_id": "alpha", "channel_id": "#ops", "channel_name": "#ops"}
    channels = (await ok(client, "get_project_channels", project_id="alpha"))["channels"]
    assert [c["channel_id"] for c in channels] == ["#ops", "C1"]  # control channel first

    # a channel already known by that name keeps its front end's id
    await ok(client, "set_project_channel", project_id="alpha", channel_id="C999", channel_name="#deploy")
    control = await ok(client, "set_control_interface", project_id="alpha", channel_name="#deploy")
    assert control == {"project_id": "alpha", "channel_id": "C999", "channel_name": "#deploy"}
    channels = (await ok(client, "get_project_channels", project_id="alpha"))["channels"]
    assert channels[0]["channel_id"] == "C999" and len(channels) == 3


async def test_get_project_for_unknown_channel_is_null(client):
    assert await ok(client, "get_project_for_channel", channel_id="nowhere") == \
        {"channel_id": "nowhere", "project_id": None, "project_name": None}
