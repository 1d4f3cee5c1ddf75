"""Logins and quotas for the whole queue (issue 22): a failed login or a usage limit parks the agent kind, its tasks
stay READY, one `queue.parked` event; it resumes at its reset time, when a login check passes, or on
`agentqueue resume`.

Real parts: the captured streams of the real CLIs (tests/data/streams), a real store, the engine's real claim pass;
the acceptance tests run the real `claude` CLI against the loopback model mock (tests/mock_anthropic.py).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest

import httpx2 as httpx

from agentqueue import paths
from agentqueue.engine.adapters import PARSERS
from agentqueue.engine.adapters.limits import reset_time
from agentqueue.engine.orchestrator import Engine, EngineConfig
from agentqueue.engine.watchdog import WatchdogLimits
from agentqueue.services import Services

from .cli_helpers import cli_env, cli_in_process, cli_json_in_process, start_daemon, stop_daemon
from .mock_anthropic import MockAnthropic
from .test_board import free_port
from .test_engine_claude import CLAUDE, mock_api, queue  # noqa: F401  (fixtures)
from .slowdown import scaled

STREAMS = Path(__file__).parent / "data" / "streams"


def first_account_error(agent_type: str, sample: str) -> tuple[int, object]:
    """The line (1-based) of a captured stream at which the adapter's parser reports the account error, and it."""
    parser = PARSERS[agent_type]()
    for number, line in enumerate((STREAMS / sample).read_text().splitlines(), 1):
        parser.feed(line)
        if parser.account_error is not None:  # type: ignore[attr-defined]
            return number, parser.account_error  # type: ignore[attr-defined]
    return 0, None


@pytest.mark.parametrize(("agent_type", "sample", "line", "kind", "words"), [
    # Claude: the first `api_retry` event (the CLI would retry 10 times more), or the "Not logged in" answer.
    ("claude-code", "claude_stream_401.jsonl", 2, "auth", "401"),
    ("claude-code", "claude_stream_429.jsonl", 2, "rate_limit", "429"),
    ("claude-code", "claude_stream_not_logged_in.jsonl", 2, "auth", "Not logged in"),
    # Codex: the first "Reconnecting... 1/5 (unexpected status 401 …)", not the failed turn after five retries.
    ("codex", "codex_app_server_401.jsonl", 12, "auth", "401 Unauthorized"),
    ("codex", "codex_app_server_429.jsonl", 12, "rate_limit", "429"),
    ("gemini", "gemini_stream_json_api_error.jsonl", 3, "auth", "API key not valid"),
])
def test_each_adapter_sees_a_failed_login_or_a_limit_at_its_first_error_line(
        agent_type: str, sample: str, line: int, kind: str, words: str) -> None:
    number, found = first_account_error(agent_type, sample)
    assert number == line and found is not None, (number, found)
    assert found.kind == kind and words in found.message  # type: ignore[attr-defined]


def test_a_stream_without_an_account_error_never_parks() -> None:
    for agent_type, sample in [("claude-code", "claude_stream_mcp_tool_allowed.jsonl"),
                               ("claude-code", "claude_stream_400_prompt_too_long.jsonl"),
                               ("claude-code", "claude_stream_error_max_turns.jsonl"),
                               ("codex", "codex_app_server_tool.jsonl"), ("gemini", "gemini_stream_json_tool.jsonl")]:
        assert first_account_error(agent_type, sample) == (0, None), sample


def test_gemini_parks_on_its_first_retry_line_on_stderr_but_leaves_a_5xx_to_its_retries() -> None:
    limited, overloaded = PARSERS["gemini"](), PARSERS["gemini"]()
    limited.feed_stderr("Attempt 1 failed with status 429. Retrying with backoff... _ApiError: "  # type: ignore
                        '{"error":{"code":429,"message":"Too many requests","status":"RESOURCE_EXHAUSTED"}}')
    overloaded.feed_stderr("Attempt 1 failed with status 503. Retrying with backoff... "  # type: ignore
                           "The model is overloaded. Please try again later.")
    assert limited.account_error is not None and limited.account_error.kind == "rate_limit"  # type: ignore
    assert overloaded.account_error is None  # type: ignore[attr-defined]


