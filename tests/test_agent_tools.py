"""A task's own agent gets AgentQueue's `agent` toolset: it queues a follow-up of its task, up to a depth.

The real daemon, the real `claude` CLI (pointed at the loopback model mock) and the real plugin it
launches as its MCP server: the scripted model calls `mcp__agentqueue__create_task`. The follow-up
depends on the task that queued it and sits one level deeper; the level beyond
`[engine] max_task_depth` is refused, and the model is told why.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from agentqueue import daemon, paths
from agentqueue.store.sqlite import SqliteStore as Store
from agentqueue.server.toolsets import NAMED_TOOLSETS

from .conftest import ok
from .mock_anthropic import FOLLOWUP, MockAnthropic
from .processes import claude_env, wait_for, parent_and_follow_up
from .test_engine_claude import CLAUDE

pytestmark = [pytest.mark.daemon, pytest.mark.real_cli, pytest.mark.anyio, pytest.mark.integration,
              pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")]


def offered_tools(mock: MockAnthropic) -> set[str]:
    """AgentQueue's tools as the model was offered them in its first request (as tools, or listed as
    deferred tools it can load: Claude Code defers MCP tools behind ToolSearch)."""
    first = json.dumps(mock.messages_for("followup")[0])
    return set(re.findall(r"mcp__agentqueue__(\w+)", first))


def tool_results(mock: MockAnthropic) -> list[str]:
    out = []
    for request in mock.messages_for("followup"):
        message = request["messages"][-1]
        if isinstance(message.get("content"), list):
            out += [json.dumps(b.get("content")) for b in message["content"] if b.get("type") == "tool_result"]
    return out


async def test_an_agent_queues_a_follow_up_of_its_task_and_the_depth_limit_holds(tmp_path: Path) -> None:
    mock = MockAnthropic().start()
    home = tmp_path / "aq"
    env = claude_env(tmp_path, mock.base_url, CLAUDE, AGENTQUEUE_HOME=str(home), AGENTQUEUE_POLL_SECONDS="0.1",
                     AGENTQUEUE_MAX_TASK_DEPTH="1")
    server = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--no-http"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = None
    try:
        await wait_for(lambda: (daemon.read_daemon_info(home) or {}).get("pid") == server.pid, 60, "the daemon")
        params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"], env=env)
        async with Client(params, mode="legacy") as client:
            await ok(client, "create_project", name="Demo")
            await ok(client, "add_repo", source="init", name="app", project_id="demo")
            first = await ok(client, "create_task", title="Start", project_id="demo",
                             description="SCENARIO:followup Do the work; queue what is out of scope.")
        store = Store(paths.db_path(home))

        parent, child = await parent_and_follow_up(store, home, 90)
        assert parent["id"] == first["id"] and (parent["parent_task_id"], parent["depth"] or 0) == (None, 0)
        assert (child["title"], child["parent_task_id"], child["depth"]) == (FOLLOWUP["title"], first["id"], 1)
        assert store.scalar("SELECT depends_on FROM task_dependencies WHERE task_id = ?",
                            (child["id"],)) == first["id"]
        # The follow-up's own agent tried to go one level deeper: refused, with the reason, and nothing queued.
        said = tool_results(mock)
        assert len(said) == 2 and child["id"] in said[0] and "level(s) deep" in said[1], said
        # The agents saw only the agent toolset, not the whole server.
        assert offered_tools(mock) == set(NAMED_TOOLSETS["agent"])
        # Both calls are in the audit log, by the agent, against their tasks.
        rows = store.all("SELECT actor, task_id, outcome FROM audit_log WHERE action = 'tool:create_task' "
                         "AND actor LIKE 'agent:%' ORDER BY id")
        assert [(r["task_id"], r["outcome"]) for r in rows] == [(first["id"], "ok"), (child["id"], "error")]
    finally:
        if store is not None:
            store.close()
        daemon.stop(home, timeout=15)
        if server.poll() is None:
            server.kill()
        mock.stop()
