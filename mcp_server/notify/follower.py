"""The notifier: a background thread that follows the store's events and sends what a person needs to know.

It never blocks the engine or a run: the engine only sets a threading.Event when events commit; the
thread reads the events table from its cursor (so nothing is missed across a restart, and in team mode
it sees other daemons' events too), writes one outbox row per event and URL, and sends due rows: each
alone, or, for digest kinds and what quiet hours held, one digest per URL. A failed send is retried with
backoff (delivery.backoff), logged, and its URL's last error kept for `doctor`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from ..settings import Settings, mask_url
from ..store.base import Store
from . import delivery
from .config import NotifyConfig
from .messages import Message, compose, digest
from .outbox import Outbox
from .timing import digest_due, quiet

log = logging.getLogger("agentqueue.notify")

POLL_SECONDS = 1.0
CURSOR_SAVE_SECONDS = 5.0
STOP_SECONDS = 3.0
LOOKBACK = 100  # team mode: ids another daemon's transaction took earlier may commit later


def kind_of(event: dict[str, Any]) -> str | None:
    """The notification kind an event is (config.KINDS), or None. A failure is told once its retries are spent:
    lifecycle moves a failed run FAILED -> READY (a retry, not told) or FAILED -> BLOCKED (told as `failed`)."""
    kind = event["event_type"]
    payload = event.get("payload") or {}
    if kind == "request.created":
        return "permission"
    if kind == "task.awaiting_approval":
        return "approval"
    if kind == "task.blocked":
        return "failed" if payload.get("from") == "FAILED" or payload.get("reason") == "max_retries" else "blocked"
    if kind == "task.completed":
        return "completed"
    if kind == "queue.parked":
        return "parked"
    return None


def _message(row: dict[str, Any]) -> Message:
    return Message(row["kind"], row["title"], row["body"], row.get("task_id"), row.get("request_id"))


class Notifier:
    def __init__(self, store: Store, settings: Settings, owner: str | None = None, board_url: str | None = None,
                 local_clock: Callable[[], datetime] | None = None,
                 retry_base: float = delivery.RETRY_BASE_SECONDS, poll_seconds: float = POLL_SECONDS) -> None:
        self.store = store
        self.config = NotifyConfig.from_values(settings.notify)
        self.outbox = Outbox(store, owner)
        self.default_board_url = board_url
        self.local_clock = local_clock or (lambda: datetime.now().astimezone())
        self.retry_base = retry_base
        self.poll_seconds = poll_seconds
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._cursor: int | None = None
        self._saved_cursor: int | None = None
        self._cursor_saved_at = 0.0
        self._seen: dict[int, None] = {}  # team mode: events already turned into rows (bounded)

    @property
    def board_url(self) -> str | None:
        return self.config.board_url or self.default_board_url

    def reload(self, settings: Settings) -> None:
        """New [notify] settings (config.toml changed): used from the next event on."""
        self.config = NotifyConfig.from_values(settings.notify)

    # -- the thread -------------------------------------------------------------------------------
    def start(self) -> bool:
        """Follow events in a daemon thread; nothing (False) when no URL is configured."""
        if not self.config.configured or self._thread is not None:
            return False
        if self._cursor is None:  # its place now: every event from here on is looked at
            self._cursor = self._saved_cursor = self.outbox.cursor()
        self.store.on_commit(self._on_commit)
        self._thread = threading.Thread(target=self._loop, name="agentqueue-notify", daemon=True)
        self._thread.start()
        log.info("notifications go to %s", ", ".join(mask_url(u) for u in self.config.all_urls()))
        return True

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            # A send in flight is not waited for long: the thread is a daemon thread, and its claim runs out.
            self._thread.join(timeout=STOP_SECONDS)
            self._thread = None
        if self._cursor is not None and self._cursor != self._saved_cursor:
            try:
                self.outbox.set_cursor(self._cursor)
            except Exception:
                log.exception("could not save the notifier's place in the events")

    def _on_commit(self, events: list[dict[str, Any]]) -> None:
        if events:
            self._wake.set()  # all the engine's thread does: the work is the notifier's own

    def _loop(self) -> None:
        delivery.warm()
        while not self._stopping.is_set():
            self._wake.clear()
            try:
                self.step()
            except Exception:  # the database was busy or gone for a moment: the next pass tries again
                log.exception("notifier pass failed")
            self._wake.wait(self.poll_seconds)

    # -- one pass ---------------------------------------------------------------------------------
    def step(self) -> None:
        """Turn new events into rows, then send what is due (nothing while quiet hours hold)."""
        self.follow()
        if quiet(self.config, self.local_clock()):
            return
        for url in self.config.all_urls():
            if self._stopping.is_set():
                return
            self.send_due(url)
            self.send_digest(url)

    def follow(self) -> None:
        if self._cursor is None:
            self._cursor = self._saved_cursor = self.outbox.cursor()
        start = max(self._cursor - LOOKBACK, 0) if self.store.shared else self._cursor
        # The newest id first, then the events up to it: an event committed between the two reads is left for the
        # next pass instead of being skipped.
        newest = self.outbox.newest_event()
        events = self.outbox.events_after(start, newest)
        for event in events:
            if event["id"] in self._seen:
                continue
            self._convert(event)
            self._seen[event["id"]] = None
        while len(self._seen) > 10 * LOOKBACK:
            self._seen.pop(next(iter(self._seen)))
        full = len(events) >= self.outbox.BATCH_EVENTS
        self._cursor = max(self._cursor, events[-1]["id"] if full else newest)
        if self._cursor != self._saved_cursor and time.monotonic() - self._cursor_saved_at >= CURSOR_SAVE_SECONDS:
            self.outbox.set_cursor(self._cursor)
            self._saved_cursor, self._cursor_saved_at = self._cursor, time.monotonic()

    def _convert(self, event: dict[str, Any]) -> None:
        kind = kind_of(event)
        if kind is None:
            return
        route = self.config.route(event.get("project_id"), self.outbox.project_name(event.get("project_id")))
        mode = route.mode(kind)
        if mode == "off":
            return
        task = self.outbox.task_facts(event["task_id"]) if event.get("task_id") else None
        if task is None and kind != "parked":
            return  # deleted since
        if kind == "permission" and not self.outbox.request_pending((event.get("payload") or {}).get("request_id")):
            return  # answered or closed already (a restart closes the requests of the runs it ended)
        message = compose(kind, event, task, self.board_url)
        held = mode == "on" and quiet(self.config, self.local_clock())
        self.outbox.add(event, route.urls, "digest" if mode == "digest" else "held" if held else "now", message)

    def send_due(self, url: str) -> None:
        rows = self.outbox.claim(url, ("now",))
        for index, row in enumerate(rows):
            outcome = delivery.send(url, _message(row))
            if outcome.ok:
                self.outbox.sent(url, [row])
                continue
            # The URL is failing: the rest of this batch waits with it rather than each taking its time limit.
            self._failed(url, rows[index:], outcome.error or "failed")
            return

    def send_digest(self, url: str) -> None:
        waiting = self.outbox.pending(url, ("digest", "held"))
        if not waiting or not digest_due(waiting, self.outbox.last_digest(url), self.config.digest_seconds,
                                         self.store.clock()):
            return
        rows = self.outbox.claim(url, ("digest", "held"), limit=500)
        if not rows:
            return
        why = "held during quiet hours" if any(r["mode"] == "held" for r in rows) else "since the last digest"
        outcome = delivery.send(url, digest([_message(r) for r in rows], why))
        if outcome.ok:
            self.outbox.sent(url, rows, digest=True)
        else:
            self._failed(url, rows, outcome.error or "failed")

    def _failed(self, url: str, rows: list[dict[str, Any]], error: str) -> None:
        attempts = max(int(r["attempts"]) for r in rows) + 1
        retry = delivery.backoff(attempts, self.retry_base) if attempts < delivery.MAX_ATTEMPTS else None
        log.warning("notifier %s failed (try %d): %s; %s", mask_url(url), attempts, error,
                    f"trying again in {retry:g} s" if retry is not None else "giving up on these messages")
        self.outbox.failed(url, rows, error, retry)


def send_test(store: Store, settings: Settings) -> list[dict[str, Any]]:
    """A test message to every configured URL, now (quiet hours or not): each one's result, secrets masked."""
    from .messages import test_message

    config = NotifyConfig.from_values(settings.notify)
    outbox = Outbox(store)
    results = []
    for url in config.all_urls():
        outcome = delivery.send(url, test_message())
        outbox.note_test(url, outcome.ok, outcome.error)
        results.append({"url": mask_url(url), "ok": outcome.ok, "error": outcome.error})
    return results
