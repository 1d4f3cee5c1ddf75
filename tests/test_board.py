"""The board in a real headless Chromium against a real daemon running real `command` agents in a real repo.

A person's path: `agentqueue board` prints a one-time login link, the browser exchanges it for a
session cookie, and every page after that is live (Server-Sent Events), with no reload.
"""

from __future__ import annotations

import html
from contextlib import closing
import json
import re
import socket
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import markupsafe
import pytest

from agentqueue import paths
from agentqueue.daemon_client import ToolError, call_tool

from .browser import SCREENSHOTS, chromium, needs_chromium
from .cli_helpers import (AGENT_COMMAND, LiveDaemon, cli_env, cli_json, run_cli, signals, start_daemon, stop_daemon,
                          wait_until)
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
    await page.wait_for_url(f"{live.base}/")  # type: ignore[attr-defined]
    await page.goto(f"{live.base}{path}")  # type: ignore[attr-defined]
    await page.evaluate("window.loadedOnce = true")
    await page.wait_for_function("window.agentqueueFeed && window.agentqueueFeed.readyState === 1")
    return page


# -- access ------------------------------------------------------------------------------------------
@pytest.mark.daemon
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
        assert first.status_code == 200 and 'http-equiv="refresh" content="0; url=/"' in first.text
        cookie = first.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
        assert anonymous.get(link).status_code == 401
        assert anonymous.get("/login?code=made-up").status_code == 401
    with httpx.Client(base_url=base, follow_redirects=False) as person:
        login = person.get(login_link(board).removeprefix(base))
        assert login.status_code == 200
        page = person.get("/projects/demo")
        assert page.status_code == 200 and "Demo" in page.text
        csrf = stored_csrf(login)
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
@pytest.mark.daemon
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
        await page.wait_for_url(f"{board.base}/")  # type: ignore[attr-defined]
        assert await page.title() == "Projects · AgentQueue"
        await page.click("text=Demo")
        await page.evaluate("window.loadedOnce = true")  # gone if the page ever reloads
        await page.wait_for_function("window.agentqueueFeed && window.agentqueueFeed.readyState === 1")
        await page.click("#create-task summary")
        await page.fill("input[name=title]", "Say and write")
        await page.fill("textarea[name=description]",
                        f"SAY first line\nWAITFOR {gate}\nSAY second line\nWRITE said.txt done")
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
@pytest.mark.daemon
async def test_dependency_links_filters_and_the_other_views(board: LiveDaemon) -> None:
    board.call("orchestrator_control", action="pause")
    first = board.call("create_task", project_id="demo", title="Schema", description="SAY a")
    # A title with a space: task ids (word-word) never hold one, so the filter can only match the title.
    second = board.call("create_task", project_id="demo", title="API v2", description="SAY b", depends_on=[first["id"]])
    board.call("create_task", project_id="demo", title="Docs", description="SAY c", depends_on=[second["id"]])
    async with chromium() as browser:
        page = await browser.new_page(viewport={"width": 1500, "height": 800})
        await page.goto(login_link(board))
        await page.wait_for_url(f"{board.base}/")  # type: ignore[attr-defined]
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
@pytest.mark.daemon
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
@pytest.mark.daemon
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
            await page.wait_for_url(f"{base}/")
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
@pytest.mark.daemon
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


@pytest.mark.daemon
def test_agentqueue_board_says_what_to_do_when_the_daemon_has_no_http(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "aq", tmp_path / "user")
    live = start_daemon(env)  # --no-http
    try:
        done = run_cli(env, "board", "--no-open")
        assert done.returncode == 1 and "without HTTP" in done.stderr and "--port" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    finally:
        stop_daemon(live)


# -- hardening (issue 18): each test attacks one finding of the second red team ------------------------------
def flash_text(response: httpx.Response) -> str:
    """The message of a board answer (a flash or an error page), as the person reads it."""
    found = re.search(r'<p class="flash (?:ok|error)"[^>]*>(.*?)</p>', response.text, re.S)
    assert found, response.text[:500]
    return html.unescape(found.group(1))


def stored_csrf(login: httpx.Response) -> str:
    """The CSRF token the login answer keeps in the board origin's localStorage (no page carries it)."""
    found = re.search(r'localStorage\.setItem\("agentqueue\.csrf", "(\w+)"\)', login.text)
    assert found, login.text[:300]
    return found.group(1)


