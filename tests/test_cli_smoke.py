"""Every `agentqueue` command once as a person runs it: the script pip installed, a new process, a pipe.

The output itself is checked in this process at a fixed width (test_cli.py, test_cli_reads.py,
test_cli_daemon.py call `cli.run`); these check that the real entry point (bin/agentqueue, installed by
pip from pyproject's script-files) reaches each command and ends with its exit status.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .cli_helpers import AGENT_COMMAND, INSTALLED_SCRIPT, cli_env, installed_cli, start_daemon, stop_daemon
from .git_fixtures import git, make_repo


def as_a_person(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = installed_cli(env, *args)
    assert "Traceback" not in done.stderr, done.stderr
    return done


# Commands that need no daemon: (argv, exit status, what the output says).
WITHOUT_A_DAEMON = [
    ((), 0, "commands:"),
    (("--version",), 0, "agentqueue 0."),
    (("install", "cursor", "--dry-run"), 0, "Would write"),
    (("uninstall",), 1, "Nothing changed: there is no terminal to ask"),
    (("chat", "--json"), 1, "--json goes with -p MESSAGE"),
]


@pytest.mark.parametrize(("args", "code", "said"), WITHOUT_A_DAEMON,
                         ids=["help", "version", "install", "uninstall", "chat"])
def test_a_command_without_a_daemon(tmp_path: Path, args: tuple[str, ...], code: int, said: str) -> None:
    done = as_a_person(cli_env(tmp_path / "aq", tmp_path / "user"), *args)
    assert done.returncode == code and said in done.stdout + done.stderr, (done.stdout, done.stderr)


def test_doctor(tmp_path: Path) -> None:
    done = as_a_person(cli_env(tmp_path / "aq", tmp_path / "user"), "doctor", "--json")
    report = json.loads(done.stdout)
    assert report["checks"] and report["ok"] == (done.returncode == 0)


@pytest.mark.integration
@pytest.mark.daemon
def test_the_queue_commands_against_a_daemon(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "aq", tmp_path / "user")
    live = start_daemon(env, "--port", "0", installed=True)  # agentqueue serve
    try:
        repo = make_repo(tmp_path / "repo")
        live.call("create_project", name="Demo")
        live.call("add_repo", source="link", project_id="demo", path=str(repo), name="app")
        live.call("create_agent", name="worker", agent_type="command", command=AGENT_COMMAND)
        task = live.call("create_task", project_id="demo", title="Write out", requires_approval=True,
                         description="WRITE out.txt changed\nSAY wrote out.txt")["id"]
        live.wait_status(task, "AWAITING_APPROVAL")

        status = as_a_person(env, "status")
        assert status.returncode == 0 and f"daemon running (pid {live.pid}" in status.stdout
        listed = as_a_person(env, "tasks")
        assert listed.returncode == 0 and task in listed.stdout and "AWAITING_APPROVAL" in listed.stdout
        shown = as_a_person(env, "show", task)
        assert shown.returncode == 0 and "Write out" in shown.stdout and "out.txt" in shown.stdout
        logged = as_a_person(env, "logs", task)
        assert logged.returncode == 0 and "wrote out.txt" in logged.stdout
        changed = as_a_person(env, "diff", task)
        assert changed.returncode == 0 and "+changed" in changed.stdout
        usage = as_a_person(env, "usage")
        assert usage.returncode == 0 and "demo" in usage.stdout

        plugin = subprocess.Popen([str(INSTALLED_SCRIPT), "mcp"], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            assert plugin.stdin is not None and plugin.stdout is not None
            plugin.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"}}}).encode() + b"\n")
            plugin.stdin.flush()
            answer = json.loads(plugin.stdout.readline())
            assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "agentqueue"
            plugin.stdin.close()
            assert plugin.wait(timeout=30) == 0
        finally:
            if plugin.poll() is None:
                plugin.kill()
                plugin.wait()

        board = as_a_person(env, "board", "--no-open", "--json")
        assert board.returncode == 0, board.stderr
        links = json.loads(board.stdout)
        assert links["login_url"].startswith(links["board"].removesuffix("/") + "/login?code=")

        listed = as_a_person(env, "projects")
        assert listed.returncode == 0 and "demo  ACTIVE" in listed.stdout and "repos: app" in listed.stdout
        added = as_a_person(env, "add", "Later", "--after", task)  # waits on the task: it never runs here
        assert added.returncode == 0 and "DEFINED, waiting on " + task in added.stdout, added.stderr
        later = added.stdout.split()[1]
        assert as_a_person(env, "stop-task", later).stdout.startswith(f"Stopped {later}: DEFINED -> BLOCKED")
        assert as_a_person(env, "restart", later).stdout.startswith(f"Restarted {later}: BLOCKED -> DEFINED")
        as_a_person(env, "stop-task", later)
        assert as_a_person(env, "skip", later).stdout.startswith(f"Skipped {later}")
        assert as_a_person(env, "delete", later, "--yes").stdout.startswith(f"Deleted {later}")
        sent = as_a_person(env, "request-changes", task, "-m", "SAY once more")
        assert sent.returncode == 0 and sent.stdout.startswith(f"Sent {task} back"), sent.stderr
        live.wait_status(task, "AWAITING_APPROVAL")

        paused = as_a_person(env, "pause")
        assert paused.returncode == 0 and "Orchestrator paused" in paused.stdout
        resumed = as_a_person(env, "resume")
        assert resumed.returncode == 0 and "Orchestrator running" in resumed.stdout

        (live.home / "policy.toml").write_text('allow = ["tool:merge_into_default"]\n')  # a person allows landing
        approved = as_a_person(env, "approve", task)
        assert approved.returncode == 0 and f"Approved {task}: COMPLETED" in approved.stdout, approved.stderr
        assert git(repo, "show", "main:out.txt") == "changed"

        stopped = as_a_person(env, "stop")
        assert stopped.returncode == 0 and "Stopped the AgentQueue daemon" in stopped.stdout, stopped.stderr
        assert live.process.wait(timeout=20) == 0
    finally:
        stop_daemon(live)
