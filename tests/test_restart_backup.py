"""`agentqueue restart-daemon`, `backup` and `restore` against a real daemon (issue 34).

restart-daemon is the restart_daemon tool typed in a terminal: the policy asks first, a connected client keeps its
session, a running agent is stopped and its task requeued with its work and no retry counted, then runs again.
backup copies the store while the daemon runs and writes (one commit's state), with config.toml and policy.toml
(0600); restore puts it back only with the daemon stopped, keeping what it replaces.
"""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import threading
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from agentqueue import daemon, paths

from .cli_helpers import AGENT_COMMAND, cli_env, run_cli, signals, start_daemon, stop_daemon, wait_until
from .conftest import person_says_yes
from .git_fixtures import make_repo
from .slowdown import scaled

pytestmark = [pytest.mark.daemon, pytest.mark.integration]



async def call(client: Client, tool: str, args: dict) -> dict:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return result.structured_content


@pytest.mark.anyio
async def test_restart_daemon_keeps_a_connected_clients_session_and_requeues_the_running_task(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "aq", tmp_path / "user")
    home = Path(env["AGENTQUEUE_HOME"])
    live = start_daemon(env)
    try:
        live.call("create_project", name="Demo")
        live.call("add_repo", source="link", project_id="demo", path=str(make_repo(tmp_path / "repo")), name="app")
        live.call("create_agent", name="worker", agent_type="command", command=AGENT_COMMAND)
        gate = signals(tmp_path) / "go"
        task = live.call("create_task", title="Waits at the gate", description=f"SAY started\nWAITFOR {gate}",
                         project_id="demo")
        live.wait_status(task["id"], "IN_PROGRESS", timeout=90)
        before = daemon.read_daemon_info(home)

        # Without a terminal and without --yes the policy's question cannot be put: nothing is restarted.
        refused = run_cli(env, "restart-daemon")
        assert refused.returncode == 1 and "Not restarted" in refused.stderr and "elicitation" in refused.stderr
        assert daemon.read_daemon_info(home)["started_at"] == before["started_at"]

        # The plugin waits out the restart for as long as a slow machine takes (then it would start a daemon itself).
        plugin = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"],
                                       env={**env, "AGENTQUEUE_CONNECT_TIMEOUT": str(scaled(120))})
        async with Client(plugin, mode="legacy", elicitation_callback=person_says_yes) as client:
            assert (await call(client, "get_task", {"task_id": task["id"]}))["status"] == "IN_PROGRESS"
            done = await anyio.to_thread.run_sync(lambda: run_cli(env, "restart-daemon", "--yes",
                                                                  timeout=scaled(180)))
            said = " ".join(done.stdout.split())
            assert done.returncode == 0, done.stdout + done.stderr
            assert "stops 1 running agent(s)" in said and task["id"] in said
            assert f"Restarted the daemon (pid {live.pid})" in said and "keep their sessions" in said
            assert "1 task(s) that were running are back in the queue" in said
            info = daemon.read_daemon_info(home)
            assert info["pid"] == before["pid"] == live.pid and info["started_at"] != before["started_at"]
            # The same client, the same session, on the restarted daemon.
            with anyio.fail_after(scaled(60)):
                again = await call(client, "get_task", {"task_id": task["id"]})
            assert again["retry_count"] == 0  # requeued by the restart, not counted as a failure
            events = await call(client, "get_recent_events", {"event_type": "daemon.restarting"})
            assert len(events["events"]) == 1
        # The task runs again on the restarted daemon, and completes once let through.
        live.wait_status(task["id"], "IN_PROGRESS", timeout=90)
        gate.touch()
        live.wait_status(task["id"], "COMPLETED", "AWAITING_APPROVAL", timeout=120)
    finally:
        stop_daemon(live)


def test_restart_daemon_with_no_daemon_says_so(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "aq", tmp_path / "user")
    done = run_cli(env, "restart-daemon", "--yes")
    assert done.returncode == 1 and "No AgentQueue daemon is running" in done.stderr
    assert not daemon.lock_is_held(tmp_path / "aq")  # it started none


def tasks_in(path: Path) -> int:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM tasks").fetchone()[0])
    finally:
        conn.close()


