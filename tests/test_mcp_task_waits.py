"""MCP Tasks for the calls that wait (issue 24, SEP-2663): wait_for_task and create_task(wait=true).

The person's client is the official MCP client with the Tasks extension's client side (tests/mcp_tasks_client.py:
the client's own extension API, and `send_request` for tasks/get, tasks/update and tasks/cancel). The end-to-end
test runs the REAL `claude` CLI on a loopback model mock, whose command the policy asks a person about.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from mcp import Client, MCPError
from mcp.client.extension import advertise

from agentqueue.server.app import build_server
from agentqueue.server.mcp_tasks import EXTENSION_ID
from agentqueue.services import Services

from .conftest import EVERY_TOOL, ok
from .git_fixtures import on_main
from .mcp_tasks_client import CreatedTask, TasksClient, cancel_task, get_task, update_task
from .mock_anthropic import MockAnthropic
from .processes import wait_for
from .test_engine_claude import CLAUDE, engine_for, mock_api  # noqa: F401  (mock_api: fixture)
from .slowdown import scaled

pytestmark = [pytest.mark.anyio]


@pytest.fixture
def demo(services: Services) -> Services:
    services.projects.create("Demo")
    return services


async def allow(_request: dict[str, Any]) -> dict[str, Any]:
    """The person at the client: allows what the agent asks."""
    return {"action": "accept", "content": {"decision": "allow"}}


def asking(services: Services, task_id: str, action: str = "Bash(touch ASKED)") -> str:
    """What the engine does when the policy asks about an agent's call: the task waits on a pending request."""
    services.tasks.set_status(task_id, "IN_PROGRESS")
    return services.requests.open(task_id, None, "Bash", {"command": action}, action, "make a file", None, 600).id


# -- clients that cannot wait get the task's state at once -----------------------------------------------------------

@pytest.mark.parametrize("mode", ["legacy", "2026 without the extension"])
async def test_an_older_connection_gets_the_id_and_state_at_once(demo: Services, mode: str) -> None:
    task = demo.tasks.create("demo", "Later", "do it later")
    async with Client(build_server(demo, EVERY_TOOL), mode="legacy" if mode == "legacy" else "auto") as client:
        with anyio.fail_after(scaled(10)):  # nothing runs the task: a call that waited would never return
            waited = await ok(client, "wait_for_task", task_id=task.id)
            created = await ok(client, "create_task", title="More", description="more", project_id="demo", wait=True)
    assert waited["id"] == task.id and waited["status"] == "READY"
    assert "Not waited" in waited["message"] and "get_task" in waited["message"]
    assert created["status"] == "READY" and demo.tasks.get(created["id"]).title == "More"


async def test_a_run_of_the_engine_never_waits(demo: Services) -> None:
    """An agent's connection declaring Tasks still gets its follow-up at once: a wait would hold its run."""
    parent = demo.tasks.create("demo", "Parent", "p")
    options = {"actor": "agent:claude", "toolsets": ["agent"], "task_id": parent.id}
    tasks = TasksClient()
    async with Client(build_server(demo, options), extensions=[tasks]) as client:
        created = await ok(client, "create_task", title="Child", description="c", wait=True)
    assert created["parent_task_id"] == parent.id and tasks.created == []  # the task itself, not a handle


# -- bad input: a clear error, no task ---------------------------------------------------------------------------------

