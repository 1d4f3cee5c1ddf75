"""A read-only view of the SQLite store with the standard library alone, for the terminal's reads.

`agentqueue tasks`, `show` and `status` read a few rows and exit: the full store (sqlite-utils, the
migrations) and the services (pydantic models, GitPython) cost them most of their time. This opens the
same file with `sqlite3`, takes no write lock and changes nothing; in WAL mode a reader never waits
for the daemon's writer. When the file's schema is not the one this version writes, or the home uses
a team's PostgreSQL database, `open_read_store` hands back the full store instead (it migrates an old
file, refuses a newer one, and speaks PostgreSQL), so every case still reads the same rows; with
`migrate=False` (a daemon of older code holds the store: the terminal never migrates under it) an old
file is refused instead (StoreNotMigrated).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .base import Params, Store, unusable_file

# The schema version this AgentQueue writes (store.sqlite.SCHEMA_VERSION, which imports sqlite-utils to
# say it; a test keeps the two equal). Any other version is opened by the full store.
SCHEMA_VERSION = 19


class _Rows:
    """The slice of sqlite-utils' Database that Store's reads use: `query` yields dicts, `execute` a cursor."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def query(self, sql: str, params: Params = ()) -> Iterator[dict[str, Any]]:
        cursor = self.conn.execute(sql, params)
        names = [d[0] for d in cursor.description or ()]
        for row in cursor:
            yield dict(zip(names, row, strict=True))

    def execute(self, sql: str, params: Params = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)

    def close(self) -> None:
        self.conn.close()


class SqliteReader(Store):
    """The SQLite file, opened for reading only (query_only: a write is an error, never a change)."""

    backend = "sqlite"
    ordered_join = "CROSS JOIN"

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        try:
            # mode=rw: never create the file; reads go through WAL like the daemon's own connection.
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, isolation_level=None,
                                   check_same_thread=False, timeout=5)
            conn.execute("PRAGMA query_only = ON")
            self.db = _Rows(conn)
            self.version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.DatabaseError as error:
            raise unusable_file(path, error) from None

    @property
    def schema_version(self) -> int:
        return self.version

    @contextmanager
    def _atomic(self, concurrent: bool, wait: bool = True) -> Iterator[None]:
        raise RuntimeError("SqliteReader is read-only: open the full store (store.db.open_store) to change anything")
        yield  # pragma: no cover

    def close(self) -> None:
        with self.lock:
            self.db.close()


def open_read_store(db_path: Path, database_url: str | None = None, *,
                    migrate: bool | Callable[[], bool] = True) -> Store:
    """The store to read from: the plain reader for a current SQLite file, else the full store (`migrate` false: a
    store at another schema is refused, never changed; a callable is asked only then, so a current file costs no
    more than its reader)."""
    if not database_url:
        reader = SqliteReader(db_path)
        if reader.schema_version == SCHEMA_VERSION:
            return reader
        reader.close()
    from .db import open_store

    return open_store(db_path, database_url, migrate=migrate() if callable(migrate) else migrate)
