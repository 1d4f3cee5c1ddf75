"""The terminal's commands that act (issue 23), against a real daemon: `add`, `restart`, `stop-task`, `skip`,
`delete`, `request-changes` and `projects` go through the tools a model calls, print one line (wrapped between
words at 40 columns, no colour when piped), take --json, and show a hostile title as text; `delete` asks on a
terminal and needs --yes without one; on a team's PostgreSQL queue `stop` asks before interrupting its runs.
"""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cli_helpers import (AGENT_COMMAND, LiveDaemon, cli_env, cli_in_process, cli_json_in_process, signals,
                          start_daemon, stop_daemon)
from .git_fixtures import make_repo
from .processes import Terminal, alive
from .test_terminal_safety import HOSTILE, SHOWN, assert_safe, assert_shown

pytestmark = [pytest.mark.daemon, pytest.mark.integration]


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveDaemon]:
    env = cli_env(tmp_path / "aq", tmp_path / "user")
    running = start_daemon(env)
    running.call("create_project", name="Demo")
    running.call("add_repo", source="link", project_id="demo", path=str(make_repo(tmp_path / "repo")), name="app")
    running.call("create_agent", name="worker", agent_type="command", command=AGENT_COMMAND)
    yield running
    stop_daemon(running)


def narrow(env: dict[str, str], *args: str) -> str:
    """`agentqueue ARGS` at 40 columns, piped: it succeeds, no line is wider, no escape reaches the output."""
    done = cli_in_process(env, *args, width=40)
    assert done.returncode == 0, (args, done.stderr)
    assert "\x1b" not in done.stdout
    assert all(len(line) <= 40 for line in done.stdout.splitlines()), done.stdout
    return done.stdout


def one_line(text: str) -> str:
    return " ".join(text.split())


def test_add_stop_restart_skip_delete_through_the_daemon(live: LiveDaemon, tmp_path: Path) -> None:
    env, gate = live.env, signals(tmp_path) / "never"
    # add: the only project is the default; the description defaults to the title.
    said = narrow(env, "add", "Waits at the gate", "-d", f"SAY hi\nWAITFOR {gate}", "--priority", "5")
    task_id = said.split()[1]
    assert one_line(said).startswith(f"Added {task_id} to demo") and f"`agentqueue logs {task_id} -f`" in one_line(said)
    assert task_id in said.splitlines()[0]  # an id is never broken across lines
    live.wait_status(task_id, "IN_PROGRESS")
    after = cli_json_in_process(env, "add", "Then this", "--after", task_id, "--approval", "-d", "SAY after")
    assert after["status"] == "DEFINED" and after["depends_on"] == [task_id] and after["requires_approval"]
    shown = one_line(cli_in_process(env, "show", after["id"]).stdout)
    assert f"Waiting on {task_id} (IN_PROGRESS)" in shown

    # stop-task kills the agent; show and status then advise terminal commands.
    stopped = narrow(env, "stop-task", task_id)
    assert one_line(stopped).startswith(f"Stopped {task_id}: IN_PROGRESS -> BLOCKED (its agent was killed).")
    assert f"`agentqueue restart {task_id}`" in one_line(stopped)
    assert live.task_status(task_id) == "BLOCKED"
    status = one_line(cli_in_process(env, "status").stdout)
    assert f"`agentqueue restart {task_id}` puts it back in the queue" in status and "restart_task" not in status
    assert f"`agentqueue skip {after['id']}`" not in status  # the dependent is not held

    # restart puts it back; --json is the tool's own result.
    restarted = cli_json_in_process(env, "restart", task_id)
    assert (restarted["task_id"], restarted["previous_status"], restarted["status"]) == (task_id, "BLOCKED", "READY")
    live.wait_status(task_id, "IN_PROGRESS")
    again = cli_in_process(env, "restart", task_id)  # the daemon's own check: not while it runs
    assert again.returncode == 1 and f"`agentqueue stop-task {task_id}`" in again.stderr, again.stderr
    assert "stop_task" not in again.stderr
    assert cli_in_process(env, "stop-task", task_id).returncode == 0
    assert any(task_id in w for w in cli_json_in_process(env, "status")["warnings"])

    # skip completes it and frees its dependent.
    skipped = narrow(env, "skip", task_id)
    assert f"Skipped {task_id}" in one_line(skipped) and f"Now free to run: {after['id']}" in one_line(skipped)
    # The held line goes once it is acted on.
    assert not any(task_id in w for w in cli_json_in_process(env, "status")["warnings"])
    live.wait_status(after["id"], "AWAITING_APPROVAL")

    # request-changes sends it back with the comment; its message is in terminal words.
    sent = narrow(env, "request-changes", after["id"], "-m", "SAY again")
    assert one_line(sent).startswith(f"Sent {after['id']} back (AWAITING_APPROVAL -> READY).")
    live.wait_status(after["id"], "AWAITING_APPROVAL")
    empty = cli_in_process(env, "request-changes", after["id"], "-m", "  ")
    assert empty.returncode == 1 and "comment is empty" in empty.stderr

    # delete: no terminal to ask, so --yes is needed; with it, the task and its results go.
    refused = cli_in_process(env, "delete", after["id"])
    assert refused.returncode == 1 and "--yes" in refused.stderr
    assert live.task_status(after["id"]) == "AWAITING_APPROVAL"
    deleted = narrow(env, "delete", after["id"], "--yes")
    assert one_line(deleted) == f"Deleted {after['id']} and its results."
    gone = cli_in_process(env, "show", after["id"])
    assert gone.returncode == 1 and "not found" in gone.stderr
    events = {e["event_type"] for e in live.call("get_recent_events", limit=100)["events"]}
    assert {"task.restarted", "task.changes_requested", "task.deleted"} <= events


