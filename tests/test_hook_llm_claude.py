"""An `llm` hook end to end: the real daemon runs the real `claude` CLI with AgentQueue's own MCP server
attached; the (mock) model calls create_task through it, and the task really exists afterwards."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from agentqueue import daemon, paths

from .mock_anthropic import HOOK_TASK, USAGE, MockAnthropic
from .processes import claude_env
from .third_party import npm_bin
from .slowdown import scaled

CLAUDE = npm_bin("claude")
pytestmark = [pytest.mark.daemon, pytest.mark.real_cli, pytest.mark.anyio, pytest.mark.integration,
              pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")]


async def test_llm_hook_creates_a_task_through_agentqueue_mcp_server(tmp_path: Path) -> None:
    mock = MockAnthropic().start()
    home = tmp_path / "aq"
    env = claude_env(tmp_path, mock.base_url, CLAUDE, AGENTQUEUE_HOME=str(home))
    server = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--no-http"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not (paths.socket_path(home).exists() and daemon.read_daemon_info(home)):
            assert time.monotonic() < deadline and server.poll() is None, "daemon did not start"
            time.sleep(0.05)
        params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"], env=env)
        async with Client(params) as client:
            async def call(tool: str, args: dict) -> dict:
                result = await client.call_tool(tool, args)
                assert not result.is_error, result.content[0].text
                return result.structured_content

            await call("create_project", {"name": "Demo"})
            await call("create_hook", {"name": "Planner", "project_id": "demo",
                                       "trigger": {"type": "periodic", "interval_seconds": 86400},
                                       "prompt_template": "SCENARIO:hook_create_task Plan the next task for "
                                                          "{{project_id}}."})
            fired = await call("fire_hook", {"hook_id": "planner"})
            with anyio.fail_after(scaled(60)):
                while True:
                    runs = (await call("list_hook_runs", {"hook_id": "planner"}))["runs"]
                    if runs and runs[0]["status"] != "running":
                        break
                    await anyio.sleep(0.2)
            run = runs[0]
            assert run["id"] == fired["run_id"] and run["status"] == "completed", run
            tasks = (await call("list_tasks", {"project_id": "demo"}))["tasks"]
            assert [t["title"] for t in tasks] == [HOOK_TASK["title"]]
            # The daemon knew the model's connection as the hook's run by its process, not by its environment.
            [made] = (await call("get_audit_log", {"action": "tool:create_task"}))["entries"]
            assert made["actor"] == "hook:planner"
            requests = len(mock.messages_for("hook_create_task"))
            assert requests >= 2  # the tool call, then the answer after its result
            assert run["tokens_used"] == sum(USAGE.values()) * requests
            usage = await call("get_token_usage", {"project_id": "demo"})
            assert usage["total"]["total"] == run["tokens_used"] and usage["total"]["cost_usd"] > 0
            created = [e for e in (await call("get_recent_events", {"event_type": "hook.completed"}))["events"]]
            assert created and created[0]["payload"]["run_id"] == run["id"]
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        mock.stop()