def logged_in(live: LiveDaemon) -> tuple[httpx.Client, str]:
    """An httpx client holding a board session, and the CSRF token its login answer kept."""
    base = live.base  # type: ignore[attr-defined]
    person = httpx.Client(base_url=base, follow_redirects=False)
    login = person.get(login_link(live).removeprefix(base))
    page = person.get("/projects/demo")
    assert page.status_code == 200, page.text[:300]
    return person, stored_csrf(login)


def bearer(live: LiveDaemon) -> dict[str, str]:
    return {"Authorization": f"Bearer {paths.token_path(live.home).read_text().strip()}"}


def titles(live: LiveDaemon) -> list[str]:
    return [t["title"] for t in cli_json(live.env, "tasks", "--all")["tasks"]]


@pytest.mark.daemon
def test_bearer_token_actions_get_the_tools_policy_verdict_and_the_audit_names_the_credential(
        board: LiveDaemon) -> None:
    base = board.base  # type: ignore[attr-defined]
    policy = board.home / "policy.toml"
    form = {"title": "Asked", "description": "SAY x"}
    board.call("orchestrator_control", action="pause")
    policy.write_text('ask = ["tool:create_task"]\n')
    # A script holding the token has no person to ask: refused with the MCP gate's own words, nothing made.
    try:
        call_tool(board.home, "create_task", {"project_id": "demo", **form}, start=False)  # a client that cannot ask
        raise AssertionError("the MCP tool was not asked about")
    except ToolError as error:
        tool_refusal = str(error)
    assert "edit_policy(add_rule='tool:create_task'" in tool_refusal
    script = httpx.post(f"{base}/projects/demo/tasks", data=form, headers=bearer(board))
    assert script.status_code == 403 and flash_text(script).startswith(tool_refusal), flash_text(script)
    as_htmx = httpx.post(f"{base}/projects/demo/tasks", data=form, headers={**bearer(board), "HX-Request": "true"})
    assert 'class="flash error"' in as_htmx.text and flash_text(as_htmx).startswith(tool_refusal)
    assert titles(board) == []
    # The token does not lift the bound on a form's size.
    huge = httpx.post(f"{base}/projects/demo/tasks", data={**form, "description": "x" * (2 << 20)},
                      headers=bearer(board))
    assert huge.status_code == 413 and titles(board) == []
    # The person at the board is the one the policy asks: their click is the answer.
    person, csrf = logged_in(board)
    with closing(person):
        made = person.post("/projects/demo/tasks", data={**form, "csrf": csrf}, headers={"HX-Request": "true"})
        assert "queued" in flash_text(made)
        assert titles(board) == ["Asked"]
        # deny is deny for everyone, with the tool's refusal.
        policy.write_text('deny = ["tool:create_task", "tool:orchestrator_control"]\n')
        for response in (person.post("/projects/demo/tasks", data={**form, "csrf": csrf}),
                         httpx.post(f"{base}/projects/demo/tasks", data=form, headers=bearer(board)),
                         person.post("/orchestrator/resume", data={"csrf": csrf}),
                         httpx.post(f"{base}/orchestrator/resume", headers=bearer(board))):
            assert response.status_code == 403 and "denied by AgentQueue's policy" in flash_text(response)
        assert titles(board) == ["Asked"]
        policy.write_text("")
        assert board.call("orchestrator_control", action="status")["state"] == "paused"
        # What a request claims about who it is never reaches the audit log.
        claims = {"X-AgentQueue-Actor": "mallory", "X-Forwarded-User": "mallory", "User-Agent": "mallory"}
        assert person.post("/projects/demo/tasks", data={**form, "title": "By the person", "csrf": csrf,
                                                         "actor": "mallory", "author": "mallory"},
                           headers=claims).status_code == 303
        assert httpx.post(f"{base}/projects/demo/tasks", data={**form, "title": "By a script", "actor": "mallory"},
                          headers={**bearer(board), **claims}).status_code == 303
    rows = board.call("get_audit_log", action="board:create_task", limit=20)["entries"]
    seen = [(e["actor"], e["outcome"], e["decision"]) for e in reversed(rows)]
    assert seen == [("http:bearer", "refused", "ask→refused"), ("http:bearer", "refused", "ask→refused"),
                    ("board", "ok", "ask→accept"), ("board", "refused", "deny"), ("http:bearer", "refused", "deny"),
                    ("board", "ok", "allow"), ("http:bearer", "ok", "allow")], seen
    assert not any("mallory" in json.dumps(e) and e["actor"] == "mallory" for e in rows)
    orchestrator = board.call("get_audit_log", action="board:orchestrator_resume")["entries"]
    assert sorted(e["actor"] for e in orchestrator) == ["board", "http:bearer"]


