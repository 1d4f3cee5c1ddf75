"""The PostgreSQL backend (team mode): several daemons, on several machines, share one queue.

The SQL the services write (`?`/`:name` placeholders, SQLite's case-insensitive LIKE) is translated
here and nowhere else. Writers are kept as safe as on SQLite: every transaction takes one
transaction-scoped advisory lock, exclusively, so the services' read-then-write steps never
interleave across daemons; a claim pass takes it shared and keeps apart from other daemons' claim
passes with `FOR UPDATE SKIP LOCKED` on the projects, agents and tasks it picks. Events cross
daemons as NOTIFY, sent with the commit; a listener thread hands other daemons' events to this
process's `on_commit` listeners.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from functools import lru_cache
from typing import Any

import psycopg
from psycopg import pq
from psycopg.adapt import Dumper, Loader
from psycopg.rows import dict_row
from psycopg.types.string import StrDumperUnknown

from ..settings import redact_url
from ..version import version as code_version
from .base import Params, SchemaTooNewError, Store, StoreBusy, StoreNotMigrated, StoreOpenError
from .pg_schema import MIGRATIONS as PG_MIGRATIONS
from .sqlite import SCHEMA_VERSION

log = logging.getLogger("agentqueue.store")

CHANNEL = "agentqueue_events"
WRITE_LOCK = 0x4147_5155_4555  # "AGQUEU": the advisory lock every write transaction takes
MIGRATE_LOCK = WRITE_LOCK + 1
NOTIFY_LIMIT = 7000  # bytes; PostgreSQL refuses payloads of 8000 and more
# A session stuck in a transaction (a daemon frozen mid-change) is ended by the server once the daemon's lease
# would have run out (it holds the write lock every other daemon waits on: a frozen daemon must not stall the team
# longer than it keeps its runs), and a wait for another daemon's lock gives up with an error, so no call anywhere
# can hang on a dead peer.
IDLE_IN_TRANSACTION = 60.0  # seconds, when the store is opened without a lease (a CLI's reads and writes)
SESSION = ("SET lock_timeout = '30s'", "SET statement_timeout = '120s'")


def _session(idle_seconds: float) -> tuple[str, ...]:
    return (f"SET idle_in_transaction_session_timeout = '{max(int(idle_seconds * 1000), 1000)}ms'", *SESSION)

_TOKENS = re.compile(r"""('(?:[^']|'')*')|("(?:[^"]|"")*")|(::)|(\?)|(?<![:\w]):([A-Za-z_]\w*)|(%)|\b(LIKE)\b"""
                     r"""|\b(IS\s+NOT\s+\?|IS\s+\?)""", re.IGNORECASE)


@lru_cache(maxsize=2048)
def translate(sql: str) -> str:
    """SQLite-style SQL as psycopg takes it: `?` -> `%s`, `:name` -> `%(name)s`, `%` -> `%%`, LIKE -> ILIKE,
    `IS ?` -> `IS NOT DISTINCT FROM %s`."""
    def one(match: re.Match[str]) -> str:
        quoted = match[1] or match[2]
        if quoted:
            return quoted.replace("%", "%%")
        if match[3]:
            return "::"
        if match[4]:
            return "%s"
        if match[5]:
            return f"%({match[5]})s"
        if match[6]:
            return "%%"
        if match[8]:  # SQLite's null-safe comparison with a parameter
            return "IS DISTINCT FROM %s" if "NOT" in match[8].upper() else "IS NOT DISTINCT FROM %s"
        return "ILIKE"  # SQLite's LIKE ignores ASCII case; the services were written for that
    return _TOKENS.sub(one, sql)


class _IntBool(Dumper):
    """Python bools into the INTEGER columns SQLite gave them (0/1)."""

    oid = psycopg.adapters.types["int8"].oid

    def dump(self, obj: Any) -> bytes:
        return b"1" if obj else b"0"


class _Text(StrDumperUnknown):
    """PostgreSQL's text cannot hold NUL, which SQLite stores (an agent's output may carry one): U+FFFD instead."""

    def dump(self, obj: str) -> Any:
        return super().dump(obj.replace("\x00", "\ufffd") if "\x00" in obj else obj)


