"""The store's interface, shared by its two backends (SQLite embedded, PostgreSQL for a team).

Services and the engine use only this: `transaction()` for every change (all of it or none of it;
the events recorded inside are announced to listeners after commit), `one`/`all`/`scalar` for reads,
and inside a transaction `db.execute(sql, params)` and `db["table"].insert(row)` /
`.update(pk, changes)`. SQL is written once, in SQLite's dialect restricted to what PostgreSQL also
means the same way; the PostgreSQL backend translates the few spellings that differ (postgres.translate).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta, UTC
from typing import Any

Params = dict[str, Any] | tuple[Any, ...] | list[Any]
Listener = Callable[[list[dict[str, Any]]], None]


def now_iso() -> str:
    """ISO-8601 UTC with milliseconds, sortable as text."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def iso_in(seconds: float) -> str:
    """now_iso's format, `seconds` from now (a deadline, a lease, a resume time)."""
    stamp = datetime.now(UTC) + timedelta(seconds=seconds)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class StoreOpenError(RuntimeError):
    """The database cannot be used at all; the message is one sentence with the next step."""


def unusable_file(path: object, error: Exception) -> StoreOpenError:
    """A damaged or foreign SQLite file, said in one sentence with what to do; the file is never touched."""
    return StoreOpenError(f"{path} is not a usable AgentQueue database ({error}). Move it aside "
                          f"(mv {path} {path}.broken) and start again for an empty queue, or restore it from a backup.")


class SchemaTooNewError(StoreOpenError):
    """The database was written by a newer AgentQueue than this one."""


class StoreNotMigrated(StoreOpenError):
    """Opened without migrating (`migrate=False`: another process may still run the code that wrote it), and its
    schema is older than this AgentQueue's."""

    def __init__(self, where: object, found: int, expected: int) -> None:
        super().__init__(f"{where} is at schema version {found}, older than this AgentQueue's {expected}; it was left "
                         "as it is.")
        self.found = found
        self.expected = expected


class StoreBusy(RuntimeError):
    """`transaction(wait=False)`: another writer holds the store right now."""