def test_reset_times_are_read_from_what_the_clis_say() -> None:
    now = datetime(2026, 11, 26, 13, 0, tzinfo=UTC).timestamp()  # 1 pm UTC
    at_3pm = datetime(2026, 11, 26, 15, 0, tzinfo=UTC).timestamp()
    assert reset_time("5-hour limit reached ∙ resets 3pm (UTC)", now) == at_3pm
    assert reset_time("You've hit your limit · resets at 3:00 PM (UTC)", now) == at_3pm
    assert reset_time("limit reached · resets 11am (UTC)", now) == at_3pm + 20 * 3600  # tomorrow's 11 am
    assert reset_time("You've hit your usage limit. Try again in 2 hours 30 minutes.", now) == now + 9000
    assert reset_time("429 Too Many Requests, retry-after: 5", now) == now + 5
    assert reset_time("Claude AI usage limit reached|1795689600", now) == 1795689600
    assert reset_time("Number of request tokens has exceeded your per-minute rate limit", now) is None


def test_a_codex_usage_limit_event_parks_until_its_resets_at() -> None:
    parser = PARSERS["codex"]()
    resets = time.time() + 3600
    parser.feed(json.dumps({"method": "account/rateLimits/updated", "params": {"rateLimits": {
        "primary": {"usedPercent": 100, "windowDurationMins": 300, "resetsAt": int(resets)}}}}))
    found = parser.account_error  # type: ignore[attr-defined]
    assert found is not None and found.kind == "quota" and found.resets_at == pytest.approx(resets, abs=1)


def test_a_claude_retry_after_becomes_the_reset_time_and_its_own_backoff_does_not() -> None:
    def retried(delay_ms: int, attempt: int = 1) -> object:
        parser = PARSERS["claude-code"]()
        parser.feed(json.dumps({"type": "system", "subtype": "api_retry", "attempt": attempt, "max_retries": 10,
                                "retry_delay_ms": delay_ms, "error_status": 429, "error": "rate_limit"}))
        return parser.account_error  # type: ignore[attr-defined]

    told = retried(5149)  # the API's retry-after: 5
    assert told.kind == "rate_limit" and told.resets_at == pytest.approx(time.time() + 5.149, abs=1)  # type: ignore
    assert retried(557).resets_at is None  # type: ignore[attr-defined]  # the CLI's own first backoff
    assert retried(4127, attempt=4).resets_at is None  # type: ignore[attr-defined]


# -- acceptance: the real claude CLI on the loopback mock --------------------------------------------------------------
def parked_engine(services: Services, login_check: float = 0.5) -> Engine:
    config = EngineConfig(poll_seconds=0.1, rate_limit_backoff=30, login_check_seconds=login_check,
                          limits=WatchdogLimits(stall_seconds=scaled(60), timeout_seconds=scaled(120)))
    return Engine(services, services.home, config=config)


def events_of(services: Services, event_type: str) -> list:
    return services.events.recent(50, event_type=event_type)


async def wait_for(what: str, condition, timeout: float = 90) -> None:  # type: ignore[no-untyped-def]
    timeout = scaled(timeout)
    try:
        with anyio.fail_after(timeout):
            while not condition():
                await anyio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}") from None


