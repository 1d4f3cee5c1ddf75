"""The board's front door: Host and Origin first, then a session (or the bearer token), then, on a session's
action, Sec-Fetch-Site and the CSRF token (auth.py says where the token lives and why).

Every answer, refusals included, forbids framing (clickjacking: a foreign page cannot lay the board
under its own buttons). The credential that let a request in is noted in the scope, so an action
knows whether a person (the session) or a script (the bearer token) is acting.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import Request

from .auth import BoardAuth

OPEN_PATHS = ("/login", "/board/login-code")  # they check their own credential (a code, the bearer token)
# The stylesheet holds no data: the login and refusal pages need it before there is a session.
PUBLIC_STATIC = ("/static/board.css",)
MAX_FORM_BYTES = 1 << 20
SAFE_METHODS = ("GET", "HEAD")
CREDENTIAL = "agentqueue.credential"  # scope key: "session" or "bearer"
SECURITY_HEADERS = [
    (b"content-security-policy", b"frame-ancestors 'none'"),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
]


def guarded(inner: Any, auth: BoardAuth, bearer_ok: Callable[[Request], bool]) -> Any:
    """`inner` (the board's routes) behind the checks; refusals say what was wrong and what to do."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await inner(scope, receive, send)
            return
        send = _with_security_headers(send)
        request = Request(scope)
        host = request.headers.get("host")
        if not auth.host_ok(host):
            await _refuse(send, 421, f"Host {host!r} is not this board's address: open it at 127.0.0.1 (or a host "
                                     "named in [server] allowed_hosts).")
            return
        if not auth.origin_ok(request.headers.get("origin"), host):
            await _refuse(send, 403, "A page from another site may not use the board (foreign Origin).")
            return
        cookie = request.cookies.get(auth.cookie_name)
        if bearer_ok(request):
            scope[CREDENTIAL] = "bearer"
        elif auth.session_ok(cookie):
            scope[CREDENTIAL] = "session"
        elif scope["path"] in PUBLIC_STATIC and scope["method"] in SAFE_METHODS:
            scope[CREDENTIAL] = "none"
        elif scope["path"] not in OPEN_PATHS:
            await _refuse(send, 401, "Not logged in, or the session ended. Run `agentqueue board` in a terminal: it "
                                     "opens the board with a one-time login link.", login=True)
            return
        if scope["method"] in SAFE_METHODS or scope["path"] in OPEN_PATHS:
            await inner(scope, receive, send)
            return
        body = await _read_body(receive)  # bounded for every credential
        if body is None:
            await _refuse(send, 413, f"The form is larger than {MAX_FORM_BYTES} bytes.")
            return
        if scope[CREDENTIAL] == "bearer":  # a script, not a page: no CSRF token to check
            await inner(scope, _replay(body), send)
            return
        if not auth.fetch_site_ok(request.headers.get("sec-fetch-site")):
            await _refuse(send, 403, "A page from another origin (another port of this host counts) may not act "
                                     "on the board (Sec-Fetch-Site).")
            return
        supplied = request.headers.get("x-csrf-token") or _form_field(body, "csrf")
        if not auth.csrf_ok(cookie or "", supplied):
            await _refuse(send, 403, "Missing or wrong CSRF token: this tab has none of the current session. Run "
                                     "`agentqueue board` to log in again.")
            return
        await inner(scope, _replay(body), send)

    return app


def _with_security_headers(send: Any) -> Any:
    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            names = {name.lower() for name, _ in message.get("headers") or []}
            extra = [(name, value) for name, value in SECURITY_HEADERS if name not in names]
            message = {**message, "headers": [*(message.get("headers") or []), *extra]}
        await send(message)

    return sending


async def _read_body(receive: Any) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_FORM_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body"):
            return b"".join(chunks)


def _replay(body: bytes) -> Any:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


def _form_field(body: bytes, name: str) -> str | None:
    try:
        values = parse_qs(body.decode("utf-8"), max_num_fields=1000).get(name)
    except (UnicodeDecodeError, ValueError):
        return None
    return values[0] if values else None


async def _refuse(send: Any, status: int, message: str, login: bool = False) -> None:
    """A refusal page with the board's styles and a way on: the login form (401), else the board's start."""
    way = ('<a href="/login">Paste a login code</a> that <code>agentqueue board</code> printed' if login
           else '<a href="/">Back to the projects</a>')
    body = (f"<!doctype html><meta charset=utf-8><title>AgentQueue board</title>"
            f'<link rel="stylesheet" href="/static/board.css"><main>'
            f'<p class="flash error" role="alert">{html.escape(message)}</p><p class="way">{way}</p></main>').encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/html; charset=utf-8"), (b"cache-control", b"no-store")]})
    await send({"type": "http.response.body", "body": body})
