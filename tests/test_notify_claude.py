"""A real `claude` agent asks, a person is told, and answers from the command in the message.

The daemon runs with `[notify] urls = ["json://127.0.0.1:PORT/hook"]` pointing at a loopback receiver; the
agent is the REAL claude CLI on the loopback model mock (tests/mock_anthropic.py). The person answers with
`agentqueue allow REQUEST`, typed at a terminal (a pseudo-terminal here), exactly as the message says.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from agentqueue import daemon, paths
from agentqueue.engine.orchestrator import Engine
from agentqueue.services import Services
from agentqueue.store.sqlite import SqliteStore as Store

from .conftest import ok, person_says_yes
from .mock_anthropic import MockAnthropic
from .notify_receiver import Receiver
from .processes import at_a_terminal, claude_env, wait_for
from .test_engine_claude import CLAUDE, mock_api  # noqa: F401  (mock_api: fixture)
from .engine_runs import engine_and_person
from .test_permissions_claude import last_tool_result, status

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.real_cli,
              pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")]


@pytest.mark.daemon
async def test_a_permission_request_reaches_a_person_who_answers_from_the_message(tmp_path: Path) -> None:
    mock = MockAnthropic().start()
    receiver = Receiver()
    home = tmp_path / "aq"
    paths.private_dir(home)
    (home / "config.toml").write_text(f'[notify]\nurls = ["{receiver.url}"]\n')
    env = claude_env(tmp_path, mock.base_url, CLAUDE, AGENTQUEUE_HOME=str(home), AGENTQUEUE_POLL_SECONDS="0.1",
                     AGENTQUEUE_PORT="0")
    server = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    store = None
    try:
        await wait_for(lambda: (daemon.read_daemon_info(home) or {}).get("pid") == server.pid, 60, "the daemon")
        board = daemon.read_daemon_info(home)["http_url"].removesuffix("/mcp")
        params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"], env=env)
        async with Client(params, mode="legacy", elicitation_callback=person_says_yes) as client:
            await ok(client, "create_project", name="Demo")
            await ok(client, "add_repo", source="init", name="app", project_id="demo")
            task = await ok(client, "create_task", title="Touch it", project_id="demo",
                            description="SCENARIO:run_cmd CMD[touch NOTIFIED_MARKER]")
        store = Store(paths.db_path(home))

        def state() -> str:
            return store.scalar("SELECT status FROM tasks WHERE id = ?", (task["id"],))

        await wait_for(lambda: state() == "WAITING_INPUT", 120, "the agent to ask")
        asked = time.monotonic()
        assert "its timeout starts when a notification reaches someone" in store.scalar(
            "SELECT reason FROM tasks WHERE id = ?", (task["id"],))
        # The acceptance bound of issue 22: told within 5 s of the question.
        await wait_for(lambda: receiver.messages, 5, "the permission request's notification")
        told = time.monotonic() - asked
        (text,) = receiver.texts()
        request_id = store.scalar("SELECT id FROM permission_requests WHERE task_id = ?", (task["id"],))
        agent_pid = store.scalar("SELECT pid FROM agents WHERE current_task = ?", (task["id"],))
        assert task["id"] in text and "Touch it" in text and "Bash(touch NOTIFIED_MARKER)" in text
        assert f"agentqueue allow {request_id}" in text and f"agentqueue deny {request_id}" in text
        assert f"{board}/tasks/{task['id']}" in text
        # Its timeout now counts from that notification (recorded once the service answered).
        await wait_for(lambda: store.scalar("SELECT notified_at FROM permission_requests WHERE id = ?", (request_id,)),
                       10, "the request to be marked as told")
        # Told: the task's reason says until when it waits, no longer that its timeout starts once someone is told.
        def reason() -> str:
            return store.scalar("SELECT reason FROM tasks WHERE id = ?", (task["id"],))
        await wait_for(lambda: "reaches someone" not in reason(), 15, "the reason to show the time")
        expires = store.scalar("SELECT expires_at FROM permission_requests WHERE id = ?", (request_id,))
        assert f"until {expires}" in reason(), reason()

        # The person types the command from the message (and confirms at the prompt the policy asks).
        command = re.search(r"agentqueue allow (req-[0-9a-f]+)", text)
        code, said = at_a_terminal([sys.executable, "-m", "agentqueue", "allow", command[1]], env, "y\n")
        assert code == 0, said
        assert f"Allowed {request_id}" in said
        await wait_for(lambda: state() in ("COMPLETED", "BLOCKED"), 120, "the run to finish")
        assert state() == "COMPLETED"
        # The same run went on: one run of one agent process, which ran the command.
        assert store.scalar("SELECT count(*) FROM task_results WHERE task_id = ?", (task["id"],)) == 1
        assert store.scalar("SELECT count(*) FROM events WHERE task_id = ? AND event_type = 'task.assigned'",
                            (task["id"],)) == 1
        assert agent_pid and "denied" not in last_tool_result(mock)  # the model was told the command's output
        assert len(receiver.messages) == 1  # completed is off by default
        # Answered is answered: `agentqueue deny` afterwards changes nothing and says why.
        late = subprocess.run([sys.executable, "-m", "agentqueue", "deny", request_id], env=env, capture_output=True,
                              text=True, timeout=60)
        assert late.returncode == 1 and "already allowed" in late.stderr and "Traceback" not in late.stderr

        # `agentqueue notify test` and `doctor` report the notifier, its secrets masked.
        tested = subprocess.run([sys.executable, "-m", "agentqueue", "notify", "test", "--json"], env=env,
                                capture_output=True, text=True, timeout=60)
        assert tested.returncode == 0, tested.stderr
        assert json.loads(tested.stdout) == [{"url": f"json://127.0.0.1:{receiver.port}/••••", "ok": True,
                                              "error": None}]
        assert receiver.texts()[-1].startswith("AgentQueue: test notification")
        doctor = subprocess.run([sys.executable, "-m", "agentqueue", "doctor", "--json"], env=env,
                                capture_output=True, text=True, timeout=120)
        (line,) = [c for c in json.loads(doctor.stdout)["checks"] if c["name"].startswith("notifier ")]
        assert line["level"] == "ok" and "last success" in line["detail"], line
        assert line["name"] == f"notifier json://127.0.0.1:{receiver.port}/••••"
        print(f"told {told:.2f} s after the task was seen waiting")
    finally:
        if store is not None:
            store.close()
        daemon.stop(home, timeout=15)
        if server.poll() is None:
            server.kill()
        receiver.stop()
        mock.stop()


# -- the timeout counts from the first notification ------------------------------------------------------------
def ready(services: Services) -> Services:
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("claude", "claude-code")
    return services


async def test_nobody_is_denied_before_a_notification_went_out(home: Path, mock_api: MockAnthropic) -> None:  # noqa: F811
    receiver = Receiver()
    receiver.status = 500  # the service is down: nobody has been told
    paths.private_dir(home)
    (home / "config.toml").write_text(f'[notify]\nurls = ["{receiver.url}"]\n')
    services = ready(Services(home))
    services.policies.edit(project_id="demo", ask_timeout="1s")
    task = services.tasks.create("demo", "Late", "SCENARIO:run_cmd CMD[touch LATE_MARKER]", max_retries=0)
    try:
        async with engine_and_person(services) as (engine, _client):
            engine.notifier.retry_base = 0.3
            await wait_for(lambda: status(services, task.id) == "WAITING_INPUT", 120, "the agent to ask")
            await wait_for(lambda: receiver.attempts >= 3, 30, "the notifier to fail a few times")
            (request,) = services.requests.list("pending", task_id=task.id)  # well past 1 s, still pending
            receiver.status = 200
            await wait_for(lambda: receiver.messages, 30, "the notification")
            await wait_for(lambda: status(services, task.id) in ("COMPLETED", "BLOCKED"), 60, "the timeout's deny")
        (request,) = services.requests.list(None, task_id=task.id)
        assert request.status == "expired" and request.decided_by == "timeout"
        told = last_tool_result(mock_api)
        assert "Nobody answered the request to run Bash(touch LATE_MARKER) within 1 s of being told" in told, told
    finally:
        services.close()
        receiver.stop()


async def test_without_a_notifier_a_request_waits_a_day_and_says_why(home: Path,
                                                                     mock_api: MockAnthropic) -> None:  # noqa: F811
    services = ready(Services(home))
    task = services.tasks.create("demo", "Quiet", "SCENARIO:run_cmd CMD[touch QUIET_MARKER]", max_retries=0)
    try:
        async with engine_and_person(services) as (engine, client):
            await wait_for(lambda: status(services, task.id) == "WAITING_INPUT", 120, "the agent to ask")
            (request,) = services.requests.list("pending", task_id=task.id)
            await wait_for(lambda: "no notifier is configured, so it waits 24 h" in engine_log(engine, task.id), 10,
                           "the log line")
            await ok(client, "answer_request", request_id=request.id, decision="deny")
            await wait_for(lambda: status(services, task.id) in ("COMPLETED", "BLOCKED"), 60, "the run to end")
        from datetime import datetime
        hours = (datetime.fromisoformat(request.expires_at.replace("Z", "+00:00"))
                 - datetime.fromisoformat(request.created_at.replace("Z", "+00:00"))).total_seconds() / 3600
        assert 23.9 < hours <= 24.01
    finally:
        services.close()


def engine_log(engine: Engine, task_id: str) -> str:
    path = engine.log_path(task_id)
    return Path(path).read_text(errors="replace") if Path(path).exists() else ""