async def test_bad_input_is_refused_before_any_task_exists(demo: Services) -> None:
    demo.projects.create("Other")
    task = demo.tasks.create("demo", "Mine", "m")
    tasks = TasksClient()
    async with Client(build_server(demo, EVERY_TOOL), extensions=[tasks]) as client:
        unknown = await client.call_tool("wait_for_task", {"task_id": "no-such-task"})
        assert unknown.is_error
        assert "Task 'no-such-task' not found. list_tasks shows task ids." in unknown.content[0].text
        elsewhere = await client.call_tool("wait_for_task", {"task_id": task.id, "project_id": "other"})
        assert elsewhere.is_error
        assert f"Task '{task.id}' belongs to project 'demo', not 'other'" in elsewhere.content[0].text
        assert "project_id='demo'" in elsewhere.content[0].text
        nowhere = await client.call_tool("wait_for_task", {"task_id": task.id, "project_id": "nope"})
        assert nowhere.is_error and "Project 'nope' not found" in nowhere.content[0].text
        assert tasks.created == []  # a refused call is never a task
        for send in (lambda: get_task(client.session, "forged-id"), lambda: cancel_task(client.session, "forged-id"),
                     lambda: update_task(client.session, "forged-id", {})):
            with pytest.raises(MCPError) as refused:
                await send()
            assert refused.value.error.code == -32602
            assert "Task 'forged-id' not found" in refused.value.error.message
            assert "wait_for_task" in refused.value.error.message
    assert demo.tasks.get(task.id).status == "READY"


async def test_tasks_methods_need_the_extension_and_the_2026_protocol(demo: Services) -> None:
    async with Client(build_server(demo, EVERY_TOOL)) as client:  # 2026, extension not declared
        with pytest.raises(MCPError) as refused:
            await get_task(client.session, "anything")
        assert refused.value.error.code == -32021 and EXTENSION_ID in refused.value.error.message
    async with Client(build_server(demo, EVERY_TOOL), mode="legacy", extensions=[advertise(EXTENSION_ID)]) as client:
        with pytest.raises(MCPError) as refused:
            await get_task(client.session, "anything")
        assert refused.value.error.code == -32601  # not a method of the handshake protocols


# -- the task's life as an MCP task ------------------------------------------------------------------------------------

async def test_a_question_is_answered_through_the_task_and_the_wait_ends_with_the_task(demo: Services) -> None:
    """The status mapping without an agent: the service calls the engine makes, driven by hand."""
    task = demo.tasks.create("demo", "Ask", "a")
    answered: list[str] = []

    async def person(request: dict[str, Any]) -> dict[str, Any]:
        answered.append(request["params"]["message"])
        demo.tasks.set_status(task.id, "COMPLETED")  # ...and later the run ends, well
        return {"action": "accept", "content": {"decision": "allow"}}

    async def when_created(created: CreatedTask, _session: Any) -> None:
        asking(demo, task.id)

    tasks = TasksClient(answer=person, on_created=when_created)
    async with Client(build_server(demo, EVERY_TOOL), extensions=[tasks]) as client:
        result = await client.call_tool("wait_for_task", {"task_id": task.id})
    assert tasks.statuses == ["working", "input_required", "completed"]
    assert not result.is_error and result.structured_content["status"] == "COMPLETED"
    assert result.structured_content["message"] == f"Task {task.id} completed."
    (key, request), = tasks.asked
    assert request["method"] == "elicitation/create" and request["params"]["mode"] == "form"
    assert request["params"]["requestedSchema"]["properties"]["decision"]["enum"] == ["allow", "deny"]
    assert "asks to Bash(touch ASKED)" in answered[0] and f"Task {task.id}" in answered[0]
    answer = demo.requests.get(key)
    assert answer.status == "allowed" and answer.decided_by == "person (MCP task)"
    rows = demo.audit.query(limit=10, task_id=task.id)
    assert any(r.action.startswith("tool:answer_request") and r.outcome == "ok" for r in rows), rows