@pytest.mark.daemon
def test_a_read_only_daemon_takes_no_board_action_with_any_credential(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "aq", tmp_path / "user")
    first = start_daemon(env, "--no-http")
    first.call("create_project", name="Demo")
    first.call("orchestrator_control", action="pause")
    stop_daemon(first)
    live = start_daemon(env, "--port", str(free_port()), "--read-only")
    try:
        live.base = json.loads(paths.daemon_info_path(live.home).read_text())["http_url"].removesuffix("/mcp")  # type: ignore[attr-defined]
        person, csrf = logged_in(live)
        with closing(person):
            assert person.get("/projects/demo").status_code == 200  # the board still shows the queue
            for response in (person.post("/projects/demo/tasks", data={"title": "t", "description": "d", "csrf": csrf}),
                             person.post("/orchestrator/resume", data={"csrf": csrf}),
                             person.post("/projects/demo/pause", data={"csrf": csrf}),
                             httpx.post(f"{live.base}/projects/demo/tasks", data={"title": "t", "description": "d"},  # type: ignore[attr-defined]
                                        headers=bearer(live)),
                             httpx.post(f"{live.base}/orchestrator/resume", headers=bearer(live))):  # type: ignore[attr-defined]
                assert response.status_code == 403 and "read-only" in flash_text(response), response.text[:300]
        assert titles(live) == []
        assert live.call("orchestrator_control", action="status")["state"] == "paused"
        assert [p["status"] for p in live.call("list_projects")["projects"]] == ["ACTIVE"]
    finally:
        stop_daemon(live)


@pytest.mark.daemon
def test_the_live_feed_takes_a_task_id_never_a_path(board: LiveDaemon) -> None:
    logs = board.home / "logs"
    (logs / "tasks").mkdir(parents=True, exist_ok=True)
    (logs / "planted.log").write_text("SECRET-OUTSIDE\n")  # what ../planted would have streamed
    (board.home / "planted.log").write_text("SECRET-OUTSIDE\n")
    board.call("orchestrator_control", action="pause")
    task = board.call("create_task", project_id="demo", title="Real", description="SAY x")
    (logs / "tasks" / f"{task['id']}.log").write_text("the task's own line\n")
    person, _ = logged_in(board)
    with closing(person):
        for query in ("task=../planted", "task=..%2Fplanted", "task=..%2fplanted", "task=%2e%2e/planted",
                      "task=../../planted", f"task={board.home}/planted", "task=/etc/passwd",
                      "task=..%5Cplanted", f"task={task['id']}%00", f"task={task['id']}/../../planted",
                      "task=%2E%2E%2F%2E%2E%2Fplanted", "task=.", "task=" + "a" * 5000):
            refused = person.get(f"/events?{query}")
            assert refused.status_code == 400 and "task id" in refused.text, (query, refused.status_code)
            assert "SECRET" not in refused.text
        missing = person.get("/events?task=no-such-task")
        assert missing.status_code == 404 and "no-such-task" in missing.text
        assert person.get("/events?project=no-such-project").status_code == 404
        for offset in ("²", "٣", "1_0", "-1", "1e3", "9" * 40, "0x10"):
            refused = person.get("/events", params={"task": task["id"], "offset": offset})
            assert refused.status_code == 400 and "offset" in refused.text, (offset, refused.status_code)
        # A real task id streams that task's log.
        with person.stream("GET", f"/events?task={task['id']}&offset=0", timeout=10) as feed:
            assert feed.status_code == 200
            seen = ""
            for chunk in feed.iter_text():
                seen += chunk
                if "own line" in seen:
                    break
        assert "the task's own line" in seen and "SECRET" not in seen


