"""The store on both backends (SQLite embedded, a real PostgreSQL server): atomic transactions, events after
commit, writers kept apart, schema versions; and SQLite's own pragmas and forward migrations."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentqueue.services.errors import ConflictError, unique
from agentqueue.store.base import SchemaTooNewError
from agentqueue.store.base import Store as AnyStore
from agentqueue.store.sqlite import MIGRATIONS, SCHEMA_VERSION, SqliteStore as Store


def test_fresh_store_is_wal_with_foreign_keys_at_current_version(tmp_path: Path) -> None:
    store = Store(tmp_path / "aq.db")
    assert store.schema_version == SCHEMA_VERSION == len(MIGRATIONS)
    assert store.scalar("PRAGMA journal_mode") == "wal"
    assert store.scalar("PRAGMA foreign_keys") == 1
    tables = set(store.db.table_names())
    for table in ("projects", "tasks", "task_dependencies", "agents", "events", "token_ledger", "task_results",
                  "repos", "project_channels", "hooks", "hook_runs", "settings", "daemon_lease"):
        assert table in tables


def test_database_from_an_older_version_opens_and_upgrades_keeping_data(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = Store(path, migrate_to=1)  # what the first release wrote
    assert old.schema_version == 1 and "daemon_lease" not in old.db.table_names()
    with old.transaction() as db:
        db["projects"].insert({"id": "legacy", "name": "Legacy", "status": "ACTIVE", "credit_weight": 1.0,
                               "max_concurrent_agents": 2, "workspace": "/tmp/x", "created_at": "t",
                               "updated_at": "t"})
    old.close()
    upgraded = Store(path)
    assert upgraded.schema_version == SCHEMA_VERSION
    assert "daemon_lease" in upgraded.db.table_names()
    assert upgraded.one("SELECT name FROM projects WHERE id = 'legacy'") == {"name": "Legacy"}
    indexes = {i.name for i in upgraded.db["tasks"].indexes}
    assert any("status" in name for name in indexes)


@pytest.fixture(params=["sqlite", "postgres"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator:
    """Opens stores on one database of the backend under test (each call: a new connection, as a daemon has)."""
    opened: list[AnyStore] = []
    if request.param == "postgres":
        from agentqueue.store.postgres import PostgresStore

        url = request.getfixturevalue("pg_server").database()
        make = lambda: PostgresStore(url)  # noqa: E731
    else:
        make = lambda: Store(tmp_path / "aq.db")  # noqa: E731

    def new() -> AnyStore:
        opened.append(make())
        return opened[-1]
    yield new
    for store in opened:
        store.close()


def test_failed_transaction_leaves_nothing_and_announces_nothing(open_store) -> None:
    store = open_store()
    announced: list[list[dict]] = []
    store.on_commit(announced.append)
    with pytest.raises(RuntimeError):
        with store.transaction() as db:
            db["settings"].insert({"key": "a", "value": "1"})
            store.add_event("test.event")
            raise RuntimeError("boom")
    assert store.scalar("SELECT count(*) FROM settings") == 0
    assert store.scalar("SELECT count(*) FROM events") == 0
    assert announced == []
    with store.transaction():
        store.set_setting("a", "2")
        store.add_event("test.event", payload={"k": 1})
    assert store.get_setting("a") == "2"
    assert [e["event_type"] for e in announced[-1]] == ["test.event"]
    assert announced[-1][0]["payload"] == {"k": 1} and isinstance(announced[-1][0]["id"], int)


def test_add_event_outside_a_transaction_is_a_bug(open_store) -> None:
    with pytest.raises(RuntimeError, match="outside a transaction"):
        open_store().add_event("x")


def test_a_failed_inner_transaction_undoes_only_itself(open_store) -> None:
    store = open_store()
    with store.transaction():
        store.set_setting("outer", "kept")
        with pytest.raises(ValueError):
            with store.transaction():
                store.set_setting("inner", "gone")
                raise ValueError("inner fails")
    assert store.get_setting("outer") == "kept" and store.get_setting("inner") is None


def test_writers_on_separate_connections_never_lose_an_update(open_store) -> None:
    """Two daemons (two connections) each read-modify-write one value 100 times: all 200 increments survive."""
    first, second = open_store(), open_store()
    with first.transaction():
        first.set_setting("n", "0")

    def bump(store: AnyStore) -> None:
        for _ in range(100):
            with store.transaction():
                store.set_setting("n", str(int(store.get_setting("n")) + 1))
    threads = [threading.Thread(target=bump, args=(s,)) for s in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert first.get_setting("n") == "200"


def test_a_taken_key_is_a_conflict_on_either_backend(open_store) -> None:
    store = open_store()
    with store.transaction() as db:
        db["settings"].insert({"key": "k", "value": "1"})
    with pytest.raises(ConflictError, match="taken"):
        with unique("taken"), store.transaction() as db:
            db["settings"].insert({"key": "k", "value": "2"})
    assert store.get_setting("k") == "1"


def test_the_sql_the_services_write_means_the_same_on_both(open_store) -> None:
    """Placeholders (? and :name), LIKE ignoring case, integer sums, literal % and ? inside quotes."""
    store = open_store()
    with store.transaction() as db:
        db.execute("INSERT INTO settings (key, value) VALUES (:key, :value)", {"key": "Mixed%Case?", "value": "5"})
        db["settings"].insert({"key": "other", "value": "7"})
    assert store.all("SELECT key FROM settings WHERE key LIKE ?", ("mixed%",)) == [{"key": "Mixed%Case?"}]
    assert store.scalar("SELECT count(*) FROM settings WHERE key = 'Mixed%Case?'") == 1
    assert store.scalar("SELECT count(*) FROM settings WHERE value IS ? OR key IS ?", (None, "other")) == 1
    total = store.scalar("SELECT sum(CAST(value AS INTEGER)) FROM settings")
    assert total == 12 and type(total) is int
    with store.transaction():  # a NUL (an agent's output may hold one): stored, found again by the same text
        store.set_setting("nul\x00key", "v")
    assert store.get_setting("nul\x00key") == "v"


def test_a_database_from_a_newer_agentqueue_is_refused(open_store) -> None:
    store = open_store()
    if store.backend == "postgres":
        store.db.execute("UPDATE agentqueue_schema SET version = ?", (SCHEMA_VERSION + 1,))
        from agentqueue.store.postgres import PostgresStore

        with pytest.raises(SchemaTooNewError, match="Upgrade AgentQueue"):
            PostgresStore(store.url)
    else:
        store.db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
        with pytest.raises(SchemaTooNewError, match="Upgrade AgentQueue"):
            Store(store.path)


def test_reopening_keeps_the_schema_and_the_data(open_store) -> None:
    store = open_store()
    with store.transaction() as db:
        db["settings"].insert({"key": "a", "value": "1"})
    again = open_store()
    assert again.schema_version == SCHEMA_VERSION and again.get_setting("a") == "1"


def test_a_broken_postgresql_connection_is_opened_again_on_the_next_call(pg_server) -> None:
    import psycopg

    from agentqueue.store.postgres import PostgresStore

    url = pg_server.database()
    store, other = PostgresStore(url), PostgresStore(url)
    try:
        other.scalar("SELECT pg_terminate_backend(?)", (store.db.conn.info.backend_pid,))  # the server ends it
        with pytest.raises(psycopg.OperationalError):
            store.scalar("SELECT 1")  # the call that meets the break fails, as it must
        with store.transaction():
            store.set_setting("after", "reconnected")
        assert other.get_setting("after") == "reconnected"
    finally:
        store.close()
        other.close()


def test_the_clock_leases_use_is_the_databases_in_the_services_format(open_store) -> None:
    from datetime import datetime

    store = open_store()
    now, later = store.clock(), store.clock(30)
    parse = lambda stamp: datetime.fromisoformat(stamp.replace("Z", "+00:00"))  # noqa: E731
    assert now.endswith("Z") and len(now) == len("2026-01-01T00:00:00.000Z") and now < later
    assert 29 < (parse(later) - parse(now)).total_seconds() < 31


def test_a_store_never_analysed_is_analysed_when_it_opens(tmp_path: Path) -> None:
    """SQLite's advice for a long-lived connection, `PRAGMA optimize=0x10002` at open (by hand before 3.46):
    tables with rows and no statistics are analysed, within `analysis_limit`; statistics that hold are left."""
    path = tmp_path / "aq.db"
    store = Store(path)
    assert store.optimize(at_open=True) == []  # empty tables: nothing to learn
    with store.transaction() as db:
        db.execute("INSERT INTO projects (id, name, status, workspace) VALUES ('p', 'P', 'ACTIVE', '/tmp/p')")
        db.conn.executemany("INSERT INTO tasks (id, project_id, title, status, priority, created_at, updated_at) "
                            "VALUES (?, 'p', 't', ?, 1, 'x', 'x')",
                            [(f"t{n}", "COMPLETED" if n % 10 else "READY") for n in range(3000)])
    store.close()
    store = Store(path)
    try:
        assert store.scalar("PRAGMA analysis_limit") == 1000
        analysed = {r["idx"] for r in store.all("SELECT idx FROM sqlite_stat1 WHERE tbl = 'tasks'")}
        assert {"tasks_open_order", "idx_tasks_status_priority_created_at"} <= analysed
        assert store.optimize(at_open=True) == []  # the statistics hold: nothing is analysed again
        assert store.optimize() == []  # the daemon's hourly run: nothing went stale either
    finally:
        store.close()