@pytest.mark.real_cli
@pytest.mark.anyio
@pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")
async def test_a_failed_login_parks_the_kind_at_the_first_error_and_a_passing_check_resumes_it(
        queue: Services, mock_api: MockAnthropic, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.delenv("CLAUDE_CODE_MAX_RETRIES")  # the CLI's own retries, as a person has them: 10 of them
    mock_api.outage = (401, {})
    tasks = [queue.tasks.create("demo", f"Task {n}", f"Say hello {n}.", repo_id="app", max_retries=3)
             for n in range(3)]
    engine = parked_engine(queue)
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        await wait_for("the kind to park", lambda: queue.parking.parked())
        await wait_for("the run to end", lambda: not engine.running)
        # Stopped at the first error line: the CLI asked once (its first retry was announced, not made, or just
        # made), where its own ten retries would have asked 11 times over more than a minute.
        refused = len(mock_api.requests)
        assert 1 <= refused <= 2, refused
        row = queue.parking.parked()[0]
        assert row["agent_type"] == "claude-code" and row["reason"] == "auth" and row["until"] is None
        # Every task of the kind stays READY, none BLOCKED, no retry spent; a check that still fails keeps it parked.
        await wait_for("a failing login check", lambda: (queue.parking.parked() or [{}])[0].get("checks", 0) >= 1)
        for task in tasks:
            current = queue.tasks.get(task.id)
            assert current.status == "READY" and current.retry_count == 0, current
        assert len(mock_api.requests) == refused  # nothing ran while parked
        log = engine.log_path(tasks[0].id).read_text()
        assert "[queue] auth at the first error line" in log
        status = queue.system.status()
        assert status["parked"][0]["agent_type"] == "claude-code" and "claude auth login" in status["parked"][0]["fix"]
        # config.toml is read again live (issue 35.9): the fix never sends the person to restart the daemon, which
        # would stop every running agent for nothing.
        fix = status["parked"][0]["fix"]
        assert "restart" not in fix.replace("no restart needed", "") and "within a second" in fix, fix
        # The API takes the key again: the next check resumes the kind by itself and the three tasks run.
        mock_api.outage = None
        await wait_for("the three tasks to complete",
                       lambda: all(queue.tasks.get(t.id).status == "COMPLETED" for t in tasks), timeout=150)
        await engine.shutdown()
        tg.cancel_scope.cancel()
    parked = events_of(queue, "queue.parked")
    assert len(parked) == 1, [e.payload for e in parked]
    assert parked[0].payload["agent_type"] == "claude-code" and parked[0].payload["reason"] == "auth"
    assert {"until", "message", "fix"} <= set(parked[0].payload)
    assert [e.payload["by"] for e in events_of(queue, "queue.resumed")] == ["check"]
    assert queue.store.scalar("SELECT count(*) FROM events WHERE event_type = 'task.blocked'") == 0


@pytest.mark.real_cli
@pytest.mark.anyio
@pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")
async def test_a_429_with_a_reset_time_parks_until_then_and_resumes_on_time(
        queue: Services, mock_api: MockAnthropic, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    monkeypatch.delenv("CLAUDE_CODE_MAX_RETRIES")
    mock_api.outage = (429, {"retry-after": "5"})
    task = queue.tasks.create("demo", "Limited", "Say hello.", repo_id="app")
    engine = parked_engine(queue)  # its own backoff is 30 s: resuming within seconds means the reset time was read
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        await wait_for("the kind to park", lambda: queue.parking.parked())
        mock_api.outage = None  # the limit is over when it said; only the reset time decides when runs start again
        row = queue.parking.parked()[0]
        assert row["reason"] == "rate_limit" and row["until"] is not None
        until = datetime.fromisoformat(row["until"].replace("Z", "+00:00"))
        parked_at = datetime.fromisoformat(row["parked_at"].replace("Z", "+00:00"))
        assert 3.5 <= (until - parked_at).total_seconds() <= 8, (row["parked_at"], row["until"])
        await wait_for("the task to complete", lambda: queue.tasks.get(task.id).status == "COMPLETED", timeout=90)
        await engine.shutdown()
        tg.cancel_scope.cancel()
    resumed = events_of(queue, "queue.resumed")
    assert [e.payload["by"] for e in resumed] == ["reset_time"]
    at = datetime.fromisoformat(resumed[0].timestamp.replace("Z", "+00:00"))
    assert at >= until, (resumed[0].timestamp, row["until"])  # not before
    assert (at - until).total_seconds() < 5, (resumed[0].timestamp, row["until"])  # and within a few seconds after
    starts = [e.timestamp for e in queue.events.recent(20, task_id=task.id, event_type="task.started")]
    assert len(starts) == 2 and min(starts) < row["until"] <= max(starts)  # the second run began after the reset
    assert len(events_of(queue, "queue.parked")) == 1
    assert queue.tasks.get(task.id).retry_count == 0


# -- a person: `agentqueue resume`, `agentqueue status`, doctor --------------------------------------------------------
@pytest.mark.daemon
def test_agentqueue_status_and_the_board_show_a_parked_kind_and_resume_unparks_it(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "aq", tmp_path / "user")
    live = start_daemon(env, "--port", str(free_port()))
    try:
        svc = Services(tmp_path / "aq")  # the same store the daemon serves, as another process of the home
        try:
            svc.parking.park("codex", "key:abc", "quota", "You've hit your usage limit",
                             until="2099-01-01T00:00:00.000Z")
        finally:
            svc.close()
        shown = cli_json_in_process(env, "status")
        assert [p["agent_type"] for p in shown["parked"]] == ["codex"]
        text = cli_in_process(env, "status")
        assert "codex is parked" in " ".join(text.stdout.split()) and "2099-01-01" in text.stdout
        # The board's overview says it too, with the fix (the bearer token opens its pages).
        base = json.loads(paths.daemon_info_path(live.home).read_text())["http_url"].removesuffix("/mcp")
        token = paths.token_path(live.home).read_text().strip()
        page = httpx.get(f"{base}/", headers={"Authorization": f"Bearer {token}"})
        assert page.status_code == 200 and "Agent kind <b>codex</b> is parked (usage limit reached)" in page.text
        assert "until 2099-01-01T00:00:00.000Z" in page.text and "agentqueue resume" in page.text
        resumed = cli_in_process(env, "resume")
        assert resumed.returncode == 0 and "Unparked agent kind(s) codex" in resumed.stdout, resumed.stdout
        assert cli_json_in_process(env, "status")["parked"] == []
        events = live.call("get_recent_events", limit=20, event_type="queue.resumed")["events"]
        assert [e["payload"]["by"] for e in events] == ["person"]
        again = cli_in_process(env, "resume")
        assert "No agent kind was parked" in again.stdout
    finally:
        stop_daemon(live)


def register_claude(home: Path) -> None:
    """A home with a claude-code agent registered, the CLI recorded in config.toml [cli] as `install` does."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(f'[cli]\nclaude = "{CLAUDE}"\n')
    svc = Services(home)
    try:
        svc.agents.create("claude", "claude-code")
    finally:
        svc.close()


@pytest.mark.real_cli
@pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")
def test_doctor_fails_a_registered_agent_with_no_key_with_its_fix(tmp_path: Path) -> None:
    home, user = tmp_path / "aq", tmp_path / "user"
    env = cli_env(home, user, AGENTQUEUE_CLAUDE_BIN=str(CLAUDE), CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
    env.pop("ANTHROPIC_API_KEY", None)
    env.pop("ANTHROPIC_AUTH_TOKEN", None)
    register_claude(home)
    done = cli_in_process(env, "doctor", "--json")
    checks = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    login = checks["claude-code login"]
    assert done.returncode == 1 and login["level"] == "fail", login
    assert "not logged in" in login["detail"]
    assert "claude auth login" in login["fix"] and "ANTHROPIC_API_KEY" in login["fix"] and "[agent_env]" in login["fix"]
    assert "restart" not in login["fix"].replace("no restart needed", ""), login["fix"]


@pytest.mark.real_cli
@pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")
def test_doctor_checks_the_key_against_the_api(tmp_path: Path) -> None:
    mock = MockAnthropic().start()
    try:
        home, user = tmp_path / "aq", tmp_path / "user"
        env = cli_env(home, user, AGENTQUEUE_CLAUDE_BIN=str(CLAUDE), ANTHROPIC_API_KEY="test-key",
                      ANTHROPIC_BASE_URL=mock.base_url, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
        register_claude(home)
        fine = {c["name"]: c for c in json.loads(cli_in_process(env, "doctor", "--json").stdout)["checks"]}
        assert fine["claude-code login"]["level"] == "ok", fine["claude-code login"]
        mock.outage = (401, {})
        refused = {c["name"]: c for c in json.loads(cli_in_process(env, "doctor", "--json").stdout)["checks"]}
        assert refused["claude-code login"]["level"] == "fail" and "401" in refused["claude-code login"]["detail"]
        assert "ANTHROPIC_API_KEY" in refused["claude-code login"]["fix"]
    finally:
        mock.stop()