def test_backup_and_restore_round_trip_while_the_daemon_runs(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "aq", tmp_path / "user")
    home = Path(env["AGENTQUEUE_HOME"])
    live = start_daemon(env)
    try:
        live.call("orchestrator_control", action="pause")  # nothing runs: the tasks are the data
        live.call("create_project", name="Demo")
        for n in range(5):
            live.call("create_task", title=f"Task {n}", description="d", project_id="demo")
        config = home / "config.toml"
        config.write_text(config.read_text() + '\n[agent_env]\nSOME_KEY = "secret"\n')
        os.chmod(config, 0o644)  # a home made by hand: the copy is private whatever the source's mode
        (home / "policy.toml").write_text('preset = "standard"\nallow = ["Bash(make:*)"]\n')
        backed_config, backed_policy = config.read_text(), (home / "policy.toml").read_text()

        # Writers go on through the daemon while the copy is taken.
        writing = threading.Event()
        stop_writing = threading.Event()

        def write() -> None:
            n = 0
            while not stop_writing.is_set():
                live.call("create_task", title=f"Meanwhile {n}", description="d", project_id="demo")
                n += 1
                writing.set()
        writer = threading.Thread(target=write)
        writer.start()
        try:
            assert writing.wait(scaled(60))
            done = run_cli(env, "backup", str(tmp_path / "backup"), "--json", timeout=scaled(120))
        finally:
            stop_writing.set()
            writer.join(timeout=scaled(60))
        assert done.returncode == 0, done.stderr
        made = json.loads(done.stdout)
        folder = tmp_path / "backup"
        assert made["store_copied"] and set(made["files"]) == {"agentqueue.db", "config.toml", "policy.toml"}
        assert folder.stat().st_mode & 0o777 == 0o700
        for name in (*made["files"], "backup.json"):
            assert (folder / name).stat().st_mode & 0o777 == 0o600, name
        copy = folder / "agentqueue.db"
        conn = sqlite3.connect(copy)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            # One commit's state: the trigger-kept counts agree with the rows they count.
            assert dict(conn.execute("SELECT status, sum(n) FROM task_counts GROUP BY status HAVING sum(n) > 0")) == \
                dict(conn.execute("SELECT status, count(*) FROM tasks GROUP BY status"))
        finally:
            conn.close()
        assert not Path(f"{copy}-wal").exists()
        backed = tasks_in(copy)
        assert backed == made["tasks"] >= 6
        manifest = json.loads((folder / "backup.json").read_text())
        assert manifest["schema"] == made["schema"] and set(manifest["files"]) == set(made["files"])

        # Life goes on after the backup.
        live.call("create_task", title="After the backup", description="d", project_id="demo")
        (home / "policy.toml").write_text('preset = "readonly"\n')
        now = tasks_in(paths.db_path(home))
        assert now > backed

        # Restore refuses while the daemon runs, and without a terminal to ask or --yes; nothing changes.
        running = run_cli(env, "restore", str(folder), "--yes")
        assert running.returncode == 1 and "agentqueue stop" in running.stderr
        assert tasks_in(paths.db_path(home)) == now
    finally:
        stop_daemon(live)
    unasked = run_cli(env, "restore", str(folder))
    assert unasked.returncode == 1 and "--yes" in unasked.stderr and tasks_in(paths.db_path(home)) == now

    restored = run_cli(env, "restore", str(folder), "--yes")
    assert restored.returncode == 0, restored.stderr
    assert tasks_in(paths.db_path(home)) == backed
    assert (home / "config.toml").read_text() == backed_config and (home / "policy.toml").read_text() == backed_policy
    assert (home / "config.toml").stat().st_mode & 0o777 == 0o600
    [before_restore] = home.glob("agentqueue.before-restore.*.db")
    assert tasks_in(before_restore) == now  # what it replaced is kept
    assert [p.read_text() for p in home.glob("policy.toml.before-restore.*")] == ['preset = "readonly"\n']

    # A daemon on the restored home serves the backup's queue.
    live = start_daemon(env)
    try:
        wait_until(lambda: daemon.read_daemon_info(home), 60, "daemon.json")
        assert live.call("list_tasks", project_id="demo", limit=500)["total"] == backed
    finally:
        stop_daemon(live)
