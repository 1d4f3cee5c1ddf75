"""Agents ask, people answer: the REAL `claude` CLI under AgentQueue's policy, a loopback model mock.

The mock scripts the model to call Bash with the command written as CMD[...] in the task; the
policy decides each call over Claude Code's stream-json permission channel. The person's side is
the official MCP client (`list_requests`, `get_task`, `answer_request`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from agentqueue import daemon, paths
from agentqueue.services import Services
from agentqueue.store.sqlite import SqliteStore as Store

from .conftest import ok, person_says_yes
from .processes import alive, claude_env, wait_for
from .engine_runs import engine_and_person
from .test_engine_claude import CLAUDE, engine_for, git, mock_api  # noqa: F401  (mock_api: fixture)
from .mock_anthropic import MockAnthropic

pytestmark = [pytest.mark.anyio, pytest.mark.integration,
              pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")]


@pytest.fixture
def queue(services: Services, mock_api: MockAnthropic) -> Services:
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("claude", "claude-code")
    return services




def status(services: Services, task_id: str) -> str:
    return services.tasks.get(task_id).status


def last_tool_result(mock: MockAnthropic, scenario: str = "run_cmd") -> str:
    """What the model was last told a tool returned (the deny message, when one was given)."""
    results = []
    for request in mock.messages_for(scenario):
        for message in request["messages"]:
            if isinstance(message.get("content"), list):
                results += [json.dumps(b.get("content")) for b in message["content"]
                            if isinstance(b, dict) and b.get("type") == "tool_result"]
    return results[-1] if results else ""


def on_main(services: Services, name: str) -> str | None:
    repo = services.repos.get("app").checkout_path
    done = subprocess.run(["git", "show", f"main:{name}"], cwd=repo, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def audited(services: Services, task_id: str, action: str) -> list[tuple[str, str]]:
    """The agent's decisions on `action` in the audit log, oldest first: (decision, outcome)."""
    rows = services.audit.query(limit=100, task_id=task_id, action=action)
    return [(r.decision, r.outcome) for r in reversed(rows) if r.actor == "agent:claude"]


async def wait_until(condition: Callable[[], object], what: str, timeout: float = 60) -> None:
    await wait_for(condition, timeout, what)


async def test_a_denied_command_never_runs_and_the_model_is_told(queue: Services, mock_api: MockAnthropic) -> None:
    queue.policies.edit(project_id="demo", add_rule="Bash(touch:*)", rule_list="deny")
    task = queue.tasks.create("demo", "Deny", "SCENARIO:run_cmd CMD[touch DENIED_MARKER]", max_retries=0)
    async with engine_and_person(queue):
        await wait_until(lambda: status(queue, task.id) in ("COMPLETED", "BLOCKED"), "the run to end")
    assert status(queue, task.id) == "COMPLETED"
    assert on_main(queue, "DENIED_MARKER") is None
    assert not list(Path(queue.repos.get("app").checkout_path).rglob("DENIED_MARKER"))
    told = last_tool_result(mock_api)
    assert "denied by AgentQueue's policy" in told and "Bash(touch:*)" in told, told
    assert queue.requests.list(None) == []  # a deny asks nobody
    assert audited(queue, task.id, "Bash(touch DENIED_MARKER)") == [("deny", "refused")]


async def test_an_allowed_command_runs(queue: Services, mock_api: MockAnthropic) -> None:
    queue.policies.edit(project_id="demo", add_rule="Bash(touch:*)", rule_list="allow")
    task = queue.tasks.create("demo", "Allow", "SCENARIO:run_cmd CMD[touch ALLOWED_MARKER]", max_retries=0)
    async with engine_and_person(queue):
        await wait_until(lambda: status(queue, task.id) in ("COMPLETED", "BLOCKED"), "the run to end")
    assert status(queue, task.id) == "COMPLETED"
    assert on_main(queue, "ALLOWED_MARKER") == ""  # the file the command made landed on main
    assert audited(queue, task.id, "Bash(touch ALLOWED_MARKER)") == [("allow", "ok")]


