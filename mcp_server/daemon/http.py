"""The daemon's HTTP side: one Starlette app on one TCP socket, with one bearer-token check.

    GET  /health           open: {"status", "version", "pid"} (any method, for any probe)
    GET  /metrics          Prometheus text; the bearer token unless `[server] metrics_public`
    *    /mcp, /mcp/…      the SDK's Streamable HTTP app; the bearer token
    *    everything else   the board, behind its own Host/Origin, session-or-token and CSRF checks
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import socket
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import uvicorn
from mcp.server import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .. import __version__
from ..metrics import CONTENT_TYPE_LATEST, Metrics
from ..settings import ConfigError

log = logging.getLogger("agentqueue.daemon")

LOOPBACK = ("127.0.0.1", "localhost", "::1")
EVERY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
GRACE_S = 3  # open requests (a board page's event stream, an MCP stream) get this long when the daemon stops


class ExposedWithoutHostsError(ConfigError):
    """A bind beyond loopback with no Host allow-list: the DNS-rebinding check would have nothing to check."""


def transport_security(host: str, allowed_hosts: list[str]) -> TransportSecuritySettings | None:
    """Host/Origin checks for the bind: the SDK's loopback defaults, widened only by an explicit allow-list."""
    if host in LOOPBACK and not allowed_hosts:
        return None  # the SDK's own loopback protection
    if host not in LOOPBACK and not allowed_hosts:
        raise ExposedWithoutHostsError(
            f"--host {host} listens beyond this machine, and no Host names are allowed: every Host and Origin "
            "check would be off. Name the hosts clients use: `agentqueue serve --host "
            f"{host} --allow-host box.lan` (repeatable), or config.toml [server] allowed_hosts = [\"box.lan\"].")
    names = [*allowed_hosts, "127.0.0.1", "localhost", "[::1]"]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                     allowed_hosts=[f"{name}:*" for name in names],
                                     allowed_origins=[f"{scheme}://{name}:*" for name in names
                                                      for scheme in ("http", "https")])


class BearerToken:
    """The one check of `Authorization: Bearer <token>`, for /mcp, /metrics and the board's scripts."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    def ok(self, connection: HTTPConnection) -> bool:
        supplied = next((value for name, value in connection.scope.get("headers") or [] if name == b"authorization"),
                        b"")
        return hmac.compare_digest(_normal_bearer(supplied), self._expected)

    @staticmethod
    def refusal() -> Response:
        body = json.dumps({"error": "unauthorized", "message": "Send `Authorization: Bearer <token>`; the token is in "
                                                               "AGENTQUEUE_TOKEN or $AGENTQUEUE_HOME/token."}).encode()
        return Response(body, 401, {"www-authenticate": "Bearer"}, media_type="application/json")


def _normal_bearer(header: bytes) -> bytes:
    """`bearer x`, `BEARER  x` -> `Bearer x`: the scheme is case-insensitive (RFC 7235); the token is not."""
    scheme, _, token = header.strip().partition(b" ")
    return b"Bearer " + token.strip() if scheme.lower() == b"bearer" else header


class _RequireBearer:
    """An ASGI app behind the bearer token (a class, so Starlette's Route passes every method through)."""

    def __init__(self, app: ASGIApp, bearer: BearerToken) -> None:
        self.app = app
        self.bearer = bearer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self.bearer.ok(HTTPConnection(scope)):
            await self.bearer.refusal()(scope, receive, send)
            return
        await self.app(scope, receive, send)


async def health(_: Request) -> Response:
    return Response(json.dumps({"status": "ok", "version": __version__, "pid": os.getpid()}).encode(),
                    media_type="application/json")


def metrics_endpoint(metrics: Metrics, bearer: BearerToken, public: bool) -> Callable[[Request], Any]:
    async def scrape(request: Request) -> Response:
        if not public and not bearer.ok(request):
            return bearer.refusal()
        if request.method not in ("GET", "HEAD"):
            return Response(b'{"error": "method not allowed", "message": "GET /metrics"}', 405,
                            {"allow": "GET, HEAD"}, media_type="application/json")
        # Off the event loop: the scrape reads the store, whose lock engine threads also take.
        body = await anyio.to_thread.run_sync(metrics.render)
        return Response(b"" if request.method == "HEAD" else body, media_type=CONTENT_TYPE_LATEST)

    return scrape


def http_app(mcp: MCPServer, bearer: BearerToken, host: str, metrics: Metrics, metrics_public: bool,
             allowed_hosts: list[str], board: ASGIApp) -> Starlette:
    """Health, metrics, MCP and the board in one app; the MCP app's lifespan (its session manager) is the app's."""
    inner = mcp.streamable_http_app(host=host, transport_security=transport_security(host, allowed_hosts))
    mcp_app = _RequireBearer(inner, bearer)
    return Starlette(routes=[Route("/health", health, methods=EVERY_METHOD),
                             Route("/metrics", metrics_endpoint(metrics, bearer, metrics_public), methods=EVERY_METHOD),
                             Route("/mcp", mcp_app), Route("/mcp/{rest:path}", mcp_app),
                             Mount("/", app=board)],
                     lifespan=lambda _: inner.router.lifespan_context(inner))


class _QuietUvicorn(uvicorn.Server):
    """Uvicorn that leaves signals to the daemon, which owns shutdown."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _bind_tcp(host: str, port: int) -> socket.socket | None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP: asyncio sets TCP_NODELAY only on accepted sockets that say TCP (proto 0 does not), and
    # without it a response's body waits ~40 ms for the ACK of its headers on a kept-alive connection (Nagle).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited by accepted sockets on Linux and BSDs
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        log.warning("HTTP disabled: cannot listen on %s:%s (%s). Plugins still connect over the socket; "
                    "pass --port to choose another port.", host, port, error.strerror)
        return None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


class HttpServer:
    """Uvicorn serving `app` on an already bound socket until `stop()`."""

    def __init__(self, app: ASGIApp, sock: socket.socket, host: str, end_streams: Callable[[], None]) -> None:
        self.sock = sock
        self.end_streams = end_streams  # ends long-lived responses (the board's event streams) at once
        self.url = f"http://{host}:{sock.getsockname()[1]}/mcp"
        self._server = _QuietUvicorn(uvicorn.Config(app, log_config=None, lifespan="on",
                                                    timeout_graceful_shutdown=GRACE_S))
        self._done = anyio.Event()

    async def serve(self) -> None:
        try:
            await self._server.serve([self.sock])
        finally:
            self._done.set()

    async def stop(self, wait: float = 5) -> None:
        self._server.should_exit = True
        with anyio.move_on_after(wait):
            await self._done.wait()
