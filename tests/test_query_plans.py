"""The store plans its queries (issue 19): on a large store that was never analysed, and again once it has been
(SQLite: `PRAGMA optimize` when the store opens; PostgreSQL: the ANALYZE its autovacuum runs), every statement
the hot paths run reads a big table through an index, and the hot queries through the index meant for them.

The statements are not copied here: the test runs the real calls (get_status, list_tasks, create_task, edit_task,
get_task through the in-memory MCP server; the engine's claim pass) and records every statement they send to the
store, then asks the database for the plan of each, with the same parameters. A query that changes is checked
as it now is.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, UTC
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from agentqueue.server.app import build_server
from agentqueue.engine.orchestrator import Engine
from agentqueue.services import Services

from .conftest import on_both_backends

store_backend = on_both_backends()

TASKS = 20_000
PROJECTS = 8
BIG = {"tasks", "task_dependencies", "events", "audit_log", "task_results", "token_ledger", "permission_requests",
       "task_feedback"}
# PostgreSQL plans by size: it reads a table of a few dozen pages whole rather than probe an index 50 times, and
# is right to. A table is big from this many 8 kB pages (20,000 tasks take about 740; their dependencies 40).
PG_BIG_PAGES = 100
# Scans of a big table that stop early on their own, with why.
BOUNDED_SCANS = {
    "FROM token_ledger WHERE task_id IS NOT NULL ORDER BY id DESC LIMIT 200": "the newest 200 runs, by rowid",
}
# Hot query (a piece of its SQL) -> the index it must use, on both backends unless a backend's name is given.
INTENDED: dict[str, str | dict[str, str]] = {
    "FROM tasks WHERE status != 'COMPLETED' ORDER BY priority": "tasks_open_order",  # list_tasks, all projects
    "WHERE project_id = ? AND status != 'COMPLETED'": "tasks_open_project_order",  # list_tasks of a project
    "FROM tasks WHERE status = 'READY' ORDER BY priority, created_at LIMIT 50": "idx_tasks_status_priority_created_at",
    "FROM tasks WHERE status = 'BLOCKED' ORDER BY updated_at DESC": "tasks_status_age",  # get_status' held tasks
    "r.warning IS NOT NULL": "task_results_warned",  # get_status' completed-with-no-change
    "action = 'sandbox:deny'": "audit_log_task_action",  # get_task's sandbox refusals
    "FROM permission_requests WHERE task_id = ?": "idx_permission_requests_task_id_created_at",
    "SELECT depends_on FROM task_dependencies WHERE task_id = ?": {  # get_task, and create/edit's cycle check
        "sqlite": "sqlite_autoindex_task_dependencies_1", "postgres": "task_dependencies_pkey"},
    "FROM task_dependencies WHERE depends_on = ?": "idx_task_dependencies_depends_on",
    "SELECT 1 FROM events WHERE task_id = ?": "idx_events_task_id_id",  # a new task id is free
    "status = 'READY' AND (agent_type IS NULL OR agent_type = ?)": "tasks_ready_order",  # the claim pass
    "FROM token_ledger WHERE timestamp >= ? AND timestamp < ?": "token_ledger_window",  # fair share, oldest hour
    "FROM token_hours WHERE hour >= ?": {"sqlite": "PRIMARY KEY", "postgres": "token_hours_pkey"},
}
# SQLite without statistics reads the READY tasks' kinds through the status index (READY rows either way).
UNANALYSED_SQLITE = {
    "SELECT DISTINCT agent_type, repo_id, capabilities FROM tasks": "idx_tasks_status_priority_created_at"}
ANALYSED = {"SELECT DISTINCT agent_type, repo_id, capabilities FROM tasks": {"sqlite": "tasks_ready_kind"}}


def stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def insert(services: Services, sql: str, rows: list[tuple[Any, ...]]) -> None:
    if services.store.backend == "postgres":
        from agentqueue.store.postgres import translate

        services.store.db.conn.cursor().executemany(translate(sql), rows)
    else:
        services.store.db.conn.executemany(sql, rows)


def grow(services: Services, count: int = TASKS, waiting_type: str | None = None) -> list[str]:
    """A queue as one grows over two months: most tasks completed (each with its events, run, ledger row and its
    agent's audited tool calls), some READY, DEFINED behind others or BLOCKED; a few sandbox refusals and
    no-change warnings. Written as the services write these rows, in bulk, and never analysed. `waiting_type`:
    the agent type the waiting tasks ask for (bench/scale.py gives one no agent has, so nothing runs them)."""
    rng = random.Random(19)
    for p in range(PROJECTS):
        services.projects.create(f"Project {p}", max_concurrent_agents=2)
    services.agents.create("worker", "command", command="true")
    start = datetime.now(UTC) - timedelta(days=60)
    every = timedelta(days=60) / count
    tasks, deps, results, ledger, events, audit = [], [], [], [], [], []
    ids = [f"task-{n:06d}" for n in range(count)]
    for n, task_id in enumerate(ids):
        project = f"project-{n % PROJECTS}"
        born = start + n * every
        late = n > count - max(600, count // 50)
        status = (rng.choice(["READY", "READY", "DEFINED", "BLOCKED"]) if late else
                  "BLOCKED" if rng.random() < 0.04 else "COMPLETED")
        tasks.append((task_id, project, f"Task {n}", "Work " + "x" * 120, status, rng.randrange(200), 0, 3, 0,
                      stamp(born), stamp(born + timedelta(minutes=5)),
                      "The merge conflicted" if status == "BLOCKED" else None, waiting_type if late else None))
        if n >= PROJECTS and rng.random() < 0.3:
            deps.append((task_id, ids[n - PROJECTS]))
        events.append(("task.created", project, task_id, json.dumps({"title": f"Task {n}"}), stamp(born)))
        if status in ("COMPLETED", "BLOCKED"):
            done = stamp(born + timedelta(minutes=5))
            warning = "The agent finished without changing any file." if rng.random() < 0.01 else None
            results.append((task_id, 1, "worker", "completed", "done", "[]", warning, 1000, 200, 1200, 0.01, 60.0,
                            done))
            ledger.append((project, task_id, "worker", 1000, 200, 1200, 0.01, done))
            for kind in ("task.assigned", "task.started", "task.verifying", f"task.{status.lower()}"):
                events.append((kind, project, task_id, "{}", done))
            for action in ("Read(README.md)", "Edit(src/app.py)", "Bash(npm test)"):
                audit.append((done, "agent:worker", project, task_id, action, "{}", "allow", "policy", "ok", None))
            if rng.random() < 0.01:
                audit.append((done, "agent:worker", project, task_id, "sandbox:deny", "{}", "deny", "sandbox",
                              "refused", "network: example.com:443 is not on the allowlist"))
    with services.store.transaction():
        insert(services, "INSERT INTO tasks (id, project_id, title, description, status, priority, retry_count, "
               "max_retries, requires_approval, created_at, updated_at, reason, agent_type) "
               "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", tasks)
        insert(services, "INSERT INTO task_dependencies (task_id, depends_on) VALUES (?, ?)", deps)
        insert(services, "INSERT INTO task_results (task_id, attempt, agent_id, status, summary, files_changed, "
               "warning, input, output, total, cost_usd, duration_s, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
               "?, ?, ?)", results)
        insert(services, "INSERT INTO token_ledger (project_id, task_id, agent_id, input, output, total, cost_usd, "
               "timestamp) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", ledger)
        insert(services, "INSERT INTO events (event_type, project_id, task_id, payload, timestamp) VALUES "
               "(?, ?, ?, ?, ?)", events)
        insert(services, "INSERT INTO audit_log (time, actor, project_id, task_id, action, arguments, decision, "
               "decided_by, outcome, message) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", audit)
    return ids


def record(services: Services) -> list[tuple[str, Any]]:
    """Every statement the store's connection is given from now on, with its parameters."""
    seen: list[tuple[str, Any]] = []
    db = services.store.db
    for name in ("execute", "query"):
        original = getattr(db, name)

        def recorded(sql: str, params: Any = (), _original: Any = original) -> Any:
            seen.append((sql, params))
            return _original(sql, params)
        setattr(db, name, recorded)
    return seen


async def hot_paths(services: Services, ids: list[str]) -> list[tuple[str, Any]]:
    """The calls the issue measures, as a client and the engine make them; returns what they asked the store."""
    denied = services.store.scalar("SELECT task_id FROM audit_log WHERE action = 'sandbox:deny' LIMIT 1")
    seen = record(services)
    async with Client(build_server(services), mode="legacy") as client:
        for name, arguments in (
                ("get_status", {}), ("list_tasks", {}), ("list_tasks", {"project_id": "project-3"}),
                ("create_task", {"project_id": "project-1", "title": "New", "description": "d",
                                 "depends_on": [ids[-5], ids[100]]}),
                ("edit_task", {"task_id": ids[-1], "depends_on": [ids[-2], ids[-3]]}),  # the cycle check walks
                ("get_task", {"task_id": ids[500]}), ("get_task", {"task_id": denied})):
            result = await client.call_tool(name, arguments)
            assert not result.is_error, (name, result.content)
    services.system.set_orchestrator("running")
    claims = Engine(services, services.home).tick(full=True)  # the claim pass: schedule, claim
    assert claims, "the claim pass found nothing to run"
    return seen


def aliases(sql: str) -> dict[str, str]:
    """Names a statement gives its tables (`task_results r`), each mapped to the table."""
    found = {}
    for table, alias in re.findall(r"\b(?:FROM|JOIN)\s+(\w+)(?:\s+(?:AS\s+)?(\w+))?", sql, re.IGNORECASE):
        found[table] = table
        if alias and alias.upper() not in ("WHERE", "ON", "JOIN", "LEFT", "CROSS", "ORDER", "GROUP", "LIMIT",
                                           "INNER", "UNION", "SET"):
            found[alias] = table
    return found


def sqlite_plan(services: Services, sql: str, params: Any) -> tuple[str, list[str]]:
    """The plan as one text, and the big tables it scans whole (a scan of a partial index is a bounded one)."""
    conn = services.store.db.conn
    partial = {r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND sql LIKE '% WHERE %'")}
    details = [r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params or ())]
    names = aliases(sql)
    scans = []
    for detail in details:
        match = re.match(r"SCAN (\w+)(?: USING (?:COVERING )?INDEX (\w+))?", detail)
        if match and names.get(match[1]) in BIG and match[2] not in partial:
            scans.append(f"{names[match[1]]}: {detail}")
    return " / ".join(details), scans


def postgres_plan(services: Services, sql: str, params: Any) -> tuple[str, list[str]]:
    from agentqueue.store.postgres import translate

    cursor = services.store.db.conn.cursor()
    cursor.execute("EXPLAIN (FORMAT JSON) " + translate(sql), params or ())
    nodes, scans, parts = [cursor.fetchone()[0][0]["Plan"]], [], []
    while nodes:
        node = nodes.pop()
        parts.append(f"{node['Node Type']} {node.get('Relation Name', '')} {node.get('Index Name', '')}".strip())
        if node["Node Type"] == "Seq Scan" and node.get("Relation Name") in BIG and \
                services.store.scalar("SELECT relpages FROM pg_class WHERE relname = ?", (node["Relation Name"],)) \
                >= PG_BIG_PAGES:
            scans.append(f"{node['Relation Name']}: Seq Scan")
        nodes.extend(node.get("Plans", []))
    return " / ".join(parts), scans


def plannable(sql: str) -> bool:
    head = sql.lstrip().split(None, 1)[0].upper()
    return head in ("SELECT", "WITH", "UPDATE", "DELETE", "INSERT") and "pg_advisory" not in sql \
        and "pg_notify" not in sql and "to_regclass" not in sql


def check(services: Services, seen: list[tuple[str, Any]], intended: dict[str, Any]) -> None:
    plan_of = sqlite_plan if services.store.backend == "sqlite" else postgres_plan
    plans: dict[str, str] = {}
    scans = []
    for sql, params in list(seen):  # planning reads the store too; those reads are not the calls'
        if sql in plans or not plannable(sql):
            continue
        plans[sql], scanned = plan_of(services, sql, params)
        if scanned and not any(bounded in sql for bounded in BOUNDED_SCANS):
            scans.append(f"{sql}\n    {scanned}")
    assert not scans, "hot statements that scan a big table:\n" + "\n".join(scans)
    for piece, index in intended.items():
        index = index.get(services.store.backend) if isinstance(index, dict) else index
        if index is None:
            continue
        matching = {sql: plan for sql, plan in plans.items() if piece in sql}
        assert matching, f"no hot statement contains {piece!r}: the calls no longer run it (update INTENDED)"
        for sql, plan in matching.items():
            assert index in plan, f"{sql}\n  uses {plan}\n  not {index}"


@pytest.fixture
def grown(services: Services) -> Iterator[tuple[Services, list[str]]]:
    if services.store.backend == "postgres":  # a state autovacuum would leave only by chance: kept for the test
        for table in BIG:
            services.store.db.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    yield services, grow(services)


def sqlite_stats(services: Services) -> int:
    return services.store.scalar("SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_stat1'") and \
        services.store.scalar("SELECT count(*) FROM sqlite_stat1 WHERE tbl = 'tasks'")


@pytest.mark.anyio
@pytest.mark.parametrize("store_backend", ["sqlite"])  # PostgreSQL: see the next test
@pytest.mark.slow
async def test_a_store_never_analysed_reads_big_tables_only_through_indexes(grown: tuple[Services, list[str]]) -> None:
    """The connection the store grew on, never analysed: SQLite plans the hot queries from the schema alone."""
    services, ids = grown
    assert not sqlite_stats(services)
    check(services, await hot_paths(services, ids), {**INTENDED, **UNANALYSED_SQLITE})


@pytest.mark.anyio
@pytest.mark.slow
async def test_once_analysed_the_hot_queries_use_their_indexes(grown: tuple[Services, list[str]], home: Path) -> None:
    """Opened again, the store analyses what never was (SQLite: `PRAGMA optimize=0x10002`; PostgreSQL: ANALYZE of
    the tables autovacuum has not analysed yet, which on a queue that grows it does after every 10 % of a table
    changes). PostgreSQL without statistics takes a list of 50 ids for a quarter of a table and scans it: a
    PostgreSQL store is checked as its server keeps it, analysed."""
    services, ids = grown
    services.close()
    services = Services(home)
    try:
        if services.store.backend == "sqlite":
            assert sqlite_stats(services)
        else:
            assert services.store.scalar("SELECT count(*) FROM pg_stats WHERE tablename = 'tasks'")
        check(services, await hot_paths(services, ids), {**INTENDED, **ANALYSED})
    finally:
        services.close()
