"""The terminal's reads (`agentqueue tasks`, `show`, `status`) read the store without the heavy modules.

They say what the tools say: cli/reads.py side by side with the services on one store (SQLite through
the plain reader, and PostgreSQL), a read while the daemon's writer holds the lock, an old store file,
and the modules a read command imports.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentqueue import paths, settings
from agentqueue.cli import reads as cli_reads
from agentqueue.services import Services
from agentqueue.services.errors import InvalidInputError, NotFoundError
from agentqueue.services.lifecycle import Lifecycle
from agentqueue.services.task_states import STATUS_NAMES
from agentqueue.store import reader
from agentqueue.store.models import TaskStatus
from agentqueue.store.reader import SqliteReader, open_read_store
from agentqueue.store.sqlite import SCHEMA_VERSION, SqliteStore

from .cli_helpers import cli_env, cli_in_process, cli_json_in_process
from .conftest import on_both_backends

store_backend = on_both_backends()
HEAVY = ("pydantic", "sqlite_utils", "git", "mcp", "anyio", "jinja2", "starlette", "uvicorn", "psycopg")


def run(result: str, error: str | None = None, error_type: str | None = None, summary: str | None = None,
        cost: float = 0.0) -> Any:
    """What an adapter's finish() gives Lifecycle.record_attempt."""
    return SimpleNamespace(status=result, summary=summary, error_type=error_type, error_message=error,
                           tokens={"input": 10, "output": 5, "cache_read": 1, "cache_write": 0, "total": 16},
                           cost_usd=cost)


def grow(home: Path) -> dict[str, str]:
    """Two projects, agents with limits, tasks in many states with deps, runs, a pending request: as the engine
    and the tools leave them."""
    svc = Services(home)
    try:
        svc.projects.create("Alpha")
        svc.projects.create("Beta", credit_weight=2.5, max_concurrent_agents=3)
        svc.agents.create("worker", "command", command="true")
        life = Lifecycle(svc.store, svc.tasks, svc.usage)
        ids: dict[str, str] = {}
        first = svc.tasks.create("alpha", "First <b>bold</b> \u202e", "d1 \x1b[31mred", priority=5).id
        ids["first"] = first
        ids["second"] = svc.tasks.create("alpha", "Second", "d2", depends_on=[first]).id
        ids["codex"] = svc.tasks.create("beta", "Needs codex", "d3", agent_type="codex").id
        ids["done"] = svc.tasks.create("beta", "Done one", "d4", priority=1).id
        assert life.claim(ids["done"], "worker")
        life.started(ids["done"], "done/branch")
        life.record_attempt(ids["done"], "worker", run("completed", summary="all good", cost=0.25), 1.5, ["a.py"],
                            warning="finished without changing any file")
        life.succeeded(ids["done"], awaiting_approval=False)
        life.free_agent("worker", ids["done"])
        ids["failed"] = svc.tasks.create("beta", "Fails", "d5").id
        assert life.claim(ids["failed"], "worker")
        life.started(ids["failed"], None)
        life.record_attempt(ids["failed"], "worker", run("failed", "429 rate limit", "rate_limit"), 2.0, [])
        life.failed(ids["failed"], "rate_limit", "429 rate limit")
        life.free_agent("worker", ids["failed"])
        ids["blocked"] = svc.tasks.create("alpha", "Held", "d6").id
        svc.tasks.set_status(ids["blocked"], "BLOCKED")
        ids["asks"] = svc.tasks.create("alpha", "Asks", "d7").id
        svc.requests.open(ids["asks"], "worker", "Bash", {"command": "npm install"}, "Bash(npm install)",
                          "install the deps", "Bash(npm install)", 600)
        for n in range(12):  # more held tasks than get_status lists
            svc.tasks.set_status(svc.tasks.create("beta", f"Stuck {n}", "x").id, "FAILED")
        return ids
    finally:
        svc.close()


def dumped(value: Any) -> Any:
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else value


