"""The terminal against a real daemon: reads as JSON, actions through the daemon's tools, stop, logs -f.

Everything is real: `agentqueue serve` as a process, a `command` agent that writes into a real linked git
repo; the CLI runs in this process at 80 columns, except on a terminal (`stop`'s question) and `logs -f`,
which run as a person runs them.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentqueue import daemon

from .cli_helpers import (AGENT_COMMAND, LiveDaemon, Output, cli_env, cli_in_process, cli_json_in_process, run_cli,
                          signals, start_daemon, stop_daemon)
from .git_fixtures import git, make_repo
from .processes import Terminal, alive

pytestmark = [pytest.mark.daemon, pytest.mark.integration]


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveDaemon]:
    env = cli_env(tmp_path / "aq", tmp_path / "user")
    running = start_daemon(env)
    repo = make_repo(tmp_path / "repo")
    running.call("create_project", name="Demo")
    running.call("add_repo", source="link", project_id="demo", path=str(repo), name="app")
    running.call("create_agent", name="worker", agent_type="command", command=AGENT_COMMAND)
    running.repo = repo  # type: ignore[attr-defined]
    yield running
    stop_daemon(running)


def test_reads_as_json_and_approve_through_the_daemon(live: LiveDaemon) -> None:
    task = live.call("create_task", project_id="demo", title="Write out", requires_approval=True,
                     description="WRITE out.txt changed\nSAY wrote out.txt")
    live.wait_status(task["id"], "AWAITING_APPROVAL")
    env = live.env

    listed = cli_json_in_process(env, "tasks")
    assert [(t["id"], t["status"]) for t in listed["tasks"]] == [(task["id"], "AWAITING_APPROVAL")]
    assert cli_json_in_process(env, "tasks", "--status", "awaiting_approval", "--project", "demo")["total"] == 1
    assert cli_json_in_process(env, "tasks", "--status", "READY")["tasks"] == []

    shown = cli_json_in_process(env, "show", task["id"])
    assert shown["task"]["branch"].startswith(f"{task['id']}/") and shown["attempts"] == 1
    assert shown["result"]["status"] == "completed" and shown["result"]["files_changed"] == ["out.txt"]
    assert shown["log"].endswith(f"{task['id']}.log")

    diff = cli_json_in_process(env, "diff", task["id"])
    assert diff["files_changed"] == ["out.txt"] and "+changed" in diff["diff"]
    plain = cli_in_process(env, "diff", task["id"])
    assert plain.returncode == 0 and "+changed" in plain.stdout

    usage = cli_json_in_process(env, "usage")
    assert [(r["project_id"], r["runs"]) for r in usage["breakdown"]] == [("demo", 1)]
    since = cli_json_in_process(env, "usage", "--project", "demo", "--since", "1")
    assert since["breakdown"][0]["task_id"] == task["id"]

    status = cli_json_in_process(env, "status")
    assert status["daemon"]["running"] and status["daemon"]["pid"] == live.pid
    assert status["tasks"]["by_status"]["AWAITING_APPROVAL"] == 1 and len(status["tasks"]["by_status"]) == 11
    assert status["orchestrator"]["state"] == "running"

    logs = cli_json_in_process(env, "logs", task["id"])
    assert "wrote out.txt" in logs["text"]

    # Approving lands the branch on main: from a script (no terminal to ask) that is refused with how to allow it.
    refused = cli_in_process(env, "approve", task["id"])
    assert refused.returncode == 1 and "tool:merge_into_default:app" in refused.stderr, refused.stderr
    assert "Traceback" not in refused.stderr
    assert cli_json_in_process(env, "show", task["id"])["task"]["status"] == "AWAITING_APPROVAL"
    (live.home / "policy.toml").write_text('allow = ["tool:merge_into_default"]\n')  # a person allows it
    approved = cli_in_process(env, "approve", task["id"])
    assert approved.returncode == 0 and "COMPLETED" in approved.stdout, approved.stderr
    assert git(live.repo, "show", "main:out.txt") == "changed"  # type: ignore[attr-defined]
    # The daemon's own checks apply: a second approve is refused with the tool's message.
    again = cli_in_process(env, "approve", task["id"])
    assert again.returncode == 1 and "AWAITING_APPROVAL" in again.stderr and "Traceback" not in again.stderr
    assert cli_json_in_process(env, "tasks", "--all")["tasks"][0]["status"] == "COMPLETED"
    assert cli_json_in_process(env, "tasks")["hidden_completed"] == 1


def test_pause_and_resume_go_through_the_daemon(live: LiveDaemon) -> None:
    env = live.env
    assert cli_json_in_process(env, "pause")["state"] == "paused"
    assert cli_json_in_process(env, "status")["orchestrator"]["state"] == "paused"
    held = live.call("create_task", project_id="demo", title="Held", description="SAY hi")
    assert cli_json_in_process(env, "pause", "demo")["status"] == "PAUSED"
    assert cli_json_in_process(env, "resume")["state"] == "running"
    assert cli_json_in_process(env, "status")["projects"][0]["status"] == "PAUSED"
    assert live.task_status(held["id"]) == "READY"  # its project is still paused
    resumed = cli_in_process(env, "resume", "demo")
    assert resumed.returncode == 0 and "ACTIVE" in resumed.stdout
    live.wait_status(held["id"], "COMPLETED")
    events = live.call("get_recent_events", limit=50)["events"]
    assert {"orchestrator.paused", "orchestrator.resumed"} <= {e["event_type"] for e in events}
    unknown = cli_in_process(env, "pause", "nope")
    assert unknown.returncode == 1 and "'nope' not found" in unknown.stderr


def _answer_on_a_tty(env: dict[str, str], answer: bytes, *args: str) -> tuple[int, str]:
    """Run the CLI on a pseudo-terminal, type `answer` at its question; returns (status, what it showed)."""
    with Terminal([sys.executable, "-m", "agentqueue", *args], env) as term:
        term.read_until(b"[y/N]")
        term.type(answer + b"\n")
        code = term.process.wait(timeout=60)
        term.drain()
    return code, term.text


def test_stop_lists_the_agents_it_interrupts_and_asks(live: LiveDaemon, tmp_path: Path) -> None:
    task = live.call("create_task", project_id="demo", title="Long one",
                     description=f"SAY working\nWAITFOR {signals(tmp_path) / 'never'}")
    live.wait_status(task["id"], "IN_PROGRESS")
    refused = cli_in_process(live.env, "stop")  # no terminal to ask
    assert refused.returncode == 1
    assert "worker" in refused.stdout and task["id"] in refused.stdout and "--force" in refused.stderr
    assert alive(live.pid) and daemon.lock_is_held(live.home)

    code, shown = _answer_on_a_tty(live.env, b"n", "stop")
    assert code == 1 and task["id"] in shown and "Not stopped" in shown
    assert alive(live.pid)

    forced = cli_in_process(live.env, "stop", "--force")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert task["id"] in forced.stdout and "Stopped the AgentQueue daemon" in forced.stdout
    assert live.process.wait(timeout=20) == 0
    # After the daemon is gone, status says so and never claims the orchestrator is running.
    status = cli_in_process(live.env, "status")
    assert "daemon not running (the orchestrator setting is 'running'" in " ".join(status.stdout.split())
    assert "orchestrator running" not in status.stdout


def test_stop_counts_a_run_waiting_for_input_among_those_it_interrupts(live: LiveDaemon) -> None:
    """Its agent process is alive (waiting for a person's answer): stopping the daemon interrupts it too."""
    from agentqueue.services import Services
    from agentqueue.services.lifecycle import Lifecycle

    live.call("orchestrator_control", action="pause")  # the daemon claims nothing itself meanwhile
    services = Services(live.home)
    try:
        owner = services.store.scalar("SELECT id FROM daemons")  # the daemon's own run, as its engine claims one
        task = services.tasks.create("demo", "Asks", "do it")
        lifecycle = Lifecycle(services.store, services.tasks, services.usage, owner=owner)
        assert lifecycle.claim(task.id, "worker")
        lifecycle.started(task.id, None)
        services.requests.open(task.id, "worker", "Bash", {}, "Bash(npm install)", None, None, 600)
        assert services.tasks.get(task.id).status == "WAITING_INPUT"
    finally:
        services.close()
    refused = run_cli(live.env, "stop")  # no terminal to ask
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert task.id in refused.stdout and "WAITING_INPUT" in refused.stdout and "--force" in refused.stderr
    assert alive(live.pid)


def test_logs_follow_prints_each_line_as_the_agent_writes_it(live: LiveDaemon, tmp_path: Path) -> None:
    go = signals(tmp_path) / "go"
    task = live.call("create_task", project_id="demo", title="Talks",
                     description=f"SAY first line\nWAITFOR {go}\nSAY second line")
    follower = subprocess.Popen([sys.executable, "-m", "agentqueue", "logs", task["id"], "-f"], env=live.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    out = Output(follower.stdout)
    try:
        out.read_until(b"first line")
        # The agent cannot write its second line before `go` exists: the first was shown while it ran.
        assert b"second line" not in out.text and live.task_status(task["id"]) == "IN_PROGRESS"
        go.touch()
        out.read_until(b"second line")
        # Following ends by itself once the task is done.
        assert follower.wait(timeout=60) == 0
        assert b"[done] completed" in out.drain(10)
        assert task["id"] in follower.stderr.read().decode()
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()


def test_a_bad_config_edit_gets_its_sentence_and_stop_still_stops_the_daemon(live: LiveDaemon, tmp_path: Path) -> None:
    """Issue 23: a bad value in config.toml after the daemon started turned every read into a traceback, and
    `stop` could not stop the daemon. Reads now say the value's sentence once and still answer; stop still
    lists the agents it interrupts, asks, and stops."""
    task = live.call("create_task", project_id="demo", title="Long one",
                     description=f"SAY working\nWAITFOR {signals(tmp_path) / 'never'}")
    live.wait_status(task["id"], "IN_PROGRESS")
    (live.home / "config.toml").write_text("[engine]\ntask_timeout = \"abc\"\n")
    sentence = "[engine] task_timeout = 'abc' is not a duration"
    for args in (["status"], ["tasks"], ["show", task["id"]], ["logs", task["id"]]):
        ran = cli_in_process(live.env, *args)
        assert ran.returncode == 0 and "Traceback" not in ran.stderr, (args, ran.stderr)
        assert ran.stderr.count(sentence) == 1 and "agentqueue doctor" in ran.stderr, (args, ran.stderr)
        assert task["id"] in ran.stdout, (args, ran.stdout)
    for args in (["usage"], ["diff", task["id"]]):  # these load the whole settings: the sentence, exit 1, no more
        ran = cli_in_process(live.env, *args)
        assert ran.returncode == 1 and sentence in ran.stderr and "Traceback" not in ran.stderr, (args, ran.stderr)
        assert len(ran.stderr.strip().splitlines()) == 1, ran.stderr
    refused = cli_in_process(live.env, "stop")  # no terminal to ask: the agents are still listed
    assert refused.returncode == 1 and task["id"] in refused.stdout and "--force" in refused.stderr
    forced = cli_in_process(live.env, "stop", "--force")
    assert forced.returncode == 0 and "Stopped the AgentQueue daemon" in forced.stdout, forced.stdout + forced.stderr
    assert live.process.wait(timeout=20) == 0