@pytest.mark.daemon
def test_the_session_cookie_works_only_on_the_daemon_that_minted_it(tmp_path: Path) -> None:
    """Browsers send a host's cookies to every port: another local daemon, even one with the same token, refuses
    them."""
    token = "shared-token-" + "x" * 32
    daemons = []
    try:
        for name in ("a", "b"):
            env = cli_env(tmp_path / name, tmp_path / "user", AGENTQUEUE_TOKEN=token)
            live = start_daemon(env, "--port", str(free_port()))
            live.base = json.loads(paths.daemon_info_path(live.home).read_text())["http_url"].removesuffix("/mcp")  # type: ignore[attr-defined]
            daemons.append(live)
        a, b = daemons
        port_a, port_b = (int(d.base.rsplit(":", 1)[1]) for d in daemons)  # type: ignore[attr-defined]
        with httpx.Client(base_url=a.base, follow_redirects=False) as browser:  # type: ignore[attr-defined]
            login = browser.get(login_link(a).removeprefix(a.base))  # type: ignore[attr-defined]
            assert login.headers["set-cookie"].startswith(f"agentqueue_board_{port_a}=")
            value = browser.cookies[f"agentqueue_board_{port_a}"]
            assert browser.get("/").status_code == 200  # it works where it was minted
        for name in (f"agentqueue_board_{port_a}", f"agentqueue_board_{port_b}", "agentqueue_board"):
            stolen = httpx.get(f"{b.base}/", headers={"Cookie": f"{name}={value}"})  # type: ignore[attr-defined]
            assert stolen.status_code == 401, name
        # The port is in the signed value: rewriting it breaks the signature.
        forged = value.replace(f"{port_a}.", f"{port_b}.", 1)
        assert httpx.get(f"{b.base}/", headers={"Cookie": f"agentqueue_board_{port_b}={forged}"}).status_code == 401  # type: ignore[attr-defined]
        # And a cookie of the old unbound shape is refused everywhere.
        old_shape = value.split(".", 1)[1]
        assert httpx.get(f"{a.base}/", headers={"Cookie": f"agentqueue_board_{port_a}={old_shape}"}).status_code == 401  # type: ignore[attr-defined]
    finally:
        for live in daemons:
            stop_daemon(live)


@pytest.mark.daemon
def test_no_board_answer_may_be_framed(board: LiveDaemon) -> None:
    base = board.base  # type: ignore[attr-defined]
    person, csrf = logged_in(board)
    with closing(person):
        answers = [person.get("/"), person.get("/projects/demo"), person.get("/agents"), person.get("/usage"),
                   person.get("/static/board.js"), person.get("/login"), person.get("/tasks/no-such-task"),
                   person.post("/projects/demo/tasks", data={"title": "", "description": "d", "csrf": csrf}),
                   person.post("/projects/demo/tasks", data={"title": "", "description": "d", "csrf": csrf},
                               headers={"HX-Request": "true"}),
                   httpx.get(f"{base}/"), httpx.get(f"{base}/", headers={"Host": "evil.example"}),
                   httpx.post(f"{base}/projects/demo/tasks", headers={"Origin": "http://evil.example"})]
    for answer in answers:
        assert answer.headers.get("content-security-policy") == "frame-ancestors 'none'", answer.request.url
        assert answer.headers.get("x-frame-options") == "DENY", answer.request.url


@needs_chromium()
@pytest.mark.anyio
@pytest.mark.daemon
async def test_a_foreign_page_cannot_frame_the_board(board: LiveDaemon) -> None:
    """Even its public login page: a frame the browser refuses renders nothing of the board's."""
    async with chromium() as browser:
        context = await browser.new_context()
        page = await context.new_page()
        await page.goto(login_link(board))
        await page.wait_for_url(f"{board.base}/")  # type: ignore[attr-defined]
        for path in ("/login", "/projects/demo"):
            evil = await context.new_page()
            await evil.set_content(f'<iframe src="{board.base}{path}" width="800" height="600"></iframe>')  # type: ignore[attr-defined]
            await evil.wait_for_timeout(1000)
            framed = next(f for f in evil.frames if f != evil.main_frame)
            content = await framed.content()
            assert "Log in" not in content and "AgentQueue" not in content, (path, framed.url, content[:300])