def test_each_read_answers_what_the_service_answers(home: Path) -> None:
    ids = grow(home)
    svc = Services(home)
    store = open_read_store(paths.db_path(home), settings.load(home).database_url)
    try:
        if svc.store.backend == "sqlite":
            assert isinstance(store, SqliteReader)  # the plain reader, not the full store
        every = [t.id for t in svc.tasks.list(include_completed=True, limit=500)[0]]
        assert len(every) == len(ids) + 12 and set(ids.values()) <= set(every)
        for project, status, everything in ((None, None, False), (None, None, True), ("alpha", None, False),
                                            ("beta", "FAILED,COMPLETED", False), (None, "blocked", False)):
            items, total, hidden = svc.tasks.list(project, status, include_completed=everything, limit=500)
            assert cli_reads.task_list(store, project, status, everything, 500) == \
                {"tasks": [dumped(t) for t in items], "total": total, "hidden_completed": hidden}
        page = cli_reads.task_list(store, None, None, True, limit=3, offset=2)
        assert [t["id"] for t in page["tasks"]] == every[2:5] and page["total"] == len(every)
        for task_id in every:
            assert json.dumps(cli_reads.task(store, task_id)) == json.dumps(dumped(svc.tasks.get(task_id)))
            attempts, result = svc.tasks.results(task_id)
            assert cli_reads.last_result(store, task_id) == (attempts, dumped(result) if result else None)
            assert cli_reads.agent_error(store, task_id) == svc.tasks.agent_error(task_id)
        assert cli_reads.task(store, ids["asks"])["pending_requests"][0]["input"] == {"command": "npm install"}
        assert cli_reads.last_result(store, ids["done"])[1]["cost_usd"] == 0.25
        status = cli_reads.system(store).status()
        assert status == svc.system.status()
        assert any("READY task(s) have no agent" in w for w in status["warnings"])  # the codex task
        assert any(w.startswith("and ") for w in status["warnings"])  # more held tasks than are listed
        projects, _ = svc.projects.list(limit=500)
        assert [{k: p[k] for k in ("id", "name", "status", "credit_weight", "max_concurrent_agents", "task_counts")}
                for p in cli_reads.projects(store)] == \
            [p.model_dump(include={"id", "name", "status", "credit_weight", "max_concurrent_agents", "task_counts"})
             for p in projects]
        # The same refusals, word for word.
        with pytest.raises(NotFoundError) as full:
            svc.tasks.get("nope")
        for call in (cli_reads.task, cli_reads.last_result, cli_reads.agent_error):
            with pytest.raises(NotFoundError) as light:
                call(store, "nope")
            assert str(light.value) == str(full.value)
        with pytest.raises(NotFoundError, match="Project 'nope' not found"):
            cli_reads.task_list(store, "nope")
        with pytest.raises(InvalidInputError, match="Unknown status DONE. Valid statuses: DEFINED"):
            cli_reads.task_list(store, None, "DONE")
    finally:
        store.close()
        svc.close()


def test_the_readers_constants_are_the_stores(tmp_path: Path) -> None:
    assert reader.SCHEMA_VERSION == SCHEMA_VERSION
    assert STATUS_NAMES == [s.value for s in TaskStatus]


