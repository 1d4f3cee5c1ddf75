"""A terminal that can do what it advises (issue 23): the advice it prints names its own commands, every status
has a next step, a wrong id gets the closest ones, narrow and piped output stays whole, and the reads work on a
team's PostgreSQL queue. The commands that act (add, restart, stop-task, skip, delete, request-changes) run
against a real daemon in tests/test_cli_act_daemon.py.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import pytest

from agentqueue import paths
from agentqueue.cli import advice
from agentqueue.cli.parser import COMMANDS as CLI_COMMANDS
from agentqueue.services import Services
from agentqueue.services import failures
from agentqueue.services.lifecycle import Lifecycle
from agentqueue.services.system import held_line, no_repo_warning

from .cli_helpers import cli_env, cli_in_process, cli_json_in_process
from .conftest import on_both_backends
from .test_cli import all_states, seed_every_state

store_backend = on_both_backends()  # the tests that use `home` run on SQLite and on PostgreSQL
# Commands another helper of issue 23 adds at the same time (the notifications slice): advice may name them.
ANNOUNCED = {"allow", "deny"}
ANSI = re.compile("\x1b")


def _tool_names() -> set[str]:
    from agentqueue.tools import SPECS

    return set(SPECS)


def _every_advice(task_id: str = "swift-falcon") -> list[str]:
    """Every text the services can store or return as advice: each failure's fix, each held reason's next step,
    get_status's warning lines, the approval hold's next step and the not-found refusals."""
    from agentqueue.engine.protected import Hold
    from agentqueue.services.agents import missing_cli_message
    from agentqueue.services.feedback import _refusal

    details = {"task_id": task_id, "from": "IN_PROGRESS", "error": "boom", "error_message": "boom", "runs": 3,
               "max_retries": 3, "request_id": "req-1234abcd", "action": "Bash(npm i)", "description": "deps",
               "expires_at": "2026-01-01T00:00:00Z", "branch": f"{task_id}/x", "default_branch": "main",
               "repo_id": "app", "checkout": "/repo", "conflicts": ["a.py"], "dirty": [], "repos": ["a", "b"],
               "project_id": "demo", "group": "brave-otter", "candidates": [{"task_id": "calm-seal", "reason": "x"}],
               "pr_url": "https://example/pr/1", "resume_after": "soon", "agent_type": "claude-code"}
    texts = [fix.replace("{id}", task_id) for _label, fix in failures.FAILURE_KINDS.values()]
    texts += [failures.describe_failure(None, None)[1], failures.describe_failure("odd", "x")[1]]
    for code in [*failures._EXPLAIN, *failures.FAILURE_KINDS, "unknown_code"]:
        for status in ("BLOCKED", "FAILED", "PAUSED", "WAITING_INPUT"):
            why = failures.explain(code, status, details)
            texts += [why.reason, why.next_step]
    texts += [failures.explain("merge_failed", "BLOCKED", {**details, "dirty": ["b.py"]}).next_step]
    texts += [held_line({"id": task_id, "title": "t", "status": "BLOCKED", "reason": None, "next_step": None}),
              no_repo_warning("demo", "/w"), missing_cli_message("codex")]
    texts += [Hold(["a"]).next_step(task_id, None), Hold(["a"]).next_step(task_id, "https://example/pr/1")]
    texts += [_refusal(task_id, s) for s in ("IN_PROGRESS", "READY", "PAUSED")]
    texts += [f"Task '{task_id}' not found. list_tasks shows task ids.",
              "Project 'x' not found. list_projects shows project ids.",
              "The orchestrator is paused with 2 READY task(s); orchestrator_control action=resume starts them.",
              "and 3 more: list_tasks status=BLOCKED,FAILED",
              f"Task {task_id} completed with no change in repo app: read its log; restart_task to run it again.",
              f"Task {task_id} completed in its project's scratch folder, not in a git repo (the project has no "
              "repo): nothing landed. For code work: add_repo, edit_task repo_id, restart_task.",
              "and more tasks completed with no change: get_task_result shows each one's warning.",
              "2 READY task(s) have no agent that can run them. create_agent registers one (claude-code, codex, "
              "gemini or command)."]
    return texts


def _status_warnings(home: Path) -> list[str]:
    """get_status's warning lines as a real store gives them: a READY task no agent can run, more held tasks than
    it lists, a task completed in a scratch folder, a paused orchestrator."""
    from .test_cli_reads import grow

    grow(home)
    services = Services(home)
    try:
        services.system.set_orchestrator("paused")
        lines = services.system.warnings()
    finally:
        services.close()
    assert any("no agent" in w for w in lines) and any(w.startswith("and ") for w in lines)
    assert any("paused" in w for w in lines) and any("scratch folder" in w for w in lines)
    return lines


def test_every_tool_the_advice_names_has_a_terminal_command_or_is_left_on_purpose(tmp_path: Path) -> None:
    tools = _tool_names()
    named: set[str] = set()
    for text in _every_advice() + _status_warnings(tmp_path / "aq"):
        words = set(re.findall(r"[a-z]+(?:_[a-z]+)+", text)) & tools
        named |= words
        shown = advice.warning_words(text)
        left = set(re.findall(r"[a-z]+(?:_[a-z]+)+", shown)) & set(advice.COMMANDS)
        assert not left, f"{sorted(left)} still named in the terminal's words: {shown!r}"
        assert "agentqueue://" not in shown, shown
    unmapped = named - set(advice.COMMANDS) - advice.LEFT_AS_IS
    assert not unmapped, f"advice names tools with no terminal command and not left on purpose: {sorted(unmapped)}"
    assert named & set(advice.COMMANDS) >= {"restart_task", "skip_task", "answer_request", "approve_task",
                                            "request_changes", "list_tasks", "get_agent_error"}
    # Every command the mapping names is one the terminal has (or that issue 23's notifications slice adds).
    for command in advice.COMMANDS.values():
        for word in command.removeprefix("agentqueue ").split("|"):
            assert word in CLI_COMMANDS or word in ANNOUNCED, command
    assert advice.LEFT_AS_IS <= tools  # a name left as is must be a tool a client can call


def test_terminal_words_fill_ids_and_keep_tools_without_a_command() -> None:
    said = advice.terminal_words(
        "answer_request request_id=req-1a2b decision=allow or deny (remember=true keeps the answer as a rule for "
        "this project); unanswered by 10:00 it is denied.")
    assert said.startswith("`agentqueue allow req-1a2b` or `agentqueue deny req-1a2b` (--remember keeps")
    assert advice.terminal_words("stop_task it first, then restart_task.", "calm-seal") == \
        "`agentqueue stop-task calm-seal` first, then `agentqueue restart calm-seal`."
    assert advice.terminal_words("restart_task swift-falcon runs it again.") == \
        "`agentqueue restart swift-falcon` runs it again."
    assert advice.terminal_words("or request_changes swift-falcon to send it back.") == \
        "or `agentqueue request-changes swift-falcon -m '…'` to send it back."
    assert advice.terminal_words("For code work: add_repo, then edit_task repo_id.", "x-y") == \
        "For code work: add_repo, then edit_task repo_id."
    assert advice.terminal_words("read the task log (agentqueue://tasks/calm-seal/log)") == \
        "read the task log (`agentqueue logs calm-seal`)"
    assert advice.warning_words("and 3 more: list_tasks status=BLOCKED,FAILED") == \
        "and 3 more: `agentqueue tasks --status BLOCKED,FAILED`"
    # A title is the task's own words, never rewritten: only the advice after it is.
    held = held_line({"id": "calm-seal", "title": "call restart_task it' is X: now", "status": "BLOCKED",
                      "reason": "Stopped.", "next_step": "restart_task calm-seal puts it back in the queue."})
    assert advice.warning_words(held) == ("Task calm-seal 'call restart_task it' is X: now' is BLOCKED: Stopped. "
                                          "Next: `agentqueue restart calm-seal` puts it back in the queue.")


def _seed_defined_behind_a_blocked_one(home: Path) -> dict[str, str]:
    ids = seed_every_state(home)
    services = Services(home)
    try:
        ids["DEFINED behind"] = services.tasks.create("alpha", "Waits", "d", depends_on=[ids["BLOCKED"]]).id
        ids["AWAITING_APPROVAL with PR"] = services.tasks.create("alpha", "Has a PR", "d").id
        services.tasks.set_status(ids["AWAITING_APPROVAL with PR"], "AWAITING_APPROVAL")
        with services.store.transaction() as db:
            db.execute("UPDATE tasks SET pr_url = ? WHERE id = ?",
                       ("https://github.com/o/r/pull/7", ids["AWAITING_APPROVAL with PR"]))
    finally:
        services.close()
    return ids


def test_show_gives_a_next_step_in_commands_for_every_status_at_40_columns_piped(tmp_path: Path) -> None:
    home = tmp_path / "aq"
    ids = _seed_defined_behind_a_blocked_one(home)
    env = cli_env(home, tmp_path / "user")
    expected = {
        "READY": "logs {id} -f", "DEFINED": "becomes READY", "DEFINED behind": "Waiting on {blocked} (BLOCKED)",
        "ASSIGNED": "logs {id} -f", "IN_PROGRESS": "stop-task {id}", "VERIFYING": "logs {id} -f",
        "WAITING_INPUT": "agentqueue restart {id}", "AWAITING_APPROVAL": "agentqueue approve {id}",
        "AWAITING_APPROVAL with PR": "pull/7", "COMPLETED": "request-changes {id}", "FAILED": "agentqueue restart {id}",
        "BLOCKED": "agentqueue restart {id}", "PAUSED": "agentqueue restart {id}",
    }
    assert set(all_states()) <= set(expected)
    tools = _tool_names() - advice.LEFT_AS_IS
    for status, wanted in expected.items():
        task_id = ids[status]
        shown = cli_in_process(env, "show", task_id, width=40)
        assert shown.returncode == 0, shown.stderr
        assert not ANSI.search(shown.stdout)  # piped: no colour codes
        lines = shown.stdout.splitlines()
        assert all(len(line) <= 40 for line in lines), [line for line in lines if len(line) > 40]
        assert task_id in lines[0]  # the id whole, never cut at the edge
        flat = " ".join(shown.stdout.split())
        assert "next step" in flat, (status, flat)
        step = flat.split("next step", 1)[1]
        assert wanted.format(id=task_id, blocked=ids["BLOCKED"]) in step, (status, step)
        assert not set(re.findall(r"[a-z]+(?:_[a-z]+)+", step.split(" attempts ")[0])) & tools, (status, step)
    # A READY task held by a paused project or orchestrator: resume is the next step.
    services = Services(home)
    try:
        services.system.set_orchestrator("paused")
        orchestrator = " ".join(cli_in_process(env, "show", ids["READY"]).stdout.split())
        project = services.tasks.get(ids["READY"]).project_id
        services.projects.set_status(project, "PAUSED")
        held = " ".join(cli_in_process(env, "show", ids["READY"]).stdout.split())
    finally:
        services.close()
    assert "next step The orchestrator is paused: `agentqueue resume` lets it start." in orchestrator
    assert f"next step Its project is paused: `agentqueue resume {project}` lets it start." in held
    # --json keeps the stored, tool-worded next step (what a model reads).
    data = cli_json_in_process(env, "show", ids["BLOCKED"])
    assert data["next_step"].startswith(f"restart_task {ids['BLOCKED']}")


def test_status_at_40_columns_piped_keeps_ids_and_states_whole_and_names_commands(tmp_path: Path) -> None:
    home = tmp_path / "aq"
    ids = seed_every_state(home)
    env = cli_env(home, tmp_path / "user")
    done = cli_in_process(env, "status", width=40)
    assert done.returncode == 0, done.stderr
    assert not ANSI.search(done.stdout)
    lines = done.stdout.splitlines()
    assert all(len(line) <= 40 for line in lines), [line for line in lines if len(line) > 40]
    words = set(done.stdout.split())
    assert "a-project-with-a-rather-long-name" in words and "…" not in done.stdout  # a long project id, whole
    for status in ("ASSIGNED", "IN_PROGRESS", "VERIFYING"):  # the running ones: id and status on one line
        assert any(ids[status] in line and status in line for line in lines), status
    flat = " ".join(done.stdout.split())
    assert f"`agentqueue restart {ids['BLOCKED']}`" in flat and "restart_task" not in flat
    # At 80 columns the tables stay (the layout issue 8 asked for).
    wide = cli_in_process(env, "status")
    assert any(line.split() == ["project", "state", "tasks"] for line in wide.stdout.splitlines())


def test_projects_lists_each_project_whole_at_40_columns(tmp_path: Path) -> None:
    home = tmp_path / "aq"
    seed_every_state(home)
    env = cli_env(home, tmp_path / "user")
    done = cli_in_process(env, "projects", width=40)
    assert done.returncode == 0, done.stderr
    assert not ANSI.search(done.stdout)
    lines = done.stdout.splitlines()
    assert all(len(line) <= 40 for line in lines), lines
    assert any(line.startswith("a-project-with-a-rather-long-name") for line in lines)
    data = cli_json_in_process(env, "projects")
    assert sorted(p["id"] for p in data["projects"]) == ["a-project-with-a-rather-long-name", "alpha"] and \
        data["total"] == 2
    assert all(p["repos"] == [] and sum(p["task_counts"].values()) > 0 for p in data["projects"])


def test_a_wrong_id_gets_the_closest_ones(home: Path, tmp_path: Path) -> None:
    services = Services(home)
    try:
        services.projects.create("Alpha")
        task_ids = [services.tasks.create("alpha", f"T{n}", "d").id for n in range(30)]
    finally:
        services.close()
    env = _team_env(home, tmp_path)
    target = task_ids[7]
    first, _, second = target.partition("-")
    for typo in (f"{first}-{second[:-1]}", f"{first[0]}{first[2:]}-{second}", f"{first}-{second}x"):
        if typo in task_ids:
            continue
        for args in (["show", typo], ["logs", typo]):
            done = cli_in_process(env, *args)
            assert done.returncode == 1 and f"Task '{typo}' not found. Did you mean" in done.stderr, done.stderr
            assert target in done.stderr.split("Did you mean", 1)[1], (typo, done.stderr)
            assert "`agentqueue tasks`" in done.stderr and "list_tasks" not in done.stderr
    nothing = cli_in_process(env, "show", "zzzzzz")
    assert nothing.returncode == 1 and "Did you mean" not in nothing.stderr
    near = cli_in_process(env, "tasks", "--project", "alpah")
    assert near.returncode == 1 and "Did you mean alpha?" in near.stderr, near.stderr


def test_closest_ids_read_a_few_index_ranges_never_every_task(tmp_path: Path) -> None:
    """Suggesting reads at most ~40 ids per range, a handful of ranges: never the whole table."""
    home = tmp_path / "aq"
    services = Services(home)
    services.projects.create("Alpha")
    now = "2026-01-01T00:00:00.000Z"
    with services.store.transaction() as db:  # 20,000 rows, as a long-lived queue holds
        db.conn.executemany("INSERT INTO tasks (id, project_id, title, description, status, priority, retry_count, "
                       "max_retries, requires_approval, created_at, updated_at) VALUES (?, 'alpha', 't', 'd', "
                       "'COMPLETED', 100, 0, 3, 0, ?, ?)", [(f"happy-bear-{n:06d}", now, now) for n in range(20_000)])
    read: list[int] = []
    real_all = services.store.all

    def counting(sql: str, params: Any = ()) -> list[dict[str, Any]]:
        rows = real_all(sql, params)
        read.append(len(rows))
        return rows

    services.store.all = counting  # type: ignore[method-assign]
    try:
        near = advice.closest_tasks(services.store, "hapy-bear-000123")
        assert near and near[0].startswith("happy-bear-000")
        assert sum(read) <= 40 * 20 and len(read) <= 20, read
        plan = " ".join(str(r) for r in services.store.db.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM tasks WHERE id >= ? ORDER BY id LIMIT 40", ("a",)).fetchall())
        assert "SEARCH" in plan and "SCAN" not in plan.replace("SCAN CONSTANT", ""), plan
    finally:
        services.store.all = real_all  # type: ignore[method-assign]
        services.close()


def _team_env(home: Path, tmp_path: Path) -> dict[str, str]:
    """The CLI's env; on PostgreSQL the queue is named in config.toml `[team] database_url`, as a team sets it."""
    env = cli_env(home, tmp_path / "user")
    url = env.pop("AGENTQUEUE_DATABASE_URL", None)
    if url:
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(f'[team]\ndatabase_url = "{url}"\n')
    return env


