"""A real PostgreSQL server for the tests: Debian's binaries, `initdb` into a temp dir, `pg_ctl` on a loopback port.

As root (CI), the server runs as the unprivileged `postgres` user the package creates (initdb refuses root).
One server per test session (under pytest-xdist: one per worker, each in its own temp dir on its own port); each
test gets its own fresh database from `PgServer.database()`.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest


def pg_binary(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)
    return found[0] if found else shutil.which(name)


def needs_postgres() -> pytest.MarkDecorator:
    return pytest.mark.skipif(pg_binary("initdb") is None or pg_binary("pg_ctl") is None,
                              reason="PostgreSQL server binaries not installed (.ci/run installs Debian's postgresql)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="aq-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # initdb and postgres refuse to run as root
            self.as_user = ["runuser", "-u", "postgres", "--"]
            shutil.chown(self.root, "postgres", "postgres")
        self.run(pg_binary("initdb"), "-D", str(self.data), "-U", "aq", "--auth=trust", "-E", "UTF8",
                 "--locale=C", "--no-sync")
        for attempt in range(3):  # xdist: another worker's server may take the free port before ours binds it
            try:
                self.run(pg_binary("pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log"), "-w",
                         "-t", "60", "-o", f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                         "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300", "start")
                break
            except RuntimeError:
                if attempt == 2:
                    raise
                self.port = _free_port()

    def run(self, *argv: str | None) -> None:
        done = subprocess.run([*self.as_user, *[a for a in argv if a]], capture_output=True, text=True,
                              cwd=self.root, timeout=120)
        if done.returncode:
            raise RuntimeError(f"{argv[0]} failed ({done.returncode}): {done.stdout}{done.stderr}")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://aq@127.0.0.1:{self.port}/{database}"

    def database(self) -> str:
        """A new empty database; returns its URL."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        subprocess.run([*self.as_user, pg_binary("pg_ctl") or "pg_ctl", "-D", str(self.data), "-m", "immediate",
                        "stop"], capture_output=True, timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)
