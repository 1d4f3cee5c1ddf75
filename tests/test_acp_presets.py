"""The `claude-code` and `codex` ACP presets: the REAL adapters from npm (.ci/run installs them), run by the engine
under AgentQueue's policy against the loopback model mocks.

`create_agent(agent_type="acp", command="claude-code")` runs @agentclientprotocol/claude-agent-acp (Claude Code
inside, tests/mock_anthropic.py as its API); `command="codex"` runs @zed-industries/codex-acp (Codex's engine,
tests/mock_openai.py through CODEX_HOME). In both scenarios the model runs the shell command written as CMD[...];
the adapter asks (`session/request_permission`) and the policy decides. The person's side is the official MCP
client, as in tests/test_acp_gemini.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from agentqueue import daemon, paths
from agentqueue.engine.watchdog import WatchdogLimits
from agentqueue.services import Services
from agentqueue.store.sqlite import SqliteStore as Store

from . import mock_anthropic, mock_openai
from .conftest import ok
from .processes import alive, wait_for
from .engine_runs import engine_and_person, engine_for
from .test_permissions_claude import on_main, status
from .third_party import npm_bin
from .slowdown import scaled

ADAPTERS = {"claude-code": ("claude-agent-acp", "AGENTQUEUE_CLAUDE_AGENT_ACP_BIN"),
            "codex": ("codex-acp", "AGENTQUEUE_CODEX_ACP_BIN")}
pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.real_cli]


@dataclass
class Model:
    """The mock behind one preset, and what a test reads from it."""
    preset: str
    server: Any

    def told_refused(self) -> bool:
        """Whether the model was told why its shell call was refused: the reason (the rule, how to lift it) is the
        next prompt of the same session (ACP's reject carries none). Claude's adapter also tells it "refused" in the
        call's result; Codex's ends its turn at a refusal, and the model reads the reason in its next turn."""
        bodies = self.server.requests if self.preset == "codex" else self.server.messages_for("run_cmd")
        reason = "AgentQueue refused your last tool call: Bash(touch DENIED_MARKER) is denied"
        told = any(reason in json.dumps(body) and "remove_rule='Bash(touch:*)'" in json.dumps(body) for body in bodies)
        if self.preset == "codex":
            return told
        results = [json.dumps(b.get("content")) for request in self.server.messages_for("run_cmd")
                   for message in request["messages"] if isinstance(message.get("content"), list)
                   for b in message["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]
        return told and bool(results) and "refused" in results[-1]


@pytest.fixture(params=sorted(ADAPTERS))
def model(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Model]:
    preset = request.param
    program, variable = ADAPTERS[preset]
    binary = npm_bin(program)
    if binary is None:
        pytest.skip(f"{program} not installed (.ci/run installs it from npm)")
    monkeypatch.setenv(variable, binary)
    if preset == "claude-code":
        server = mock_anthropic.MockAnthropic().start()
        (tmp_path / "user-home").mkdir()
        env = {"HOME": str(tmp_path / "user-home"), "ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL":
               server.base_url, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
               "CLAUDE_CODE_MAX_RETRIES": "0"}
    else:
        server = mock_openai.MockOpenAI().start()
        env = mock_openai.codex_home(tmp_path, server.base_url)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    yield Model(preset, server)
    server.stop()


@pytest.fixture
def queue(services: Services, model: Model) -> Services:
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("acp", "acp", command=model.preset)
    return services




def audited(services: Services, task_id: str, action: str) -> list[tuple[str, str]]:
    rows = services.audit.query(limit=100, task_id=task_id, action=action)
    return [(r.decision, r.outcome) for r in reversed(rows) if r.actor == "agent:acp"]


def ended(services: Services, task_id: str) -> Callable[[], bool]:
    return lambda: status(services, task_id) in ("COMPLETED", "BLOCKED", "FAILED")


def ledger(services: Services, task_id: str) -> dict[str, Any] | None:
    return services.store.one("SELECT input, output, cache_read, cache_write, total, cost_usd FROM token_ledger "
                              "WHERE task_id = ?", (task_id,))


async def test_a_denied_command_never_runs(queue: Services, model: Model) -> None:
    queue.policies.edit(project_id="demo", add_rule="Bash(touch:*)", rule_list="deny")
    task = queue.tasks.create("demo", "Deny", "SCENARIO:run_cmd CMD[touch DENIED_MARKER]", max_retries=0)
    async with engine_and_person(queue) as (engine, _):
        await wait_for(ended(queue, task.id), 120, "the run to end")
    log = engine.log_path(task.id).read_text()
    assert status(queue, task.id) == "COMPLETED", log
    assert on_main(queue, "DENIED_MARKER") is None
    assert not list(Path(queue.repos.get("app").checkout_path).rglob("DENIED_MARKER"))
    assert not list((queue.home / "workspaces").rglob("DENIED_MARKER"))
    assert queue.requests.list(None) == []  # a deny asks nobody
    assert audited(queue, task.id, "Bash(touch DENIED_MARKER)") == [("deny", "refused")]
    assert model.told_refused(), log
    assert ADAPTERS[model.preset][0] in log


async def test_an_ask_waits_for_a_person_and_the_same_run_goes_on(queue: Services, model: Model) -> None:
    task = queue.tasks.create("demo", "Ask", "SCENARIO:run_cmd CMD[touch ASKED_MARKER]", max_retries=0)
    async with engine_and_person(queue) as (engine, client):
        await wait_for(lambda: status(queue, task.id) == "WAITING_INPUT", 120, "the task to wait for a person")
        agent_pid = queue.store.scalar("SELECT pid FROM agents WHERE id = 'acp'")
        assert agent_pid and alive(agent_pid)
        pending = (await ok(client, "list_requests", project_id="demo"))["requests"]
        assert len(pending) == 1 and pending[0]["action"] == "Bash(touch ASKED_MARKER)", pending
        assert pending[0]["task_id"] == task.id
        answered = await ok(client, "answer_request", request_id=pending[0]["id"], decision="allow")
        assert answered["status"] == "allowed"
        await wait_for(ended(queue, task.id), 120, "the run to end")
    log = engine.log_path(task.id).read_text()
    assert status(queue, task.id) == "COMPLETED", log
    attempts, _ = queue.tasks.results(task.id)
    assert attempts == 1  # one run: the same process went on
    assert audited(queue, task.id, "Bash(touch ASKED_MARKER)") == [("ask→accept", "ok")]
    assert on_main(queue, "ASKED_MARKER") == ""  # the work landed on main
    row = ledger(queue, task.id)
    assert row is not None, log
    if model.preset == "claude-code":
        # PromptResponse.usage: the turn's two Messages calls (the tool call, then the answer), each USAGE.
        usage = mock_anthropic.USAGE
        assert (row["input"], row["output"], row["cache_read"], row["cache_write"]) == (
            2 * usage["input_tokens"], 2 * usage["output_tokens"], 2 * usage["cache_read_input_tokens"],
            2 * usage["cache_creation_input_tokens"]), row
        assert row["cost_usd"] is not None and row["cost_usd"] > 0  # the adapter's own USD figure (usage_update)
    else:
        want = mock_openai.expected_turn_usage("tool_call", "final")
        assert (row["input"], row["output"], row["cache_read"]) == (
            want["input_tokens"] - want["cached_input_tokens"], want["output_tokens"],
            want["cached_input_tokens"]), row


@pytest.mark.parametrize("model", ["claude-code"], indirect=True)
async def test_the_agents_model_is_the_claude_adapters_model_option(queue: Services, model: Model) -> None:
    """Claude's adapter takes no model flag: the model is its `model` config option, set after session/new."""
    queue.policies.edit(project_id="demo", add_rule="Bash(touch:*)", rule_list="allow")
    queue.agents.edit("acp", model="sonnet")
    task = queue.tasks.create("demo", "Sonnet", "SCENARIO:run_cmd CMD[touch SONNET_MARKER]", max_retries=0)
    async with engine_and_person(queue) as (engine, _):
        await wait_for(ended(queue, task.id), 120, "the run to end")
    assert status(queue, task.id) == "COMPLETED", engine.log_path(task.id).read_text()
    assert on_main(queue, "SONNET_MARKER") == ""
    served = {s["model"] for s in model.server.served if "SONNET_MARKER" in json.dumps(s["request"])}
    assert served and all("sonnet" in m for m in served), served


@pytest.mark.parametrize("model", ["claude-code"], indirect=True)
async def test_a_model_the_adapter_does_not_offer_fails_the_run_before_any_prompt(queue: Services,
                                                                                  model: Model) -> None:
    queue.agents.edit("acp", model="no-such-model")
    task = queue.tasks.create("demo", "Nope", "SCENARIO:run_cmd CMD[touch NOPE_MARKER]", max_retries=0)
    async with engine_and_person(queue) as (engine, _):
        await wait_for(ended(queue, task.id), 120, "the run to end")
    log = engine.log_path(task.id).read_text()
    assert status(queue, task.id) != "COMPLETED", log
    assert "refused the model 'no-such-model'" in log, log
    assert not [s for s in model.server.served if "NOPE_MARKER" in json.dumps(s["request"])]  # no prompt reached it


@pytest.mark.parametrize("model", ["claude-code"], indirect=True)
async def test_claude_settings_cannot_allow_what_the_policy_denies(queue: Services, model: Model,
                                                                    tmp_path: Path) -> None:
    """Claude Code's own settings (the user's ~/.claude/settings.json, and the repo's) may allow a command, and an
    allowed call is never sent as a permission request. The preset's `ask` rules (as for the claude-code agent
    type) outrank them: the policy still decides."""
    allow = json.dumps({"permissions": {"allow": ["Bash(touch:*)"]}})
    (tmp_path / "user-home" / ".claude").mkdir()
    (tmp_path / "user-home" / ".claude" / "settings.json").write_text(allow)
    repo = Path(queue.repos.get("app").checkout_path)
    (repo / ".claude").mkdir()
    (repo / ".claude" / "settings.json").write_text(allow)
    subprocess.run(["git", "add", ".claude"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "settings"],
                   cwd=repo, check=True)
    queue.policies.edit(project_id="demo", add_rule="Bash(touch:*)", rule_list="deny")
    task = queue.tasks.create("demo", "Deny", "SCENARIO:run_cmd CMD[touch PLANTED_MARKER]", max_retries=0)
    async with engine_and_person(queue) as (engine, _):
        await wait_for(ended(queue, task.id), 120, "the run to end")
    log = engine.log_path(task.id).read_text()
    assert not list((queue.home / "workspaces").rglob("PLANTED_MARKER")), log
    assert on_main(queue, "PLANTED_MARKER") is None
    assert audited(queue, task.id, "Bash(touch PLANTED_MARKER)") == [("deny", "refused")], log


@pytest.mark.daemon
async def test_the_agent_toolset_reaches_the_claude_adapter_through_session_new(tmp_path: Path) -> None:
    """AgentQueue's MCP server goes in ACP's session/new; the model calls its create_task, the adapter asks about
    it (decided as mcp__agentqueue, which standard allows), and the daemon decides the tool call itself again."""
    binary = npm_bin("claude-agent-acp")
    if binary is None:
        pytest.skip("claude-agent-acp not installed (.ci/run installs it from npm)")
    api = mock_anthropic.MockAnthropic().start()
    home = tmp_path / "aq"
    (tmp_path / "user-home").mkdir()
    env = {**os.environ, "HOME": str(tmp_path / "user-home"), "ANTHROPIC_API_KEY": "test-key",
           "ANTHROPIC_BASE_URL": api.base_url, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_MAX_RETRIES": "0", "AGENTQUEUE_CLAUDE_AGENT_ACP_BIN": binary,
           "AGENTQUEUE_HOME": str(home), "AGENTQUEUE_POLL_SECONDS": "0.1", "AGENTQUEUE_PORT": "0"}
    server = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--no-http"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = None
    try:
        await wait_for(lambda: (daemon.read_daemon_info(home) or {}).get("pid") == server.pid, 60, "the daemon")
        params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"], env=env)
        async with Client(params, mode="legacy") as client:
            await ok(client, "create_project", name="Demo")
            await ok(client, "add_repo", source="init", name="app", project_id="demo")
            await ok(client, "create_agent", name="acp", agent_type="acp", command="claude-code")
            first = await ok(client, "create_task", title="Start", project_id="demo",
                             description="SCENARIO:followup queue a follow-up")
        store = Store(paths.db_path(home))

        def follow_ups() -> list[dict]:
            return store.all("SELECT title, parent_task_id FROM tasks WHERE title = ?",
                             (mock_anthropic.FOLLOWUP["title"],))

        try:
            await wait_for(lambda: follow_ups(), 120, "the follow-up queued through MCP")
        except AssertionError as error:
            logs = "\n".join(p.read_text()[-3000:] for p in sorted((home / "logs" / "tasks").glob("*.log")))
            raise AssertionError(f"{error}\n{logs}") from None
        assert follow_ups()[0] == {"title": mock_anthropic.FOLLOWUP["title"], "parent_task_id": first["id"]}
        await wait_for(lambda: store.scalar("SELECT status FROM tasks WHERE id = ?", (first["id"],)) == "COMPLETED",
                       60, "the first task to complete")
        audit = store.all("SELECT action, decision FROM audit_log WHERE task_id = ? AND actor = 'agent:acp'",
                          (first["id"],))
        assert audit == [{"action": "mcp__agentqueue", "decision": "allow"},
                         {"action": "tool:create_task", "decision": "allow"}], audit
    finally:
        if store is not None:
            store.close()
        daemon.stop(home, timeout=15)
        if server.poll() is None:
            server.kill()
        api.stop()


@pytest.mark.parametrize("model", ["claude-code"], indirect=True)
async def test_a_loop_warning_reaches_the_claude_adapters_model_in_the_same_run(queue: Services,
                                                                              model: Model) -> None:
    """The watchdog's warning cancels the turn (session/cancel) and is the session's next prompt: the model's next
    requests carry it, from the same process; a model that keeps looping is then killed, as with `claude`."""
    queue.policies.edit(project_id="demo", add_rule="Bash(echo:*)", rule_list="allow")
    task = queue.tasks.create("demo", "Loop", "SCENARIO:loop keep going", max_retries=0)
    limits = WatchdogLimits(stall_seconds=scaled(60), timeout_seconds=scaled(120), loop_warn=2, no_progress_warn=2)
    engine = engine_for(queue)
    engine.config.limits = limits
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        await wait_for(ended(queue, task.id), 150, "the run to end")
        await engine.shutdown(grace=10)
        tg.cancel_scope.cancel()
    log = engine.log_path(task.id).read_text()
    assert "warned the agent in this run" in log, log
    assert log.count("$ ") == 1  # one process: the warning was a prompt in the same session
    noted = [i for i, r in enumerate(model.server.messages_for("loop")) if "AgentQueue watchdog" in json.dumps(
        r["messages"])]
    assert noted and noted[0] > 0, log
