"""The queue speaks up: one line when a task completes, fails, blocks, awaits approval or asks permission.

It follows the daemon's `GET /events` (Server-Sent Events of every committed change, pushed the
moment the store commits; the board's feed) with the bearer token. A daemon without HTTP
(`serve --no-http`) is polled instead: `get_recent_events` over the local socket every half second.
The details of a line (title, reason, the request's action) come from the daemon's own tools.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.text import Text

from .. import paths
from ..daemon_client import DaemonError, ToolError, call_tool, daemon_info
from ..visible import visible

POLL_SECONDS = 0.5
TASK_LINES = {  # event type -> (mark, style, what happened)
    "task.completed": ("✔", "green", "completed"), "task.failed": ("✗", "red", "failed"),
    "task.blocked": ("⛔", "red", "is blocked"), "task.awaiting_approval": ("⏸", "yellow", "awaits your approval"),
}
Announce = Callable[[Text], None]


class QueueWatcher:
    def __init__(self, home: Path, announce: Announce) -> None:
        self.home = home
        self.announce = announce
        self.pending: dict[str, dict[str, Any]] = {}  # permission requests shown and not yet answered
        self.stopping = threading.Event()
        self.mode = "none"
        self.seen_at: dict[str, float] = {}  # for the benchmark: task id -> when its line was printed

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True, name="queue-watcher").start()

    def stop(self) -> None:
        self.stopping.set()

    # -- following the daemon -----------------------------------------------------------------------
    def _run(self) -> None:
        self.refresh_requests()
        while not self.stopping.is_set():
            base = self._events_url()
            try:
                if base:
                    self.mode = "events"
                    self._follow(base)
                else:
                    self.mode = "polling"
                    self._poll()
            except Exception:  # noqa: BLE001 — the watcher never takes the chat down; it tries again
                pass
            self.stopping.wait(1.0)

    def _events_url(self) -> str | None:
        url = (daemon_info(self.home) or {}).get("http_url")
        if not url:
            return None
        base = url.removesuffix("/mcp")
        for wildcard in ("//0.0.0.0:", "//[::]:"):
            base = base.replace(wildcard, "//127.0.0.1:")
        return f"{base}/events"

    def _token(self) -> str:
        token = os.environ.get("AGENTQUEUE_TOKEN", "").strip()
        if token:
            return token
        try:
            return paths.token_path(self.home).read_text().strip()
        except OSError:
            return ""

    def _follow(self, url: str) -> None:
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {self._token()}",
                                                       "Accept": "text/event-stream"})
        try:
            stream = urllib.request.urlopen(request, timeout=30)  # keep-alives come every 15 s
        except urllib.error.HTTPError as error:
            if error.code in (401, 403):  # not our daemon's token: fall back to the socket for a while
                self.mode = "polling"
                self._poll(until=time.monotonic() + 60)
            return
        with stream:
            kind = ""
            for raw in stream:
                if self.stopping.is_set():
                    return
                line = raw.decode(errors="replace").rstrip("\r\n")
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:") and kind == "change":
                    try:
                        item = json.loads(line[5:])
                    except ValueError:
                        continue
                    self.on_event(str(item.get("event_type")), item.get("task_id"))
                elif not line:
                    kind = ""

    def _poll(self, until: float | None = None) -> None:
        last = None
        while not self.stopping.is_set() and (until is None or time.monotonic() < until):
            if self._events_url() and until is None:
                return  # the daemon came back with HTTP: follow its events instead
            try:
                events = call_tool(self.home, "get_recent_events", {"limit": 50}, timeout=10, start=False)["events"]
            except (DaemonError, ToolError, OSError, KeyError):
                events = None
            if events is not None:
                fresh = [e for e in reversed(events) if last is not None and e["id"] > last]
                last = max([last or 0, *(e["id"] for e in events)])
                for event in fresh:
                    self.on_event(event["event_type"], event.get("task_id"))
            self.stopping.wait(POLL_SECONDS)

    # -- what is said ---------------------------------------------------------------------------------
    def on_event(self, event_type: str, task_id: str | None) -> None:
        if event_type == "request.created":
            self.refresh_requests()
        elif event_type == "request.answered":
            self.refresh_requests(announce_new=False)
        elif event_type in TASK_LINES and task_id:
            self.announce(self.task_line(event_type, task_id))
            self.seen_at[task_id] = time.time()

    def task_line(self, event_type: str, task_id: str) -> Text:
        """One line (a title's newlines shown as \\n): the task's words can't fake a second queue line."""
        mark, style, what = TASK_LINES[event_type]
        task = self._call("get_task", task_id=task_id) or {}
        line = Text.assemble((f"{mark} ", style), (visible(task_id), "bold"), f" {what}")
        if task.get("title"):
            line.append(f": {visible(str(task['title']))}")
        if event_type != "task.completed" and task.get("reason"):
            line.append(f" — {visible(str(task['reason']))}", style="dim")
        if event_type == "task.awaiting_approval":
            line.append(f"  /approve {visible(task_id)}", style="cyan")
        return line

    def refresh_requests(self, announce_new: bool = True) -> None:
        found = self._call("list_requests", status="pending", limit=100)
        if found is None:
            return
        current = {r["id"]: r for r in found.get("requests") or []}
        for request_id, request in current.items():
            if request_id not in self.pending and announce_new:
                self.announce(self.request_line(request))
        self.pending = current

    def request_line(self, request: dict[str, Any]) -> Text:
        """The request's action string whole, made visible: exactly what /allow lets the agent do (and, when
        it differs, the rule /always adds to the policy)."""
        rid = visible(str(request["id"]))
        action = str(request.get("action") or request.get("tool") or "?")
        rule = request.get("suggested_rule")
        line = Text.assemble(("? ", "bold yellow"), (visible(str(request["task_id"])), "bold"), " asks: ",
                             (visible(action), "bold"), visible(f" (project {request.get('project_id')})  "),
                             (f"/allow {rid} · /deny {rid} · /always {rid}", "cyan"))
        if rule and rule != action:
            line.append(f"  (/always remembers {visible(str(rule))})", style="dim")
        return line

    def _call(self, tool: str, **arguments: Any) -> dict[str, Any] | None:
        try:
            return call_tool(self.home, tool, arguments, timeout=10, start=False)
        except (DaemonError, ToolError, OSError):
            return None
