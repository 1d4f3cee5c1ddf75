"""The board as an MCP App (SEP-1865): what the server advertises, and the app driven in a real Chromium.

The host page (tests/mcp_app_host/host.html) uses ext-apps' own host side (AppBridge) and forwards the
app's tool calls to the official Python MCP client; the app's HTML is fetched through that client.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from agentqueue.server.app import build_server
from agentqueue.apps import BOARD_URI, TASK_URI
from agentqueue.apps.page import module_as_global
from agentqueue.services import Services

from .browser import SCREENSHOTS, chromium, needs_chromium
from .conftest import ok, person_says_yes
from .git_fixtures import git_env  # noqa: F401  (fixture)
from .mock_anthropic import MockAnthropic
from .processes import wait_for
from .test_engine_claude import CLAUDE, engine_for, mock_api  # noqa: F401  (mock_api: fixture)
from .test_engine_lifecycle import AGENT_COMMAND, make_engine, run_until_final

pytestmark = [pytest.mark.both_eras, pytest.mark.anyio]

APP_MIME = "text/html;profile=mcp-app"
HOST = Path(__file__).parent / "mcp_app_host"
# An element that loads something: any src/href on it would be a fetch from inside the sandbox.
FETCHING = re.compile(r"<(?:script|link|img|iframe|source|embed|object)\b[^>]*\b(?:src|href|data)\s*=", re.I)


# -- what the server advertises ----------------------------------------------------------------------
async def test_the_three_tools_point_at_their_pages(client: Client) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    for name, uri in (("get_status", BOARD_URI), ("list_tasks", BOARD_URI), ("get_task", TASK_URI)):
        assert tools[name].meta["ui"]["resourceUri"] == uri, name
        assert tools[name].meta["ui/resourceUri"] == uri, name  # the key older hosts read
    assert tools["create_task"].meta is None  # only the viewing tools open the app


async def test_the_server_declares_the_extension_to_2026_clients(server) -> None:
    async with Client(server, mode="auto") as modern:
        # MCP Apps, beside MCP Tasks (issue 24: server/mcp_tasks.py), each with no settings.
        assert modern.server_capabilities.extensions == {"io.modelcontextprotocol/ui": {},
                                                         "io.modelcontextprotocol/tasks": {}}


async def test_the_pages_are_listed_and_self_contained(client: Client) -> None:
    listed = {str(r.uri): r for r in (await client.list_resources()).resources}
    for uri in (BOARD_URI, TASK_URI):
        assert listed[uri].mime_type == APP_MIME
        content = (await client.read_resource(uri)).contents[0]
        assert content.mime_type == APP_MIME and str(content.uri) == uri
        html = content.text
        assert html.startswith("<!doctype html>") and "globalThis['McpExtApps']={" in html
        assert FETCHING.findall(html) == [], "the page would load something from outside"
        assert "/*__EXT_APPS__*/" not in html and "__VIEW__" not in html


async def test_a_host_without_apps_gets_the_plain_results(client: Client, services: Services) -> None:
    services.projects.create("Demo")
    services.tasks.create("demo", "Plain", "nothing special")
    listed = await ok(client, "list_tasks", project_id="demo")
    assert [t["title"] for t in listed["tasks"]] == ["Plain"]
    result = await client.call_tool("get_status", {})
    assert result.meta is None or "ui" not in result.meta  # the link to the page lives on the tool only
    assert result.structured_content["projects"] == 1 and result.content[0].type == "text"


def test_rewriting_the_bundle_export_list() -> None:
    assert module_as_global("var a=1;function b(){}export{a as A,b};", "X") == \
        "var a=1;function b(){}globalThis['X']={A:a,b:b};\n"
    with pytest.raises(ValueError, match="no trailing export list"):
        module_as_global("var a=1;", "X")


# -- the app in a real browser ------------------------------------------------------------------------
@pytest.fixture
def queue(services: Services, git_env: Path) -> dict[str, str]:  # noqa: F811
    """A project whose engine ran two tasks: one now AWAITING_APPROVAL, one BLOCKED after a failed run."""
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("worker", "command", command=AGENT_COMMAND)
    review = services.tasks.create("demo", "Review the greeting", "WRITE hello.txt hello", repo_id="app",
                                   requires_approval=True)
    broken = services.tasks.create("demo", "Fix the flaky build", "SAY trying\nEXIT 3", repo_id="app", max_retries=0)
    services.tasks.create("demo", "Later work", "SAY later", depends_on=[broken.id])
    return {"review": review.id, "broken": broken.id}


@pytest.fixture
async def ran(services: Services, queue: dict[str, str]) -> dict[str, str]:
    await run_until_final(services, make_engine(services), *queue.values())
    assert services.tasks.get(queue["review"]).status == "AWAITING_APPROVAL"
    assert services.tasks.get(queue["broken"]).status == "BLOCKED"
    return queue


@pytest.fixture
async def legacy_client(services: Services) -> AsyncIterator[Client]:
    """A 2025-era client like the desktop hosts; the person says yes to what the policy asks."""
    async with Client(build_server(services), mode="legacy", elicitation_callback=person_says_yes) as c:
        yield c


def _wire(result: Any) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def _host_page() -> str:
    bridge = module_as_global((HOST / "ext-apps-app-bridge.js").read_text(encoding="utf-8"), "McpAppBridge")
    return (HOST / "host.html").read_text(encoding="utf-8").replace("/*__APP_BRIDGE__*/", bridge, 1)


class Host:
    """The host page in Chromium, with the app opened in its iframe; records the app's tool calls and fetches."""

    def __init__(self, page: Any) -> None:
        self.page, self.app = page, page.frame_locator("#app")
        self.calls: list[str] = []
        self.fetched: list[str] = []

    async def screenshot(self, name: str) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        await self.page.screenshot(path=str(SCREENSHOTS / name), full_page=True)