def test_a_read_never_writes_and_never_waits_for_the_writer(tmp_path: Path) -> None:
    """The daemon mid-transaction (its write lock held, a task not yet committed): reads answer at once, with
    what is committed; and the reader refuses to change anything."""
    home = tmp_path / "aq"
    svc = Services(home)
    project = svc.projects.create("Alpha").id
    kept = svc.tasks.create(project, "Committed", "d").id
    svc.close()
    writer = sqlite3.connect(paths.db_path(home), isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE tasks SET title = 'Not yet' WHERE id = ?", (kept,))
    try:
        env = cli_env(home, tmp_path / "user")
        # WAL: a reader sees the last commit and never queues behind the writer (the busy timeout is 30 s).
        listed = json.loads(cli_in_process(env, "tasks", "--json").stdout)
        assert [t["title"] for t in listed["tasks"]] == ["Committed"]
        assert cli_json_in_process(env, "show", kept)["task"]["title"] == "Committed"
        assert cli_json_in_process(env, "status")["tasks"]["total"] == 1
        plain = cli_in_process(env, "status")
        assert plain.returncode == 0 and "tasks 1:" in plain.stdout
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    read_only = SqliteReader(paths.db_path(home))
    try:
        with pytest.raises(RuntimeError, match="read-only"):
            with read_only.transaction():
                pass
        with pytest.raises(sqlite3.OperationalError):  # query_only: even a raw write is refused
            read_only.db.execute("DELETE FROM tasks")
    finally:
        read_only.close()
    assert cli_json_in_process(env, "tasks")["total"] == 1


def test_an_older_store_is_migrated_then_read(tmp_path: Path) -> None:
    home = tmp_path / "aq"
    SqliteStore(paths.db_path(home), migrate_to=SCHEMA_VERSION - 1).close()
    env = cli_env(home, tmp_path / "user")
    assert cli_json_in_process(env, "tasks") == {"tasks": [], "total": 0, "hidden_completed": 0}
    with sqlite3.connect(paths.db_path(home)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_newer_store_is_refused_in_one_sentence(tmp_path: Path) -> None:
    home = tmp_path / "aq"
    SqliteStore(paths.db_path(home)).close()
    with sqlite3.connect(paths.db_path(home)) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    done = cli_in_process(cli_env(home, tmp_path / "user"), "tasks")
    assert done.returncode == 1 and "newer than this AgentQueue" in done.stderr and "Traceback" not in done.stderr


# argv: the heavy modules (comma-separated), then the command; the report is stderr's last line.
PROBE = """
import json, sys
from agentqueue import cli
code = None
try:
    cli.main(sys.argv[2:])
except SystemExit as exit:
    code = exit.code
heavy = sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1].split(',')))
print(json.dumps({'code': code, 'heavy': heavy}), file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["tasks"], ["tasks", "--json"], ["tasks", "--all", "--project", "alpha"],
                                  ["show", "{task}"], ["show", "{task}", "--json"], ["status"], ["status", "--json"],
                                  ["logs", "{task}", "--json"]])
def test_the_read_commands_import_nothing_heavy(tmp_path: Path, args: list[str]) -> None:
    home = tmp_path / "aq"
    svc = Services(home)
    project = svc.projects.create("Alpha").id
    task = svc.tasks.create(project, "One", "d").id
    svc.close()
    env = cli_env(home, tmp_path / "user")
    argv = [a.replace("{task}", task) for a in args]
    heavy = HEAVY + (("rich",) if "--json" in args else ())  # JSON is printed without rich
    done = subprocess.run([sys.executable, "-c", PROBE, ",".join(heavy), *argv], env=env,
                          capture_output=True, text=True, timeout=60)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    assert report == {"code": 0, "heavy": []}, done.stderr
    assert done.stdout.strip(), "the command printed nothing"


def test_the_task_list_wraps_only_titles_and_shows_them_inert(tmp_path: Path) -> None:
    home = tmp_path / "aq"
    svc = Services(home)
    project = svc.projects.create("A project with a rather long name that is long").id
    first = svc.tasks.create(project, "Short", "d").id
    time.sleep(0.005)  # created_at has milliseconds: two tasks of one millisecond list in their (random) ids' order
    title = "Words that wrap around [red]markup[/red] \u202e and averyveryverylongwordthatcannotfitinthecolumn"
    second = svc.tasks.create(project, title, "d", depends_on=[first]).id
    svc.tasks.set_status(first, "BLOCKED")
    svc.close()
    done = cli_in_process(cli_env(home, tmp_path / "user"), "tasks", width=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["task", "project", "status", "pri", "title"] and set(lines[1]) == {"─"}
    assert all(len(line) <= 60 for line in lines), lines
    assert lines[2].split()[:4] == [first, "a-project-with-a-ra…", "BLOCKED", "100"]
    assert lines[3].split()[:4] == [second, "a-project-with-a-ra…", "DEFINED", "100"]
    column = lines[3].index("Words")
    wrapped = [lines[3][column:]] + [line[column:] for line in lines[4:-1]]
    assert all(not line[:column].strip() for line in lines[4:-1])  # continuation lines hold only the title
    expected = title.replace("\u202e", "\\u202e") + f"(after {first})"
    assert "".join(wrapped).replace(" ", "") == expected.replace(" ", "")
    assert "\u202e" not in done.stdout and "[red]markup[/red]" in "".join(wrapped)  # shown as typed, inert
    assert lines[-1] == "2 task(s)"


def test_an_id_longer_than_any_id_is_refused_without_echoing_it_whole(tmp_path: Path) -> None:
    """A 50,000-character id was printed back whole in the not-found sentence (and searched for close ids)."""
    home = tmp_path / "aq"
    Services(home).close()
    env = cli_env(home, tmp_path / "user")
    for args in (["show", "z" * 50_000], ["logs", "z" * 50_000], ["tasks", "--project", "p" * 50_000]):
        done = cli_in_process(env, *args)
        assert done.returncode == 1 and "50,000 characters long" in done.stderr, (args[0], done.stderr[:300])
        assert len(done.stderr) < 400 and "Traceback" not in done.stderr
