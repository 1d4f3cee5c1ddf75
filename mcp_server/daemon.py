"""`agentqueue serve`: the one daemon of an AGENTQUEUE_HOME.

It holds the home's lock, serves every plugin connection on a Unix socket as its own MCP session
(exactly as the SDK serves stdio, so both protocol eras and notifications work), serves Streamable
HTTP on loopback behind a bearer token, and stops cleanly on SIGTERM or `agentqueue stop`.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import secrets
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import uvicorn
from anyio.abc import SocketStream
from mcp.server import MCPServer
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings

from . import __version__, logs, paths
from . import home_lock as home_lock_module
from .home_lock import AlreadyRunningError
from .app import CONNECTION_OPTIONS, build_server
from .board import board_app
from .board.live import Broadcaster
from .engine.orchestrator import Engine
from .metrics import CONTENT_TYPE_LATEST, Metrics
from .services import Services
from .settings import ConfigError
from .store.db import StoreOpenError, now_iso
from .peer import lineage, peer_pid
from .daemon_client import stop  # noqa: F401  (daemon.stop: it lives with the client, stdlib only)
from .toolsets import decode_preamble, socket_options

log = logging.getLogger("agentqueue.daemon")

DEFAULT_PORT = 8765


@contextlib.contextmanager
def home_lock(home: Path, grace: float = home_lock_module.GRACE_SECONDS) -> Iterator[None]:
    """The home's lock for the daemon's lifetime; the refusal names the pid that holds it."""
    info = read_daemon_info(home)
    with home_lock_module.hold(home, f" (pid {info['pid']})" if info else "", grace):
        yield


def lock_is_held(home: Path) -> bool:
    return home_lock_module.is_held(home)


def read_daemon_info(home: Path) -> dict[str, Any] | None:
    try:
        return json.loads(paths.daemon_info_path(home).read_text())
    except (OSError, ValueError):
        return None


def load_or_create_token(home: Path) -> str:
    """AGENTQUEUE_TOKEN, else `<home>/token` (created 0600 on first use)."""
    env = os.environ.get("AGENTQUEUE_TOKEN")
    if env:
        return env.strip()
    path = paths.token_path(home)
    if path.exists():
        return path.read_text().strip()
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token


# -- MCP over the Unix socket ------------------------------------------------------------------------
class _SocketLines:
    """The file-like pair `stdio_server` wants (async line iteration, write, flush) over a socket.

    Lines have no length limit: a tool result or an agent's output can be megabytes.
    """

    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self._buffer = bytearray()

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[: newline + 1])
                del self._buffer[: newline + 1]
                if line.strip():
                    yield line.decode("utf-8", errors="replace")
                continue
            try:
                chunk = await self.stream.receive(65536)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                if self._buffer.strip():
                    yield self._buffer.decode("utf-8", errors="replace")
                return
            self._buffer += chunk

    async def preamble(self) -> dict[str, Any] | None:
        """The plugin's options line (`{"agentqueue": {...}}`), consumed if the connection opens with one."""
        while b"\n" not in self._buffer:
            try:
                chunk = await self.stream.receive(65536)
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
                return None
            self._buffer += chunk
        newline = self._buffer.find(b"\n")
        options = decode_preamble(bytes(self._buffer[:newline]))
        if options is not None:
            del self._buffer[: newline + 1]
        return options

    async def write(self, text: str) -> None:
        await self.stream.send(text.encode("utf-8"))

    async def flush(self) -> None:
        return None


_DISCONNECTS = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, BrokenPipeError,
                ConnectionResetError)


def is_disconnect(error: BaseException) -> bool:
    """A client that hung up (possibly wrapped in task-group exception groups): normal, not an error."""
    if isinstance(error, BaseExceptionGroup):
        return all(is_disconnect(inner) for inner in error.exceptions)
    return isinstance(error, _DISCONNECTS)


# (actor, task_id) of the engine's run a process is, or None: Engine.run_of_pid.
RunOfPid = Callable[[int], "tuple[str, str | None] | None"]


