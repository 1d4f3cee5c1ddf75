"""Upgrades of the SQLite store (issue 34): a home made at each earlier schema version, with a row of every kind the
schema then had, upgraded to the current one by the current code: every row survives, the current services read
them, and the migration kept a copy of the store as it was (named by its schema) and said so in the log. A store
newer than the code is refused with the way back. The fixtures are built by running the migration history up to
each version (a migration that shipped is never edited, so that is what the AgentQueue of that version wrote);
tests/test_upgrade_daemon.py upgrades a home written by an older commit's own daemon."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentqueue import paths
from agentqueue.services import Services
from agentqueue.store.backup import migration_backups
from agentqueue.store.base import SchemaTooNewError, StoreNotMigrated
from agentqueue.store.sqlite import SCHEMA_VERSION, SqliteStore

# Tables whose rows triggers keep (counts and sums of other tables' rows): checked for consistency, not filled.
DERIVED = {"task_counts", "token_hours"}
STAMP = "2026-11-20T10:00:00.000Z"
# Values the services read as more than text: a row of each kind the current code can load, not only keep.
MEANINGFUL: dict[tuple[str, str], Any] = {
    ("projects", "status"): "ACTIVE", ("projects", "credit_weight"): 1.0, ("projects", "max_concurrent_agents"): 2,
    ("projects", "budget_limit"): None, ("projects", "default_repo_id"): None, ("projects", "merge_retries"): None,
    ("projects", "best_of_pick"): None,
    ("tasks", "status"): "READY", ("tasks", "priority"): 100, ("tasks", "retry_count"): 0, ("tasks", "max_retries"): 3,
    ("tasks", "requires_approval"): 0, ("tasks", "agent_type"): None, ("tasks", "assigned_agent"): None,
    ("tasks", "resume_after"): None, ("tasks", "parent_task_id"): None, ("tasks", "depth"): 0, ("tasks", "owner"): None,
    ("tasks", "best_of"): None, ("tasks", "pick"): None, ("tasks", "chosen"): None, ("tasks", "candidate_of"): None,
    ("tasks", "capabilities"): None, ("tasks", "model"): None, ("tasks", "repo_id"): None, ("tasks", "branch"): None,
    ("agents", "state"): "IDLE", ("agents", "agent_type"): "command", ("agents", "capabilities"): "[]",
    ("agents", "current_task"): None, ("agents", "repo_id"): None, ("agents", "pid"): None, ("agents", "paused"): 0,
    ("agents", "label"): None, ("agents", "command"): "true",
    ("hooks", "enabled"): 1, ("hooks", "trigger"): '{"type": "periodic", "interval_seconds": 3600}',
    ("hooks", "action"): "create_task", ("hooks", "context_steps"): "[]", ("hooks", "llm_config"): None,
    ("hooks", "task_template"): '{"title": "t", "description": "d"}', ("hooks", "cooldown_seconds"): 3600,
    ("hooks", "last_fired_at"): None,
    ("events", "payload"): "{}", ("audit_log", "arguments"): "{}", ("task_results", "files_changed"): "[]",
    ("daemons", "labels"): "[]", ("permission_requests", "status"): "pending",
}


def _columns(conn: sqlite3.Connection, table: str) -> list[tuple[str, str]]:
    return [(row[1], str(row[2]).upper()) for row in conn.execute(f'PRAGMA table_info("{table}")')]


def _parents(conn: sqlite3.Connection, table: str) -> dict[str, tuple[str, str]]:
    """column -> (table, column) it references."""
    return {row[3]: (row[2], row[4]) for row in conn.execute(f'PRAGMA foreign_key_list("{table}")')}


def _value(table: str, column: str, kind: str) -> Any:
    if (table, column) in MEANINGFUL:
        return MEANINGFUL[(table, column)]
    if column.endswith("_at") or column in ("timestamp", "time", "until", "next_check", "lease_until"):
        return STAMP
    if "INT" in kind:
        return 7
    if kind in ("FLOAT", "REAL"):
        return 2.5
    return f"{table}-{column}"


def fill_every_kind(path: Path) -> dict[str, dict[str, Any]]:
    """One row in every table the store at `path` has (its own schema, whatever its version), parents first; returns
    each row as written."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys = ON")
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                                         "'sqlite_%' ORDER BY name") if r[0] not in DERIVED]
    written: dict[str, dict[str, Any]] = {}
    pending = list(tables)
    while pending:
        table = next(t for t in pending if all(p == t or p in written for p, _ in _parents(conn, t).values()))
        parents = _parents(conn, table)
        row = {}
        for column, kind in _columns(conn, table):
            if column in parents:
                parent, key = parents[column]
                row[column] = written[parent][key] if parent != table else f"{table}-{key}"
            else:
                row[column] = _value(table, column, kind)
        names = ", ".join(f'"{c}"' for c in row)
        conn.execute(f'INSERT INTO "{table}" ({names}) VALUES ({", ".join("?" * len(row))})', list(row.values()))
        written[table] = row
        pending.remove(table)
    conn.commit()
    conn.close()
    return written


def rows_of(path: Path, table: str) -> list[dict[str, Any]]:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(f'SELECT * FROM "{table}"')]
    finally:
        conn.close()


