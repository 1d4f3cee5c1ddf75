"""Costs flat in the task count (issue 13): trigger-kept counts, partial indexes, a scheduler pass that
reads only what it can assign, and an engine that schedules on events rather than on every poll."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agentqueue.engine.orchestrator import Engine
from agentqueue.engine.scheduler import schedule
from agentqueue.services import Services
from agentqueue.store.sqlite import MIGRATIONS, SqliteStore as Store

from .conftest import on_both_backends
from datetime import UTC

store_backend = on_both_backends()  # the store's suite: every test here runs on SQLite and on PostgreSQL



def plan(services: Services, sql: str, params: tuple = ()) -> str:
    return " / ".join(r["detail"] for r in services.store.all("EXPLAIN QUERY PLAN " + sql, params))


def counted(services: Services) -> set[tuple[str, str, int]]:
    return {(r["project_id"], r["status"], r["n"]) for r in services.store.all(
        "SELECT project_id, status, n FROM task_counts WHERE n != 0")}


def actual(services: Services) -> set[tuple[str, str, int]]:
    return {(r["project_id"], r["status"], r["n"]) for r in services.store.all(
        "SELECT project_id, status, count(*) AS n FROM tasks GROUP BY project_id, status")}


def test_the_counts_follow_every_path_that_writes_tasks(services: Services) -> None:
    services.projects.create("One")
    services.projects.create("Two")
    a = services.tasks.create("one", "a", "d")
    b = services.tasks.create("one", "b", "d", depends_on=[a.id])
    c = services.tasks.create("two", "c", "d")
    assert counted(services) == actual(services) == {("one", "READY", 1), ("one", "DEFINED", 1), ("two", "READY", 1)}
    services.tasks.stop(a.id)
    services.tasks.skip(a.id)  # COMPLETED: b becomes READY
    services.tasks.set_status(c.id, "FAILED")
    assert counted(services) == actual(services)
    services.tasks.delete(b.id)
    services.projects.delete("two")
    assert counted(services) == actual(services) == {("one", "COMPLETED", 1)}
    assert services.tasks.status_counts() == {"COMPLETED": 1}
    assert services.projects.get("one").task_counts == {"COMPLETED": 1}


def test_an_existing_store_gets_its_counts_when_it_upgrades(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    import sqlite_utils

    db = sqlite_utils.Database(conn)
    for migration in MIGRATIONS[:-1]:
        migration(db)
    conn.execute(f"PRAGMA user_version={len(MIGRATIONS) - 1}")
    conn.execute("INSERT INTO projects (id, name, status, credit_weight, max_concurrent_agents, workspace, created_at, "
                 "updated_at) VALUES ('p', 'P', 'ACTIVE', 1, 2, '/tmp', 'x', 'x')")
    conn.executemany("INSERT INTO tasks (id, project_id, title, description, status, priority, retry_count, "
                     "max_retries, requires_approval, created_at, updated_at) VALUES (?, 'p', 't', 'd', ?, 1, 0, 3, 0, "
                     "'x', 'x')", [(f"t{n}", "READY" if n % 3 else "COMPLETED") for n in range(30)])
    conn.commit()
    conn.close()
    store = Store(path)
    try:
        assert {(r["status"], r["n"]) for r in store.all("SELECT status, n FROM task_counts")} == \
            {("READY", 20), ("COMPLETED", 10)}
    finally:
        store.close()


@pytest.mark.parametrize("store_backend", ["sqlite"])  # SQLite's plans; PostgreSQL plans from its statistics
def test_the_hot_queries_read_partial_indexes(services: Services) -> None:
    services.projects.create("One")
    default_page = ("SELECT id FROM tasks WHERE status != 'COMPLETED' ORDER BY priority, created_at, id LIMIT 50")
    assert "tasks_open_order" in plan(services, default_page) and "TEMP B-TREE" not in plan(services, default_page)
    project_page = ("SELECT id FROM tasks WHERE project_id = ? AND status != 'COMPLETED' "
                    "ORDER BY priority, created_at, id LIMIT 50")
    assert "tasks_open_project_order" in plan(services, project_page, ("one",))
    ready = ("SELECT id FROM tasks WHERE project_id = ? AND status = 'READY' "
             "AND (agent_type IS NULL OR agent_type = ?) "
             "AND (? IS NULL OR repo_id = ?) ORDER BY priority, created_at, id LIMIT ?")
    assert "tasks_ready_order" in plan(services, ready, ("one", "command", None, None, 2))


def test_a_scheduler_pass_reads_only_what_it_can_assign(agent_clis: dict[str, str], services: Services) -> None:
    services.projects.create("Big", max_concurrent_agents=3)
    services.agents.create("general", "command", command="true")
    services.agents.create("codex one", "codex")
    for n in range(300):  # first in queue order, but for an agent type nobody has
        services.tasks.create("big", f"t{n}", "d", priority=10, agent_type="gemini")
    wanted = services.tasks.create("big", "for codex", "d", priority=50, agent_type="codex")
    anyone = services.tasks.create("big", "for anyone", "d", priority=90)
    state = Engine(services, services.home).queue_state()
    # Two idle agents, two kinds: at most two candidates per kind, not 302 tasks.
    assert len(state.tasks) <= 4
    assignments = {a.agent_id: a.task_id for a in schedule(state)}
    assert assignments == {"codex-one": wanted.id, "general": anyone.id}  # each finds its task behind 300 others
    services.system.set_orchestrator("paused")
    assert Engine(services, services.home).queue_state().tasks == ()  # paused: nothing is read


@pytest.mark.anyio
async def test_the_engine_schedules_on_events_not_on_every_poll(services: Services) -> None:
    services.projects.create("P")
    engine = Engine(services, services.home)
    passes = []
    original = engine.queue_state
    engine.queue_state = lambda: passes.append(1) or original()  # type: ignore[method-assign]
    for _ in range(5):
        engine.tick(full=False)  # a quiet poll: the periodic checks only
    assert passes == []
    engine.tick(full=True)
    assert passes == [1]
    engine._poked = False
    services.tasks.create("p", "new", "d")  # task.created wakes the engine
    assert engine._poked


def test_the_fair_share_window_sums_hours_kept_by_a_trigger_and_is_exact(services: Services) -> None:
    """The scheduler's 24 h window reads the trigger-kept `token_hours` for its whole hours and the ledger only for
    the part of its oldest hour inside it: the same sums as summing the ledger, at any window edge."""
    from datetime import datetime, timedelta

    services.projects.create("One")
    services.projects.create("Two")
    now = datetime.now(UTC)
    ages = [25, 24.2, 23.99, 23.5, 20, 5, 1, 0.01, 0]  # hours ago, on both sides of the window's edge and hour
    with services.store.transaction():
        for n, hours in enumerate(ages):
            at = (now - timedelta(hours=hours)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
            services.usage.record(project_id="one" if n % 2 else "two", tokens={"total": 10 ** n}, cost_usd=0,
                                  timestamp=at)
        services.usage.record(project_id=None, tokens={"total": 7}, cost_usd=0, timestamp=now.isoformat())
    since = (now - timedelta(hours=24)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    expected = {r["project_id"]: r["total"] for r in services.store.all(
        "SELECT project_id, sum(total) AS total FROM token_ledger WHERE timestamp >= ? AND project_id IS NOT NULL "
        "GROUP BY project_id", (since,))}
    assert services.usage.window_totals(24) == expected
    assert sum(r["total"] for r in services.store.all("SELECT total FROM token_hours")) == \
        sum(10 ** n for n in range(len(ages)))  # every project row is in its hour; a run with no project is not


def test_an_existing_store_gets_its_hours_when_it_upgrades(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = Store(path, migrate_to=11)
    with old.transaction() as db:
        db.conn.executemany("INSERT INTO token_ledger (project_id, total, timestamp) VALUES (?, ?, ?)",
                            [("p", 5, "2026-11-25T10:15:00.000Z"), ("p", 6, "2026-11-25T10:59:00.000Z"),
                             ("q", 7, "2026-11-25T11:00:00.000Z"), (None, 8, "2026-11-25T11:00:00.000Z")])
    old.close()
    store = Store(path)
    try:
        assert {(r["hour"], r["project_id"], r["total"]) for r in store.all("SELECT * FROM token_hours")} == \
            {("2026-11-25T10", "p", 11), ("2026-11-25T11", "q", 7)}
    finally:
        store.close()