async def test_a_deny_carries_the_persons_note_and_a_bad_or_second_answer_changes_nothing(demo: Services) -> None:
    task = demo.tasks.create("demo", "Ask", "a")
    request_id = asking(demo, task.id)
    tasks = TasksClient()
    async with Client(build_server(demo, EVERY_TOOL), extensions=[tasks]) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "wait_for_task", {"task_id": task.id})
            await wait_for(lambda: tasks.last is not None and tasks.last.status == "input_required", 30, "the question")
            handle = tasks.created[0].task_id
            with pytest.raises(MCPError) as bad:
                await update_task(client.session, handle, {request_id: {"action": "accept",
                                                                        "content": {"decision": "maybe"}}})
            assert "decision must be allow or deny" in bad.value.error.message
            assert demo.requests.get(request_id).status == "pending"  # a bad answer changes nothing
            await update_task(client.session, handle, {request_id: {"action": "accept", "content": {
                "decision": "deny", "message": "not in this repo"}}})
            await update_task(client.session, handle, {request_id: {"action": "accept", "content": {
                "decision": "allow"}}})  # already answered: ignored, the first answer stands
            await wait_for(lambda: tasks.statuses[-1] == "working", 30, "the wait to go on")
            tg.cancel_scope.cancel()
    denied = demo.requests.get(request_id)
    assert denied.status == "denied" and denied.message == "not in this repo"
    assert demo.tasks.get(task.id).status == "IN_PROGRESS"


async def test_an_agents_escape_sequences_reach_the_persons_client_as_text(demo: Services) -> None:
    """The question is an agent's words: an OSC 52 clipboard write, a screen clear and a bidi override in its action
    and description reach the person's client (a terminal, for Claude Code) escaped, never as bytes that act."""
    task = demo.tasks.create("demo", "Ask", "a")
    demo.tasks.set_status(task.id, "IN_PROGRESS")
    hostile = "Bash(echo \x1b]52;c;cm0gLXJmIH4=\x07 \x1b[2J\u202etxt.exe)"
    demo.requests.open(task.id, None, "Bash", {"command": hostile}, hostile, "why \x1b[31mred\x9b", None, 600)
    tasks = TasksClient()
    async with Client(build_server(demo, EVERY_TOOL), extensions=[tasks]) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "wait_for_task", {"task_id": task.id})
            await wait_for(lambda: tasks.last is not None and tasks.last.status == "input_required", 30, "the question")
            tg.cancel_scope.cancel()
    shown = [tasks.last.status_message, *(r["params"]["message"] for r in tasks.last.input_requests.values())]
    for text in shown:
        assert not any(ch in text for ch in "\x1b\x07\x9b\u202e"), text
    assert "\\x1b]52;c;cm0gLXJmIH4=\\x07" in shown[1] and "\\u202etxt.exe" in shown[1]
    assert "why \\x1b[31mred\\x9b" in shown[1]


async def test_a_read_only_connection_sees_the_wait_but_cannot_answer(demo: Services) -> None:
    task = demo.tasks.create("demo", "Ask", "a")
    request_id = asking(demo, task.id)
    tasks = TasksClient()
    async with Client(build_server(demo, {"read_only": True}), extensions=[tasks]) as client:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "wait_for_task", {"task_id": task.id})
            await wait_for(lambda: tasks.last is not None, 30, "the first poll")
            # No form it could not send back: working, and the message names the request a person answers elsewhere.
            assert tasks.last.status == "working" and request_id in tasks.last.status_message
            with pytest.raises(MCPError) as refused:
                await update_task(client.session, tasks.created[0].task_id,
                                  {request_id: {"action": "accept", "content": {"decision": "allow"}}})
            assert "may not answer permission requests" in refused.value.error.message
            tg.cancel_scope.cancel()
    assert demo.requests.get(request_id).status == "pending"


async def test_cancelling_the_wait_leaves_the_work_alone(demo: Services) -> None:
    task = demo.tasks.create("demo", "Long", "l")

    async def cancel_at_once(created: CreatedTask, session: Any) -> None:
        await cancel_task(session, created.task_id)

    tasks = TasksClient(on_created=cancel_at_once)
    async with Client(build_server(demo, EVERY_TOOL), extensions=[tasks]) as client:
        result = await client.call_tool("create_task", {"title": "Long too", "description": "l", "project_id": "demo",
                                                        "wait": True})
        assert tasks.statuses == ["working", "cancelled"] and result.is_error
        assert "goes on (READY)" in tasks.last.status_message and "stop_task" in tasks.last.status_message
        created = demo.tasks.list("demo", None, False, 50, 0)[0]
        assert {t.title: t.status for t in created} == {"Long": "READY", "Long too": "READY"}
        # Cancelled is final: the task ending later does not make the wait completed.
        demo.tasks.set_status(next(t.id for t in created if t.title == "Long too"), "COMPLETED")
        assert (await get_task(client.session, tasks.created[0].task_id)).status == "cancelled"
        # A wait that ended stays ended: cancelling it then changes nothing.
        demo.tasks.set_status(task.id, "COMPLETED")
        done = TasksClient()
        async with Client(build_server(demo, EVERY_TOOL), extensions=[done]) as other:
            await other.call_tool("wait_for_task", {"task_id": task.id})
            await cancel_task(other.session, done.created[0].task_id)
            assert (await get_task(other.session, done.created[0].task_id)).status == "completed"


