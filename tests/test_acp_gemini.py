"""Gemini at Claude's level, through ACP: the REAL `gemini --acp` run by the engine under AgentQueue's policy.

Only the model is scripted (tests/mock_gemini.py: `run_cmd` runs the shell with CMD[...]); every call Gemini would
confirm arrives as `session/request_permission`, which the policy decides (engine/acp_client.py). The person's
side is the official MCP client, as in tests/test_permissions_claude.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from agentqueue import daemon, paths
from agentqueue.engine.watchdog import WatchdogLimits
from agentqueue.services import Services
from agentqueue.store.sqlite import SqliteStore as Store

from . import mock_gemini as mock
from .conftest import ok
from .processes import alive, wait_for
from .engine_runs import engine_and_person
from .test_permissions_claude import on_main, status
from .third_party import npm_bin
from .slowdown import scaled

GEMINI = npm_bin("gemini")
pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.real_cli,
              pytest.mark.skipif(GEMINI is None, reason="gemini CLI not installed (npm @google/gemini-cli)")]


@pytest.fixture
def api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[mock.MockGemini]:
    with mock.MockGemini() as server:
        # Not the mock's TMPDIR: the sandbox's gate sockets go under it, and a long one is too long for AF_UNIX.
        for key, value in mock.gemini_home(tmp_path, server.base_url).items():
            if key != "TMPDIR":
                monkeypatch.setenv(key, value)
        monkeypatch.setenv("AGENTQUEUE_GEMINI_BIN", str(GEMINI))
        yield server


@pytest.fixture
def queue(services: Services, api: mock.MockGemini) -> Services:
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("gemini", "gemini")
    return services




def audited(services: Services, task_id: str, action: str) -> list[tuple[str, str]]:
    rows = services.audit.query(limit=100, task_id=task_id, action=action)
    return [(r.decision, r.outcome) for r in reversed(rows) if r.actor == "agent:gemini"]


def shell_results(api: mock.MockGemini) -> list[str]:
    """What the model was told each shell call returned, oldest first."""
    return list(dict.fromkeys(json.dumps(r.get("response")) for body in api.chat_requests
                              for r in mock.function_responses(body) if r.get("name") == mock.SHELL_TOOL))


async def until(condition: Callable[[], object], what: str, timeout: float = 90) -> None:
    await wait_for(condition, timeout, what)


def ended(services: Services, task_id: str) -> Callable[[], bool]:
    return lambda: status(services, task_id) in ("COMPLETED", "BLOCKED", "FAILED")


@pytest.mark.parametrize("command", ["touch DENIED_MARKER", "echo ok & touch DENIED_MARKER",
                                     "echo ok; touch DENIED_MARKER"])
async def test_a_denied_command_never_runs(queue: Services, api: mock.MockGemini, command: str) -> None:
    queue.policies.edit(project_id="demo", add_rule="Bash(touch:*)", rule_list="deny")
    queue.policies.edit(project_id="demo", add_rule="Bash(echo:*)", rule_list="allow")  # a compound needs every part
    task = queue.tasks.create("demo", "Deny", f"SCENARIO:run_cmd CMD[{command}]", max_retries=0)
    async with engine_and_person(queue) as (engine, _):
        await until(ended(queue, task.id), "the run to end")
    log = engine.log_path(task.id).read_text()
    assert status(queue, task.id) == "COMPLETED", log
    assert on_main(queue, "DENIED_MARKER") is None
    assert not list(Path(queue.repos.get("app").checkout_path).rglob("DENIED_MARKER"))
    assert not list((queue.home / "workspaces").rglob("DENIED_MARKER"))
    assert queue.requests.list(None) == []  # a deny asks nobody
    assert audited(queue, task.id, f"Bash({command})") == [("deny", "refused")]
    # Gemini tells its model a rejected call was "canceled by the user" (ACP carries no reason with a reject)...
    assert "canceled" in shell_results(api)[-1], shell_results(api)
    # ...and the reason, the rule and how to lift it, is the next prompt of the same session: the model's next
    # request carries it, once, after the refused call's result.
    first = next(body for body in api.chat_requests if "AgentQueue refused" in mock.user_text(body))
    told = mock.user_texts(first)[-1]
    assert told.startswith("AgentQueue refused your last tool call: "), told
    assert "Bash(touch:*)" in told and "remove_rule='Bash(touch:*)'" in told and "Do not retry" in told, told
    assert mock.user_text(first).count("AgentQueue refused") == 1 and mock.function_responses(first)
    assert log.count("$ ") == 1  # the same process, the same session
    assert "gemini" in log and "--acp" in log


@pytest.mark.parametrize("decision", ["allow", "deny"])
async def test_an_ask_waits_for_a_person_and_the_same_run_goes_on(queue: Services, api: mock.MockGemini,
                                                                  decision: str) -> None:
    task = queue.tasks.create("demo", "Ask", "SCENARIO:run_cmd CMD[touch ASKED_MARKER]", max_retries=0)
    async with engine_and_person(queue) as (engine, client):
        await until(lambda: status(queue, task.id) == "WAITING_INPUT", "the task to wait for a person")
        agent_pid = queue.store.scalar("SELECT pid FROM agents WHERE id = 'gemini'")
        assert agent_pid and alive(agent_pid)
        pending = (await ok(client, "list_requests", project_id="demo"))["requests"]
        assert len(pending) == 1 and pending[0]["action"] == "Bash(touch ASKED_MARKER)"
        assert pending[0]["task_id"] == task.id
        answered = await ok(client, "answer_request", request_id=pending[0]["id"], decision=decision)
        assert answered["status"] == ("allowed" if decision == "allow" else "denied")
        assert status(queue, task.id) in ("IN_PROGRESS", "COMPLETED")
        await until(ended(queue, task.id), "the run to end")
    assert status(queue, task.id) == "COMPLETED", engine.log_path(task.id).read_text()
    attempts, _ = queue.tasks.results(task.id)
    assert attempts == 1  # one run: the same process went on
    assert engine.log_path(task.id).read_text().count("$ ") == 1
    expected = ("ask→accept", "ok") if decision == "allow" else ("ask→decline", "refused")
    assert audited(queue, task.id, "Bash(touch ASKED_MARKER)") == [expected]
    if decision == "allow":
        assert on_main(queue, "ASKED_MARKER") == ""  # the work landed on main
    else:
        assert on_main(queue, "ASKED_MARKER") is None
    # The tokens are in the ledger: Gemini's per-turn `_meta.quota` (prompt and candidates of each chat call, the
    # router's not counted); a person's decline is told to the model as one more prompt (one more "final" answer).
    row = queue.store.one("SELECT input, output, total, cost_usd FROM token_ledger WHERE task_id = ?", (task.id,))
    steps = ("tool_call", "final") + (("final",) if decision == "deny" else ())
    want_in = sum(mock.USAGE[s]["prompt"] for s in steps)
    want_out = sum(mock.USAGE[s]["candidates"] for s in steps)
    assert row is not None and (row["input"], row["output"]) == (want_in, want_out), row
    # The cost: every chat call went to gemini-3.8-flash (the CLI's "auto" routing with an API key; the mock's
    # modelVersion is not what the CLI reports), priced at $0.75 / $3.75 per 1M (adapters/prices.py), input
    # priced whole (ACP's count has the cached tokens in it and no split), to the micro-dollar as every run's cost.
    assert [p for _, p in api.log if "streamGenerateContent" in p][0].startswith("/v1beta/models/gemini-3.8-flash:")
    assert row["cost_usd"] == pytest.approx(round((want_in * 0.75 + want_out * 3.75) / 1_000_000, 6), abs=1e-12)
    if decision == "deny":
        assert "A person denied Bash(touch ASKED_MARKER)" in mock.user_text(api.chat_requests[-1])


async def test_an_allowed_command_runs_without_asking(queue: Services, api: mock.MockGemini) -> None:
    queue.policies.edit(project_id="demo", add_rule="Bash(touch:*)", rule_list="allow")
    task = queue.tasks.create("demo", "Allow", "SCENARIO:run_cmd CMD[touch ALLOWED_MARKER]", max_retries=0)
    async with engine_and_person(queue):
        await until(ended(queue, task.id), "the run to end")
    assert status(queue, task.id) == "COMPLETED"
    assert on_main(queue, "ALLOWED_MARKER") == ""
    assert audited(queue, task.id, "Bash(touch ALLOWED_MARKER)") == [("allow", "ok")]
    assert queue.requests.list(None) == []


async def test_a_loop_warning_reaches_the_model_in_the_same_run(queue: Services, api: mock.MockGemini) -> None:
    queue.policies.edit(project_id="demo", add_rule="Bash(ls)", rule_list="allow")
    task = queue.tasks.create("demo", "Loop", "SCENARIO:loop list the files", max_retries=0)
    # Gemini stops a turn itself after a few identical calls (its own loop detection): ours warns before that.
    limits = WatchdogLimits(stall_seconds=scaled(60), timeout_seconds=scaled(120), loop_warn=2, no_progress_warn=2)
    async with engine_and_person(queue, limits) as (engine, _):
        await until(ended(queue, task.id), "the run to end", 150)
    log = engine.log_path(task.id).read_text()
    assert api.warned, log  # the model's next request carried the warning
    # ...and, in the same prompt, the task again: a cancelled turn may be dropped from Gemini's history.
    warned = [mock.user_texts(b)[-1] for b in api.requests if mock.WATCHDOG_TEXT in mock.user_text(b)]
    assert warned and "SCENARIO:loop list the files" in warned[0], warned
    assert "warned the agent in this run" in log
    assert status(queue, task.id) == "COMPLETED", log
    assert log.count("$ ") == 1  # the same process, a new prompt in the same session


@pytest.mark.daemon
async def test_the_agent_toolset_reaches_gemini_through_session_new(tmp_path: Path) -> None:
    """AgentQueue's MCP server goes in ACP's session/new; Gemini's model calls its create_task, which the daemon
    serves as the running task's follow-up."""
    api = mock.MockGemini().start()
    home = tmp_path / "aq"
    gemini = {k: v for k, v in mock.gemini_home(tmp_path, api.base_url).items() if k != "TMPDIR"}
    env = {**os.environ, **gemini, "AGENTQUEUE_GEMINI_BIN": str(GEMINI), "AGENTQUEUE_HOME": str(home),
           "AGENTQUEUE_POLL_SECONDS": "0.1", "AGENTQUEUE_PORT": "0"}
    server = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--no-http"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    store = None
    try:
        await until(lambda: (daemon.read_daemon_info(home) or {}).get("pid") == server.pid, "the daemon", 60)
        params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"], env=env)
        async with Client(params, mode="legacy") as client:
            await ok(client, "create_project", name="Demo")
            await ok(client, "add_repo", source="init", name="app", project_id="demo")
            await ok(client, "create_agent", name="gemini", agent_type="gemini")
            first = await ok(client, "create_task", title="Start", project_id="demo",
                             description="SCENARIO:mcp_tool queue a follow-up")
        store = Store(paths.db_path(home))

        def follow_ups() -> list[dict]:
            return store.all("SELECT title, parent_task_id FROM tasks WHERE title = ?", (mock.MCP_FOLLOWUP_TITLE,))

        try:
            await until(lambda: follow_ups(), "the follow-up queued through MCP", 120)
        except AssertionError as error:
            logs = "\n".join(p.read_text()[-3000:] for p in sorted((home / "logs" / "tasks").glob("*.log")))
            declared = [sorted(map(str, mock.tool_names(b))) for b in api.chat_requests]
            raise AssertionError(f"{error}: {declared}\n{logs}") from None
        assert follow_ups() == [{"title": mock.MCP_FOLLOWUP_TITLE, "parent_task_id": first["id"]}]
        # The run ends although Gemini stays up while its MCP server is connected (the runner ends it).
        await until(lambda: store.scalar("SELECT status FROM tasks WHERE id = ?", (first["id"],)) == "COMPLETED",
                    "the first task to complete", 60)
        names = {n for b in api.chat_requests for n in map(str, mock.tool_names(b)) if n.endswith("create_task")}
        assert names, "Gemini declared no create_task tool"
        audit = store.all("SELECT action, decision FROM audit_log WHERE task_id = ? AND actor = 'agent:gemini'",
                          (first["id"],))
        # Gemini asked about the MCP call (mapped to mcp__agentqueue, which standard allows), and the daemon decided
        # the tool call itself again.
        assert audit == [{"action": "mcp__agentqueue", "decision": "allow"},
                         {"action": "tool:create_task", "decision": "allow"}], audit
        assert names == {"mcp_agentqueue_create_task"}
    finally:
        if store is not None:
            store.close()
        daemon.stop(home, timeout=15)
        if server.poll() is None:
            server.kill()
        api.stop()