@pytest.mark.parametrize("decision", ["allow", "deny"])
async def test_an_ask_waits_for_a_person_and_the_same_run_goes_on(queue: Services, mock_api: MockAnthropic,
                                                                  decision: str) -> None:
    task = queue.tasks.create("demo", "Ask", "SCENARIO:run_cmd CMD[touch ASKED_MARKER]", max_retries=0)
    async with engine_and_person(queue) as (engine, client):
        await wait_until(lambda: status(queue, task.id) == "WAITING_INPUT", "the task to wait for a person")
        agent_pid = queue.store.scalar("SELECT pid FROM agents WHERE id = 'claude'")
        assert agent_pid and alive(agent_pid)
        # The person sees the request through the official MCP client...
        pending = (await ok(client, "list_requests", project_id="demo"))["requests"]
        assert len(pending) == 1 and pending[0]["action"] == "Bash(touch ASKED_MARKER)"
        assert pending[0]["task_id"] == task.id and pending[0]["suggested_rule"]
        shown = await ok(client, "get_task", task_id=task.id)
        assert shown["status"] == "WAITING_INPUT" and shown["pending_requests"][0]["id"] == pending[0]["id"]
        assert "answer_request" in shown["next_step"]
        approvals = json.loads((await client.read_resource("agentqueue://approvals")).contents[0].text)
        assert [r["id"] for r in approvals["requests"]] == [pending[0]["id"]]
        # ...and answers it; the agent waiting in the same process goes on.
        assert queue.store.scalar("SELECT pid FROM agents WHERE id = 'claude'") == agent_pid
        answered = await ok(client, "answer_request", request_id=pending[0]["id"], decision=decision)
        assert answered["status"] == ("allowed" if decision == "allow" else "denied")
        await wait_until(lambda: status(queue, task.id) in ("COMPLETED", "BLOCKED"), "the run to end")
    assert status(queue, task.id) == "COMPLETED"
    attempts, _ = queue.tasks.results(task.id)
    assert attempts == 1  # one run in the ledger: the same process, not a retry
    assert queue.store.scalar("SELECT count(*) FROM token_ledger WHERE task_id = ?", (task.id,)) == 1
    log = engine.log_path(task.id).read_text()
    assert log.count("$ ") == 1  # one spawn
    if decision == "allow":
        assert on_main(queue, "ASKED_MARKER") == ""
    else:
        assert on_main(queue, "ASKED_MARKER") is None
        assert "A person denied Bash(touch ASKED_MARKER)" in last_tool_result(mock_api)
    events = [e.event_type for e in queue.events.recent(100, task_id=task.id)]
    assert "request.created" in events and "request.answered" in events and "task.waiting_input" in events
    expected = ("ask→accept", "ok") if decision == "allow" else ("ask→decline", "refused")
    assert audited(queue, task.id, "Bash(touch ASKED_MARKER)") == [expected]


async def test_remember_makes_the_next_identical_call_pass(queue: Services, mock_api: MockAnthropic) -> None:
    task = queue.tasks.create("demo", "Twice", "SCENARIO:run_cmd CMD[touch TWICE_MARKER] TIMES[2]", max_retries=0)
    async with engine_and_person(queue) as (_, client):
        await wait_until(lambda: status(queue, task.id) == "WAITING_INPUT", "the first call to ask")
        request = queue.requests.list("pending")[0]
        await ok(client, "answer_request", request_id=request.id, decision="allow", remember=True)
        await wait_until(lambda: status(queue, task.id) in ("COMPLETED", "BLOCKED"), "the run to end")
    assert status(queue, task.id) == "COMPLETED"
    assert len(queue.requests.list(None, task_id=task.id)) == 1  # the second call did not ask
    rules = [r["rule"] for r in queue.policies.effective("demo").describe()["allow"]]
    assert request.suggested_rule in rules
    assert on_main(queue, "TWICE_MARKER") == ""
    assert audited(queue, task.id, "Bash(touch TWICE_MARKER)") == [("ask→accept", "ok"), ("allow", "ok")]


async def test_an_unanswered_request_times_out_into_a_deny(queue: Services, mock_api: MockAnthropic) -> None:
    queue.policies.edit(project_id="demo", ask_timeout="1s")
    task = queue.tasks.create("demo", "Nobody", "SCENARIO:run_cmd CMD[touch LATE_MARKER]", max_retries=0)
    async with engine_and_person(queue):
        await wait_until(lambda: status(queue, task.id) in ("COMPLETED", "BLOCKED"), "the run to end")
    assert status(queue, task.id) == "COMPLETED"
    (request,) = queue.requests.list(None, task_id=task.id)
    assert request.status == "expired" and request.decided_by == "timeout"
    assert on_main(queue, "LATE_MARKER") is None
    assert "Nobody answered" in last_tool_result(mock_api)
    assert audited(queue, task.id, "Bash(touch LATE_MARKER)") == [("ask→timeout", "refused")]