class _Number(Loader):
    """numeric (what sum() and avg() of integers give) as int when whole, else float, as SQLite returns them."""

    def load(self, data: Any) -> int | float:
        value = Decimal(bytes(data).decode())
        return int(value) if value == value.to_integral_value() else float(value)


def _connect(url: str, idle_seconds: float = IDLE_IN_TRANSACTION) -> psycopg.Connection[Any]:
    conn = psycopg.connect(url, autocommit=True, cursor_factory=psycopg.ClientCursor, connect_timeout=10)
    conn.adapters.register_dumper(bool, _IntBool)
    conn.adapters.register_dumper(str, _Text)
    conn.adapters.register_loader("numeric", _Number)
    for statement in _session(idle_seconds):
        conn.execute(statement)
    return conn


class _Table:
    """`db["table"].insert(row)` and `.update(pk, changes)`, the two table calls the services make."""

    def __init__(self, db: PgDatabase, name: str) -> None:
        self.db, self.name = db, name

    def insert(self, row: dict[str, Any]) -> _Table:
        columns = ", ".join(f'"{c}"' for c in row)
        marks = ", ".join("?" for _ in row)
        self.db.execute(f'INSERT INTO "{self.name}" ({columns}) VALUES ({marks})', tuple(row.values()))
        return self

    def update(self, pk: Any, changes: dict[str, Any]) -> _Table:
        if changes:
            sets = ", ".join(f'"{c}" = ?' for c in changes)
            self.db.execute(f'UPDATE "{self.name}" SET {sets} WHERE id = ?', (*changes.values(), pk))
        return self


