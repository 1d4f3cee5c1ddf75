"""A tool call that waits on the store holds up no other client: tools run in worker threads, reads use their
own connection, and an audit row waits for the store in the background, never in front of an answer.

Real stores: another connection takes SQLite's write lock (or PostgreSQL's write lock, the advisory lock
every AgentQueue writer takes), so one client's create_task waits; a second client's get_task on the same
server must come back while the first is still waiting, and the first completes once the lock is let go.
Ordering, not timing: nothing here measures how long anything took.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import anyio
import pytest
from mcp import Client

from agentqueue import paths
from agentqueue.server.app import build_server
from agentqueue.services import Services

from .conftest import EVERY_TOOL, ok, on_both_backends
from .slowdown import scaled

pytestmark = pytest.mark.anyio
store_backend = on_both_backends()


class WriterElsewhere:
    """Another process's writer holding the store's write lock until `release()`."""

    def __init__(self, services: Services) -> None:
        self.backend = services.store.backend
        if self.backend == "sqlite":
            self.conn: Any = sqlite3.connect(str(paths.db_path(services.home)), isolation_level=None)
            self.conn.execute("BEGIN IMMEDIATE")
        else:
            import psycopg

            from agentqueue.store.postgres import WRITE_LOCK

            self.conn = psycopg.connect(services.settings.database_url, autocommit=True)
            self.conn.execute("SELECT pg_advisory_lock(%s)", (WRITE_LOCK,))

    def release(self) -> None:
        if self.conn is None:
            return
        if self.backend == "sqlite":
            self.conn.execute("ROLLBACK")
        self.conn.close()  # PostgreSQL: a session's advisory locks end with it
        self.conn = None


def store_is_busy(services: Services) -> bool:
    """Whether some thread of this process is inside a store transaction (here: the waiting create_task)."""
    if services.store.lock.acquire(blocking=False):
        services.store.lock.release()
        return False
    return True


async def test_a_call_waiting_on_the_store_holds_up_no_other_client(services: Services) -> None:
    services.projects.create("Demo")
    task = services.tasks.create("demo", "Work", "do it")
    server = build_server(services, EVERY_TOOL)
    created: dict[str, Any] = {}
    async with Client(server) as first, Client(server) as second:
        writer = WriterElsewhere(services)
        try:
            async def create() -> None:
                created.update(await ok(first, "create_task", title="Waits", description="for the lock",
                                        project_id="demo"))

            async with anyio.create_task_group() as group:
                group.start_soon(create)
                with anyio.fail_after(scaled(20)):
                    while not store_is_busy(services):  # the first call is now waiting on the database's lock
                        await anyio.sleep(0.01)
                got = await ok(second, "get_task", task_id=task.id)
                listed = await ok(second, "list_tasks", project_id="demo")
                # The second client had its answers while the first call was still waiting on the store.
                assert got["id"] == task.id and [t["id"] for t in listed["tasks"]] == [task.id]
                assert created == {} and store_is_busy(services)
                writer.release()  # the other process lets go: the first call goes through
        finally:
            writer.release()
    assert created["title"] == "Waits" and services.tasks.get(created["id"]).status == "READY"
    # The second client's audit rows waited for the store, not its answers; they follow once it is free.
    with anyio.fail_after(scaled(20)):
        while len(services.audit.query(limit=10, action="tool:get_task")) < 1 or \
                len(services.audit.query(limit=10, action="tool:list_tasks")) < 1:
            await anyio.sleep(0.05)
    [row] = services.audit.query(limit=10, action="tool:get_task")
    assert row.outcome == "ok" and row.task_id == task.id