@pytest.mark.daemon
def test_agentqueue_board_keeps_the_login_code_off_every_command_line(board: LiveDaemon, tmp_path: Path) -> None:
    """Opening a browser runs a program with the URL as an argument, which `ps` shows every local user."""
    seen = tmp_path / "browser-argv.json"
    fake = tmp_path / "fake-browser"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nopen({str(seen)!r}, 'w').write(json.dumps(sys.argv))\n")
    fake.chmod(0o755)
    done = run_cli({**board.env, "BROWSER": str(fake)}, "board")
    assert done.returncode == 0, done.stderr
    code = re.search(r"/login\?code=([\w-]+)", done.stdout).group(1)  # printed for the person
    argv = json.loads(seen.read_text())
    assert not any(code in arg for arg in argv), argv
    opened = argv[-1]
    assert opened.startswith("file://") and "code" not in opened, argv
    page = Path(urllib.parse.unquote(urllib.parse.urlsplit(opened).path))
    assert page.stat().st_mode & 0o777 == 0o600 and code in page.read_text()
    # The page sends the browser on to the login link, which works (once).
    target = html.unescape(re.search(r'url=([^"]+)"', page.read_text()).group(1))
    assert target == f"{board.base}/login?code={code}"  # type: ignore[attr-defined]
    assert httpx.get(target, follow_redirects=False).status_code == 200
    assert httpx.get(target, follow_redirects=False).status_code == 401


@needs_chromium()
@pytest.mark.anyio
@pytest.mark.daemon
async def test_the_login_page_from_agentqueue_board_logs_a_real_browser_in(board: LiveDaemon, tmp_path: Path) -> None:
    seen = tmp_path / "browser-argv.json"
    fake = tmp_path / "fake-browser"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nopen({str(seen)!r}, 'w').write(json.dumps(sys.argv))\n")
    fake.chmod(0o755)
    assert run_cli({**board.env, "BROWSER": str(fake)}, "board").returncode == 0
    async with chromium() as browser:
        page = await browser.new_page()
        await page.goto(json.loads(seen.read_text())[-1])  # what the person's browser was given: a file
        await page.wait_for_url(f"{board.base}/", timeout=10_000)  # type: ignore[attr-defined]
        await page.wait_for_selector("text=Demo")
        assert await page.title() == "Projects · AgentQueue"


HOSTILE_TITLES = ["x" * 256, "Fix \x1b]52;c;ZXZpbAo=\x07 now", "two\nlines", "bell\x07", "tab\there", "del\x7f",
                  "c1\x9b2J", "sep\u2028arator", "nul\x00byte"]


@pytest.mark.daemon
def test_the_board_refuses_exactly_the_titles_the_tool_refuses(board: LiveDaemon) -> None:
    person, csrf = logged_in(board)
    with closing(person):
        for title in HOSTILE_TITLES:
            try:
                board.call("create_task", project_id="demo", title=title, description="d")
                raise AssertionError(f"the tool took {title!r}")
            except ToolError as error:
                tool_says = str(error)
            answer = person.post("/projects/demo/tasks", data={"title": title, "description": "d", "csrf": csrf},
                                 headers={"HX-Request": "true"})
            assert flash_text(answer) == tool_says, (title, flash_text(answer), tool_says)
            assert "Task title" in tool_says
        assert titles(board) == []
        made = board.call("create_task", project_id="demo", title="Fine", description="d")
        try:
            board.call("edit_task", task_id=made["id"], title="two\nlines")
            raise AssertionError("edit_task took a title create_task refuses")
        except ToolError as error:
            assert "control character" in str(error)
        ok = person.post("/projects/demo/tasks", data={"title": "é" * 255, "description": "d", "csrf": csrf},
                         headers={"HX-Request": "true"})
        assert "queued" in flash_text(ok)