async def test_readonly_runs_gemini_in_plan_mode_and_nothing_is_written(queue: Services, api: mock.MockGemini) -> None:
    queue.policies.edit(project_id="demo", preset="readonly")
    task = queue.tasks.create("demo", "Read only", "SCENARIO:run_cmd CMD[touch RO_MARKER]", max_retries=0)
    async with engine_and_person(queue) as (engine, _):
        await until(ended(queue, task.id), "the run to end")
    assert status(queue, task.id) == "COMPLETED", engine.log_path(task.id).read_text()
    assert not list((queue.home / "workspaces").rglob("RO_MARKER")) and on_main(queue, "RO_MARKER") is None
    assert queue.requests.list(None) == []  # readonly asks nobody
    declared = mock.tool_names(api.chat_requests[0])
    assert mock.SHELL_TOOL not in declared, sorted(map(str, declared))  # plan mode offers no shell


async def test_stop_task_while_waiting_blocks_it_and_closes_the_request(queue: Services, api: mock.MockGemini) -> None:
    task = queue.tasks.create("demo", "Stop me", "SCENARIO:run_cmd CMD[touch STOPPED_MARKER]", max_retries=0)
    async with engine_and_person(queue) as (engine, client):
        await until(lambda: status(queue, task.id) == "WAITING_INPUT", "the task to wait")
        agent_pid = queue.store.scalar("SELECT pid FROM agents WHERE id = 'gemini'")
        await ok(client, "stop_task", task_id=task.id)
        await until(lambda: task.id not in engine.running, "the run to end")
    assert status(queue, task.id) == "BLOCKED"
    (request,) = queue.requests.list(None, task_id=task.id)
    assert request.status == "expired" and request.decided_by == "run ended"
    assert not alive(agent_pid)
    assert not list((queue.home / "workspaces").rglob("STOPPED_MARKER"))