class Store:
    """One connection shared by the process, serialised by a re-entrant lock; a backend provides the rest."""

    backend = "base"
    # Other daemons may share this database (a team's queue), so runs carry owners and claims lock rows.
    shared = False
    # Appended to a SELECT that picks rows to claim: other daemons' claim passes skip rows this one holds.
    claim_lock = ""
    # A join written to be read left to right (SQLite plans CROSS JOIN in the written order).
    ordered_join = "JOIN"

    def __init__(self) -> None:
        self.lock = threading.RLock()
        # Reads go to a second connection while another thread's transaction holds the first, so a writer waiting
        # on the database's lock (another process's write, a row lock) holds up the writers behind it, never a read.
        self.reader: Any = None  # the backend opens it (same interface as db)
        self._read_lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._pending_events: list[dict[str, Any]] | None = None
        self.db: Any = None  # the backend's connection wrapper: execute, query, ["table"].insert/update

    # -- what a backend provides ------------------------------------------------------------------
    @property
    def schema_version(self) -> int:
        raise NotImplementedError

    @contextmanager
    def _atomic(self, concurrent: bool, wait: bool = True) -> Iterator[None]:
        """The backend's outermost transaction (a savepoint when nested); `wait=False` raises StoreBusy rather
        than wait for another writer."""
        raise NotImplementedError
        yield  # pragma: no cover

    def _announce_elsewhere(self, events: list[dict[str, Any]]) -> None:
        """Tell other processes sharing the database (PostgreSQL: NOTIFY, sent with the commit)."""

    def close(self) -> None:
        raise NotImplementedError

    def optimize(self, at_open: bool = False) -> list[str]:
        """Refresh the query planner's statistics where they went stale; returns the tables analysed. The daemon
        calls it hourly. PostgreSQL's autovacuum does this on the server by itself, so by default: nothing."""
        return []

    def clock(self, after_seconds: float = 0.0) -> str:
        """The database's own time (ISO-8601 UTC, as now_iso writes it), `after_seconds` from now: leases
        compare times that several machines write, so they are taken from the one clock all of them share."""
        return iso_in(after_seconds)

    # -- transactions and events --------------------------------------------------------------
    @contextmanager
    def transaction(self, concurrent: bool = False, wait: bool = True) -> Iterator[Any]:
        """One atomic unit of change; events recorded inside are announced only after commit.

        `concurrent`: the transaction keeps itself apart from other daemons' with row locks (a claim pass
        with `claim_lock`), so on PostgreSQL it may run beside them; every other transaction is serialised
        against all writers, as on SQLite, so the services' read-then-write steps stay correct.
        `wait=False`: raise StoreBusy at once if another writer (thread or process) holds the store."""
        if not self.lock.acquire(blocking=wait):
            raise StoreBusy("another writer holds the store")
        try:
            outermost = self._pending_events is None
            if outermost:
                self._pending_events = []
            try:
                with self._atomic(concurrent, wait):
                    yield self.db
                    if outermost and self._pending_events:
                        self._announce_elsewhere(self._pending_events)
            except BaseException:
                if outermost:
                    self._pending_events = None
                raise
            if outermost:
                events, self._pending_events = self._pending_events or [], None
                self._announce(events)
        finally:
            self.lock.release()

    @contextmanager
    def _reading(self) -> Iterator[Any]:
        """The writer's connection when it is free (or held by this thread's own transaction, which must see its
        writes); the reader while another thread's transaction holds it, so a read never queues behind a writer
        that waits on the database's lock."""
        if self.reader is not None and not self.lock.acquire(blocking=False):
            with self._read_lock:
                yield self.reader
            return
        if self.reader is None:
            self.lock.acquire()
        try:
            yield self.db
        finally:
            self.lock.release()

    def _announce(self, events: list[dict[str, Any]]) -> None:
        for listener in list(self._listeners):
            listener(events)

    def add_event(
        self,
        event_type: str,
        *,
        project_id: str | None = None,
        task_id: str | None = None,
        agent_id: str | None = None,
        payload: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Record an event; must be called inside `transaction()` so it commits with its change."""
        if self._pending_events is None:
            raise RuntimeError("add_event outside a transaction")
        row = {
            "event_type": event_type, "project_id": project_id, "task_id": task_id,
            "agent_id": agent_id, "payload": json.dumps(payload or {}), "timestamp": now_iso(),
        }
        event_id = self.db.execute(
            "INSERT INTO events (event_type, project_id, task_id, agent_id, payload, timestamp) "
            "VALUES (:event_type, :project_id, :task_id, :agent_id, :payload, :timestamp) RETURNING id",
            row,
        ).fetchone()[0]
        event = {**row, "id": event_id, "payload": payload or {}}
        self._pending_events.append(event)
        return event

    def on_commit(self, listener: Listener) -> None:
        """Call `listener(events)` after every committed transaction (events may be empty), and, on a shared
        database, with the events other daemons committed."""
        self._listeners.append(listener)

    # -- reads --------------------------------------------------------------------------------
    def one(self, sql: str, params: Params = ()) -> dict[str, Any] | None:
        with self._reading() as db:
            rows = list(db.query(sql, params))
        return rows[0] if rows else None

    def all(self, sql: str, params: Params = ()) -> list[dict[str, Any]]:
        with self._reading() as db:
            return list(db.query(sql, params))

    def scalar(self, sql: str, params: Params = ()) -> Any:
        with self._reading() as db:
            row = db.execute(sql, params).fetchone()
        return row[0] if row else None

    # -- settings -----------------------------------------------------------------------------
    def get_setting(self, key: str, default: str | None = None) -> str | None:
        value = self.scalar("SELECT value FROM settings WHERE key = ?", (key,))
        return default if value is None else value

    def set_setting(self, key: str, value: str) -> None:
        """Upsert a setting; call inside `transaction()`."""
        self.db.execute(
            "INSERT INTO settings (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )
