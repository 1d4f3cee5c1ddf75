"""`agentqueue serve`: the one daemon of an AGENTQUEUE_HOME.

It holds the home's lock, serves every plugin connection on a Unix socket as its own MCP session
(unix_socket.py), serves the HTTP app on loopback behind a bearer token (http.py), runs the engine,
and stops cleanly on SIGTERM or `agentqueue stop`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.abc import SocketListener
from mcp.server import MCPServer

from .. import __version__, logs, paths, settings_reload
from .. import home_lock as home_lock_module
from ..server.app import build
from ..server.resources import Notifier
from ..board import board_app
from ..board.live import Broadcaster
from ..daemon_client import stop  # noqa: F401  (daemon.stop: it lives with the client, stdlib only)
from ..engine.orchestrator import Engine
from ..home_lock import AlreadyRunningError
from ..metrics import Metrics
from ..services import Services
from ..settings import ConfigError
from ..store.db import StoreOpenError, now_iso
from ..walls import WALLS
from .http import LOOPBACK, BearerToken, HttpServer, _bind_tcp, http_app
from .unix_socket import serve_connection

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
        self._tasks: anyio.abc.TaskGroup | None = None  # the daemon's task group, while it serves
        self.reload_every = settings_reload.DEFAULT_RELOAD_SECONDS  # how often config.toml and policy.toml are read

    async def run(self) -> None:
        self.reload_every = settings_reload.reload_seconds()  # a bad AGENTQUEUE_RELOAD_SECONDS stops here, clearly
        with home_lock(self.home):
            services = Services(self.home, restart=self._restart)
            try:
                await self._run(services)
            finally:
                paths.daemon_info_path(self.home).unlink(missing_ok=True)
                settings_reload.status_path(self.home).unlink(missing_ok=True)
                services.close()
                log.info("daemon stopped")

    async def _run(self, services: Services) -> None:
        message = services.agents.bootstrap_default()
        if message:
            log.info(message)
        metrics = Metrics(services.store) if self.http else None  # GET /metrics, with every tool call timed
        built = build(services, self.options, on_tool_call=metrics.observe_tool_call if metrics else None)
        mcp, notifier = built.mcp, built.notifier
        live = Broadcaster()  # the board's pages hear the same changes as subscribed clients
        services.store.on_commit(live.on_commit)

        def on_log(task_id: str) -> None:
            notifier.mark(f"agentqueue://tasks/{task_id}/log")
            live.on_log(task_id)
        engine = Engine(services, self.home, flush=notifier.flush, on_log=on_log)
        listener = await self._open_socket()
        http = self._http_side(services, mcp, live, metrics)
        engine.notifier.default_board_url = http.url.removesuffix("/mcp") if http else None  # messages link the board
        async with anyio.create_task_group() as tg:
            self._tasks = tg
            if paths.restart_marker(self.home).exists():  # a restart that got here is done
                paths.restart_record(self.home).write_text(repr(time.time()))
                paths.restart_marker(self.home).unlink()
            tg.start_soon(self._accept, listener, mcp, engine)
            if http is not None:
                tg.start_soon(http.serve)
            tg.start_soon(self._housekeeping, services, notifier)
            tg.start_soon(self._reload_settings, services, engine)
            await tg.start(self._watch_signals)
            self._announce(http.url if http else None, services)
            tg.start_soon(engine.run)
            await self.stopping.wait()
            await self._stop(listener, engine, http)
            tg.cancel_scope.cancel()
        paths.socket_path(self.home).unlink(missing_ok=True)

    async def _open_socket(self) -> SocketListener:
        """The home's Unix socket, which plugins connect to (only this user may)."""
        sock_path = paths.socket_path(self.home)
        sock_path.unlink(missing_ok=True)  # we hold the lock, so any socket file left is stale
        listener = await anyio.create_unix_listener(sock_path)
        os.chmod(sock_path, 0o600)
        return listener

    def _http_side(self, services: Services, mcp: MCPServer, live: Broadcaster,
                   metrics: Metrics | None) -> HttpServer | None:
        """The HTTP server with the board, or None without HTTP (--no-http, or the port cannot be had)."""
        sock = _bind_tcp(self.host, self.port) if self.http else None
        if sock is None:
            return None
        token = load_or_create_token(self.home)
        bearer = BearerToken(token)
        hosts = [*services.settings.allowed_hosts, *self.allow_hosts]
        if self.host not in LOOPBACK:
            log.warning("HTTP listens on %s, beyond this machine: only Host names %s are accepted, with the "
                        "bearer token.", self.host, ", ".join(hosts) or "(none)")
        board, board_asgi = board_app(services, token, hosts, live, bearer.ok, sock.getsockname()[1], self.options)
        app = http_app(mcp, bearer, self.host, metrics, services.settings.metrics_public, hosts, board_asgi)
        return HttpServer(app, sock, self.host, end_streams=board.close)

    def _announce(self, http_url: str | None, services: Services) -> None:
        """daemon.json, the log line and the next steps; only once signals are handled: `agentqueue stop` finds
        the pid here, and a SIGTERM before the handler is installed would kill the daemon without its cleanup.
        daemon.json says which code runs (its version, the store's schema, the walls it puts around runs): the
        terminal's `status` and `doctor` compare it with the code installed since (cli/daemon_code.py)."""
        sock_path = paths.socket_path(self.home)
        info = {"pid": os.getpid(), "socket": str(sock_path), "http_url": http_url, "version": __version__,
                "started_at": now_iso(), "schema": services.store.schema_version, "backend": services.store.backend,
                "walls": list(WALLS)}
        target = paths.daemon_info_path(self.home)
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        partial.write_text(json.dumps(info))
        os.replace(partial, target)  # atomic: a reader never sees a half-written file (and gives up)
        log.info("daemon %s serving %s on %s%s", __version__, self.home, sock_path,
                 f" and {http_url}" if http_url else "")
        print(next_steps(self.home, http_url), flush=True)

    async def _accept(self, listener: SocketListener, mcp: MCPServer, engine: Engine) -> None:
        async with anyio.create_task_group() as connections:
            try:
                while True:
                    stream = await listener.accept()
                    connections.start_soon(serve_connection, mcp, stream, engine.run_of_pid)
            except anyio.ClosedResourceError:
                await anyio.sleep_forever()  # stopping: no new connections; open ones end with the daemon

    def _restart(self) -> None:
        """restart_daemon (given to the services): stop soon, then `serve` re-executes itself."""
        if self._tasks is None:  # tools are served only inside the task group; nothing to restart before it
            raise RuntimeError("the daemon is not serving yet")
        self.restart_requested = True
        paths.restart_marker(self.home).write_text(str(os.getpid()))

        async def soon() -> None:
            await anyio.sleep(0.3)  # let the tool's answer reach the client first
            self.stopping.set()
        self._tasks.start_soon(soon)

    async def _stop(self, listener: SocketListener, engine: Engine, http: HttpServer | None) -> None:
        log.info("daemon stopping")
        # First stop listening: a plugin reconnecting for a restart must reach the new daemon, never this one.
        await listener.aclose()
        paths.socket_path(self.home).unlink(missing_ok=True)
        if http is not None:
            http.end_streams()  # open pages' streams end now, not at the HTTP server's grace timeout
        await engine.shutdown()
        if http is not None:
            await http.stop()

    async def _housekeeping(self, services: Services, notifier: Notifier) -> None:
        """Publish changes made outside tool calls; hourly, prune the audit log and refresh the query planner's
        statistics where they went stale (SQLite's advice for a long-lived connection; the engine keeps its own
        lease)."""
        pruned = -PRUNE_EVERY_S
        while True:
            await notifier.flush()
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

    async def _reload_settings(self, services: Services, engine: Engine) -> None:
        """Edits of config.toml and policy.toml apply to new runs without a restart (settings_reload.py)."""
        every = self.reload_every
        try:
            reloader = await anyio.to_thread.run_sync(lambda: settings_reload.Reloader(
                self.home, services.settings, engine.apply_settings, every=every))
        except OSError as error:  # settings_applied.json cannot be written: doctor will say it cannot tell
            log.warning("settings reload is off: %s", error)
            return
        if not every:
            log.info("settings reload is off (AGENTQUEUE_RELOAD_SECONDS=0): edits of config.toml and policy.toml "
                     "need a restart")
            return
        while True:
            await anyio.sleep(every)
            try:
                await anyio.to_thread.run_sync(reloader.check)
            except Exception:  # noqa: BLE001 — the reload must never take the daemon down; it looks again later
                log.exception("settings reload failed; the daemon keeps its settings")

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
