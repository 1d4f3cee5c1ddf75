"""`kill -9` of the daemon mid-run: on restart the task is recovered, the orphan agent killed, and the
work done exactly once. Real daemon processes, the real `claude` CLI, a loopback model mock."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from agentqueue import daemon, paths
from agentqueue.store.sqlite import SqliteStore as Store

from .mock_anthropic import USAGE, MockAnthropic
from .processes import alive, claude_env
from .third_party import npm_bin
from .slowdown import scaled

CLAUDE = npm_bin("claude")
pytestmark = [pytest.mark.daemon, pytest.mark.real_cli, pytest.mark.anyio, pytest.mark.integration,
              pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")]


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def test_daemon_killed_mid_run_is_recovered_without_losing_or_repeating_the_task(tmp_path: Path) -> None:
    mock = MockAnthropic().start()
    home = tmp_path / "aq"
    env = claude_env(tmp_path, mock.base_url, CLAUDE, AGENTQUEUE_HOME=str(home), AGENTQUEUE_POLL_SECONDS="0.1")

    def start_daemon() -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--no-http"], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: paths.socket_path(home).exists() and daemon.read_daemon_info(home), 30, "the daemon")
        return process

    first = start_daemon()
    try:
        params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"], env=env)
        async with Client(params) as client:
            # First start of a home with `claude` available: the daemon registered an agent for it.
            agents = await client.call_tool("list_agents", {})
            assert [a["id"] for a in agents.structured_content["agents"]] == ["claude"]
            for tool, args in (("create_project", {"name": "Demo"}),
                               ("add_repo", {"source": "init", "name": "app", "project_id": "demo"}),
                               ("create_task", {"title": "Say hello", "project_id": "demo", "repo_id": "app",
                                                "description": "SCENARIO:slow_write Create claude_hello.txt."})):
                result = await client.call_tool(tool, args)
                assert not result.is_error, result.content[0].text
            task_id = result.structured_content["id"]
        store = Store(paths.db_path(home))

        def agent_pid() -> int | None:
            row = store.one("SELECT t.status, a.pid FROM tasks t JOIN agents a ON a.current_task = t.id "
                            "WHERE t.id = ?", (task_id,))
            return row["pid"] if row and row["status"] == "IN_PROGRESS" and row["pid"] else None

        orphan = wait_for(agent_pid, 60, "the agent to start")
        wait_for(lambda: mock.messages_for("slow_write"), 30, "claude to call the model")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        # Inside the sandbox the run dies with its daemon (bubblewrap's --die-with-parent, issue 18); whether the
        # kernel has reaped it yet when we look is a race, so only what recovery must do is checked: no orphan
        # after it, the work landed once, nothing repeated.

        second = start_daemon()
        try:
            wait_for(lambda: not alive(orphan), 10, "recovery to kill the orphan agent")
            final = wait_for(lambda: (store.one("SELECT status FROM tasks WHERE id = ?", (task_id,)) or {}).get(
                "status") in ("COMPLETED", "BLOCKED") and store.one("SELECT * FROM tasks WHERE id = ?", (task_id,)),
                90, "the task to finish")
            assert final["status"] == "COMPLETED" and final["retry_count"] == 1
            events = store.all("SELECT payload FROM events WHERE task_id = ? AND event_type = 'task.ready'", (task_id,))
            assert any(json.loads(e["payload"])["reason"] == "recovered" for e in events)
            repo = store.one("SELECT checkout_path FROM repos WHERE id = 'app'")["checkout_path"]
            shown = subprocess.run(["git", "show", "main:claude_hello.txt"], cwd=repo, capture_output=True, text=True)
            assert shown.stdout.strip() == "hello from claude"
            touching = subprocess.run(["git", "log", "--format=%H", "main", "--", "claude_hello.txt"], cwd=repo,
                                      capture_output=True, text=True).stdout.split()
            assert len(touching) == 1, "the work landed exactly once"
            assert store.scalar("SELECT count(*) FROM task_results WHERE task_id = ? AND status = 'completed'",
                                (task_id,)) == 1
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(timeout=20)
        store.close()
    finally:
        if first.poll() is None:
            first.kill()
        mock.stop()


async def test_a_run_cut_by_the_daemons_death_is_paid_for(tmp_path: Path) -> None:
    """Issue 34 (the soak found it): a daemon killed mid-run never recorded that run, so the model responses it had
    been served were in no ledger row. The runner keeps what the stream showed on disk as it goes; recovery records
    it, partial, exactly what the mock served."""
    mock = MockAnthropic().start()
    home = tmp_path / "aq"
    env = claude_env(tmp_path, mock.base_url, CLAUDE, AGENTQUEUE_HOME=str(home), AGENTQUEUE_POLL_SECONDS="0.1",
                     CLAUDE_CODE_MAX_RETRIES="0")

    def start_daemon() -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--no-http"], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: paths.socket_path(home).exists() and daemon.read_daemon_info(home), 60, "the daemon")
        return process

    first = start_daemon()
    second = None
    try:
        params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"], env=env)
        async with Client(params) as client:
            for tool, args in (("create_project", {"name": "Demo"}),
                               ("add_repo", {"source": "init", "name": "app", "project_id": "demo"}),
                               ("create_task", {"title": "Works, then waits", "project_id": "demo",
                                                "repo_id": "app", "max_retries": 3,
                                                "description": "SCENARIO:busy_then_hang STEPS[2] keep at it"})):
                result = await client.call_tool(tool, args)
                assert not result.is_error, result.content[0].text
            task_id = result.structured_content["id"]
        log = paths.task_log(home, task_id)
        # Two responses served and read (each a Bash call whose result is in the log); the third request hangs.
        wait_for(lambda: log.exists() and log.read_text().count("[result]") >= 2, 90, "two tool calls to run")
        wait_for(lambda: log.with_suffix(".usage.json").exists(), 10, "the run's usage on disk")
        served = mock.served_tokens("SCENARIO:busy_then_hang")
        assert served["total"] == 2 * sum(USAGE.values())
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
        store = Store(paths.db_path(home))
        assert store.scalar("SELECT count(*) FROM token_ledger WHERE task_id = ?", (task_id,)) == 0

        second = start_daemon()
        wait_for(lambda: store.scalar("SELECT count(*) FROM events WHERE task_id = ? AND event_type = 'task.ready' "
                                      "AND payload LIKE '%recovered%'", (task_id,)), 60, "recovery")
        rows = store.all("SELECT input, output, cache_read, cache_write, total, cost_usd, partial, agent_id "
                         "FROM token_ledger WHERE task_id = ?", (task_id,))
        assert len(rows) == 1, rows
        assert {k: rows[0][k] for k in served} == served
        assert rows[0]["partial"] == 1 and rows[0]["agent_id"] == "claude"
        assert rows[0]["cost_usd"] == pytest.approx(2 * 0.001495)  # the CLI's own price of a mock response
        assert not log.with_suffix(".usage.json").exists() or store.scalar(
            "SELECT status FROM tasks WHERE id = ?", (task_id,)) == "IN_PROGRESS"  # the rerun keeps its own
        store.close()
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=30)
        mock.stop()