def run_of_peer(stream: SocketStream, run_of_pid: RunOfPid | None) -> tuple[str, str | None] | None:
    """The engine's run the connecting process belongs to (it or one of its ancestors is the run's process).

    A process this daemon started outside a run (a verify command, a hook's shell step, run_command) is no
    person either: it is `process:<pid>`, and is offered no person's decision.
    """
    if run_of_pid is None:
        return None
    raw = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
    pid = peer_pid(raw) if raw is not None else None
    if pid is None:
        return None
    chain = lineage(pid)
    found = next((run for p in chain if (run := run_of_pid(p)) is not None), None)
    if found is None and os.getpid() in chain[1:]:
        return f"process:{pid}", None
    return found


async def serve_connection(mcp: MCPServer, stream: SocketStream, run_of_pid: RunOfPid | None = None) -> None:
    """One plugin connection = one MCP session, with its own lifespan (and so its own active project)."""
    pipe = _SocketLines(stream)
    lowlevel = mcp._lowlevel_server
    try:
        # A socket connection is limited by what its own plugin asks for (`agentqueue mcp --read-only`), and is
        # who the kernel says it is: a process of one of the engine's runs is that run's agent or hook, never a
        # person, whatever its preamble claims. The daemon's own flags limit HTTP clients.
        preamble = await pipe.preamble()
        run = await anyio.to_thread.run_sync(run_of_peer, stream, run_of_pid)  # reads /proc and the store
        CONNECTION_OPTIONS.set(socket_options(preamble, run))
        async with stream, stdio_server(stdin=pipe, stdout=pipe) as (read, write):  # type: ignore[arg-type]
            await lowlevel.run(read, write, lowlevel.create_initialization_options())
    except Exception as error:
        if is_disconnect(error):
            # Health checks (`claude mcp list`) hang up as soon as they have the tool list.
            log.debug("plugin connection closed by the client")
        else:
            log.exception("plugin connection failed")