async def test_create_task_wait_ends_with_create_tasks_own_result(demo: Services) -> None:
    async def lands(created: CreatedTask, _session: Any) -> None:
        for task in demo.tasks.list("demo", None, False, 50, 0)[0]:
            demo.tasks.set_status(task.id, "AWAITING_APPROVAL")

    tasks = TasksClient(on_created=lands)
    async with Client(build_server(demo, EVERY_TOOL), extensions=[tasks]) as client:
        result = await client.call_tool("create_task", {"title": "T", "description": "d", "project_id": "demo",
                                                        "wait": True})
    assert tasks.statuses == ["working", "completed"]
    assert "awaits approval: approve_task" in tasks.last.status_message
    # The tool's own output schema (the client validated it): the task, now awaiting approval.
    assert result.structured_content["status"] == "AWAITING_APPROVAL" and "message" not in result.structured_content


async def test_a_task_deleted_while_waited_on_fails_the_wait(demo: Services) -> None:
    task = demo.tasks.create("demo", "Gone", "g")

    async def delete(created: CreatedTask, _session: Any) -> None:
        demo.tasks.delete(task.id)

    tasks = TasksClient(on_created=delete)
    async with Client(build_server(demo, EVERY_TOOL), extensions=[tasks]) as client:
        await client.call_tool("wait_for_task", {"task_id": task.id})
    assert tasks.statuses == ["working", "failed"]
    assert tasks.last.error["code"] == -32602 and "was deleted" in tasks.last.error["message"]


# -- end to end: a real agent asks, the person answers through the task -----------------------------------------------

@asynccontextmanager
async def engine_running(services: Services) -> AsyncIterator[None]:
    engine = engine_for(services)
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        try:
            yield
        finally:
            with anyio.CancelScope(shield=True):
                await engine.shutdown(grace=10)
            tg.cancel_scope.cancel()


@pytest.mark.integration
@pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")
async def test_a_real_agent_asks_and_the_person_answers_through_the_mcp_task(
        demo: Services, mock_api: MockAnthropic) -> None:  # noqa: F811
    demo.repos.add("demo", "init", name="app")
    demo.agents.create("claude", "claude-code")
    tasks = TasksClient(answer=allow)
    async with engine_running(demo):
        async with Client(build_server(demo, EVERY_TOOL), extensions=[tasks]) as client:
            with anyio.fail_after(scaled(150)):
                result = await client.call_tool("create_task", {
                    "title": "Ask", "description": "SCENARIO:run_cmd CMD[touch TASKS_MARKER]", "project_id": "demo",
                    "max_retries": 0, "wait": True})
    assert tasks.statuses == ["working", "input_required", "working", "completed"], tasks.statuses
    assert not result.is_error and result.structured_content["status"] == "COMPLETED"
    task_id = result.structured_content["id"]
    (key, request), = tasks.asked
    assert "Bash(touch TASKS_MARKER)" in request["params"]["message"]
    assert demo.requests.get(key).status == "allowed" and demo.requests.get(key).task_id == task_id
    assert on_main(demo, "TASKS_MARKER") == ""  # the command the person allowed ran, and its work landed
    assert demo.tasks.get(task_id).status == "COMPLETED" and demo.tasks.results(task_id)[0] == 1  # one run, not a retry