def test_reads_work_on_a_team_queue(home: Path, store_backend: str, tmp_path: Path) -> None:
    """Issue 23: on a PostgreSQL queue `tasks`, `show`, `logs`, `diff` said "No AgentQueue data", `status --json`
    said `initialized: false`: they looked for the home's SQLite file."""
    services = Services(home)
    try:
        services.projects.create("Alpha")
        held = services.tasks.create("alpha", "Held one", "d").id
        services.tasks.set_status(held, "BLOCKED")
    finally:
        services.close()
    env = _team_env(home, tmp_path)
    if store_backend == "postgres":
        assert not paths.db_path(home).exists()
    for args in (["tasks"], ["show", held], ["logs", held], ["projects"], ["status"], ["usage"]):
        done = cli_in_process(env, *args)
        assert done.returncode == 0 and "No AgentQueue data" not in done.stdout + done.stderr, (args, done)
    assert held in cli_in_process(env, "tasks").stdout
    diff = cli_in_process(env, "diff", held)  # no repo: the diff's own refusal, not "no data"
    assert "No AgentQueue data" not in diff.stderr and "Traceback" not in diff.stderr, diff.stderr
    status = cli_json_in_process(env, "status")
    assert "initialized" not in status and status["tasks"]["total"] == 1
    assert any(held in w for w in status["warnings"])


