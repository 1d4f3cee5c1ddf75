"""agentqueue:// resources (reads and change notifications in both eras) and the prompts."""

from __future__ import annotations

import json
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import pytest
from mcp import Client, MCPError
from mcp.types import ResourceUpdatedNotification

from .conftest import ok
from .slowdown import scaled

pytestmark = [pytest.mark.both_eras, pytest.mark.anyio]

STATIC = {"agentqueue://status", "agentqueue://projects", "agentqueue://events/recent", "agentqueue://approvals"}
TEMPLATES = {"agentqueue://projects/{project_id}", "agentqueue://projects/{project_id}/tasks",
             "agentqueue://tasks/{task_id}"}
PROMPTS = {"dispatcher", "notes_mode", "plan_to_tasks", "review_task", "project_overview", "agent_context",
           "summarize_conversation"}


async def read_json(client: Client, uri: str):
    result = await client.read_resource(uri)
    assert len(result.contents) == 1
    content = result.contents[0]
    assert content.mime_type == "application/json"
    return json.loads(content.text)


@pytest.fixture
async def seeded(client) -> dict[str, str]:
    """Project 'web' with a channel; tasks: a (READY), b (DEFINED, after a), review (AWAITING_APPROVAL),
    done (COMPLETED)."""
    await ok(client, "create_project", name="Web")
    await ok(client, "set_project_channel", project_id="web", channel_id="C42", channel_name="#web")
    ids = {}
    for title in ("a", "review", "done"):
        ids[title] = (await ok(client, "create_task", project_id="web", title=title, description=f"do {title}"))["id"]
    ids["b"] = (await ok(client, "create_task", project_id="web", title="b", description="do b",
                         depends_on=[ids["a"]]))["id"]
    await ok(client, "set_task_status", task_id=ids["review"], status="AWAITING_APPROVAL")
    await ok(client, "set_task_status", task_id=ids["done"], status="COMPLETED")
    return ids


# -- reading ------------------------------------------------------------------------------------

async def test_resources_are_listed(client):
    assert STATIC <= {str(r.uri) for r in (await client.list_resources()).resources}
    assert TEMPLATES <= {t.uri_template for t in (await client.list_resource_templates()).resource_templates}


async def test_status_resource(client, seeded):
    status = await read_json(client, "agentqueue://status")
    assert status["projects"] == 1
    assert status["tasks"]["total"] == 4
    assert status["tasks"]["by_status"] == {"DEFINED": 1, "READY": 1, "AWAITING_APPROVAL": 1, "COMPLETED": 1}
    assert status["orchestrator"]["state"] == "running"
    assert any("create_agent" in w for w in status["warnings"])  # a READY task and no agent


async def test_project_resources(client, seeded):
    projects = await read_json(client, "agentqueue://projects")
    assert [p["id"] for p in projects] == ["web"]
    project = await read_json(client, "agentqueue://projects/web")
    assert (project["id"], project["name"], project["status"]) == ("web", "Web", "ACTIVE")
    assert project["channels"] == [{"channel_id": "C42", "channel_name": "#web"}]
    assert project["task_counts"]["COMPLETED"] == 1

    tasks = await read_json(client, "agentqueue://projects/web/tasks")
    assert tasks["project_id"] == "web" and tasks["total"] == 4  # completed tasks included
    assert {t["id"] for t in tasks["tasks"]} == set(seeded.values())


async def test_task_resource_matches_get_task_and_stays_current(client, seeded):
    assert await read_json(client, f"agentqueue://tasks/{seeded['b']}") == \
        await ok(client, "get_task", task_id=seeded["b"])
    await ok(client, "edit_task", task_id=seeded["b"], title="renamed")
    assert (await read_json(client, f"agentqueue://tasks/{seeded['b']}"))["title"] == "renamed"


async def test_events_resource_is_newest_first(client, seeded):
    events = await read_json(client, "agentqueue://events/recent")
    # the last change was set_task_status(done, COMPLETED): the status event, then the override record
    assert [(e["event_type"], e["task_id"]) for e in events[:2]] == \
        [("task.status_overridden", seeded["done"]), ("task.completed", seeded["done"])]
    assert events[-1]["event_type"] == "project.created"
    assert [e["id"] for e in events] == sorted((e["id"] for e in events), reverse=True)


async def test_approvals_resource(client, seeded):
    approvals = await read_json(client, "agentqueue://approvals")
    assert [t["id"] for t in approvals["tasks"]] == [seeded["review"]] and approvals["total"] == 1
    await ok(client, "approve_task", task_id=seeded["review"])
    assert await read_json(client, "agentqueue://approvals") == {"tasks": [], "total": 0, "requests": []}


@pytest.mark.parametrize("uri", ["agentqueue://projects/nope", "agentqueue://projects/nope/tasks",
                                 "agentqueue://tasks/nope"])
async def test_unknown_ids_are_mcp_errors(client, uri):
    with pytest.raises(MCPError) as raised:
        await client.read_resource(uri)
    assert raised.value.error.code == -32602
    assert "'nope' not found" in raised.value.error.message


# -- change notifications -----------------------------------------------------------------------