# -- MCP over HTTP ---------------------------------------------------------------------------------
class _QuietUvicorn(uvicorn.Server):
    """Uvicorn that leaves signals to the daemon, which owns shutdown."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


LOOPBACK = ("127.0.0.1", "localhost", "::1")


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


def http_app(mcp: MCPServer, token: str, host: str, metrics: Metrics | None = None,
             metrics_public: bool = False, allowed_hosts: list[str] | None = None, board: Any = None) -> Any:
    """The SDK's Streamable HTTP app behind a bearer-token check, plus an open `GET /health`,
    `GET /metrics` (Prometheus text; behind the token unless `[server] metrics_public`) and the
    board (every other path, behind its own session check)."""
    inner = mcp.streamable_http_app(host=host, transport_security=transport_security(host, allowed_hosts or []))
    expected = f"Bearer {token}".encode()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            path = scope.get("path", "")
            if board is not None and path != "/mcp" and not path.startswith("/mcp/") \
                    and path not in ("/health", "/metrics"):
                await board(scope, receive, send)
                return
            if path == "/health":
                body = json.dumps({"status": "ok", "version": __version__, "pid": os.getpid()}).encode()
                await _respond(send, 200, body)
                return
            if path == "/metrics" and metrics is not None and (metrics_public or hmac.compare_digest(
                    _normal_bearer(dict(scope.get("headers") or []).get(b"authorization", b"")), expected)):
                if scope.get("method") not in ("GET", "HEAD"):
                    await _respond(send, 405, b'{"error": "method not allowed", "message": "GET /metrics"}',
                                   [(b"allow", b"GET, HEAD")])
                    return
                # Off the event loop: the scrape reads the store, whose lock engine threads also take.
                body = await anyio.to_thread.run_sync(metrics.render)
                await _respond(send, 200, b"" if scope["method"] == "HEAD" else body, content_type=CONTENT_TYPE_LATEST)
                return
            supplied = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(_normal_bearer(supplied), expected):
                body = json.dumps({"error": "unauthorized",
                                   "message": "Send `Authorization: Bearer <token>`; the token is in "
                                              "AGENTQUEUE_TOKEN or $AGENTQUEUE_HOME/token."}).encode()
                await _respond(send, 401, body, [(b"www-authenticate", b"Bearer")])
                return
        await inner(scope, receive, send)

    return app


def _normal_bearer(header: bytes) -> bytes:
    """`bearer x`, `BEARER  x` -> `Bearer x`: the scheme is case-insensitive (RFC 7235); the token is not."""
    scheme, _, token = header.strip().partition(b" ")
    return b"Bearer " + token.strip() if scheme.lower() == b"bearer" else header


async def _respond(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]] = (),  # type: ignore[assignment]
                   content_type: str = "application/json") -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type.encode()), *headers]})
    await send({"type": "http.response.body", "body": body})


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


PRUNE_EVERY_S = 3600.0


# -- the daemon ------------------------------------------------------------------------------------
class Daemon:
    def __init__(self, home: Path, host: str = "127.0.0.1", port: int = DEFAULT_PORT, http: bool = True,
                 options: dict[str, Any] | None = None, allow_hosts: list[str] | None = None) -> None:
        self.home = home
        self.options = options or {}  # --read-only / --toolsets: what HTTP clients are limited to
        self.allow_hosts = allow_hosts or []  # --allow-host: Host names accepted besides loopback
        self.host = host
        self.port = port
        self.http = http
        self.stopping = anyio.Event()
        self.restart_requested = False

    async def run(self) -> None:
        with home_lock(self.home):
            services = Services(self.home)
            try:
                await self._run(services)
            finally:
                paths.daemon_info_path(self.home).unlink(missing_ok=True)
                services.close()
                log.info("daemon stopped")

    async def _run(self, services: Services) -> None:
        message = services.agents.bootstrap_default()
        if message:
            log.info(message)
        mcp = build_server(services, self.options)
        notifier = mcp.notifier  # type: ignore[attr-defined]
        live = Broadcaster()  # the board's pages hear the same changes as subscribed clients
        services.store.on_commit(live.on_commit)

        def on_log(task_id: str) -> None:
            notifier.mark(f"agentqueue://tasks/{task_id}/log")
            live.on_log(task_id)
        engine = Engine(services, self.home, flush=notifier.flush, on_log=on_log)
        board = None
        sock_path = paths.socket_path(self.home)
        sock_path.unlink(missing_ok=True)  # we hold the lock, so any socket file left is stale
        listener = await anyio.create_unix_listener(sock_path)
        os.chmod(sock_path, 0o600)
        http_sock = _bind_tcp(self.host, self.port) if self.http else None
        http_url = None
        server = None
        if http_sock is not None:
            token = load_or_create_token(self.home)
            metrics = Metrics(services.store)
            services.on_tool_call = metrics.observe_tool_call
            hosts = [*services.settings.allowed_hosts, *self.allow_hosts]
            if self.host not in LOOPBACK:
                log.warning("HTTP listens on %s, beyond this machine: only Host names %s are accepted, with the "
                            "bearer token.", self.host, ", ".join(hosts) or "(none)")
            expected = f"Bearer {token}".encode()
            board, board_asgi = board_app(services, token, hosts, live, lambda request: hmac.compare_digest(
                _normal_bearer(request.headers.get("authorization", "").encode()), expected),
                http_sock.getsockname()[1], self.options)
            config = uvicorn.Config(http_app(mcp, token, self.host, metrics, services.settings.metrics_public, hosts,
                                             board_asgi),
                                    log_config=None, lifespan="on",
                                    timeout_graceful_shutdown=3)
            server = _QuietUvicorn(config)
            port = http_sock.getsockname()[1]
            http_url = f"http://{self.host}:{port}/mcp"

        def announce() -> None:
            # Only once signals are handled: `agentqueue stop` finds the pid here, and a SIGTERM
            # before the handler is installed would kill the daemon without its cleanup.
            info = {"pid": os.getpid(), "socket": str(sock_path), "http_url": http_url, "version": __version__,
                    "started_at": now_iso()}
            target = paths.daemon_info_path(self.home)
            partial = target.with_name(f".{target.name}.{os.getpid()}")
            partial.write_text(json.dumps(info))
            os.replace(partial, target)  # atomic: a reader never sees a half-written file (and gives up)
            log.info("daemon %s serving %s on %s%s", __version__, self.home, sock_path,
                     f" and {http_url}" if http_url else "")
            print(next_steps(self.home, http_url), flush=True)

        async def accept() -> None:
            async with anyio.create_task_group() as connections:
                try:
                    while True:
                        stream = await listener.accept()
                        connections.start_soon(serve_connection, mcp, stream, engine.run_of_pid)
                except anyio.ClosedResourceError:
                    await anyio.sleep_forever()  # stopping: no new connections; open ones end with the daemon

        http_done = anyio.Event()

        async def run_http() -> None:
            try:
                await server.serve([http_sock])
            finally:
                http_done.set()

        async with anyio.create_task_group() as tg:
            def restart() -> None:
                self.restart_requested = True
                paths.restart_marker(self.home).write_text(str(os.getpid()))

                async def soon() -> None:
                    await anyio.sleep(0.3)  # let the tool's answer reach the client first
                    self.stopping.set()
                tg.start_soon(soon)

            services.system.restart_hook = restart
            if paths.restart_marker(self.home).exists():  # a restart that got here is done
                paths.restart_record(self.home).write_text(repr(time.time()))
                paths.restart_marker(self.home).unlink()
            tg.start_soon(accept)
            if server is not None:
                tg.start_soon(run_http)
            tg.start_soon(self._housekeeping, services, mcp)
            await tg.start(self._watch_signals)
            announce()
            tg.start_soon(engine.run)
            await self.stopping.wait()
            log.info("daemon stopping")
            # First stop listening: a plugin reconnecting for a restart must reach the new daemon, never this one.
            await listener.aclose()
            sock_path.unlink(missing_ok=True)
            if board is not None:
                board.close()  # open pages' streams end now, not at the HTTP server's grace timeout
            await engine.shutdown()
            if server is not None:
                server.should_exit = True
                with anyio.move_on_after(5):
                    await http_done.wait()
            tg.cancel_scope.cancel()
        sock_path.unlink(missing_ok=True)

    async def _housekeeping(self, services: Services, mcp: MCPServer) -> None:
        """Publish changes made outside tool calls; hourly, prune the audit log and refresh the query planner's
        statistics where they went stale (SQLite's advice for a long-lived connection; the engine keeps its own
        lease)."""
        pruned = -PRUNE_EVERY_S
        while True:
            await mcp.notifier.flush()  # type: ignore[attr-defined]
            if time.monotonic() - pruned > PRUNE_EVERY_S:
                pruned = time.monotonic()
                gone = await anyio.to_thread.run_sync(services.audit.prune, services.settings.audit_retention_days)
                if gone:
                    log.info("audit log: pruned %d row(s) older than %d days", gone,
                             services.settings.audit_retention_days)
                analysed = await anyio.to_thread.run_sync(services.store.optimize)
                if analysed:
                    log.info("query planner statistics refreshed for %s", ", ".join(analysed))
            await anyio.sleep(0.25)

    async def _watch_signals(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            task_status.started()
            async for signum in signals:
                log.info("received %s", signal.Signals(signum).name)
                self.stopping.set()
                return


def next_steps(home: Path, http_url: str | None) -> str:
    """What `agentqueue serve` tells the person who started it (stdout: a plugin-started daemon logs it)."""
    lines = [f"AgentQueue {__version__} is running for {home} (pid {os.getpid()}).", "",
             "Next steps:",
             "  agentqueue install claude-code    add it to a client (or claude-desktop, cursor, vscode)",
             "  agentqueue status                 see the queue;  agentqueue doctor  checks the setup",
             "  agentqueue stop                   stop it (or Ctrl-C here)"]
    if http_url:
        token = "AGENTQUEUE_TOKEN" if os.environ.get("AGENTQUEUE_TOKEN") else str(paths.token_path(home))
        lines[1:1] = [f"HTTP clients: {http_url} with `Authorization: Bearer <token>`; the token is in {token}."]
    return "\n".join(lines)


def serve(home: Path, host: str, port: int, http: bool, options: dict[str, Any] | None = None,
          allow_hosts: list[str] | None = None) -> int:
    """Entry point of `agentqueue serve`; returns the exit code (or re-executes itself on restart_daemon)."""
    logs.configure(home, "agentqueue")
    daemon = Daemon(home, host, port, http, options, allow_hosts)
    try:
        anyio.run(daemon.run)
    except AlreadyRunningError as error:
        print(str(error), file=sys.stderr)
        return paths.EXIT_ALREADY_RUNNING
    except (StoreOpenError, ConfigError) as error:
        print(str(error), file=sys.stderr)
        return paths.EXIT_CANNOT_START
    if daemon.restart_requested:
        log.info("re-executing the daemon")
        logging.shutdown()
        argv = paths.self_command(*sys.argv[1:])
        os.execv(argv[0], argv)
    return 0