def test_stop_lists_this_daemons_runs_on_a_team_queue(home: Path, store_backend: str, tmp_path: Path) -> None:
    """Issue 23: on PostgreSQL `stop` saw no running agents (it looked for the SQLite file) and stopped a daemon
    with agents running without asking. It lists this home's daemon's runs; another daemon's runs go on."""
    from agentqueue.cli.commands.stop import running_agents

    services = Services(home)
    try:
        services.projects.create("Alpha")
        services.agents.create("worker", "command", command="true")
        services.agents.create("other", "command", command="true")
        ours, theirs = (services.tasks.create("alpha", title, "d").id for title in ("Ours", "Theirs"))
        for task_id, agent, owner in ((ours, "worker", f"{socket.gethostname()}:4242:abc123"),
                                      (theirs, "other", "elsewhere:1:def456")):
            life = Lifecycle(services.store, services.tasks, services.usage, owner=owner)
            assert life.claim(task_id, agent)
            life.started(task_id, None)
    finally:
        services.close()
    _team_env(home, tmp_path)
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("AGENTQUEUE_DATABASE_URL", raising=False)  # only config.toml names the queue
        listed = [r["task_id"] for r in running_agents(home, pid=4242)]
    # SQLite has one daemon per home: every claimed run is its own.
    assert sorted(listed) == sorted([ours] if store_backend == "postgres" else [ours, theirs])