@pytest.mark.daemon
def test_numbers_in_board_forms_are_ascii_whole_numbers_or_a_clear_4xx(board: LiveDaemon) -> None:
    task = board.call("create_task", project_id="demo", title="Review me", requires_approval=True,
                      description="WRITE a.txt one")
    board.wait_status(task["id"], "AWAITING_APPROVAL")
    person, csrf = logged_in(board)
    with closing(person):
        for line in ("²", "٣", "１", "1_0", "1e3", "0x1", "9" * 40, "9" * 5000, "1.5", "one"):
            changes = person.post(f"/tasks/{task['id']}/changes",
                                  data={"comment": "c", "file": "a.txt", "line": line, "csrf": csrf})
            assert changes.status_code == 400 and "line must be a line number" in flash_text(changes), \
                (line, changes.status_code)
        for line, words in (("0", "line must be between 1"), ("99999999999", "line must be between 1"),
                            ("-3", "line must be between 1")):
            changes = person.post(f"/tasks/{task['id']}/changes",
                                  data={"comment": "c", "file": "a.txt", "line": line, "csrf": csrf})
            assert changes.status_code == 400 and words in flash_text(changes), (line, flash_text(changes))
        for priority in ("²", "٣", "1_0", "9" * 40, "9" * 5000, "1e3", "high"):
            made = person.post("/projects/demo/tasks",
                               data={"title": "p", "description": "d", "priority": priority, "csrf": csrf})
            assert made.status_code == 400 and "priority must be a whole number" in flash_text(made), priority
        huge = person.post("/projects/demo/tasks",
                           data={"title": "p", "description": "d", "priority": "99999999999", "csrf": csrf})
        assert huge.status_code == 400 and "priority must be between" in flash_text(huge)
        # A CSRF token of non-ASCII characters is a refusal, not a crash.
        assert person.post("/projects/demo/tasks", data={"title": "p", "description": "d", "csrf": "²" * 64}
                           ).status_code == 403
        # Ids in the path that name nothing: the service's not-found, never a 500.
        for path in ("/tasks/..%2F..%2Ftoken/approve", "/tasks/%00/approve", "/requests/%2E%2E/x"):
            answer = person.post(path, data={"csrf": csrf, "decision": "allow"})
            assert 400 <= answer.status_code < 500, (path, answer.status_code)
    assert titles(board) == ["Review me"]
    assert board.task_status(task["id"]) == "AWAITING_APPROVAL"
    # Every attempt is an audit row of the person's session, refused, even those refused before any service ran.
    changes = board.call("get_audit_log", action="board:changes", limit=100)["entries"]
    assert len(changes) == 13 and {(e["actor"], e["outcome"]) for e in changes} == {("board", "refused")}
    created = board.call("get_audit_log", action="board:create_task", limit=100)["entries"]
    assert len(created) == 8 and {(e["actor"], e["outcome"]) for e in created} == {("board", "refused")}


# -- long columns ---------------------------------------------------------------------------------------
HOSTILE = '</a><script>alert("x")</script><img src=x onerror=alert(1)> & "quoted" \'single\''


def long_ready_column(live: LiveDaemon, count: int) -> list[str]:
    """`count` READY tasks in demo (the orchestrator paused), the last one, sorted last, with a hostile title."""
    live.call("orchestrator_control", action="pause")
    ids = [live.call("create_task", project_id="demo", title=f"Item {n:02d}", description="SAY x", priority=10)["id"]
           for n in range(count - 1)]
    return ids + [live.call("create_task", project_id="demo", title=HOSTILE, description="SAY x", priority=99)["id"]]


def cards_in(page: str, column: str) -> list[str]:
    section = page.split(f'id="col-{column}"', 1)[1].split("</section>", 1)[0]
    return re.findall(r'<article class="card[^"]*" id="card-([\w-]+)"', section)


@pytest.mark.daemon
def test_a_long_column_shows_its_first_cards_and_its_own_page_shows_the_rest_escaped(board: LiveDaemon) -> None:
    ids = long_ready_column(board, 56)
    person, _ = logged_in(board)
    with closing(person):
        whole = person.get("/projects/demo")
        assert whole.status_code == 200
        assert cards_in(whole.text, "Ready") == ids[:50]  # the first 50, in the list's order
        assert re.search(r'id="col-Ready" data-column="Ready" data-hidden="6">\s*<h2>Ready <span class="count">56<',
                         whole.text)
        assert '<a class="more" href="/projects/demo?column=Ready">6 more</a>' in whole.text
        assert "<script>alert" not in whole.text and 'id="shown-count">56<' in whole.text
        # The column's own page: every card (up to 200 at a time), the hostile title inert.
        column = person.get("/projects/demo", params={"column": "Ready"})
        assert column.status_code == 200 and cards_in(column.text, "Ready") == ids
        assert 'id="col-Defined"' not in column.text and "the whole board" in column.text
        assert str(markupsafe.escape(HOSTILE)) in column.text  # the card's title, escaped as text
        assert "<script>alert" not in column.text and "<img src=x" not in column.text
        later = person.get("/projects/demo", params={"column": "Ready", "offset": "50"})
        assert cards_in(later.text, "Ready") == ids[50:] and "cards 51–56 of 56" in later.text
        assert "<script>alert" not in later.text
        # A filter travels with the links, url-encoded: the hostile text cannot leave its attribute.
        filtered = person.get("/projects/demo", params={"q": HOSTILE})
        assert cards_in(filtered.text, "Ready") == [ids[-1]] and "<script>alert" not in filtered.text
        shown = person.get("/projects/demo", params={"q": "Item", "column": "Ready", "offset": "40"})
        assert cards_in(shown.text, "Ready") == ids[40:55]
        assert 'href="/projects/demo?q=Item&amp;column=Ready&amp;offset=0">previous 200' in shown.text
        # Bad input: a clear 4xx that says what to give.
        unknown = person.get("/projects/demo", params={"column": "<b>Nope</b>"})
        assert unknown.status_code == 400 and "Unknown column" in unknown.text and "<b>Nope" not in unknown.text
        for offset in ("-1", "x", "1e3", "٣"):
            refused = person.get("/projects/demo", params={"column": "Ready", "offset": offset})
            assert refused.status_code == 400 and "offset" in refused.text, offset