@asynccontextmanager
async def app_in_host(client: Client, uri: str, tool: str, arguments: dict[str, Any], prompt: str,
                      width: int = 1180) -> AsyncIterator[Host]:
    """What a host does when the model calls `tool`: read the tool's page, render it, hand it the result."""
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert tools[tool].meta["ui"]["resourceUri"] == uri
    html = (await client.read_resource(uri)).contents[0].text
    opened_with = _wire(await client.call_tool(tool, arguments))
    async with chromium() as browser:
        host = Host(await browser.new_page(viewport={"width": width, "height": 760}))

        async def call_tool(name: str, args: dict[str, Any]) -> dict[str, Any]:
            host.calls.append(name)
            return _wire(await client.call_tool(name, args))

        host.page.on("request", lambda request: host.fetched.append(request.url)
                     if not request.url.startswith(("about:", "data:")) else None)
        await host.page.expose_function("pyCallTool", call_tool)
        await host.page.set_content(_host_page())
        await host.page.wait_for_function("window.hostReady === true")
        await host.page.evaluate("([html, result, prompt]) => openApp(html, result, prompt)",
                                 [html, opened_with, prompt])
        yield host
    assert host.fetched == [], f"the app fetched {host.fetched}"


@needs_chromium()
async def test_the_board_renders_the_queue_and_approve_goes_through_the_host(
        ran: dict[str, str], services: Services, legacy_client: Client) -> None:
    from playwright.async_api import expect

    async with app_in_host(legacy_client, BOARD_URI, "list_tasks", {"project_id": "demo"},
                           "Show me the queue of demo.") as host:
        app = host.app
        for title in ("Review the greeting", "Fix the flaky build", "Later work"):
            await expect(app.get_by_text(title)).to_be_visible()
        review = app.locator(f'.column[data-status="AWAITING_APPROVAL"] .card[data-task-id="{ran["review"]}"]')
        await expect(review.get_by_role("button", name="Approve")).to_be_visible()
        await expect(app.locator(f'.column[data-status="BLOCKED"] .card[data-task-id="{ran["broken"]}"]')
                     .get_by_role("button", name="Restart")).to_be_visible()
        await expect(app.locator("#summary")).to_contain_text("1 AWAITING_APPROVAL")
        await host.screenshot("mcp-app-board.png")

        await review.get_by_role("button", name="Approve").click()
        await expect(app.locator("#message")).to_have_text(f"Approved {ran['review']}")
        await expect(app.locator(f'.column[data-status="COMPLETED"] .card[data-task-id="{ran["review"]}"]')) \
            .to_be_visible()

    assert "approve_task" in host.calls and {"get_status", "list_tasks", "list_requests"} <= set(host.calls)
    assert services.tasks.get(ran["review"]).status == "COMPLETED"
    assert (await ok(legacy_client, "get_task", task_id=ran["review"]))["status"] == "COMPLETED"