def test_a_second_request_takes_the_held_line_once_the_first_is_answered(tmp_path: Path) -> None:
    """A warning acted on goes away: a task waiting on two permission requests named the first in its reason and
    next step (get_status's line, show) even after a person answered it."""
    services = Services(tmp_path / "aq")
    try:
        services.projects.create("Alpha")
        services.agents.create("worker", "command", command="true")
        task = services.tasks.create("alpha", "Asks twice", "d").id
        life = Lifecycle(services.store, services.tasks, services.usage)
        assert life.claim(task, "worker")
        life.started(task, None)
        first = services.requests.open(task, "worker", "Bash", {}, "Bash(npm i)", None, None, 600).id
        second = services.requests.open(task, "worker", "Bash", {}, "Bash(make)", None, None, 600).id
        assert [first in w for w in services.system.warnings()] == [True]
        services.requests.answer(first, "allow")
        lines = services.system.warnings()
        assert len(lines) == 1 and second in lines[0] and first not in lines[0], lines
        assert services.tasks.get(task).status == "WAITING_INPUT" and second in services.tasks.get(task).next_step
        shown = " ".join(cli_in_process(cli_env(tmp_path / "aq", tmp_path / "user"), "show", task).stdout.split())
        assert f"next step `agentqueue allow {second}` or `agentqueue deny {second}`" in shown, shown
        assert first not in shown.split("next step")[1] and "answer_request" not in shown
        services.requests.answer(second, "deny")
        assert services.system.warnings() == [] and services.tasks.get(task).status == "IN_PROGRESS"
    finally:
        services.close()


def test_tasks_at_40_columns_piped_lists_each_task_whole(tmp_path: Path) -> None:
    home = tmp_path / "aq"
    ids = seed_every_state(home)
    env = cli_env(home, tmp_path / "user")
    done = cli_in_process(env, "tasks", "--all", width=40)
    assert done.returncode == 0 and not ANSI.search(done.stdout), done.stderr
    lines = done.stdout.splitlines()
    assert all(len(line) <= 40 for line in lines), [line for line in lines if len(line) > 40]
    for status, task_id in ids.items():  # each id with its status on one line
        assert any(line.startswith(f"{task_id}  {status}  ") for line in lines), (status, done.stdout)
    assert "a-project-with-a-rather-long-name" in done.stdout.split()
    wide = cli_in_process(env, "tasks", "--all")  # 80 columns: the table, as before
    assert wide.stdout.splitlines()[0].split() == ["task", "project", "status", "pri", "title"]