async def test_a_rate_limit_fails_the_run_as_rate_limit_and_parks_gemini(queue: Services,
                                                                        api: mock.MockGemini) -> None:
    task = queue.tasks.create("demo", "Limited", "SCENARIO:rate_limit anything", max_retries=0)
    async with engine_and_person(queue) as (engine, _):
        await until(lambda: queue.tasks.results(task.id)[1] is not None, "the run to end")
    _, result = queue.tasks.results(task.id)
    assert result.error_type == "rate_limit", (result, engine.log_path(task.id).read_text())


async def test_an_edit_is_decided_once_and_written_through_the_client(queue: Services, api: mock.MockGemini) -> None:
    task = queue.tasks.create("demo", "Write", "SCENARIO:write_tool PATH[notes/by_gemini.txt]", max_retries=0)
    async with engine_and_person(queue) as (engine, _):
        await until(ended(queue, task.id), "the run to end")
    log = engine.log_path(task.id).read_text()
    assert status(queue, task.id) == "COMPLETED", log
    assert on_main(queue, "notes/by_gemini.txt") == mock.WRITE_TOOL_CONTENT.strip()
    rows = [r for r in queue.audit.query(limit=100, task_id=task.id) if r.actor == "agent:gemini"]
    assert [(r.action.split("(")[0], r.decision) for r in rows] == [("Edit", "allow")], [r.action for r in rows]