def user_version(path: Path) -> int:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION))
def test_a_home_of_each_earlier_schema_upgrades_keeping_every_row(tmp_path: Path, version: int,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    home = tmp_path / "aq"
    store_path = paths.db_path(paths.private_dir(home))
    SqliteStore(store_path, migrate_to=version).close()  # what AgentQueue at that schema wrote
    assert user_version(store_path) == version
    written = fill_every_kind(store_path)
    assert {"projects", "tasks", "task_dependencies", "events"} <= set(written)

    with caplog.at_level(logging.INFO, logger="agentqueue.store"):
        svc = Services(home)  # what a daemon of this version opens first
    try:
        assert svc.store.schema_version == SCHEMA_VERSION
        # Every row of every kind, each column it had, as it was; the columns added since hold their defaults.
        for table, row in written.items():
            [now] = rows_of(store_path, table)
            assert {k: now[k] for k in row} == row, table
        conn = sqlite3.connect(store_path)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        finally:
            conn.close()
        # The current code reads them: the project with its trigger-kept counts, the task, the agent, the hook.
        project, task = written["projects"], written["tasks"]
        assert svc.projects.get(project["id"]).task_counts == {"READY": 1}
        assert svc.tasks.get(task["id"]).title == task["title"]
        assert svc.store.scalar("SELECT count(*) FROM events") == 1
        if "agents" in written:
            assert svc.agents.get(written["agents"]["id"]).name == written["agents"]["name"]
        if "hooks" in written:
            assert svc.hooks.get(written["hooks"]["id"]).name == written["hooks"]["name"]
        assert svc.system.status()["tasks"]["by_status"] == {"READY": 1}
    finally:
        svc.close()

    # Before changing anything the migration kept the store as it was, beside it, named by its schema, and said so.
    [(schema, copy)] = migration_backups(store_path)
    assert schema == version and copy.name.startswith(f"agentqueue.schema-{version}.") and copy.parent == home
    assert user_version(copy) == version and copy.stat().st_mode & 0o777 == 0o600
    assert not Path(f"{copy}-wal").exists()  # one self-contained file
    for table, row in written.items():
        assert rows_of(copy, table) == [row], table
    said = [r.getMessage() for r in caplog.records if r.name == "agentqueue.store" and r.levelno >= logging.WARNING]
    assert any(f"migrating from schema version {version} to {SCHEMA_VERSION}" in line and str(copy) in line
               for line in said), said


def test_a_new_store_is_created_without_a_copy(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "agentqueue.db")
    store.close()
    assert migration_backups(tmp_path / "agentqueue.db") == []


def test_a_current_store_is_opened_without_a_copy(tmp_path: Path) -> None:
    SqliteStore(tmp_path / "agentqueue.db").close()
    SqliteStore(tmp_path / "agentqueue.db").close()
    assert migration_backups(tmp_path / "agentqueue.db") == []


def test_a_store_opened_without_migrating_is_refused_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "agentqueue.db"
    SqliteStore(path, migrate_to=SCHEMA_VERSION - 3).close()
    with pytest.raises(StoreNotMigrated) as refused:
        SqliteStore(path, migrate=False)
    assert (refused.value.found, refused.value.expected) == (SCHEMA_VERSION - 3, SCHEMA_VERSION)
    assert user_version(path) == SCHEMA_VERSION - 3 and migration_backups(path) == []


def test_a_store_newer_than_the_code_is_refused_with_the_way_back(tmp_path: Path) -> None:
    path = tmp_path / "agentqueue.db"
    SqliteStore(path, migrate_to=SCHEMA_VERSION - 1).close()
    SqliteStore(path).close()  # the upgrade: a copy at the old schema is kept
    [(_, copy)] = migration_backups(path)
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")  # as a newer AgentQueue leaves it
    conn.close()
    with pytest.raises(SchemaTooNewError) as refused:
        SqliteStore(path)
    said = str(refused.value)
    assert f"schema version {SCHEMA_VERSION + 1}" in said and "nothing was changed" in said
    assert "pip install -U agentqueue" in said and f"agentqueue restore {copy}" in said
    assert user_version(path) == SCHEMA_VERSION + 1


def test_two_processes_migrating_at_once_run_each_step_once(tmp_path: Path) -> None:
    """A terminal's read and a daemon starting on the same old store: each step takes the write lock first (a deferred
    BEGIN failed at once with "database is locked", worded as a damaged file) and reads the version again, so the
    second waits and finds the work done."""
    import threading

    path = tmp_path / "agentqueue.db"
    SqliteStore(path, migrate_to=10).close()
    errors: list[BaseException] = []

    def open_it() -> None:
        try:
            SqliteStore(path).close()
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
    threads = [threading.Thread(target=open_it) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == [] and user_version(path) == SCHEMA_VERSION


def test_a_team_database_migrates_with_a_log_line_and_is_never_migrated_unasked(
        pg_server, caplog: pytest.LogCaptureFixture) -> None:
    """PostgreSQL: no copy (that is pg_dump's job, and the log line says so), but the migration is logged first, and
    an open that must not migrate (the terminal's) is refused with nothing changed."""
    from agentqueue.store.postgres import PostgresStore

    url = pg_server.database()
    PostgresStore(url, migrate_to=11).close()  # the PostgreSQL baseline, as the first team-mode release wrote it
    with pytest.raises(StoreNotMigrated) as refused:
        PostgresStore(url, migrate=False)
    assert (refused.value.found, refused.value.expected) == (11, SCHEMA_VERSION)
    with caplog.at_level(logging.INFO, logger="agentqueue.store"):
        store = PostgresStore(url)
    try:
        assert store.schema_version == SCHEMA_VERSION
    finally:
        store.close()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(f"migrating from schema version 11 to {SCHEMA_VERSION}" in line and "pg_dump" in line
               for line in said), said