@pytest.fixture
async def watch(server, era) -> AsyncIterator[tuple[Client, Callable]]:
    """A client plus `watch(uri)`: an async context that yields `next_update() -> uri`, over the era's pipe
    (2025: resources/subscribe + notifications/resources/updated; 2026: subscriptions/listen)."""
    send, receive = anyio.create_memory_object_stream[str](100)

    async def on_message(message) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            await send.send(str(message.params.uri))

    @asynccontextmanager
    async def subscribe(uri: str) -> AsyncIterator[Callable[[], Awaitable[str]]]:
        if era == "legacy":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # resources/subscribe is deprecated in 2026, current in 2025
                await client.subscribe_resource(uri)

            async def next_update() -> str:
                with anyio.fail_after(scaled(5)):
                    return await receive.receive()
            yield next_update
        else:
            async with client.listen(resource_subscriptions=[uri]) as subscription:
                events = aiter(subscription)

                async def next_update() -> str:
                    with anyio.fail_after(scaled(5)):
                        return (await anext(events)).uri
                yield next_update

    async with send, receive, Client(server, mode="legacy" if era == "legacy" else "auto",
                                     message_handler=on_message) as client:
        yield client, subscribe


@pytest.mark.parametrize(("uri", "tool", "args"), [
    ("agentqueue://tasks/{b}", "edit_task", {"task_id": "{b}", "priority": 1}),
    ("agentqueue://tasks/{a}", "stop_task", {"task_id": "{a}"}),
    ("agentqueue://projects/web/tasks", "create_task", {"project_id": "web", "title": "new", "description": "d"}),
    ("agentqueue://approvals", "approve_task", {"task_id": "{review}"}),
    ("agentqueue://projects", "pause_project", {"project_id": "web"}),
    ("agentqueue://status", "set_task_status", {"task_id": "{a}", "status": "FAILED"}),
])
async def test_a_change_notifies_subscribers(watch, uri, tool, args):
    client, subscribe = watch
    ids = await seed_for_watch(client)
    uri = uri.format(**ids)
    args = {k: v.format(**ids) if isinstance(v, str) else v for k, v in args.items()}
    async with subscribe(uri) as next_update:
        await ok(client, tool, **args)
        assert await next_update() == uri


async def test_only_the_changed_resource_is_announced(watch):
    client, subscribe = watch
    ids = await seed_for_watch(client)
    async with subscribe(f"agentqueue://tasks/{ids['a']}") as next_update:
        await ok(client, "edit_task", task_id=ids["b"], priority=5)  # not watched
        await ok(client, "edit_task", task_id=ids["a"], priority=5)
        assert await next_update() == f"agentqueue://tasks/{ids['a']}"


async def seed_for_watch(client: Client) -> dict[str, str]:
    await ok(client, "create_project", name="Web")
    a = (await ok(client, "create_task", project_id="web", title="a", description="d"))["id"]
    b = (await ok(client, "create_task", project_id="web", title="b", description="d", depends_on=[a]))["id"]
    review = (await ok(client, "create_task", project_id="web", title="r", description="d"))["id"]
    await ok(client, "set_task_status", task_id=review, status="AWAITING_APPROVAL")
    return {"a": a, "b": b, "review": review}


# -- prompts ------------------------------------------------------------------------------------

async def prompt_text(client: Client, name: str, **args: str) -> str:
    result = await client.get_prompt(name, args)
    assert len(result.messages) == 1 and result.messages[0].role == "user"
    return result.messages[0].content.text


async def test_prompts_are_listed_with_descriptions(client):
    prompts = {p.name: p for p in (await client.list_prompts()).prompts}
    assert PROMPTS <= prompts.keys()
    assert all(prompts[name].description for name in PROMPTS)
    required = {name: {a.name for a in prompts[name].arguments or [] if a.required} for name in PROMPTS}
    assert required["review_task"] == {"task_id"} and required["plan_to_tasks"] == {"plan"}
    assert required["dispatcher"] == set()


async def test_static_prompts(client):
    dispatcher = await prompt_text(client, "dispatcher")
    assert "dispatcher" in dispatcher and "create_task" in dispatcher and "self-contained" in dispatcher.lower()
    assert "`web`" in await prompt_text(client, "notes_mode", project_id="web")
    assert "the active project" in await prompt_text(client, "notes_mode")
    plan = await prompt_text(client, "plan_to_tasks", plan="1. build the API\n2. build the UI", project_id="web")
    assert "1. build the API\n2. build the UI" in plan and "`web`" in plan and "depends_on" in plan
    summary = await prompt_text(client, "summarize_conversation", transcript="user: ship swift-falcon today")
    assert "user: ship swift-falcon today" in summary and "task ids" in summary


async def test_review_task_prompt(client, seeded):
    text = await prompt_text(client, "review_task", task_id=seeded["review"])
    assert f"Review task {seeded['review']}" in text
    assert '"title": "review"' in text and '"description": "do review"' in text
    assert "approve_task" in text and "get_task_diff" in text


async def test_project_overview_prompt(client, seeded):
    text = await prompt_text(client, "project_overview", project_id="web")
    assert "Project overview: web" in text and '"name": "Web"' in text
    assert seeded["a"] in text and seeded["b"] in text
    assert seeded["done"] not in text  # open tasks only


async def test_agent_context_prompt(client, agent_clis):
    await ok(client, "create_agent", name="Builder", agent_type="codex", capabilities=["rust"])
    text = await prompt_text(client, "agent_context", agent_id="builder")
    assert "# Agent builder" in text and '"rust"' in text and "`codex` CLI" in text


@pytest.mark.parametrize(("name", "args"), [
    ("review_task", {"task_id": "nope"}),
    ("project_overview", {"project_id": "nope"}),
    ("agent_context", {"agent_id": "nope"}),
])
async def test_prompts_with_unknown_ids_say_so(client, name, args):
    with pytest.raises(MCPError) as raised:
        await client.get_prompt(name, args)
    assert "'nope' not found" in raised.value.error.message


async def test_prompt_missing_its_argument_is_an_error(client):
    with pytest.raises(MCPError):
        await client.get_prompt("review_task", {})
