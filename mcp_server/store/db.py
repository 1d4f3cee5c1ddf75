"""Which store a home uses: the embedded SQLite file, or a team's PostgreSQL server (`AGENTQUEUE_DATABASE_URL`)."""

from __future__ import annotations

from pathlib import Path

from .base import SchemaTooNewError, Store, StoreNotMigrated, StoreOpenError, iso_in, now_iso
from .sqlite import SqliteStore

__all__ = ["SchemaTooNewError", "Store", "StoreNotMigrated", "StoreOpenError", "iso_in", "now_iso", "open_store"]


def open_store(db_path: Path, database_url: str | None = None, *, migrate: bool = True,
               lease_seconds: float | None = None) -> Store:
    """The SQLite file at `db_path`, or, given a postgresql:// URL, the shared PostgreSQL database. `migrate=False`:
    a store at another schema than this code's is refused (StoreNotMigrated, SchemaTooNewError), never changed. A
    daemon passes its lease: a transaction of its left idle longer, as by a frozen daemon, is ended by the server."""
    if not database_url:
        return SqliteStore(db_path, migrate=migrate)
    try:
        from .postgres import PostgresStore  # psycopg is needed (and imported) only in team mode
    except ImportError as error:
        raise StoreOpenError(f"AGENTQUEUE_DATABASE_URL names a PostgreSQL database, but its driver is not installed "
                             f"({error.name or error}). Install it into AgentQueue's environment: "
                             "pip install 'agentqueue[team]'.") from None

    return PostgresStore(database_url, migrate=migrate, lease_seconds=lease_seconds)
