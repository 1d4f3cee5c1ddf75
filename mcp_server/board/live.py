"""The board's live feed: the store's committed events and the engine's log ticks, fanned out to pages.

Fed by the same commit listener that drives MCP resource notifications, so a page and a subscribed
client learn of a change at the same moment. Producers run on any thread (engine workers, tool
calls); each open page holds an asyncio queue on the daemon's loop, woken thread-safely.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

QUEUE_SIZE = 1000


@dataclass
class Feed:
    """One open page: what it watches, and its queue (None in it means: fell behind, reload)."""

    project_id: str | None
    task_id: str | None
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[dict[str, Any] | None] = field(default_factory=lambda: asyncio.Queue(QUEUE_SIZE))

    def wants(self, item: dict[str, Any]) -> bool:
        if item["kind"] == "bye":  # the daemon stops: every page
            return True
        if self.task_id is not None:
            return item.get("task_id") == self.task_id
        if self.project_id is not None:
            return item["kind"] != "log" and item.get("project_id") in (self.project_id, None)
        return item["kind"] != "log"  # the overview and agent pages take every change but log lines

    def offer(self, item: dict[str, Any]) -> None:
        """On the loop's thread: queue the item, or a single resync marker once the page falls behind."""
        try:
            self.queue.put_nowait(item)
        except asyncio.QueueFull:
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(None)


class Broadcaster:
    def __init__(self) -> None:
        self._feeds: list[Feed] = []
        self._lock = threading.Lock()

    def open(self, project_id: str | None = None, task_id: str | None = None) -> Feed:
        feed = Feed(project_id, task_id, asyncio.get_running_loop())
        with self._lock:
            self._feeds.append(feed)
        return feed

    def close(self, feed: Feed) -> None:
        with self._lock:
            if feed in self._feeds:
                self._feeds.remove(feed)

    def publish(self, item: dict[str, Any]) -> None:
        with self._lock:
            feeds = [f for f in self._feeds if f.wants(item)]
        for feed in feeds:
            try:
                feed.loop.call_soon_threadsafe(feed.offer, item)
            except RuntimeError:  # that page's loop is closed (the daemon is stopping)
                self.close(feed)

    # -- producers ----------------------------------------------------------------------------
    def on_commit(self, events: list[dict[str, Any]]) -> None:
        """Store listener: one item per committed event (task moves, requests, notes, hooks...)."""
        for event in events:
            payload = event.get("payload") or {}
            self.publish({"kind": "event", "event_type": event["event_type"],
                          "project_id": event.get("project_id"), "task_id": event.get("task_id"),
                          "status": payload.get("to") if isinstance(payload, dict) else None})

    def on_log(self, task_id: str) -> None:
        """Engine callback: the task's log grew (the page reads the new bytes itself)."""
        self.publish({"kind": "log", "task_id": task_id, "project_id": None})