@needs_chromium()
async def test_the_task_view_shows_the_failure_and_restarts_the_task(
        ran: dict[str, str], services: Services, legacy_client: Client) -> None:
    from playwright.async_api import expect

    async with app_in_host(legacy_client, TASK_URI, "get_task", {"task_id": ran["broken"]},
                           "Why did that task fail?", width=900) as host:
        app = host.app
        await expect(app.locator("#task h2").first).to_contain_text("Fix the flaky build")
        await expect(app.locator("#task .badge")).to_have_text("BLOCKED")
        await expect(app.locator("#task pre").first).to_have_text("SAY trying\nEXIT 3")
        await expect(app.get_by_text("Result (attempt 1)")).to_be_visible()
        await expect(app.locator("#task pre.result")).to_contain_text("error: crashed: command exited with status 3")
        await expect(app.locator("#task")).not_to_contain_text("null")
        await expect(app.locator("#board")).to_be_hidden()
        await host.screenshot("mcp-app-task.png")

        await app.get_by_role("button", name="Restart").click()
        await expect(app.locator("#message")).to_have_text(f"Restarted {ran['broken']}")
        await expect(app.locator("#task .badge")).to_have_text("READY")

    assert sorted(host.calls) == sorted(["get_task", "get_task_result", "restart_task", "get_task", "get_task_result"])
    assert services.tasks.get(ran["broken"]).status == "READY"


@needs_chromium()
@pytest.mark.integration
@pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")
async def test_a_permission_request_is_answered_in_the_app_and_the_run_goes_on(
        services: Services, mock_api: MockAnthropic) -> None:  # noqa: F811
    """The real `claude` CLI asks (policy: ask), the person clicks Allow in the board, the same run finishes."""
    from playwright.async_api import expect

    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("claude", "claude-code")
    task = services.tasks.create("demo", "Ask first", "SCENARIO:run_cmd CMD[touch ASKED_MARKER]", max_retries=0)
    engine = engine_for(services)
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        try:
            await wait_for(lambda: services.tasks.get(task.id).status == "WAITING_INPUT", 60, "the agent to ask")
            async with Client(build_server(services), mode="legacy", elicitation_callback=person_says_yes) as client, \
                    app_in_host(client, BOARD_URI, "get_status", {}, "Anything waiting for me?") as host:
                request = host.app.locator(".request")
                await expect(request).to_contain_text("Bash(touch ASKED_MARKER)")
                waiting = host.app.locator(f'.column[data-status="WAITING_INPUT"] .card[data-task-id="{task.id}"]')
                await expect(waiting).to_be_visible()
                await request.get_by_role("button", name="Allow").click()
                await expect(host.app.locator("#message")).to_contain_text("allow: req-")
                await wait_for(lambda: services.tasks.get(task.id).status in ("COMPLETED", "BLOCKED"), 60,
                               "the run to end")
            assert "answer_request" in host.calls
        finally:
            with anyio.CancelScope(shield=True):
                await engine.shutdown(grace=10)
            tg.cancel_scope.cancel()
    assert services.tasks.get(task.id).status == "COMPLETED"
    assert [r.status for r in services.requests.list(None)] == ["allowed"]
    assert services.tasks.results(task.id)[0] == 1  # the same run went on: no retry
