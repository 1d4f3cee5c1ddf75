"""agentqueue:// resources, and telling subscribers when they change (both protocol eras).

A committed change marks the URIs its events touch; `Notifier.flush()` (after every tool call, and
on a short timer in the daemon for the engine's changes) publishes them once each: on the
`subscriptions/listen` bus for 2026 clients and as `notifications/resources/updated` to 2025 clients
that sent `resources/subscribe`.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import anyio.lowlevel

import mcp.types as types
from mcp.server import MCPServer, ServerRequestContext
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.server.subscriptions import ResourceUpdated, ServerEvent

from .. import paths
from ..apps import BOARD_URI, TASK_URI
from ..services import Services, result_size
from ..services.errors import NotFoundError

log = logging.getLogger("agentqueue.resources")

STATUS = "agentqueue://status"
PROJECTS = "agentqueue://projects"
EVENTS = "agentqueue://events/recent"
APPROVALS = "agentqueue://approvals"
AUDIT = "agentqueue://audit"


# The tools that read what each resource shows: a connection offered none of them (`--toolsets`, `--read-only`)
# is offered the resource neither (a template's `{name}` matches like a value).
_READERS: list[tuple[re.Pattern[str], tuple[str, ...]]] = [(re.compile(pattern), tools) for pattern, tools in (
    (r"agentqueue://status", ("get_status",)),
    (r"agentqueue://projects", ("list_projects",)),
    (r"agentqueue://projects/[^/]+", ("list_projects",)),
    (r"agentqueue://projects/[^/]+/tasks", ("list_tasks",)),
    (r"agentqueue://projects/[^/]+/notes/.+", ("read_note",)),
    (r"agentqueue://projects/[^/]+/memory", ("read_note",)),
    (r"agentqueue://tasks/[^/]+", ("get_task",)),
    (r"agentqueue://tasks/[^/]+/log", ("get_task",)),
    (r"agentqueue://events/recent", ("get_recent_events",)),
    (r"agentqueue://approvals", ("list_requests",)),
    (r"agentqueue://audit", ("get_audit_log",)),
    (re.escape(BOARD_URI), ("get_status", "list_tasks")),
    (re.escape(TASK_URI), ("get_task",)),
)]


def readers_of(uri: str) -> tuple[str, ...]:
    """The tools that read the same data as the resource `uri` (or template); () for a URI we do not serve."""
    bare = re.sub(r"\{\?[^}]*\}$", "", uri).split("?", 1)[0]  # `{?offset}` in a template, `?offset=…` in a URI
    return next((tools for pattern, tools in _READERS if pattern.fullmatch(bare)), ())


def uris_for(event: dict[str, Any]) -> set[str]:
    """The resources an event changes."""
    uris = {STATUS, EVENTS}
    if event.get("project_id"):
        pid = event["project_id"]
        uris |= {PROJECTS, f"agentqueue://projects/{pid}", f"agentqueue://projects/{pid}/tasks"}
    if event.get("task_id"):
        uris.add(f"agentqueue://tasks/{event['task_id']}")
    if event["event_type"] == "memory.written" and event.get("project_id"):
        uris.add(f"agentqueue://projects/{event['project_id']}/memory")
    if event["event_type"].startswith("note.") and event.get("project_id"):
        uris.add(f"agentqueue://projects/{event['project_id']}/notes/{(event.get('payload') or {}).get('name')}")
    payload = event.get("payload") or {}
    if "AWAITING_APPROVAL" in (payload.get("from"), payload.get("to")) or event["event_type"] == "task.deleted" \
            or event["event_type"].startswith("request."):
        uris.add(APPROVALS)
    return uris


# Whose `subscriptions/listen` stream is opening: set by the middleware around the listen handler, so the
# bus knows which connection each stream belongs to.
LISTENER: ContextVar[Any] = ContextVar("agentqueue_listener", default=None)


class ConnectionBus:
    """The SDK's in-memory fan-out to listen streams, plus `publish_to`: an event for one connection's streams
    (its tool list changed, and nobody else's did)."""

    def __init__(self) -> None:
        self._listeners: dict[object, tuple[Callable[[ServerEvent], None], Any]] = {}

    async def publish(self, event: ServerEvent) -> None:
        await self._deliver(event, lambda owner: True)

    async def publish_to(self, owner: Any, event: ServerEvent) -> None:
        await self._deliver(event, lambda listener_owner: listener_owner is owner)

    async def _deliver(self, event: ServerEvent, wanted: Callable[[Any], bool]) -> None:
        for listener, owner in list(self._listeners.values()):
            if wanted(owner):
                try:
                    listener(event)
                except Exception:  # one broken stream must not starve the others
                    log.exception("subscription listener raised; continuing")
        await anyio.lowlevel.checkpoint()  # let the streams drain between bursts

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        token = object()
        self._listeners[token] = (listener, LISTENER.get())
        return lambda: self._listeners.pop(token, None) and None


class Notifier:
    def __init__(self, bus: ConnectionBus) -> None:
        self.bus = bus
        self._dirty: set[str] = set()
        self._lock = threading.Lock()
        self._legacy: dict[str, weakref.WeakSet[Any]] = {}

    def on_commit(self, events: list[dict[str, Any]]) -> None:
        """Store listener: runs right after a commit, on whatever thread made it."""
        touched = set().union(*(uris_for(e) for e in events)) if events else set()
        if touched:
            with self._lock:
                self._dirty |= touched

    def mark(self, *uris: str) -> None:
        """Mark resources changed outside the store (a task's log); published on the next flush."""
        with self._lock:
            self._dirty |= set(uris)

    def subscribe(self, uri: str, connection: Any) -> None:
        self._legacy.setdefault(uri, weakref.WeakSet()).add(connection)

    def unsubscribe(self, uri: str, connection: Any) -> None:
        self._legacy.get(uri, weakref.WeakSet()).discard(connection)

    async def flush(self) -> None:
        with self._lock:
            dirty, self._dirty = self._dirty, set()
        for uri in sorted(dirty):
            await self.bus.publish(ResourceUpdated(uri=uri))
            for connection in list(self._legacy.get(uri, ())):
                try:
                    await connection.send_resource_updated(uri)
                except Exception:  # a client that went away must not break the others
                    log.debug("dropping legacy subscriber of %s", uri, exc_info=True)
                    self.unsubscribe(uri, connection)


def _json(value: Any, rest: str = "") -> str:
    """JSON text of value, cut to result_size.RESOURCE_CHARS (an object then says so in `truncated`/`note`)."""
    text = json.dumps(value, default=lambda m: m.model_dump(mode="json"), indent=1)
    if len(text) + 5 * (len(text) - len(text.encode("ascii", "ignore"))) <= result_size.RESOURCE_CHARS:
        return text
    data = json.loads(text)
    cuts = result_size.shrink(data, result_size.RESOURCE_CHARS - 1000,
                              lambda d: len(json.dumps(d, indent=1, ensure_ascii=True)))
    if isinstance(data, dict):
        data["truncated"] = True
        data["note"] = f"Cut to stay under {result_size.RESOURCE_CHARS:,} characters: " \
                       f"{'; '.join(c.phrase for c in cuts)[:300]}. {rest}".strip()
    return json.dumps(data, indent=1)


def log_page(path: Path, task_id: str, offset: int | None) -> str:
    """One page of a task log (bytes from offset, or its end), headed by where it is and how to read on."""
    uri = f"agentqueue://tasks/{task_id}/log"
    budget = result_size.RESOURCE_CHARS - 400  # the header line
    with path.open("rb") as handle:
        size = handle.seek(0, 2)
        start = max(0, size - budget) if offset is None else min(max(offset, 0), size)
        handle.seek(start)
        raw = handle.read(budget)
    decoded = raw.decode("utf-8", errors="replace")
    if offset is None:  # the end: keep the last of it (escaping costs the same read backwards)
        text = result_size.cut(decoded[::-1], budget)[::-1]
        start, end = (start, start + len(raw)) if text == decoded else (size - len(text.encode()), size)
    else:
        text = result_size.cut(decoded, budget)
        end = start + (len(raw) if text == decoded else len(text.encode("utf-8", errors="replace")))
    if start == 0 and end == size:
        return text  # the whole log fits
    before = f"earlier: {uri}?offset={max(0, start - result_size.RESOURCE_CHARS)}" if start else "this is the start"
    after = f"next: {uri}?offset={end}" if end < size else "this is the end (so far)"
    return f"[log bytes {start:,}–{end:,} of {size:,}; {before}; {after}]\n{text}"


def register(mcp: MCPServer, services: Services, notifier: Notifier) -> None:
    """The resources of CONTRACT §5 that exist so far, plus the legacy subscribe handlers."""
    _project_resources(mcp, services)
    _task_resources(mcp, services)
    _feed_resources(mcp, services)
    _subscribe_handlers(mcp, notifier)


def found(fn: Any, *args: Any) -> Any:
    """fn(*args), with a missing id as the protocol's resource-not-found error."""
    try:
        return fn(*args)
    except NotFoundError as error:
        raise ResourceNotFoundError(str(error)) from None


def _project_resources(mcp: MCPServer, services: Services) -> None:
    @mcp.resource(STATUS, mime_type="application/json", description="Queue status: tasks, agents, warnings")
    def status() -> str:
        return _json(services.system.status())

    @mcp.resource(PROJECTS, mime_type="application/json", description="All projects")
    def projects() -> str:
        return _json(services.projects.list(limit=500)[0])

    @mcp.resource("agentqueue://projects/{project_id}", mime_type="application/json",
                  description="One project with its channels")
    def project(project_id: str) -> str:
        data = found(services.projects.get, project_id).model_dump(mode="json")
        data["channels"] = [c.model_dump() for c in services.channels.for_project(project_id)]
        return _json(data)

    @mcp.resource("agentqueue://projects/{project_id}/tasks", mime_type="application/json",
                  description="A project's tasks, completed included")
    def project_tasks(project_id: str) -> str:
        tasks, total, _ = found(services.tasks.list, project_id, None, True, 500, 0)
        return _json({"project_id": project_id, "tasks": tasks, "total": total},
                     "list_tasks with offset pages them all.")


def _task_resources(mcp: MCPServer, services: Services) -> None:
    @mcp.resource("agentqueue://tasks/{task_id}", mime_type="application/json", description="One task")
    def task(task_id: str) -> str:
        return _json(found(services.tasks.get, task_id))

    @mcp.resource("agentqueue://projects/{project_id}/notes/{name}", mime_type="text/markdown",
                  description="A project note (markdown)")
    def note(project_id: str, name: str) -> str:
        content = found(services.notes.read, project_id, name)["content"]
        part = result_size.page(content, 0, result_size.RESOURCE_CHARS - 300)
        if part.next_offset is None:
            return content
        return part.text + (f"\n\n[note cut: {part.span()} shown; read_note title={name!r} "
                            f"offset={part.next_offset} gives the next part]")

    @mcp.resource("agentqueue://projects/{project_id}/memory", mime_type="text/markdown",
                  description="A project's MEMORY.md, which every agent's prompt includes")
    def memory(project_id: str) -> str:
        return str(found(services.memory.as_note, project_id)["content"])

    @mcp.resource("agentqueue://tasks/{task_id}/log{?offset}", mime_type="text/plain",
                  description="A task's agent output as it streams: the end, or from ?offset=<byte> on, "
                              "one page at a time")
    def task_log(task_id: str, offset: int | None = None) -> str:
        found(services.tasks.get, task_id)
        path = paths.task_log(services.home, task_id)
        if not path.exists():
            elsewhere = services.team.ran_elsewhere(task_id)
            return (f"(this task ran on another daemon of the team, {elsewhere}: its log is on that machine)"
                    if elsewhere else "(no agent has run this task yet)")
        return log_page(path, task_id, offset)


def _feed_resources(mcp: MCPServer, services: Services) -> None:
    @mcp.resource(EVENTS, mime_type="application/json", description="The 50 most recent events")
    def events() -> str:
        return _json(services.events.recent(50))

    @mcp.resource(APPROVALS, mime_type="application/json",
                  description="What waits for a person: tasks awaiting approval, agents' permission requests")
    def approvals() -> str:
        tasks, total, _ = services.tasks.list(None, "AWAITING_APPROVAL", True, 500, 0)
        requests = services.requests.list("pending", limit=500)
        return _json({"tasks": tasks, "total": total, "requests": requests},
                     "list_tasks status=AWAITING_APPROVAL and list_requests page them.")

    @mcp.resource(AUDIT, mime_type="application/json",
                  description="The 100 latest audit rows: tool calls and agent permission decisions")
    def audit() -> str:
        return _json({"entries": services.audit.query(limit=100)}, "get_audit_log filters and pages them.")


def _subscribe_handlers(mcp: MCPServer, notifier: Notifier) -> None:
    # 2025-era clients subscribe per URI; MCPServer leaves these methods unserved (reference §2).
    lowlevel = mcp._lowlevel_server

    async def on_subscribe(ctx: ServerRequestContext, params: types.SubscribeRequestParams) -> types.EmptyResult:
        notifier.subscribe(str(params.uri), ctx.session._connection)
        return types.EmptyResult()

    async def on_unsubscribe(ctx: ServerRequestContext, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        notifier.unsubscribe(str(params.uri), ctx.session._connection)
        return types.EmptyResult()

    lowlevel.add_request_handler("resources/subscribe", types.SubscribeRequestParams, on_subscribe)
    lowlevel.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, on_unsubscribe)
