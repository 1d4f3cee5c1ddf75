"""The SQLite store: pragmas, forward migrations, atomic transactions."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agentqueue.store.base import SchemaTooNewError
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


def test_a_newer_database_is_refused_with_advice(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    Store(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(SchemaTooNewError, match="Upgrade AgentQueue"):
        Store(path)


def test_failed_transaction_leaves_nothing_and_announces_nothing(tmp_path: Path) -> None:
    store = Store(tmp_path / "aq.db")
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


def test_add_event_outside_a_transaction_is_a_bug(tmp_path: Path) -> None:
    store = Store(tmp_path / "aq.db")
    with pytest.raises(RuntimeError, match="outside a transaction"):
        store.add_event("x")
