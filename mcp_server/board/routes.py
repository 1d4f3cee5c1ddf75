"""The board's HTTP routes (Starlette, in the daemon's own HTTP server), behind BoardAuth.

Pages are rendered on the server (Jinja2); htmx posts the actions and the live feed (Server-Sent
Events) tells open pages what changed. Every action goes through the same services as the MCP tools,
with their validation and errors, after the same policy verdict (permit.py), and is written to the
audit log under the credential that made it (the board's session or the bearer token).
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..services import Services, task_states
from ..services.errors import NotFoundError, ServiceError
from ..version import version as code_version
from . import data
from .auth import CSRF_STORAGE_KEY, SESSION_TTL_S, BoardAuth
from .gate import CREDENTIAL
from .live import Broadcaster
from .permit import actor, permit

log = logging.getLogger("agentqueue.board")
HERE = Path(__file__).resolve().parent
KEEPALIVE_S = 15.0
ACTIONS = ("approve", "restart", "stop", "skip", "changes")
QUIET = object()  # nothing happened for KEEPALIVE_S
# Whole numbers in forms and queries: ASCII digits only (int() also takes "٣" and "1_0"), at most 19 of them;
# the services check the range and say it in the tool's words.
WHOLE = re.compile(r"[-+]?[0-9]{1,19}")


def _environment() -> Environment:
    # auto_reload off: the templates ship with the package, so a page need not stat each file it renders.
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]),
                      auto_reload=False)
    env.globals["columns"] = [name for name, _ in data.COLUMNS]
    env.globals["column_statuses"] = data.COLUMNS  # the overview counts tasks by the kanban's columns
    env.globals["states"] = task_states  # the status groups: which actions a task's panel offers
    env.globals["version"] = code_version()  # the footer: the code this daemon runs (it changes only on a restart)
    env.filters["tokens"] = lambda n: f"{int(n or 0):,}"
    env.filters["usd"] = lambda x: f"${float(x or 0):.2f}"
    return env


class Board:
    """The board's pages and actions for one daemon."""

    def __init__(self, services: Services, auth: BoardAuth, live: Broadcaster,
                 bearer_ok: Callable[[Request], bool], options: dict[str, Any] | None = None) -> None:
        self.svc = services
        self.auth = auth
        self.live = live
        self.bearer_ok = bearer_ok
        self.options = options or {}  # the daemon's --read-only / --toolsets
        self.templates = _environment()
        self.closing = False

    # -- plumbing -----------------------------------------------------------------------------
    def render(self, request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        # No page carries the CSRF token: anyone holding the cookie can fetch a page (auth.py says why).
        context.setdefault("feed", "")
        html = self.templates.get_template(name).render(request=request, **context)
        return HTMLResponse(html, status_code=status)

    async def read(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Store reads off the event loop: the store's lock is also taken by engine threads."""
        return await anyio.to_thread.run_sync(fn, *args)

    async def act(self, request: Request, action: str, fn: Callable[..., Any], *args: Any,
                  project_id: str | None = None, task_id: str | None = None,
                  arguments: dict[str, Any] | None = None, done: str = "Done.", refused: str | None = None) -> Response:
        """Run one action (its tool's `arguments`) if the daemon and the policy permit it, through the
        services; audit it (also when `refused`: the form was bad, nothing ran); answer htmx (a flash)
        or a plain form (303)."""
        started = time.monotonic()
        credential = request.scope.get(CREDENTIAL)
        arguments = arguments or {}
        status = 400
        try:
            if refused is not None:
                raise ServiceError(refused)
            verdict = await anyio.to_thread.run_sync(permit, self.svc, action, arguments, credential, self.options)
        except ServiceError as error:  # a bad form, or an id the policy needs names nothing: the tool's message
            decision, decided_by, message, outcome = "none", "not reached", str(error), "refused"
        else:
            decision, decided_by = verdict.decision, verdict.decided_by
            if not verdict.allowed:
                message, outcome, status = verdict.message, "refused", 403
            else:
                try:
                    await anyio.to_thread.run_sync(fn, *args)
                except ServiceError as error:
                    message, outcome = str(error), "refused"
                else:
                    message, outcome = done, "ok"
        await anyio.to_thread.run_sync(lambda: self.svc.audit.record(
            actor=actor(credential), action=f"board:{action}", decision=decision, decided_by=decided_by,
            outcome=outcome, message=None if outcome == "ok" else message, project_id=project_id,
            task_id=task_id, arguments=arguments, duration_ms=int((time.monotonic() - started) * 1000)))
        if request.headers.get("hx-request"):
            return self._flash(request, outcome == "ok", message)
        if outcome != "ok":
            return self.render(request, "error.html", status=status, message=message)
        return RedirectResponse(_same_origin_path(request), status_code=303)

    def _flash(self, request: Request, ok: bool, message: str) -> HTMLResponse:
        response = self.render(request, "_flash.html", ok=ok, message=message)
        response.headers["HX-Retarget"] = "#flash"
        response.headers["HX-Reswap"] = "innerHTML"
        return response

    # -- pages --------------------------------------------------------------------------------
    async def overview(self, request: Request) -> Response:
        view = await self.read(data.overview, self.svc)
        return self.render(request, "overview.html", feed="/events", **view)

    async def kanban(self, request: Request) -> Response:
        project_id = request.path_params["project_id"]
        query, agent = request.query_params.get("q", ""), request.query_params.get("agent", "")
        column = request.query_params.get("column") or None
        offset = _whole(request.query_params.get("offset") or "0")
        if offset is None or offset < 0:
            given = _shown(request.query_params.get("offset"))
            return _plain(400, f"offset must be a card number such as 200 (got {given}).")
        view = await self.read(data.kanban, self.svc, project_id, query, agent, column, offset)
        return self.render(request, "kanban.html", feed=f"/events?project={project_id}", **view)

    async def card(self, request: Request) -> Response:
        task = await self.read(data.card, self.svc, request.path_params["task_id"])
        totals = await self.read(data.column_totals, self.svc, task.project_id)
        response = self.render(request, "_card.html", task=task, column=data.COLUMN_OF.get(task.status, "Stuck"))
        # A page shows a long column's first cards only: it sets each column's count from these.
        response.headers["X-Column-Totals"] = json.dumps(totals)
        return response

    async def agents(self, request: Request) -> Response:
        rows = await self.read(data.agents, self.svc)
        return self.render(request, "agents.html", feed="/events", rows=rows)

    async def task(self, request: Request) -> Response:
        view = await self.read(data.task_page, self.svc, request.path_params["task_id"])
        task_id = view["task"].id
        return self.render(request, "task.html", feed=f"/events?task={task_id}&offset={view['log_offset']}", **view)

    async def panel(self, request: Request) -> Response:
        view = await self.read(data.task_page, self.svc, request.path_params["task_id"])
        return self.render(request, "_panel.html", **view)

    async def usage(self, request: Request) -> Response:
        view = await self.read(data.usage_by_day, self.svc)
        return self.render(request, "usage.html", feed="/events", usage=view)

    # -- actions ------------------------------------------------------------------------------
    async def create_task(self, request: Request) -> Response:
        project_id = request.path_params["project_id"]
        form = await request.form()
        title, description = str(form.get("title") or ""), str(form.get("description") or "")
        priority = _whole(str(form.get("priority") or "100"))
        refused = None if priority is not None else (
            f"priority must be a whole number such as 100 (got {_shown(form.get('priority'))}). Nothing was changed.")
        depends_on = [str(d) for d in form.getlist("depends_on") if d]
        approval = form.get("requires_approval") in ("on", "true", "1")
        repo_id = str(form.get("repo_id") or "") or None
        arguments = {"project_id": project_id, "title": title, "description": description, "priority": priority,
                     "repo_id": repo_id, "requires_approval": approval, "depends_on": depends_on}
        return await self.act(request, "create_task", lambda: self.svc.tasks.create(
            project_id, title, description, priority, repo_id, approval, depends_on, 3, None),
            project_id=project_id, arguments=arguments, done=f"Task “{title}” queued.", refused=refused)

    async def task_action(self, request: Request) -> Response:
        task_id, action = request.path_params["task_id"], request.path_params["action"]
        if action not in ACTIONS:
            return await self.act(request, "unknown", lambda: None, task_id=task_id, arguments={"action": action},
                                  refused=f"Unknown action {_shown(action)}: one of {', '.join(ACTIONS)}.")
        tasks = self.svc.tasks
        refused = None
        if action == "changes":
            form = await request.form()
            comment = str(form.get("comment") or "")
            file, text = str(form.get("file") or "") or None, str(form.get("line") or "").strip()
            line = _whole(text) if text else None
            if text and line is None:
                refused = f"line must be a line number such as 12 (got {_shown(text)}). Nothing was changed."
            call = lambda: self.svc.feedback.request_changes(  # noqa: E731
                task_id, comment, file, line, author="board")
            arguments = {"task_id": task_id, "comment": comment, "file": file, "line": line}
            done = "Changes requested: the task is queued again with your comment."
        else:
            call = {"approve": lambda: tasks.approve(task_id), "restart": lambda: tasks.restart(task_id),
                    "stop": lambda: tasks.stop(task_id), "skip": lambda: tasks.skip(task_id)}[action]
            arguments = {"task_id": task_id}
            done = {"approve": "Approved.", "restart": "Queued again.", "stop": "Stopped.", "skip": "Skipped."}[action]
        project_id = None
        try:
            project_id = (await self.read(tasks.get, task_id)).project_id
        except NotFoundError as error:
            refused = refused or str(error)
        return await self.act(request, action, call, project_id=project_id, task_id=task_id,
                              arguments=arguments, done=done, refused=refused)

    async def answer(self, request: Request) -> Response:
        request_id = request.path_params["request_id"]
        form = await request.form()
        decision = str(form.get("decision") or "")
        remember = form.get("remember") in ("on", "true", "1")
        message = str(form.get("message") or "") or None
        by = "person (board)" if request.scope.get(CREDENTIAL) == "session" else "http:bearer"
        return await self.act(request, "answer_request", lambda: self.svc.requests.answer(
            request_id, decision, remember, message, by=by),
            arguments={"request_id": request_id, "decision": decision, "remember": remember, "message": message},
            done=f"Answered: {decision}.")

    async def project_state(self, request: Request) -> Response:
        project_id, state = request.path_params["project_id"], request.path_params["state"]
        if state not in ("pause", "resume"):
            return await self.act(request, "unknown", lambda: None, project_id=project_id, arguments={"action": state},
                                  refused=f"Unknown action {_shown(state)}: pause or resume.")
        return await self.act(request, f"{state}_project", lambda: self.svc.projects.set_status(
            project_id, "PAUSED" if state == "pause" else "ACTIVE"), project_id=project_id,
            arguments={"project_id": project_id}, done=f"Project {'paused' if state == 'pause' else 'resumed'}.")

    async def orchestrator(self, request: Request) -> Response:
        state = request.path_params["state"]
        if state not in ("pause", "resume"):
            return await self.act(request, "unknown", lambda: None, arguments={"action": state},
                                  refused=f"Unknown action {_shown(state)}: pause or resume.")

        def change() -> None:
            self.svc.system.set_orchestrator("paused" if state == "pause" else "running")
            self.live.publish({"kind": "event", "event_type": "orchestrator." + state, "project_id": None,
                               "task_id": None, "status": None})
        return await self.act(request, f"orchestrator_{state}", change, arguments={"action": state},
                              done=f"Orchestrator {'paused' if state == 'pause' else 'running'}.")

    # -- access -------------------------------------------------------------------------------
    async def login(self, request: Request) -> Response:
        code = request.query_params.get("code", "").strip()
        if not code:
            return self.render(request, "login.html", status=401,
                               message="Run `agentqueue board` in a terminal: it opens the board logged in, or "
                                       "prints a login code to paste here.")
        cookie = self.auth.redeem(code)
        if cookie is None:
            return self.render(request, "login.html", status=401,
                               message="This login code is used up or expired. Run `agentqueue board` for a new one.")
        # A page that moves on by itself, not a redirect: `agentqueue board` opens the login from a local
        # file, and a SameSite=Strict cookie is not sent along a redirect chain that began on another site.
        # It is the only answer that holds the CSRF token, kept in this origin's localStorage (auth.py says why).
        keep = (f"localStorage.setItem({json.dumps(CSRF_STORAGE_KEY)}, {json.dumps(self.auth.csrf_token(cookie))});"
                "location.replace('/');")
        response = HTMLResponse(f'<!doctype html><meta charset=utf-8><title>AgentQueue board</title><script>{keep}'
                                '</script><meta http-equiv="refresh" content="0; url=/"><p>Logged in. '
                                '<a href="/">Open the board</a>.</p>\n')
        response.set_cookie(self.auth.cookie_name, cookie, max_age=int(SESSION_TTL_S), httponly=True,
                            samesite="strict", path="/")
        return response

    async def login_code(self, request: Request) -> Response:
        """For `agentqueue board`: the bearer token buys a one-time code (never a session directly)."""
        if not self.bearer_ok(request):
            return JSONResponse({"error": "unauthorized", "message": "Send the daemon's bearer token."}, 401)
        return JSONResponse({"code": self.auth.issue_code()})

    # -- the live feed ------------------------------------------------------------------------
    async def _feed_target(self, request: Request) -> tuple[str | None, str | None, int] | Response:
        """The live feed's project, task and byte offset, or the 400/404 that says what was wrong."""
        project_id = request.query_params.get("project") or None
        task_id = request.query_params.get("task") or None
        offset = _whole(request.query_params.get("offset") or "0")
        if offset is None or offset < 0:
            given = _shown(request.query_params.get("offset"))
            return _plain(400, f"offset must be a byte offset such as 0 (got {given}).")
        if task_id is not None:
            if not data.TASK_ID.fullmatch(task_id):  # never a path: the log file is named after the id
                return _plain(400, f"task must be a task id such as swift-falcon (got {_shown(task_id)}).")
            try:
                await self.read(self.svc.tasks.get, task_id)
            except NotFoundError as error:
                return _plain(404, str(error))
        if project_id is not None:
            try:
                await self.read(self.svc.projects.get, project_id)
            except NotFoundError as error:
                return _plain(404, str(error))
        return project_id, task_id, offset

    async def events(self, request: Request) -> Response:
        """`?task=<task id>&offset=<bytes>` (a task page), `?project=<project id>` (a kanban) or nothing."""
        target = await self._feed_target(request)
        if isinstance(target, Response):
            return target
        project_id, task_id, offset = target
        feed = self.live.open(project_id, task_id)

        async def stream() -> AsyncIterator[str]:
            nonlocal offset
            try:
                yield "retry: 1000\n\n"
                if task_id:  # lines written between the page's render and this connection
                    text, offset = await self.read(data.log_tail, self.svc, task_id, offset)
                    if text:
                        yield _sse("log", {"task_id": task_id, "text": text})
                while not self.closing:
                    item: Any = QUIET
                    with anyio.move_on_after(KEEPALIVE_S):  # no yield inside a cancel scope
                        item = await feed.queue.get()
                    if item is QUIET:
                        yield ": keep-alive\n\n"
                        continue
                    if item is None:
                        yield _sse("resync", {})
                        continue
                    if item.get("kind") == "bye":
                        return
                    if item["kind"] == "log":
                        text, offset = await self.read(data.log_tail, self.svc, item["task_id"], offset)
                        if text:
                            yield _sse("log", {"task_id": item["task_id"], "text": text})
                    else:
                        yield _sse("change", item)
            finally:
                self.live.close(feed)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    # -- errors: a page with the board's header and a way back ---------------------------------
    async def not_found(self, request: Request, error: Exception) -> Response:
        message = str(error) if isinstance(error, NotFoundError) else \
            f"Nothing on the board at {_shown(request.url.path)}."
        return self.render(request, "error.html", status=404, message=message)

    async def refused(self, request: Request, error: Exception) -> Response:
        return self.render(request, "error.html", status=400, message=str(error))

    def close(self) -> None:
        """The daemon stops: end every open stream (pages reconnect to the next daemon)."""
        self.closing = True
        self.live.publish({"kind": "bye"})


def _whole(text: str) -> int | None:
    """A whole number written in ASCII digits, or None (not one, or longer than any limit we take)."""
    text = text.strip()
    return int(text) if WHOLE.fullmatch(text) else None


def _shown(value: Any) -> str:
    """A bad value quoted back to the person, cut short (it may be a megabyte of anything)."""
    text = repr(str(value if value is not None else ""))
    return text if len(text) <= 60 else text[:57] + "…'"


def _same_origin_path(request: Request) -> str:
    """Where a plain form returns to: the Referer's path when it is this board's own page, else /."""
    referer = urlsplit(request.headers.get("referer") or "")
    if referer.netloc.lower() != (request.headers.get("host") or "").lower() or not referer.path.startswith("/") \
            or referer.path.startswith("//"):
        return "/"
    return referer.path + (f"?{referer.query}" if referer.query else "")


def _plain(status: int, message: str) -> Response:
    return Response(message + "\n", status_code=status, media_type="text/plain; charset=utf-8")


def _sse(event: str, payload: dict[str, Any]) -> str:
    body = json.dumps(payload, ensure_ascii=False)
    return f"event: {event}\n" + "".join(f"data: {line}\n" for line in body.split("\n")) + "\n"


def routes(board: Board) -> Starlette:
    return Starlette(routes=[
        Route("/", board.overview),
        Route("/login", board.login),
        Route("/board/login-code", board.login_code, methods=["POST"]),
        Route("/projects/{project_id}", board.kanban),
        Route("/projects/{project_id}/cards/{task_id}", board.card),
        Route("/projects/{project_id}/tasks", board.create_task, methods=["POST"]),
        Route("/projects/{project_id}/{state}", board.project_state, methods=["POST"]),
        Route("/agents", board.agents),
        Route("/usage", board.usage),
        Route("/tasks/{task_id}", board.task),
        Route("/tasks/{task_id}/panel", board.panel),
        Route("/tasks/{task_id}/{action}", board.task_action, methods=["POST"]),
        Route("/requests/{request_id}", board.answer, methods=["POST"]),
        Route("/orchestrator/{state}", board.orchestrator, methods=["POST"]),
        Route("/events", board.events),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ], exception_handlers={NotFoundError: board.not_found, 404: board.not_found, ServiceError: board.refused})
