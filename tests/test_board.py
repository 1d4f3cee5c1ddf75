"""The board in a real headless Chromium against a real daemon running real `command` agents in a real repo.

A person's path: `agentqueue board` prints a one-time login link, the browser exchanges it for a
session cookie, and every page after that is live (Server-Sent Events), with no reload.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest

from agentqueue import paths

from .browser import SCREENSHOTS, chromium, needs_chromium
from .cli_helpers import AGENT_COMMAND, signals, LiveDaemon, cli_env, cli_json, run_cli, start_daemon, stop_daemon, wait_until
from .git_fixtures import git, make_repo
from .mock_anthropic import MockAnthropic
from .test_engine_claude import CLAUDE, mock_api  # noqa: F401  (mock_api: fixture)

pytestmark = [pytest.mark.integration]


@pytest.fixture
def board(tmp_path: Path) -> Iterator[LiveDaemon]:
    env = cli_env(tmp_path / "aq", tmp_path / "user")
    running = start_daemon(env, "--port", str(free_port()))  # fixed: a restarted daemon binds it again
    repo = make_repo(tmp_path / "repo")
    running.call("create_project", name="Demo")
    running.call("add_repo", source="link", project_id="demo", path=str(repo), name="app")
    running.call("create_agent", name="worker", agent_type="command", command=AGENT_COMMAND)
    running.repo = repo  # type: ignore[attr-defined]
    running.base = json.loads(paths.daemon_info_path(running.home).read_text())["http_url"].removesuffix("/mcp")  # type: ignore[attr-defined]
    yield running
    stop_daemon(running)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def login_link(live: LiveDaemon) -> str:
    """What the person runs: `agentqueue board` (here without opening a browser)."""
    link = cli_json(live.env, "board", "--no-open")["login_url"]
    assert re.fullmatch(rf"{re.escape(live.base)}/login\?code=[\w-]{{20,}}", link), link  # type: ignore[attr-defined]
    return link


async def live_page(browser: object, live: LiveDaemon, path: str, width: int = 1400, height: int = 900) -> object:
    """A logged-in page at `path` with its live feed open; `window.loadedOnce` tells a reload apart."""
    page = await browser.new_page(viewport={"width": width, "height": height})  # type: ignore[attr-defined]
    await page.goto(login_link(live))
    await page.goto(f"{live.base}{path}")  # type: ignore[attr-defined]
    await page.evaluate("window.loadedOnce = true")
    await page.wait_for_function("window.agentqueueFeed && window.agentqueueFeed.readyState === 1")
    return page


# -- access ------------------------------------------------------------------------------------------
def test_pages_and_actions_need_the_session_and_the_board_refuses_foreign_origins(board: LiveDaemon) -> None:
    base = board.base  # type: ignore[attr-defined]
    with httpx.Client(base_url=base, follow_redirects=False) as anonymous:
        for path in ("/", "/projects/demo", "/agents", "/usage", "/events", "/static/board.js"):
            refused = anonymous.get(path)
            assert refused.status_code == 401 and "agentqueue board" in refused.text, path
        assert anonymous.post("/projects/demo/tasks", data={"title": "x", "description": "y"}).status_code == 401
        # A one-time link: the first use sets an HttpOnly, SameSite=Strict cookie; the second is refused.
        link = login_link(board).removeprefix(base)
        first = anonymous.get(link)
        assert first.status_code == 303 and first.headers["location"] == "/"
        cookie = first.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        assert anonymous.get(link).status_code == 401
        assert anonymous.get("/login?code=made-up").status_code == 401
    with httpx.Client(base_url=base, follow_redirects=False) as person:
        assert person.get(login_link(board).removeprefix(base)).status_code == 303
        page = person.get("/projects/demo")
        assert page.status_code == 200 and "Demo" in page.text
        csrf = re.search(r'data-csrf="(\w+)"', page.text).group(1)
        form = {"title": "From the form", "description": "SAY hi", "csrf": csrf}
        # The session alone cannot act: no CSRF token, a wrong one, or a foreign Origin are refused.
        assert person.post("/projects/demo/tasks", data={**form, "csrf": ""}).status_code == 403
        assert person.post("/projects/demo/tasks", data={**form, "csrf": "0" * 64}).status_code == 403
        foreign = person.post("/projects/demo/tasks", data=form, headers={"Origin": "http://evil.example"})
        assert foreign.status_code == 403 and "foreign Origin" in foreign.text
        rebound = person.get("/", headers={"Host": "evil.example"})
        assert rebound.status_code == 421
        assert cli_json(board.env, "tasks")["tasks"] == []  # nothing was created by the refused posts
        made = person.post("/projects/demo/tasks", data=form, headers={"Origin": base, "HX-Request": "true"})
        assert made.status_code == 200 and "queued" in made.text
        assert [t["title"] for t in cli_json(board.env, "tasks", "--all")["tasks"]] == ["From the form"]
        # Bad input gets the service's own message, and changes nothing.
        bad = person.post("/projects/demo/tasks", data={**form, "depends_on": "no-such-task"},
                          headers={"HX-Request": "true"})
        assert bad.status_code == 200 and "no-such-task" in bad.text and 'class="flash error"' in bad.text
        assert len(cli_json(board.env, "tasks", "--all")["tasks"]) == 1
    # The bearer token (what `agentqueue board` itself holds) also opens the pages.
    token = paths.token_path(board.home).read_text().strip()
    assert httpx.get(f"{base}/agents", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    audit = board.call("get_audit_log", action="board:create_task")
    assert [e["outcome"] for e in audit["entries"]][:2] == ["refused", "ok"]


# -- live, in a real browser ------------------------------------------------------------------------------
@needs_chromium()
@pytest.mark.anyio
async def test_a_task_from_the_form_moves_across_the_board_and_its_log_streams_with_no_reload(
        board: LiveDaemon, tmp_path: Path) -> None:
    gate = signals(tmp_path) / "gate"
    board.call("orchestrator_control", action="pause")  # so the new card is seen READY first
    async with chromium() as browser:
        context = await browser.new_context(viewport={"width": 1500, "height": 900})
        asked: list[str] = []
        context.on("request", lambda request: asked.append(request.url))
        page = await context.new_page()
        await page.goto(login_link(board))
        assert await page.title() == "Projects · AgentQueue"
        await page.click("text=Demo")
        await page.evaluate("window.loadedOnce = true")  # gone if the page ever reloads
        await page.wait_for_function("window.agentqueueFeed && window.agentqueueFeed.readyState === 1")
        await page.click("#create-task summary")
        await page.fill("input[name=title]", "Say and write")
        await page.fill("textarea[name=description]", f"SAY first line\nWAITFOR {gate}\nSAY second line\nWRITE said.txt done")
        await page.click("text=Queue task")
        await page.wait_for_selector("#flash .ok")
        assert await page.input_value("input[name=title]") == ""  # the form is cleared for the next task
        card = page.locator("#col-Ready .card", has_text="Say and write")
        await card.wait_for()
        task_id = await card.get_attribute("data-id")

        board.call("orchestrator_control", action="resume")
        await page.locator(f"#col-Running #card-{task_id}").wait_for(timeout=30_000)
        task_page = await context.new_page()  # the same session (a new context would have no cookie)
        await task_page.goto(f"{board.base}/tasks/{task_id}")  # type: ignore[attr-defined]
        await task_page.evaluate("window.loadedOnce = true")
        await task_page.wait_for_function("document.getElementById('log').textContent.includes('first line')",
                                          timeout=30_000)
        gate.write_text("go")
        await task_page.wait_for_function("document.getElementById('log').textContent.includes('second line')",
                                          timeout=30_000)
        await page.locator(f"#col-Done #card-{task_id}").wait_for(timeout=30_000)
        await task_page.wait_for_function("document.getElementById('task-status').textContent === 'COMPLETED'",
                                          timeout=30_000)
        assert await page.evaluate("window.loadedOnce") and await task_page.evaluate("window.loadedOnce")
        assert asked and all(url.startswith(board.base + "/") for url in asked), asked  # nothing from outside
        assert await page.locator(f"#col-Ready #card-{task_id}").count() == 0
        assert git(board.repo, "show", "main:said.txt") == "done"  # type: ignore[attr-defined]
        await task_page.locator("#diff .files code", has_text="said.txt").wait_for()
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(SCREENSHOTS / "board-kanban.png"), full_page=True)
        await task_page.screenshot(path=str(SCREENSHOTS / "board-task.png"), full_page=True)


@needs_chromium()
@pytest.mark.anyio
async def test_dependency_links_filters_and_the_other_views(board: LiveDaemon) -> None:
    board.call("orchestrator_control", action="pause")
    first = board.call("create_task", project_id="demo", title="Schema", description="SAY a")
    # A title with a space: task ids (word-word) never hold one, so the filter can only match the title.
    second = board.call("create_task", project_id="demo", title="API v2", description="SAY b", depends_on=[first["id"]])
    board.call("create_task", project_id="demo", title="Docs", description="SAY c", depends_on=[second["id"]])
    async with chromium() as browser:
        page = await browser.new_page(viewport={"width": 1500, "height": 800})
        await page.goto(login_link(board))
        await page.goto(f"{board.base}/projects/demo")  # type: ignore[attr-defined]
        links = page.locator("#links path")
        assert await links.count() == 2
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(SCREENSHOTS / "board-dependencies.png"), full_page=True)
        assert await links.first.get_attribute("data-from") == first["id"]
        await page.fill("input[name=q]", "API v2")
        await page.click("text=Filter")
        await page.wait_for_url("**q=API**")
        assert await page.locator(".card").count() == 1
        await page.goto(f"{board.base}/agents")  # type: ignore[attr-defined]
        assert await page.locator("#agent-worker").count() == 1 or "worker" in await page.content()
        await page.goto(f"{board.base}/")  # type: ignore[attr-defined]
        await page.click("text=Resume the orchestrator")
        await page.wait_for_selector("#flash .ok")
        assert board.call("orchestrator_control", action="status")["state"] == "running"
        wait_until(lambda: cli_json(board.env, "tasks", "--all")["tasks"]
                   and all(t["status"] == "COMPLETED" for t in cli_json(board.env, "tasks", "--all")["tasks"]),
                   60, "the three tasks to complete")
        await page.goto(f"{board.base}/usage")  # type: ignore[attr-defined]
        await page.wait_for_selector("#usage-chart .uplot, #usage-chart:has-text('No usage')")
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(SCREENSHOTS / "board-usage.png"), full_page=True)
        await page.goto(f"{board.base}/")  # type: ignore[attr-defined]
        await page.screenshot(path=str(SCREENSHOTS / "board-projects.png"), full_page=True)
        await page.goto(f"{board.base}/agents")  # type: ignore[attr-defined]
        await page.screenshot(path=str(SCREENSHOTS / "board-agents.png"), full_page=True)


@needs_chromium()
@pytest.mark.anyio
async def test_an_open_page_reconnects_after_a_daemon_restart(board: LiveDaemon) -> None:
    board.call("orchestrator_control", action="pause")
    async with chromium() as browser:
        page = await live_page(browser, board, "/projects/demo", height=800)
        before = paths.daemon_info_path(board.home).read_text()
        board.call("restart_daemon")
        await page.wait_for_function("window.agentqueueFeed.readyState !== 1", timeout=30_000)
        wait_until(lambda: paths.daemon_info_path(board.home).exists()
                   and paths.daemon_info_path(board.home).read_text() != before
                   and paths.socket_path(board.home).exists(), 60, "the restarted daemon")
        await page.wait_for_function("window.agentqueueFeed.readyState === 1", timeout=30_000)
        made = board.call("create_task", project_id="demo", title="After the restart", description="SAY x")
        await page.locator(f"#col-Ready #card-{made['id']}").wait_for(timeout=10_000)
        assert await page.evaluate("window.loadedOnce")  # the same page, never reloaded


@needs_chromium()
@pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")
@pytest.mark.anyio
async def test_a_permission_request_is_answered_on_the_task_page_and_the_same_run_goes_on(
        tmp_path: Path, mock_api: MockAnthropic) -> None:  # noqa: F811
    """The real `claude` CLI asks (the standard preset asks before Bash), the person clicks Allow on the board."""
    env = cli_env(tmp_path / "aq", tmp_path / "user", AGENTQUEUE_CLAUDE_BIN=CLAUDE)
    live = start_daemon(env, "--port", str(free_port()))
    try:
        live.call("create_project", name="Demo")
        live.call("add_repo", source="init", project_id="demo", name="app")
        live.call("create_agent", name="asker", agent_type="claude-code")
        task = live.call("create_task", project_id="demo", title="Ask first", max_retries=0,
                         description="SCENARIO:run_cmd CMD[touch ASKED_MARKER]")
        live.wait_status(task["id"], "WAITING_INPUT", timeout=90)
        base = json.loads(paths.daemon_info_path(live.home).read_text())["http_url"].removesuffix("/mcp")
        live.base = base  # type: ignore[attr-defined]
        async with chromium() as browser:
            page = await browser.new_page(viewport={"width": 1300, "height": 900})
            await page.goto(login_link(live))
            await page.goto(f"{base}/tasks/{task['id']}")
            request = page.locator(".request")
            await request.wait_for()
            assert "touch ASKED_MARKER" in await request.inner_text()
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            await page.screenshot(path=str(SCREENSHOTS / "board-permission-request.png"), full_page=True)
            await request.get_by_role("button", name="Allow").click()
            await page.wait_for_selector("#flash .ok")
            await page.wait_for_function("document.getElementById('task-status').textContent === 'COMPLETED'",
                                         timeout=60_000)
        requests = live.call("list_requests", status="allowed")["requests"]
        assert [(r["task_id"], r["decided_by"]) for r in requests] == [(task["id"], "person (board)")]
        assert cli_json(live.env, "show", task["id"])["attempts"] == 1  # the same run went on: no retry
    finally:
        stop_daemon(live)


@needs_chromium()
@pytest.mark.anyio
async def test_request_changes_reruns_with_the_comment_then_approve_lands_it(board: LiveDaemon) -> None:
    task = board.call("create_task", project_id="demo", title="Needs review", requires_approval=True,
                      description="ECHO\nWRITE review.txt first draft")
    board.wait_status(task["id"], "AWAITING_APPROVAL")
    async with chromium() as browser:
        page = await live_page(browser, board, f"/tasks/{task['id']}", width=1300, height=1100)
        await page.fill("textarea[name=comment]", "Say banana in the second draft.")
        await page.select_option("select[name=file]", "review.txt")
        await page.fill("input[name=line]", "1")
        await page.click("text=Request changes >> nth=-1")
        await page.wait_for_selector("#flash .ok")
        # The rerun's agent printed its prompt: the comment is in it, with where it was made.
        await page.wait_for_function("document.getElementById('log').textContent.includes('Say banana')",
                                     timeout=60_000)
        log = await page.inner_text("#log")
        assert "Changes requested by the reviewer" in log and "on review.txt:1] Say banana" in log
        await page.locator("#comments li", has_text="Say banana").wait_for(timeout=30_000)
        await page.wait_for_function("document.getElementById('task-status').textContent === 'AWAITING_APPROVAL'"
                                     " && document.getElementById('panel').textContent.includes('Attempts (2)')",
                                     timeout=60_000)
        await page.click("#panel button.primary")  # Approve
        await page.wait_for_function("document.getElementById('task-status').textContent === 'COMPLETED'",
                                     timeout=60_000)
        assert await page.evaluate("window.loadedOnce")
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(SCREENSHOTS / "board-request-changes.png"), full_page=True)
    assert git(board.repo, "show", "main:review.txt") == "first draft"  # type: ignore[attr-defined]
    shown = cli_json(board.env, "show", task["id"])
    assert shown["attempts"] == 2 and shown["task"]["status"] == "COMPLETED"
    assert len(board.call("get_recent_events", event_type="task.changes_requested")["events"]) == 1


def test_agentqueue_board_says_what_to_do_when_the_daemon_has_no_http(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "aq", tmp_path / "user")
    live = start_daemon(env)  # --no-http
    try:
        done = run_cli(env, "board", "--no-open")
        assert done.returncode == 1 and "without HTTP" in done.stderr and "--port" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    finally:
        stop_daemon(live)