def test_wrong_ids_and_projects_get_the_closest_and_add_says_how_to_choose(live: LiveDaemon) -> None:
    env = live.env
    task = cli_json_in_process(env, "add", "Say hi", "-d", "SAY hi")
    first, _, second = task["id"].partition("-")
    typo = f"{first}-{second[:-1]}"
    for command in ("restart", "stop-task", "skip", "approve"):
        done = cli_in_process(env, command, typo)
        assert done.returncode == 1, done.stdout
        assert f"Task '{typo}' not found. Did you mean {task['id']}?" in done.stderr, done.stderr
        assert "list_tasks" not in done.stderr and "Traceback" not in done.stderr
    deleted = cli_in_process(env, "delete", typo, "--yes")
    assert f"Did you mean {task['id']}?" in deleted.stderr
    live.call("create_project", name="Other")
    ambiguous = cli_in_process(env, "add", "Where to")
    assert ambiguous.returncode == 1 and "demo, other" in ambiguous.stderr and "--project ID" in ambiguous.stderr
    assert "`agentqueue projects`" in ambiguous.stderr
    wrong = cli_in_process(env, "add", "Where to", "--project", "othr")
    assert wrong.returncode == 1 and "Did you mean other?" in wrong.stderr, wrong.stderr
    listed = narrow(env, "projects")
    assert "demo  ACTIVE" in listed and "other  ACTIVE" in listed and "repos: app" in listed


def test_hostile_titles_stay_inert_in_every_new_command(live: LiveDaemon, tmp_path: Path) -> None:
    env, gate = live.env, signals(tmp_path) / "never"
    refused = cli_in_process(env, "add", HOSTILE)  # create_task refuses controls in a title, in its words
    assert refused.returncode == 1 and "control character" in refused.stderr
    assert_safe(refused.stdout + refused.stderr)
    added = cli_in_process(env, "add", "Plain for now", "-d", f"{HOSTILE}\nWAITFOR {gate}")
    assert added.returncode == 0, added.stderr
    task_id = added.stdout.split()[1]
    with sqlite3.connect(live.home / "agentqueue.db") as db:  # as a title written by other means would read
        db.execute("UPDATE tasks SET title = ? WHERE id = ?", (HOSTILE, task_id))
    live.wait_status(task_id, "IN_PROGRESS")
    steps = (["stop-task", task_id], ["restart", task_id], ["stop-task", task_id], ["projects"], ["show", task_id],
             ["status"], ["tasks"], ["request-changes", task_id, "-m", HOSTILE], ["stop-task", task_id],
             ["skip", task_id])
    for args in steps:
        if args[0] == "stop-task":
            live.wait_status(task_id, "IN_PROGRESS")
        done = cli_in_process(env, *args, width=40)
        assert done.returncode == 0, (args, done)
        assert_safe(done.stdout + done.stderr)
    shown = cli_in_process(env, "show", task_id)
    assert_shown(shown.stdout, SHOWN)
    # On a terminal, delete asks with the title made visible; "n" keeps it, "y" deletes it.
    env40 = {**env, "COLUMNS": "40"}
    with Terminal([sys.executable, "-m", "agentqueue", "delete", task_id], env40) as term:
        assert term.read_until(b"[y/N]"), term.text
        term.type(b"n\n")
        assert term.process.wait(timeout=60) == 1
        term.drain()
    assert_safe(term.text, styled=True)
    assert "Not deleted." in term.text and "\\x1b]52;c;QkFTRTY0\\x07" in term.text
    assert live.task_status(task_id) == "COMPLETED"
    with Terminal([sys.executable, "-m", "agentqueue", "delete", task_id], env40) as term:
        assert term.read_until(b"[y/N]"), term.text
        term.type(b"y\n")
        assert term.process.wait(timeout=60) == 0
        term.drain()
    assert_safe(term.text, styled=True)
    assert f"Deleted {task_id}" in term.text
    assert cli_in_process(env, "show", task_id).returncode == 1


@pytest.mark.pg
def test_stop_asks_before_interrupting_runs_on_a_team_queue(tmp_path: Path, pg_server: object) -> None:
    """Issue 23: on a PostgreSQL queue `stop` saw no agents (it looked for the SQLite file) and stopped the daemon
    with agents running without asking."""
    home = tmp_path / "aq"
    home.mkdir()
    (home / "config.toml").write_text(f'[team]\ndatabase_url = "{pg_server.database()}"\n')  # type: ignore[attr-defined]
    env = cli_env(home, tmp_path / "user")
    env.pop("AGENTQUEUE_DATABASE_URL", None)
    running = start_daemon(env)
    try:
        running.call("create_project", name="Demo")
        running.call("create_agent", name="worker", agent_type="command", command=AGENT_COMMAND)
        task = running.call("create_task", project_id="demo", title="Long one",
                            description=f"SAY working\nWAITFOR {signals(tmp_path) / 'never'}")
        running.wait_status(task["id"], "IN_PROGRESS")
        assert cli_json_in_process(env, "show", task["id"])["task"]["status"] == "IN_PROGRESS"
        refused = cli_in_process(env, "stop")  # no terminal to ask
        assert refused.returncode == 1, refused.stdout + refused.stderr
        assert task["id"] in refused.stdout and "--force" in refused.stderr
        assert alive(running.pid)
        forced = cli_in_process(env, "stop", "--force")
        assert forced.returncode == 0 and task["id"] in forced.stdout, forced.stdout + forced.stderr
        assert running.process.wait(timeout=30) == 0
    finally:
        stop_daemon(running)