async def test_stop_task_while_waiting_blocks_it_and_closes_the_request(queue: Services,
                                                                       mock_api: MockAnthropic) -> None:
    task = queue.tasks.create("demo", "Stop me", "SCENARIO:run_cmd CMD[touch STOPPED_MARKER]", max_retries=0)
    async with engine_and_person(queue) as (engine, client):
        await wait_until(lambda: status(queue, task.id) == "WAITING_INPUT", "the task to wait")
        await ok(client, "stop_task", task_id=task.id)
        await wait_until(lambda: task.id not in engine.running, "the run to end")
    assert status(queue, task.id) == "BLOCKED"
    (request,) = queue.requests.list(None, task_id=task.id)
    assert request.status == "expired" and request.decided_by == "run ended"


# -- a daemon that restarts or dies while a person has not answered yet -------------------------------------
@pytest.mark.parametrize("how", ["restart_daemon", "kill -9"])
@pytest.mark.daemon
@pytest.mark.real_cli
async def test_a_pending_request_never_leaves_a_run_waiting_forever(tmp_path: Path, how: str) -> None:
    mock = MockAnthropic().start()
    home = tmp_path / "aq"
    env = claude_env(tmp_path, mock.base_url, CLAUDE, AGENTQUEUE_HOME=str(home), AGENTQUEUE_POLL_SECONDS="0.1",
                     AGENTQUEUE_PORT="0")

    def start() -> subprocess.Popen:
        process = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--no-http"], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return process

    server = start()
    store = None
    try:
        # Connect only once this daemon serves: a plugin that finds none starts its own, and this one, still
        # importing on a loaded machine, would take the home over later (after the kill below).
        await wait_until(lambda: (daemon.read_daemon_info(home) or {}).get("pid") == server.pid, "the daemon", 60)
        params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"], env=env)
        async with Client(params, mode="legacy", elicitation_callback=person_says_yes) as client:
            for tool, args in (("create_project", {"name": "Demo"}),
                               ("add_repo", {"source": "init", "name": "app", "project_id": "demo"}),
                               ("create_task", {"title": "Ask", "project_id": "demo",
                                                "description": "SCENARIO:run_cmd CMD[touch RESTART_MARKER]"})):
                created = await ok(client, tool, **args)
            task_id = created["id"]
            store = Store(paths.db_path(home))

            def state() -> str:
                return store.scalar("SELECT status FROM tasks WHERE id = ?", (task_id,))

            await wait_until(lambda: state() == "WAITING_INPUT", "the first run to ask", 90)
            first_request = store.scalar("SELECT id FROM permission_requests WHERE task_id = ?", (task_id,))
            agent_pid = store.scalar("SELECT pid FROM agents WHERE current_task = ?", (task_id,))
            assert agent_pid and alive(agent_pid)
            if how == "restart_daemon":
                await ok(client, "restart_daemon")  # the client's session survives this one
        if how == "kill -9":
            os.kill(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
            server = start()
        # The old run is gone, its request closed; the task runs again and asks again.
        await wait_until(lambda: not alive(agent_pid), "the waiting agent to be ended", 30)
        await wait_until(lambda: store.scalar("SELECT status FROM permission_requests WHERE id = ?",
                                              (first_request,)) == "expired", "the old request to close", 30)
        await wait_until(lambda: store.scalar("SELECT count(*) FROM permission_requests WHERE task_id = ? AND "
                                              "status = 'pending'", (task_id,)) == 1, "the rerun to ask", 90)
        async with Client(params, mode="legacy") as client:
            pending = (await ok(client, "list_requests", project_id="demo"))["requests"]
            assert [r["id"] for r in pending] != [first_request]
            await ok(client, "answer_request", request_id=pending[0]["id"], decision="deny")
            await wait_until(lambda: state() in ("COMPLETED", "BLOCKED"), "the task to finish", 90)
        assert state() == "COMPLETED"
        assert store.scalar("SELECT count(*) FROM permission_requests WHERE status = 'pending'") == 0
    finally:
        if store is not None:
            store.close()
        daemon.stop(home, timeout=15)
        if server.poll() is None:
            server.kill()
        mock.stop()
