"""The REAL `claude` CLI (2.1.328) as the MCP client of MCP Tasks (issue 24): it waits on an AgentQueue task, and the
person answers the task's agent's permission question in Claude Code's own form.

Claude Code declares `io.modelcontextprotocol/tasks` only in its interactive terminal session (its `-p` print mode
does not: a feature gate that defaults to the `cli` entrypoint), so it runs here on a pseudo-terminal, as a person
runs it. The model behind it is the loopback mock (`SCENARIO:wait_task`); the task runs on the daemon's own
`claude` agent against the same mock, and its `touch` asks a person. A stdio tap in front of `agentqueue mcp`
records the JSON-RPC Claude Code sends and gets.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from agentqueue.services import Services

from .git_fixtures import on_main
from .mock_anthropic import MockAnthropic
from .processes import Terminal, claude_env, wait_for
from .test_engine_claude import CLAUDE, mock_api  # noqa: F401  (mock_api: fixture)

pytestmark = [pytest.mark.anyio, pytest.mark.daemon, pytest.mark.integration,
              pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")]

TAP = Path(__file__).with_name("jsonrpc_tap.py")
RIGHT, DOWN, ENTER = b"\x1b[C", b"\x1b[B", b"\r"


def person_at_claude_code(tmp_path: Path, base_url: str, home: Path, log: Path) -> tuple[list[str], dict[str, str],
                                                                                         Path]:
    """Claude Code as a person starts it in a folder: onboarded, the folder trusted, AgentQueue's plugin configured."""
    work = tmp_path / "work"
    work.mkdir()
    env = claude_env(tmp_path, base_url, str(CLAUDE), TERM="xterm-256color", CLAUDE_CODE_MAX_RETRIES="0")
    (tmp_path / "user-home" / ".claude.json").write_text(json.dumps({
        "hasCompletedOnboarding": True, "theme": "dark",
        "customApiKeyResponses": {"approved": [env["ANTHROPIC_API_KEY"][-20:]], "rejected": []},
        "projects": {str(work): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}}}))
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"agentqueue": {
        "command": sys.executable, "args": [str(TAP), str(log), sys.executable, "-m", "agentqueue", "mcp"],
        "env": {"AGENTQUEUE_HOME": str(home)}}}}))
    argv = [str(CLAUDE), "--strict-mcp-config", "--mcp-config", str(config),
            "--allowedTools", "mcp__agentqueue__wait_for_task"]
    return argv, env, work


def wire(log: Path) -> list[tuple[str, dict[str, Any]]]:
    return [(row["dir"], row["message"]) for row in map(json.loads, log.read_text().splitlines())
            if isinstance(row["message"], dict)]


def told_completed(mock: MockAnthropic, task_id: str) -> bool:
    """Claude Code told its model the MCP task completed, with the AgentQueue task as it ended."""
    return any("<status>completed</status>" in text and f'\\"id\\":\\"{task_id}\\"' in text
               for text in (json.dumps(r.get("messages")) for r in list(mock.requests)))


async def test_claude_code_waits_as_an_mcp_task_and_its_person_answers_the_agent_there(
        live_home: Path, tmp_path: Path, mock_api: MockAnthropic) -> None:  # noqa: F811
    services = Services(live_home)
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("claude", "claude-code")
    task = services.tasks.create("demo", "Ask", "SCENARIO:run_cmd CMD[touch CLAUDE_CODE_MARKER]", max_retries=0)
    plugin = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"],
                                   env={**os.environ, "AGENTQUEUE_HOME": str(live_home), "AGENTQUEUE_PORT": "0"})
    async with Client(plugin) as client:  # the daemon is up (its engine starts the task's agent)
        await client.list_tools()
    log = tmp_path / "rpc.jsonl"
    argv, env, work = person_at_claude_code(tmp_path, mock_api.base_url, live_home, log)
    try:
        with Terminal(argv, env, cwd=work) as terminal:
            assert await anyio.to_thread.run_sync(terminal.read_until, "❯".encode(), 90), terminal.text[-2000:]
            await anyio.sleep(8)  # its MCP servers connect after the prompt shows
            terminal.type(f"SCENARIO:wait_task TASK[{task.id}]".encode())
            await anyio.sleep(0.5)
            terminal.type(ENTER)
            shown = await anyio.to_thread.run_sync(terminal.shows, "Allow it?", 150)
            assert shown, "\n".join(line.rstrip() for line in terminal.lines).strip()
            # The person picks "allow" in the form and accepts it.
            for key in (RIGHT, ENTER, DOWN, ENTER):
                await anyio.sleep(1.5)
                terminal.type(key)
            await wait_for(lambda: not services.requests.list("pending", task_id=task.id), 60, "the answer")
            await wait_for(lambda: told_completed(mock_api, task.id), 150, "Claude Code to be told the task completed")
    finally:
        services.close()
    services = Services(live_home)
    (request,) = services.requests.list(None, task_id=task.id)
    assert request.status == "allowed" and request.decided_by == "person (MCP task)"
    assert services.tasks.get(task.id).status == "COMPLETED" and on_main(services, "CLAUDE_CODE_MARKER") == ""
    services.close()
    messages = wire(log)
    calls = [m for d, m in messages if d == "c2s" and m.get("method") == "tools/call"]
    assert calls and calls[0]["params"]["name"] == "wait_for_task"
    assert "io.modelcontextprotocol/tasks" in calls[0]["params"]["_meta"][
        "io.modelcontextprotocol/clientCapabilities"]["extensions"]
    created = [m["result"] for d, m in messages if d == "s2c" and (m.get("result") or {}).get("resultType") == "task"]
    assert created and created[0]["taskId"]
    polled = [m["result"]["status"] for d, m in messages if d == "s2c" and "status" in (m.get("result") or {})
              and m["result"].get("taskId") == created[0]["taskId"]]
    assert "input_required" in polled and polled[-1] == "completed", polled
    updates = [m["params"] for d, m in messages if d == "c2s" and m.get("method") == "tasks/update"]
    assert {"action": "accept", "content": {"decision": "allow"}} in [
        r for u in updates for r in u["inputResponses"].values()], updates