async def test_an_edit_outside_the_worktree_never_happens(queue: Services, api: mock.MockGemini,
                                                          tmp_path: Path) -> None:
    """Refused by Gemini itself (outside its workspace); the client's jail and the sandbox stand behind that."""
    outside = tmp_path / "outside.txt"
    task = queue.tasks.create("demo", "Escape", f"SCENARIO:write_tool PATH[{outside}]", max_retries=0)
    async with engine_and_person(queue) as (engine, client):
        await until(lambda: ended(queue, task.id)() or status(queue, task.id) == "WAITING_INPUT", "the run to go on")
        if status(queue, task.id) == "WAITING_INPUT":  # standard asks about an edit outside the worktree: say yes
            (request,) = queue.requests.list("pending")
            await ok(client, "answer_request", request_id=request.id, decision="allow")
        await until(ended(queue, task.id), "the run to end")
    assert not outside.exists(), engine.log_path(task.id).read_text()


async def test_a_loop_that_goes_on_is_killed(queue: Services, api: mock.MockGemini) -> None:
    for rule in ("Bash(ls)", "Bash(pwd)"):
        queue.policies.edit(project_id="demo", add_rule=rule, rule_list="allow")
    task = queue.tasks.create("demo", "Ping-pong", "SCENARIO:alternate", max_retries=0)
    limits = WatchdogLimits(stall_seconds=scaled(60), timeout_seconds=scaled(120), ping_pong_warn=4, ping_pong_kill=8)
    async with engine_and_person(queue, limits) as (engine, _):
        await until(lambda: queue.tasks.results(task.id)[1] is not None, "the run to end")
        agent_pid = queue.store.scalar("SELECT pid FROM agents WHERE id = 'gemini'")
    _, result = queue.tasks.results(task.id)
    log = engine.log_path(task.id).read_text()
    assert result.error_type == "loop" and "alternating" in (result.error_message or ""), log
    assert "warned the agent in this run" in log and "killing the run" in log
    assert agent_pid is None or not alive(agent_pid)