@needs_chromium()
@pytest.mark.anyio
@pytest.mark.daemon
async def test_a_card_from_the_hidden_part_of_a_column_moves_and_both_counts_follow(board: LiveDaemon) -> None:
    ids = long_ready_column(board, 53)
    async with chromium() as browser:
        page = await live_page(browser, board, "/projects/demo")
        assert await page.locator("#col-Ready .card").count() == 50
        assert await page.text_content("#col-Ready .count") == "53"
        board.call("set_task_status", task_id=ids[-1], status="BLOCKED")  # the hostile one, not on the page
        stuck = page.locator(f"#col-Stuck #card-{ids[-1]}")
        await stuck.wait_for(timeout=15_000)
        assert await stuck.locator(".title").text_content() == HOSTILE  # text, never markup
        await page.wait_for_function("document.querySelector('#col-Ready .count').textContent === '52'")
        assert await page.text_content("#col-Stuck .count") == "1"
        assert await page.text_content("#shown-count") == "53"
        assert await page.evaluate("window.loadedOnce") and await page.evaluate("!window.alerted")


def test_every_http_connection_sends_small_responses_at_once() -> None:
    """The listener is a TCP socket asyncio recognises, so each accepted connection gets TCP_NODELAY: else a
    response's body waits ~40 ms for the ACK of its headers on a kept-alive connection (Nagle + delayed ACK)."""
    import asyncio

    from agentqueue.daemon.http import _bind_tcp

    listener = _bind_tcp("127.0.0.1", 0)
    assert listener is not None

    async def accept_one() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Seen(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                sock = transport.get_extra_info("socket")
                accepted.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Seen, sock=listener)  # as uvicorn serves it
        async with server:
            _, writer = await asyncio.open_connection(*listener.getsockname()[:2])
            nodelay = await asyncio.wait_for(accepted, 10)
            writer.close()
        return nodelay

    assert asyncio.run(accept_one()) != 0


@pytest.mark.daemon
def test_the_board_says_which_figures_hold_partial_or_unpriced_runs(board: LiveDaemon) -> None:
    """Issue 22: a run cut short is counted up to where it stopped, and the projects, usage and task pages say so;
    a run of a model with no known price shows its cost as unknown."""
    import sqlite3

    task = board.call("create_task", project_id="demo", title="Cut short", description="d")["id"]
    with closing(sqlite3.connect(paths.db_path(board.home))) as db, db:
        db.execute("INSERT INTO token_ledger (project_id, task_id, agent_id, input, output, cache_read, cache_write, "
                   "total, cost_usd, timestamp, partial) VALUES ('demo', ?, 'worker', 100, 42, 25, 50, 217, NULL, "
                   "strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 1)", (task,))
        db.execute("INSERT INTO task_results (task_id, attempt, agent_id, status, error_type, input, output, "
                   "cache_read, cache_write, total, cost_usd, duration_s, created_at, partial) VALUES "
                   "(?, 1, 'worker', 'failed', 'stalled', 100, 42, 25, 50, 217, NULL, 12.5, "
                   "strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), 1)", (task,))
    person, _ = logged_in(board)
    with closing(person):
        overview, usage, page = person.get("/"), person.get("/usage"), person.get(f"/tasks/{task}")
    assert "incl. 1 partial" in overview.text and "+ 1 unpriced" in overview.text
    assert "incl. 1 partial" in usage.text and "+ 1 unpriced" in usage.text
    attempts = page.text.split("<summary>Attempts (", 1)[1]  # the worker may have run it too: its own row is whole
    assert ">217 <span" in attempts and ">partial</span>" in attempts and ">unknown</span>" in attempts
