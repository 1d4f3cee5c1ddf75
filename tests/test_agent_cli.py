"""An agent without MCP queues a follow-up through `agentqueue task create` (issue 24: a skill and a CLI for agents).

The real daemon and the real `claude` CLI on the loopback model mock, given no MCP server at all (a wrapper hands it
an empty `--mcp-config`): its scripted model runs `agentqueue task create …` through Bash, allowed by a policy rule.
The daemon knows the run from the calling process (SO_PEERCRED and its lineage), so the follow-up is the task's child,
one level deeper; the level beyond [engine] max_task_depth is refused and the agent reads the refusal as the
command's output. Each agent writes MEMORY.md with `agentqueue task memory`, and is refused a person's decision
(`agentqueue approve`) though the policy allows the command. A person's shell is a person's client, and a forged
AGENTQUEUE_TASK_ID names nobody. The real `codex` (which has the MCP tools too) and `gemini` (no MCP at all) do the
same through their shells.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.types import ElicitResult

from agentqueue import daemon, paths
from agentqueue.store.sqlite import SqliteStore as Store

from . import mock_gemini, mock_openai
from .conftest import ok
from .mock_anthropic import CLI_FOLLOWUP, CLI_MEMORY, MockAnthropic
from .processes import claude_env, wait_for, parent_and_follow_up
from .test_engine_claude import CLAUDE
from .third_party import npm_bin

pytestmark = [pytest.mark.daemon, pytest.mark.real_cli, pytest.mark.anyio, pytest.mark.integration,
              pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")]

AGENTQUEUE = str(Path(sys.executable).parent / "agentqueue")
CODEX, GEMINI = npm_bin("codex"), npm_bin("gemini")


def without_mcp(tmp_path: Path, claude: str) -> str:
    """The real claude, handed an empty MCP config in place of the engine's: an agent that has only its shell.

    The real CLI's folder goes on the agents' PATH (`[env] path`): the sandbox shows a run the folders on its PATH
    and its command's own, and a checkout under /tmp (a clean clone) is otherwise private to it."""
    home = tmp_path / "aq"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(f'[env]\npath = ["{Path(claude).parent}"]\n')
    wrapper = tmp_path / "bin" / "claude"
    wrapper.parent.mkdir()
    wrapper.write_text('#!/usr/bin/env bash\nargs=()\nnext=0\nfor a in "$@"; do\n'
                       '  if [ "$next" = 1 ]; then args+=(\'{"mcpServers":{}}\'); next=0; continue; fi\n'
                       '  [ "$a" = "--mcp-config" ] && next=1\n  args+=("$a")\ndone\n'
                       f'exec {claude} "${{args[@]}}"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


def bash_results(mock: MockAnthropic) -> list[str]:
    """What each Bash call told the model (its tool results, in order)."""
    out = []
    for request in mock.messages_for("cli_followup"):
        message = request["messages"][-1]
        if isinstance(message.get("content"), list):
            out += [json.dumps(b.get("content")) for b in message["content"] if b.get("type") == "tool_result"]
    return out


async def test_an_agent_without_mcp_queues_a_follow_up_through_the_cli_and_the_depth_limit_holds(
        tmp_path: Path) -> None:
    mock = MockAnthropic().start()
    home = tmp_path / "aq"
    env = claude_env(tmp_path, mock.base_url, without_mcp(tmp_path, CLAUDE), AGENTQUEUE_HOME=str(home),
                     AGENTQUEUE_POLL_SECONDS="0.1", AGENTQUEUE_MAX_TASK_DEPTH="1")
    server = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--no-http"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = None

    async def person(_context, _params) -> ElicitResult:  # the person approves the policy rule they add
        return ElicitResult(action="accept", content={"approve": True})

    try:
        await wait_for(lambda: (daemon.read_daemon_info(home) or {}).get("pid") == server.pid, 60, "the daemon")
        params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"], env=env)
        async with Client(params, mode="legacy", elicitation_callback=person) as client:
            await ok(client, "create_project", name="Demo")
            await ok(client, "add_repo", source="init", name="app", project_id="demo")
            for rule in ("Bash(agentqueue task:*)", "Bash(agentqueue approve:*)"):
                await ok(client, "edit_policy", project_id="demo", add_rule=rule, list="allow")
            first = await ok(client, "create_task", title="Start", project_id="demo",
                             description="SCENARIO:cli_followup Do the work; queue what is out of scope.")
        store = Store(paths.db_path(home))

        parent, child = await parent_and_follow_up(store, home, 120)
        assert parent["id"] == first["id"] and (parent["parent_task_id"], parent["depth"] or 0) == (None, 0)
        assert (child["title"], child["parent_task_id"], child["depth"]) == (CLI_FOLLOWUP["title"], first["id"], 1)
        # The agent ran the command in Bash and read its JSON; the follow-up's agent was refused one level deeper,
        # the refusal being what the command printed.
        said = bash_results(mock)
        assert len(said) == 6, said
        assert f'\\"id\\": \\"{child["id"]}\\"' in said[0] and '\\"parent_task_id\\"' in said[0], said[0]
        assert "level(s) deep" in said[3] and "agentqueue task:" in said[3], said[3]
        # Each agent wrote the project's memory through `agentqueue task memory`, scoped to its task's project.
        assert all('\\"mode\\": \\"append\\"' in said[i] for i in (1, 4)), said
        # A person's decision through the terminal is refused to a run, though the policy allowed the command.
        assert all("person's decision" in said[i] for i in (2, 5)), said
        workspace = Path(store.scalar("SELECT workspace FROM projects WHERE id = 'demo'"))
        assert (workspace / "memory" / "MEMORY.md").read_text().count(CLI_MEMORY) == 2
        # The model had no AgentQueue tool: it used the command.
        offered = [t.get("name", "") for t in mock.messages_for("cli_followup")[0].get("tools") or []]
        assert "Bash" in offered and not [name for name in offered if name.startswith("mcp__")], offered
        # Both calls are the agent's, against their tasks, in the audit log.
        rows = store.all("SELECT actor, task_id, outcome FROM audit_log WHERE action = 'tool:create_task' "
                         "AND actor LIKE 'agent:%' ORDER BY id")
        assert [(r["task_id"], r["outcome"]) for r in rows] == [(first["id"], "ok"), (child["id"], "error")]

        # A person's shell is a person's client: AGENTQUEUE_TASK_ID (here forged, naming the follow-up) names nobody.
        forged = {**env, "AGENTQUEUE_TASK_ID": child["id"]}
        by_hand = subprocess.run([AGENTQUEUE, "task", "create", "By hand", "-d", "Queued from a shell.",
                                  "--project", "demo"], env=forged, capture_output=True, text=True, timeout=60)
        assert by_hand.returncode == 0, by_hand.stderr
        made = json.loads(by_hand.stdout)
        row = store.one("SELECT parent_task_id, depth FROM tasks WHERE id = ?", (made["id"],))
        assert (row["parent_task_id"], row["depth"] or 0) == (None, 0)
        last = store.all("SELECT actor, task_id FROM audit_log WHERE action = 'tool:create_task' ORDER BY id DESC "
                         "LIMIT 1")[0]
        assert not last["actor"].startswith(("agent:", "process:")) and last["task_id"] is None, last
        listed = subprocess.run([AGENTQUEUE, "task", "list", "--all"], env=forged, capture_output=True, text=True,
                                timeout=60)
        assert {t["id"] for t in json.loads(listed.stdout)["tasks"]} >= {first["id"], child["id"], made["id"]}
    finally:
        if store is not None:
            store.close()
        daemon.stop(home, timeout=15)
        if server.poll() is None:
            server.kill()
        mock.stop()



def call_outputs(api: mock_openai.MockOpenAI) -> list[str]:
    """What each of Codex's shell calls printed, as the model was told it."""
    return list(dict.fromkeys(str(i.get("output")) for body in api.requests for i in body.get("input") or []
                              if isinstance(i, dict) and i.get("type") == "function_call_output"))


async def follow_up_through_the_cli(tmp_path: Path, agent_type: str, api: Any, cli_env: dict[str, str],
                                    title: str, said: Callable[[], list[str]]) -> None:
    """A real daemon runs `agent_type` on its model mock: the agent's shell queues the follow-up with `agentqueue task
    create`, and the follow-up's own agent is refused one level deeper (AGENTQUEUE_MAX_TASK_DEPTH=1)."""
    home = tmp_path / "aq"
    env = {**os.environ, **cli_env, "AGENTQUEUE_HOME": str(home), "AGENTQUEUE_POLL_SECONDS": "0.1",
           "AGENTQUEUE_MAX_TASK_DEPTH": "1"}
    server = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--no-http"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = None
    try:
        await wait_for(lambda: (daemon.read_daemon_info(home) or {}).get("pid") == server.pid, 60, "the daemon")
        params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"], env=env)
        async with Client(params, mode="legacy") as client:
            await ok(client, "create_project", name="Demo")
            await ok(client, "add_repo", source="init", name="app", project_id="demo")
            await ok(client, "create_agent", name=agent_type, agent_type=agent_type)
            first = await ok(client, "create_task", title="Start", project_id="demo", agent_type=agent_type,
                             description="SCENARIO:cli_followup Do the work; queue what is out of scope.")
        store = Store(paths.db_path(home))
        _, child = await parent_and_follow_up(store, home, 120, said=said)
        assert (child["title"], child["parent_task_id"], child["depth"]) == (title, first["id"], 1)
        told = said()
        assert len(told) == 2 and child["id"] in told[0] and "level(s) deep" in told[1], told
    finally:
        if store is not None:
            store.close()
        daemon.stop(home, timeout=15)
        if server.poll() is None:
            server.kill()
        api.stop()


@pytest.mark.skipif(CODEX is None, reason="codex CLI not installed (.ci/run installs it)")
async def test_codex_queues_a_follow_up_through_the_cli_too(tmp_path: Path) -> None:
    """Codex has AgentQueue's MCP tools (tests/test_permissions_codex.py); the CLI is a way to the queue as well."""
    api = mock_openai.MockOpenAI().start()
    cli_env = {**mock_openai.codex_home(tmp_path, api.base_url), "AGENTQUEUE_CODEX_BIN": CODEX}
    await follow_up_through_the_cli(tmp_path, "codex", api, cli_env, mock_openai.CLI_FOLLOWUP_TITLE,
                                    lambda: call_outputs(api))


def shell_outputs(api: mock_gemini.MockGemini) -> list[str]:
    """What each of Gemini's shell calls printed, as the model was told it."""
    return list(dict.fromkeys(json.dumps(r.get("response")) for body in api.requests if isinstance(body, dict)
                              for r in mock_gemini.function_responses(body)))


@pytest.mark.skipif(GEMINI is None, reason="gemini CLI not installed (npm @google/gemini-cli)")
async def test_gemini_queues_a_follow_up_through_the_cli_too(tmp_path: Path) -> None:
    """Gemini queues a follow-up through the CLI (since issue 24 it has the MCP toolset too, through ACP: this is the
    CLI's path, tests/test_acp_gemini.py the toolset's)."""
    api = mock_gemini.MockGemini().start()
    # Not the mock's TMPDIR: the daemon's gate sockets go under it, and this one is too long for AF_UNIX.
    gemini = {k: v for k, v in mock_gemini.gemini_home(tmp_path, api.base_url).items() if k != "TMPDIR"}
    await follow_up_through_the_cli(tmp_path, "gemini", api, {**gemini, "AGENTQUEUE_GEMINI_BIN": GEMINI},
                                    mock_gemini.CLI_FOLLOWUP_TITLE, lambda: shell_outputs(api))
