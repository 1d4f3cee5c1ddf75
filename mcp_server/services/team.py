"""This daemon among the daemons that share one queue: its row in `daemons`, its lease, and which runs are whose.

Every daemon (SQLite's single one too) joins with a lease it renews by a heartbeat. Each run it
claims carries its id (`tasks.owner`). A daemon whose lease ran out is dead to the others: one of
them takes its row (row lock, SKIP LOCKED, so only one does) and with it the runs it owned, which
are then requeued. At start a daemon also takes over its own previous incarnation at once (same
machine and home: the home lock proves that one is gone), without waiting for its lease.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path

from ..settings import Settings
from ..store.db import Store
from .task_states import CLAIMED, in_clause


@dataclass(frozen=True)
class DeadDaemon:
    """A daemon whose runs this one took over: where they ran, to stop leftovers and keep their work."""

    id: str
    hostname: str
    home: str
    tasks: tuple[str, ...]

    @property
    def here(self) -> bool:
        """On this machine: its processes can be signalled and its worktrees read."""
        return self.hostname == socket.gethostname()


class Team:
    def __init__(self, store: Store, home: Path, settings: Settings) -> None:
        self.store = store
        self.home = str(home)
        self.hostname = socket.gethostname()
        self.id = f"{self.hostname}:{os.getpid()}:{secrets.token_hex(3)}"
        self.labels = list(settings.labels)
        self.lease_seconds = settings.lease_seconds

    @property
    def shared(self) -> bool:
        """Other daemons may be running on this queue (PostgreSQL); SQLite has one per home."""
        return self.store.shared

    def join(self) -> None:
        stamp = self.store.clock()
        with self.store.transaction() as db:
            db.execute("INSERT INTO daemons (id, hostname, pid, home, labels, started_at, heartbeat_at, lease_until) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", (self.id, self.hostname, os.getpid(), self.home,
                                                          json.dumps(self.labels), stamp, stamp,
                                                          self.store.clock(self.lease_seconds)))

    def beat(self) -> bool:
        """Renew the lease; False when this daemon's row is gone (others found it dead and took its runs)."""
        with self.store.transaction() as db:
            renewed = db.execute("UPDATE daemons SET heartbeat_at = ?, lease_until = ? WHERE id = ?",
                                 (self.store.clock(), self.store.clock(self.lease_seconds), self.id)).rowcount
        return bool(renewed)

    def leave(self) -> None:
        with self.store.transaction() as db:
            db.execute("DELETE FROM daemons WHERE id = ?", (self.id,))

    def _on_this_machine(self, owner: str | None) -> bool:
        """An owner id is host:pid:random; no owner (a store from before team mode) is this home's own."""
        return owner is None or owner.rsplit(":", 2)[0] == self.hostname

    def others_alive(self) -> bool:
        """Whether another daemon holds a lease on the queue now."""
        return bool(self.store.scalar("SELECT 1 FROM daemons WHERE id != ? AND lease_until >= ? LIMIT 1",
                                      (self.id, self.store.clock())))

    def ran_elsewhere(self, task_id: str) -> str | None:
        """Where another daemon ran the task (its host and home), when one did: task logs stay where they were
        written."""
        owner = self.store.scalar("SELECT owner FROM tasks WHERE id = ?", (task_id,))
        if not self.shared or not owner or owner == self.id:
            return None
        row = self.store.one("SELECT hostname, home FROM daemons WHERE id = ?", (owner,))
        return f"{row['hostname']} {row['home']}" if row else f"{owner.rsplit(':', 2)[0]} (no longer running)"

    def take_over(self, at_start: bool = False) -> list[DeadDaemon]:
        """Claim the runs of dead daemons for this one (each dead daemon's row is taken by exactly one daemon).

        Dead: its lease ran out, or (at start) it is this machine's and home's previous daemon. Runs whose owner
        is in no row (a store from before team mode; a daemon that claimed after its row was taken) are taken too."""
        now = self.store.clock()
        taken: list[DeadDaemon] = []
        with self.store.transaction() as db:
            rows = self.store.all(
                "SELECT id, hostname, home FROM daemons WHERE id != ? AND (lease_until < ? OR (? = 1 AND hostname = ? "
                "AND home = ?))" + self.store.claim_lock, (self.id, now, int(at_start), self.hostname, self.home))
            claimed, claimed_params = in_clause(CLAIMED)  # a run goes on: its agent's process may be alive
            for row in rows:
                tasks = tuple(r["id"] for r in self.store.all(
                    f"SELECT id FROM tasks WHERE owner = ? AND {claimed}", (row["id"], *claimed_params)))
                db.execute(f"UPDATE tasks SET owner = ? WHERE owner = ? AND {claimed}",
                           (self.id, row["id"], *claimed_params))
                db.execute("DELETE FROM daemons WHERE id = ?", (row["id"],))
                taken.append(DeadDaemon(row["id"], row["hostname"], row["home"], tasks))
            # Runs owned by no daemon in the table (a daemon that claimed after its row was taken, or an engine
            # that never joined). Those whose owner was on this machine may have left a process or work here: they
            # are stopped and kept as the home's own are (the pid is checked against the worktree first).
            # At start nothing runs here yet, so a run carrying this engine's own id is a leftover too.
            strays = self.store.all(f"SELECT id, owner FROM tasks WHERE {claimed} AND (owner IS NULL OR "
                                    "owner NOT IN (SELECT id FROM daemons) OR (? = 1 AND owner = ?))",
                                    (*claimed_params, int(at_start), self.id))
            if strays:
                db.execute(f"UPDATE tasks SET owner = ? WHERE id IN ({', '.join('?' for _ in strays)})",
                           (self.id, *(r["id"] for r in strays)))
                here = tuple(r["id"] for r in strays if self._on_this_machine(r["owner"]))
                elsewhere = tuple(r["id"] for r in strays if not self._on_this_machine(r["owner"]))
                if here:
                    taken.append(DeadDaemon("", self.hostname, self.home, here))
                if elsewhere:
                    taken.append(DeadDaemon("", "", self.home, elsewhere))
        return taken
