"""The board's rough edges of issue 23, each walked in a real headless Chromium against a real daemon.

The header follows live changes, the usage chart's axis spans the data in days, the pages before login
have their styles and refusals a way back, an approved task drops its agent badge, the panel counts
attempts, flash messages clear, a 1,000-task column pages, and the overview speaks the kanban's words.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import httpx2 as httpx
import pytest

from agentqueue import paths

from .browser import chromium, needs_chromium
from .cli_helpers import LiveDaemon, cli_env, signals, start_daemon, stop_daemon
from .mock_anthropic import MockAnthropic
from .test_board import board, live_page, login_link  # noqa: F401  (board: fixture)
from .test_engine_claude import CLAUDE, mock_api  # noqa: F401  (mock_api: fixture)

pytestmark = [pytest.mark.integration]

BG = "rgb(246, 247, 249)"  # board.css's --bg: the stylesheet is applied


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def base_of(live: LiveDaemon) -> str:
    return json.loads(paths.daemon_info_path(live.home).read_text())["http_url"].removesuffix("/mcp")


@needs_chromium()
@pytest.mark.anyio
@pytest.mark.daemon
async def test_the_header_and_its_buttons_follow_live_changes(board: LiveDaemon) -> None:  # noqa: F811
    async with chromium() as browser:
        page = await live_page(browser, board, "/projects/demo")
        assert await page.text_content("#project-status") == "ACTIVE"
        await page.click("text=Pause project")  # the person's own click
        await page.wait_for_function("document.getElementById('project-status').textContent === 'PAUSED'",
                                     timeout=15_000)
        await page.locator("#project-state button", has_text="Resume project").wait_for()
        assert await page.locator("text=Pause project").count() == 0
        board.call("resume_project", project_id="demo")  # someone else (a model) resumes it
        await page.wait_for_function("document.getElementById('project-status').textContent === 'ACTIVE'",
                                     timeout=15_000)
        await page.locator("#project-state button", has_text="Pause project").wait_for()
        board.call("orchestrator_control", action="pause")  # the orchestrator shows on the project's header too
        await page.locator("#orchestrator-paused").wait_for(timeout=15_000)
        board.call("orchestrator_control", action="resume")
        await page.locator("#orchestrator-paused").wait_for(state="detached", timeout=15_000)
        assert await page.evaluate("window.loadedOnce")  # no reload
        overview = page
        await overview.goto(f"{board.base}/")  # type: ignore[attr-defined]
        await overview.evaluate("window.loadedOnce = true")
        await overview.wait_for_function("window.agentqueueFeed && window.agentqueueFeed.readyState === 1")
        board.call("orchestrator_control", action="resume")
        board.call("pause_project", project_id="demo")
        await overview.locator("#project-demo .badge", has_text="PAUSED").wait_for(timeout=15_000)
        board.call("orchestrator_control", action="pause")
        await overview.locator("button", has_text="Resume the orchestrator").wait_for(timeout=15_000)
        assert await overview.text_content("#orchestrator") == "paused"
        assert await overview.evaluate("window.loadedOnce")


@needs_chromium()
@pytest.mark.anyio
@pytest.mark.daemon
async def test_flash_messages_clear_after_a_while_or_at_the_next_action(board: LiveDaemon) -> None:  # noqa: F811
    async with chromium() as browser:
        page = await live_page(browser, board, "/projects/demo")
        await page.click("text=Pause project")
        flash = page.locator("#flash .flash.ok[role=status]")
        await flash.wait_for()
        assert await flash.text_content() == "Project paused."
        await flash.wait_for(state="detached", timeout=15_000)  # gone by itself (after 8 s)
        assert await page.get_attribute("#flash", "aria-live") == "polite"  # the region stays for the next one
        # An error stays until the next action, which replaces it.
        await page.click("#create-task summary")
        await page.fill("input[name=title]", "Bad dependency")
        await page.fill("textarea[name=description]", "SAY x")
        await page.evaluate("""() => { const o = document.createElement('option'); o.value = 'no-such-task';
            o.selected = true; document.querySelector('select[name=depends_on]').appendChild(o); }""")
        await page.click("text=Queue task")
        error = page.locator("#flash .flash.error[role=alert]")
        await error.wait_for()
        assert "no-such-task" in await error.text_content()
        await page.wait_for_timeout(9_000)
        assert await error.count() == 1  # an error is not timed out
        await page.click("text=Resume project")
        await page.locator("#flash .flash.ok", has_text="Project resumed.").wait_for()
        assert await page.locator("#flash .flash.error").count() == 0


@needs_chromium()
@pytest.mark.anyio
@pytest.mark.daemon
async def test_pages_before_login_have_their_styles_and_refusals_a_way_back(board: LiveDaemon) -> None:  # noqa: F811
    base = board.base  # type: ignore[attr-defined]
    async with chromium() as browser:
        stranger = await browser.new_page()
        await stranger.goto(f"{base}/login")
        assert await stranger.evaluate("getComputedStyle(document.body).backgroundColor") == BG
        assert await stranger.locator("input[name=code]").count() == 1
        refused = await stranger.goto(f"{base}/projects/demo")
        assert refused.status == 401
        assert await stranger.evaluate("getComputedStyle(document.body).backgroundColor") == BG
        assert "agentqueue board" in await stranger.text_content("[role=alert]")
        await stranger.click("text=Paste a login code")
        await stranger.wait_for_url(f"{base}/login")
        await stranger.locator("input[name=code]").wait_for()
        # Logged in: a task or page that does not exist is a 404 with the board's header and a way back.
        page = await browser.new_page()
        await page.goto(login_link(board))
        await page.wait_for_url(f"{base}/")
        for path, said in (("/tasks/no-such-task", "no-such-task"), ("/projects/nope", "nope"),
                           ("/no/such/page", "/no/such/page")):
            answer = await page.goto(f"{base}{path}")
            assert answer.status == 404, path
            assert said in await page.text_content("[role=alert]"), path
            assert await page.evaluate("getComputedStyle(document.body).backgroundColor") == BG
            await page.click("text=Back to the projects")
            await page.wait_for_url(f"{base}/")
    # Only the stylesheet is open: the scripts and every page still need the session.
    with httpx.Client(base_url=base) as anonymous:
        assert anonymous.get("/static/board.css").status_code == 200
        assert anonymous.get("/static/board.js").status_code == 401
        assert anonymous.post("/static/board.css").status_code == 401


@needs_chromium()
@pytest.mark.anyio
@pytest.mark.daemon
async def test_an_approved_task_drops_its_agent_badge_and_the_panel_counts_attempts(
        board: LiveDaemon, tmp_path: Path) -> None:  # noqa: F811
    gate = signals(tmp_path) / "hold"
    board.call("orchestrator_control", action="pause")
    task = board.call("create_task", project_id="demo", title="Reviewed", requires_approval=True,
                      description=f"WAITFOR {gate}\nWRITE reviewed.txt ok")
    async with chromium() as browser:
        page = await live_page(browser, board, f"/tasks/{task['id']}")
        assert await page.text_content("#attempts") == "not run yet, up to 4 attempts"  # max_retries=3: 1 + 3
        kanban = await live_page(browser, board, "/projects/demo")
        board.call("orchestrator_control", action="resume")
        card = kanban.locator(f"#col-Running #card-{task['id']}")
        await card.wait_for(timeout=30_000)
        await card.locator(".agent", has_text="worker").wait_for(timeout=15_000)  # working: the badge shows
        await page.wait_for_function("document.getElementById('attempts').textContent === 'attempt 1 of 4'",
                                     timeout=15_000)
        gate.write_text("go")
        review = kanban.locator(f"#col-Review #card-{task['id']}")
        await review.wait_for(timeout=30_000)
        assert await review.locator(".agent").count() == 0  # the run is over: nobody works on it
        await page.wait_for_function("document.getElementById('task-status').textContent === 'AWAITING_APPROVAL'",
                                     timeout=30_000)
        assert "last run by worker" in await page.text_content("#panel")
        await page.click("#panel button.primary")  # Approve
        done = kanban.locator(f"#col-Done #card-{task['id']}")
        await done.wait_for(timeout=30_000)
        assert await done.locator(".agent").count() == 0
        assert await page.text_content("#attempts") == "attempt 1 of 4"
        assert await kanban.evaluate("window.loadedOnce") and await page.evaluate("window.loadedOnce")


@needs_chromium()
@pytest.mark.anyio
@pytest.mark.daemon
async def test_the_overview_and_the_kanban_use_the_same_words_and_counts(board: LiveDaemon) -> None:  # noqa: F811
    board.call("orchestrator_control", action="pause")
    made = [board.call("create_task", project_id="demo", title=f"T{n}", description="SAY x")["id"] for n in range(4)]
    board.call("set_task_status", task_id=made[0], status="BLOCKED")
    board.call("set_task_status", task_id=made[1], status="BLOCKED")
    board.call("create_task", project_id="demo", title="Later", description="SAY x", depends_on=[made[2]])
    async with chromium() as browser:
        kanban = await live_page(browser, board, "/projects/demo")
        columns = await kanban.eval_on_selector_all(
            "#kanban .column", "cs => cs.map(c => [c.dataset.column, c.querySelector('.count').textContent])")
        kanban_status = await kanban.text_content("#project-status")
        overview = await live_page(browser, board, "/")
        headers = await overview.eval_on_selector_all("table.grid thead th", "hs => hs.map(h => h.textContent)")
        cells = await overview.eval_on_selector_all("#project-demo td[data-column]",
                                                    "ts => ts.map(t => [t.dataset.column, t.textContent])")
        overview_status = await overview.text_content("#project-demo .badge")
    assert [name for name, _ in columns] == ["Defined", "Ready", "Running", "Waiting", "Review", "Stuck", "Done"]
    assert headers[2:2 + len(columns)] == [name for name, _ in columns]  # the same column names, in order
    assert cells == columns  # and the same counts
    assert dict(columns)["Stuck"] == "2" and dict(columns)["Defined"] == "1" and dict(columns)["Ready"] == "2"
    assert kanban_status == overview_status == "ACTIVE"


@needs_chromium()
@pytest.mark.anyio
@pytest.mark.daemon
@pytest.mark.slow
async def test_a_column_of_1000_tasks_shows_50_and_pages_the_rest(tmp_path: Path) -> None:
    from agentqueue.services import Services

    env = cli_env(tmp_path / "aq", tmp_path / "user")
    home = Path(env["AGENTQUEUE_HOME"])
    svc = Services(home)  # the store the daemon will serve: 1,000 queued tasks no agent can take
    try:
        project = svc.projects.create("Big").id
        for n in range(1000):
            svc.tasks.create(project, f"Item {n:04d}", "SAY x", priority=10, agent_type="codex")
    finally:
        svc.close()
    live = start_daemon(env, "--port", str(free_port()))
    live.base = base_of(live)  # type: ignore[attr-defined]
    try:
        async with chromium() as browser:
            page = await live_page(browser, live, f"/projects/{project}")
            assert await page.locator("#col-Ready .card").count() == 50
            assert await page.text_content("#col-Ready .count") == "1000"
            assert await page.text_content("#shown-count") == "1000"
            await page.click("#col-Ready a.more")
            await page.wait_for_url("**column=Ready**")
            assert await page.locator("#col-Ready .card").count() == 200
            assert "cards 1–200 of 1000" in await page.text_content(".column-page")
            await page.click("text=next 200 of 800 more")
            await page.wait_for_url("**offset=200**")
            assert await page.locator("#col-Ready .card").count() == 200
            assert "cards 201–400 of 1000" in await page.text_content(".column-page")
    finally:
        stop_daemon(live)


@needs_chromium()
@pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")
@pytest.mark.anyio
@pytest.mark.daemon
@pytest.mark.real_cli
async def test_the_usage_charts_time_axis_spans_the_days_of_the_data(
        tmp_path: Path, mock_api: MockAnthropic) -> None:  # noqa: F811
    env = cli_env(tmp_path / "aq", tmp_path / "user", AGENTQUEUE_CLAUDE_BIN=CLAUDE)
    live = start_daemon(env, "--port", str(free_port()))
    live.base = base_of(live)  # type: ignore[attr-defined]
    try:
        live.call("create_project", name="Demo")
        live.call("add_repo", source="init", project_id="demo", name="app")
        live.call("create_agent", name="model", agent_type="claude-code")
        task = live.call("create_task", project_id="demo", title="Spend", max_retries=0,
                         description="SCENARIO:plain say done")
        live.wait_status(task["id"], "COMPLETED", timeout=120)
        async with chromium() as browser:
            page = await live_page(browser, live, "/usage")
            await page.locator("#usage-chart .uplot").first.wait_for()
            scale = await page.evaluate("window.usageCharts.map(u => [u.scales.x.min, u.scales.x.max])")
            days = await page.eval_on_selector_all("#usage-chart .uplot", "us => us.map(u => u.dataset.days)")
            day = await page.text_content("table.grid tbody td")  # the one day of data, as the table says it
    finally:
        stop_daemon(live)
    assert len(scale) == 2, scale  # tokens and cost
    for low, high in scale:  # one day of data: the day before to the day after, not years
        assert high - low == 2 * 86400, scale
    months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    _, month, date = (int(part) for part in day.split("-"))
    label = f"{months[month - 1]} {date}"
    for drawn in days:  # days, not hours or years, and the data's day among them
        assert label in drawn.split(","), (drawn, day)
        assert all(len(d.split()) == 2 and d.split()[0] in months for d in drawn.split(",")), drawn
