"""The notifications in the store: one row per event and notifier URL, claimed by one daemon at a time.

A row is added once (UNIQUE event_id, target), by whichever daemon turns the event into a message first;
sending it needs a claim (claimed_by, claimed_until), so in team mode each message goes out from one
daemon only, and a daemon that dies mid-send lets another take the row over when its claim runs out. A URL
is known in the store only by a hash (`target`) and its masked form: secrets stay in config.toml.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import secrets
from collections.abc import Iterable
from typing import Any

from ..settings import mask_url
from ..store.base import Store
from .messages import Message, TaskFacts

CURSOR_KEY = "notify.cursor"
CLAIM_SECONDS = 60.0  # longer than one send's time limit: a claim outlives its send
BATCH = 20
# Events that may become a notification (follower.kind_of says which kind).
EVENT_TYPES = ("request.created", "task.awaiting_approval", "task.blocked", "task.completed", "queue.parked")


def target_of(url: str) -> str:
    """The stored name of a notifier URL (a hash: the URL's secrets never reach the database)."""
    return hashlib.sha256(url.encode()).hexdigest()[:24]


class Outbox:
    def __init__(self, store: Store, owner: str | None = None) -> None:
        self.store = store
        self.owner = owner or f"notifier-{secrets.token_hex(4)}"
        self._claims = itertools.count(1)

    # -- following events ---------------------------------------------------------------------------
    def cursor(self) -> int:
        """The last event looked at; the first time, the newest event (nothing older is announced)."""
        stored = self.store.get_setting(CURSOR_KEY)
        if stored is not None:
            return int(stored)
        newest = int(self.store.scalar("SELECT coalesce(max(id), 0) FROM events") or 0)
        self.set_cursor(newest)
        return newest

    def set_cursor(self, event_id: int) -> None:
        with self.store.transaction():
            self.store.set_setting(CURSOR_KEY, str(event_id))

    BATCH_EVENTS = 200

    def events_after(self, event_id: int, up_to: int) -> list[dict[str, Any]]:
        """Events that may become notifications, after `event_id` and up to `up_to`, oldest first."""
        marks = ", ".join("?" for _ in EVENT_TYPES)
        rows = self.store.all(f"SELECT * FROM events WHERE id > ? AND id <= ? AND event_type IN ({marks}) "
                              "ORDER BY id LIMIT ?", (event_id, up_to, *EVENT_TYPES, self.BATCH_EVENTS))
        return [{**r, "payload": json.loads(r["payload"] or "{}")} for r in rows]

    def newest_event(self) -> int:
        return int(self.store.scalar("SELECT coalesce(max(id), 0) FROM events") or 0)

    def task_facts(self, task_id: str) -> TaskFacts | None:
        row = self.store.one("SELECT t.id, t.title, t.next_step, t.project_id, p.name AS project FROM tasks t "
                             "LEFT JOIN projects p ON p.id = t.project_id WHERE t.id = ?", (task_id,))
        if row is None:
            return None
        return TaskFacts(row["id"], row["title"] or "", row["project"] or row["project_id"] or "", row["next_step"])

    def request_pending(self, request_id: str | None) -> bool:
        return bool(request_id) and self.store.scalar(
            "SELECT status FROM permission_requests WHERE id = ?", (request_id,)) == "pending"

    def project_name(self, project_id: str | None) -> str | None:
        return self.store.scalar("SELECT name FROM projects WHERE id = ?", (project_id,)) if project_id else None

    # -- rows -------------------------------------------------------------------------------------
    def add(self, event: dict[str, Any], urls: Iterable[str], mode: str, message: Message) -> int:
        """One pending row per URL for `event`; a row another daemon already added is left alone. How many added."""
        added = 0
        now = self.store.clock()
        with self.store.transaction() as db:
            for url in urls:
                cursor = db.execute(
                    "INSERT INTO notifications (event_id, target, kind, mode, project_id, task_id, request_id, title, "
                    "body, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (event_id, target) DO NOTHING",
                    (event["id"], target_of(url), message.kind, mode, event.get("project_id"), message.task_id,
                     message.request_id, message.title, message.body, now))
                added += cursor.rowcount or 0
        return added

    def claim(self, url: str, modes: tuple[str, ...], limit: int = BATCH) -> list[dict[str, Any]]:
        """Claim pending rows of `url` in `modes` that are due (not waiting for a retry, nobody else's claim)."""
        token = f"{self.owner}:{next(self._claims)}"
        now = self.store.clock()
        marks = ", ".join("?" for _ in modes)
        with self.store.transaction():
            self.store.db.execute(
                "UPDATE notifications SET claimed_by = ?, claimed_until = ? WHERE id IN (SELECT id FROM notifications "
                f"WHERE status = 'pending' AND target = ? AND mode IN ({marks}) AND (next_at IS NULL OR next_at <= ?) "
                "AND (claimed_until IS NULL OR claimed_until < ?) ORDER BY id LIMIT ?)",
                (token, self.store.clock(CLAIM_SECONDS), target_of(url), *modes, now, now, limit))
        return self.store.all("SELECT * FROM notifications WHERE claimed_by = ? AND status = 'pending' ORDER BY id",
                              (token,))

    def pending(self, url: str, modes: tuple[str, ...]) -> list[dict[str, Any]]:
        """Pending rows of `url` in `modes`, claimed or not (what a digest would hold)."""
        marks = ", ".join("?" for _ in modes)
        return self.store.all(f"SELECT id, mode, created_at, next_at FROM notifications WHERE status = 'pending' "
                              f"AND target = ? AND mode IN ({marks}) ORDER BY id", (target_of(url), *modes))

    def sent(self, url: str, rows: list[dict[str, Any]], digest: bool = False) -> None:
        """The rows went out: settled, the URL's last success noted, and a permission request marked as told."""
        now = self.store.clock()
        with self.store.transaction() as db:
            for row in rows:
                db.execute("UPDATE notifications SET status = 'sent', sent_at = ?, last_error = NULL, "
                           "claimed_until = NULL WHERE id = ?", (now, row["id"]))
                if row.get("request_id"):
                    db.execute("UPDATE permission_requests SET notified_at = ? WHERE id = ? AND notified_at IS NULL",
                               (now, row["request_id"]))
            self._note(url, ok_at=now, digest_at=now if digest else None)

    def failed(self, url: str, rows: list[dict[str, Any]], error: str, retry_in: float | None) -> None:
        """The send failed: try again in `retry_in` seconds, or (None) give up on the rows."""
        now = self.store.clock()
        next_at = self.store.clock(retry_in) if retry_in is not None else None
        with self.store.transaction() as db:
            for row in rows:
                db.execute("UPDATE notifications SET attempts = attempts + 1, next_at = ?, last_error = ?, "
                           "claimed_until = NULL, status = ? WHERE id = ?",
                           (next_at, error[:500], "pending" if retry_in is not None else "given_up", row["id"]))
            self._note(url, error_at=now, error=error)

    def note_test(self, url: str, ok: bool, error: str | None) -> None:
        now = self.store.clock()
        with self.store.transaction():
            if ok:
                self._note(url, ok_at=now)
            else:
                self._note(url, error_at=now, error=error or "failed")

    def _note(self, url: str, ok_at: str | None = None, error_at: str | None = None, error: str | None = None,
              digest_at: str | None = None) -> None:
        self.store.db.execute(
            "INSERT INTO notify_targets (target, shown, last_ok_at, last_error_at, last_error, last_digest_at) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (target) DO UPDATE SET shown = excluded.shown, "
            "last_ok_at = coalesce(excluded.last_ok_at, notify_targets.last_ok_at), "
            "last_error_at = coalesce(excluded.last_error_at, notify_targets.last_error_at), "
            "last_error = coalesce(excluded.last_error, notify_targets.last_error), "
            "last_digest_at = coalesce(excluded.last_digest_at, notify_targets.last_digest_at)",
            (target_of(url), mask_url(url), ok_at, error_at, error and error[:500], digest_at))

    def last_digest(self, url: str) -> str | None:
        return self.store.scalar("SELECT last_digest_at FROM notify_targets WHERE target = ?", (target_of(url),))


def target_states(store: Store) -> list[dict[str, Any]]:
    """Each notifier URL's last success and last error, with how many messages wait and were given up (doctor)."""
    return store.all(
        "SELECT t.*, (SELECT count(*) FROM notifications n WHERE n.target = t.target AND n.status = 'pending') "
        "AS waiting, (SELECT count(*) FROM notifications n WHERE n.target = t.target AND n.status = 'given_up') "
        "AS given_up FROM notify_targets t")