class PgDatabase:
    """The connection as the services see it: execute (tuples), query (dicts), tables."""

    def __init__(self, url: str, idle_seconds: float = IDLE_IN_TRANSACTION) -> None:
        self.url = url
        self.idle_seconds = idle_seconds
        self.conn = _connect(url, idle_seconds)
        self.in_transaction = False  # set by the store: a transaction never moves to a new connection

    def _ready(self) -> psycopg.Connection[Any]:
        """The connection, opened again after it broke (the server restarted): the call that saw the break
        failed, the next one works. Never inside a transaction, which ends with its connection."""
        if not self.in_transaction and (self.conn.broken or self.conn.closed):
            log.warning("the PostgreSQL connection broke; reconnecting")
            self.conn = _connect(self.url, self.idle_seconds)
        return self.conn

    def execute(self, sql: str, params: Params = ()) -> psycopg.Cursor[Any]:
        cursor = self._ready().cursor()
        cursor.execute(translate(sql), params if params is not None else ())
        return cursor

    def query(self, sql: str, params: Params = ()) -> Iterator[dict[str, Any]]:
        cursor = self._ready().cursor(row_factory=dict_row)
        cursor.execute(translate(sql), params if params is not None else ())
        return iter(cursor.fetchall())

    def __getitem__(self, table: str) -> _Table:
        return _Table(self, table)

    def table_names(self) -> list[str]:
        return [r["table_name"] for r in self.query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()")]


class PostgresStore(Store):
    backend = "postgres"
    shared = True
    claim_lock = " FOR UPDATE SKIP LOCKED"

    def __init__(self, url: str, *, migrate_to: int = SCHEMA_VERSION, migrate: bool = True,
                 lease_seconds: float | None = None) -> None:
        """The team's database, migrated to `migrate_to`; `migrate=False` refuses one at another schema than this
        code's (StoreNotMigrated, SchemaTooNewError) and changes nothing: other daemons may run the code that wrote
        it. `lease_seconds`: the daemon's lease, which bounds how long a transaction of its may sit idle."""
        super().__init__()
        self.url = url
        idle = lease_seconds if lease_seconds is not None else IDLE_IN_TRANSACTION
        self.origin = secrets.token_hex(8)  # tells this process's own notifications from other daemons'
        self._listener: threading.Thread | None = None
        self._closing = threading.Event()
        try:
            self.db = PgDatabase(url, idle)
            if migrate:
                self._migrate(migrate_to)
            else:
                self._refuse_other_schema()
            self.reader = PgDatabase(url, idle)  # reads never wait behind a writer's advisory lock or row locks
            self.optimize(at_open=True)
        except StoreOpenError:
            self.db.conn.close()
            raise
        except psycopg.Error as error:
            raise StoreOpenError(
                f"Cannot use the PostgreSQL database at {redact_url(url)} ({str(error).strip()}). Check "
                "AGENTQUEUE_DATABASE_URL (or [team] database_url in config.toml) and that the server is running."
            ) from None

    # -- schema -------------------------------------------------------------------------------
    @property
    def schema_version(self) -> int:
        with self.lock:
            exists = self.db.execute("SELECT to_regclass('agentqueue_schema')").fetchone()[0]
            if not exists:
                return 0
            return int(self.db.execute("SELECT version FROM agentqueue_schema").fetchone()[0])

    def _too_new(self, current: int) -> SchemaTooNewError:
        return SchemaTooNewError(
            f"The database at {redact_url(self.url)} has schema version {current}, newer than this AgentQueue "
            f"({code_version()}) understands ({SCHEMA_VERSION}); nothing was changed. Upgrade AgentQueue on this "
            "machine (pip install -U agentqueue): every daemon of a team runs the same version.")

    def _refuse_other_schema(self) -> None:
        current = self.schema_version
        if current > SCHEMA_VERSION:
            raise self._too_new(current)
        if current < SCHEMA_VERSION:
            raise StoreNotMigrated(f"The database at {redact_url(self.url)}", current, SCHEMA_VERSION)

    def _migrate(self, target: int) -> None:
        """Each version in a transaction of its own, under an advisory lock (daemons starting together: one migrates),
        logged first. AgentQueue keeps no copy of a PostgreSQL database: that is pg_dump's job, before upgrading."""
        with self.lock:
            self.db.execute("SELECT pg_advisory_lock(?)", (MIGRATE_LOCK,))  # daemons starting together: one migrates
            try:
                current = self.schema_version
                if current > SCHEMA_VERSION:
                    raise self._too_new(current)
                steps = sorted(v for v in PG_MIGRATIONS if current < v <= target)
                if steps and current:
                    log.warning("PostgreSQL store %s: migrating from schema version %d to %d (AgentQueue %s). "
                                "AgentQueue keeps no copy of a PostgreSQL database: take one with pg_dump before an "
                                "upgrade to be able to go back.", redact_url(self.url), current, steps[-1],
                                code_version())
                for version in steps:
                    with self.db.conn.transaction():
                        self.db.conn.execute(PG_MIGRATIONS[version])  # type: ignore[arg-type]
                        self.db.execute("CREATE TABLE IF NOT EXISTS agentqueue_schema (version INTEGER NOT NULL)")
                        self.db.execute("DELETE FROM agentqueue_schema")
                        self.db.execute("INSERT INTO agentqueue_schema (version) VALUES (?)", (version,))
                    log.info("PostgreSQL schema now at version %d", version)
            finally:
                self.db.execute("SELECT pg_advisory_unlock(?)", (MIGRATE_LOCK,))

    # -- statistics ---------------------------------------------------------------------------
    def optimize(self, at_open: bool = False) -> list[str]:
        """The server's autovacuum analyses a table after every 10 % of it changes, so a queue that grows keeps
        its statistics with no help; at open, a table that has rows and was never analysed (loaded in bulk, or
        autovacuum turned off) is analysed here, as SQLite's store does. Returns the tables analysed."""
        if not at_open:
            return []
        try:
            with self.lock:
                stale = [r["relname"] for r in self.db.query(
                    "SELECT relname FROM pg_stat_user_tables WHERE schemaname = current_schema() AND n_live_tup > 0 "
                    "AND last_analyze IS NULL AND last_autoanalyze IS NULL ORDER BY relname")]
                for table in stale:
                    self.db.execute(f'ANALYZE "{table}"')
            return stale
        except psycopg.Error as error:  # statistics are the server's to keep; never a reason not to open
            log.info("query planner statistics not refreshed (%s)", str(error).strip())
            return []

    # -- transactions -------------------------------------------------------------------------
    @contextmanager
    def _atomic(self, concurrent: bool, wait: bool = True) -> Iterator[None]:
        conn = self.db._ready()
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            with conn.transaction():  # nested: a savepoint
                yield
            return
        with conn.transaction():
            self.db.in_transaction = True
            try:
                if wait:
                    self.db.execute("SELECT pg_advisory_xact_lock_shared(?)" if concurrent
                                    else "SELECT pg_advisory_xact_lock(?)", (WRITE_LOCK,))
                elif not self.db.execute("SELECT pg_try_advisory_xact_lock(?)", (WRITE_LOCK,)).fetchone()[0]:
                    raise StoreBusy("another daemon's writer holds the store")
                yield
            finally:
                self.db.in_transaction = False

    def clock(self, after_seconds: float = 0.0) -> str:
        """The server's clock, the one every daemon of the team reads (theirs may drift apart)."""
        return str(self.scalar(
            "SELECT to_char((clock_timestamp() AT TIME ZONE 'UTC') + make_interval(secs => ?), "
            "'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')", (float(after_seconds),)))

    def _announce_elsewhere(self, events: list[dict[str, Any]]) -> None:
        ids = [e["id"] for e in events]
        payload = json.dumps({"origin": self.origin, "ids": ids})
        if len(payload) > NOTIFY_LIMIT:
            payload = json.dumps({"origin": self.origin, "first": min(ids), "last": max(ids)})
        self.db.execute("SELECT pg_notify(?, ?)", (CHANNEL, payload))

    # -- other daemons' events ------------------------------------------------------------------
    def on_commit(self, listener: Any) -> None:
        super().on_commit(listener)
        if self._listener is None:
            self._listener = threading.Thread(target=self._listen, name="agentqueue-listen", daemon=True)
            self._listener.start()

    def _listen(self) -> None:
        """LISTEN on its own connection; reconnects after a failure (the server restarted) until closed."""
        while not self._closing.is_set():
            try:
                conn = _connect(self.url)
            except psycopg.Error as error:
                log.warning("cannot listen for other daemons' events (%s); retrying", error)
                self._closing.wait(2)
                continue
            try:
                conn.execute(f"LISTEN {CHANNEL}")
                while not self._closing.is_set():
                    # The generator holds the connection while it waits: collect, then query after it returns.
                    notes = [note.payload for note in conn.notifies(timeout=0.5, stop_after=1)]
                    for payload in notes:
                        self._deliver(conn, payload)
            except psycopg.Error as error:
                if not self._closing.is_set():
                    log.warning("lost the event listener's connection (%s); reconnecting", error)
            finally:
                conn.close()

    def _deliver(self, conn: psycopg.Connection[Any], payload: str) -> None:
        try:
            note = json.loads(payload)
        except ValueError:
            return
        if note.get("origin") == self.origin:
            return  # this process announced these itself at commit
        cursor = conn.cursor(row_factory=dict_row)
        if "ids" in note:
            cursor.execute("SELECT * FROM events WHERE id = ANY(%s) ORDER BY id", ([int(i) for i in note["ids"]],))
        else:
            cursor.execute("SELECT * FROM events WHERE id BETWEEN %s AND %s ORDER BY id",
                           (int(note["first"]), int(note["last"])))
        events = [{**row, "payload": json.loads(row["payload"] or "{}"), "remote": True} for row in cursor.fetchall()]
        if events:
            try:
                self._announce(events)
            except Exception:
                log.exception("a listener failed on another daemon's events")

    def close(self) -> None:
        self._closing.set()
        with self.lock, self._read_lock:
            self.db.conn.close()
            if self.reader is not None:
                self.reader.conn.close()
        if self._listener is not None:
            self._listener.join(timeout=2)
