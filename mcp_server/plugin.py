"""`agentqueue mcp`: the stdio plugin MCP clients launch. Stdlib only, so it starts in milliseconds.

It connects to the daemon of AGENTQUEUE_HOME (starting it detached if none answers) and copies bytes
both ways: client stdin -> daemon socket -> client stdout. The daemon serves the connection as a
full MCP session; this process only looks at messages to survive a daemon restart: it remembers
the client's `initialize` handshake and, when the daemon goes away while the client is still
there, reconnects (starting a daemon if needed), replays the handshake and swallows its answer,
so the client keeps its session across `restart_daemon` (only then: after `agentqueue stop` or a
crash the plugin exits like any server that went away).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from . import paths

CONNECT_TIMEOUT_S = float(os.environ.get("AGENTQUEUE_CONNECT_TIMEOUT", "30"))


def _connect(sock_path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(sock_path))
    except OSError:
        sock.close()
        return None
    return sock


def start_daemon(home: Path) -> subprocess.Popen[bytes]:
    """Spawn `agentqueue serve` in its own session so it outlives this plugin and the client."""
    log_dir = paths.logs_dir(home)
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "daemon.out", "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "agentqueue", "serve"],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, close_fds=True,
            env={**os.environ, "AGENTQUEUE_HOME": str(home)},
        )


def connect_or_start(home: Path, timeout: float = CONNECT_TIMEOUT_S) -> socket.socket:
    sock_path = paths.socket_path(home)
    sock = _connect(sock_path)
    if sock is not None:
        return sock
    process = start_daemon(home)
    deadline = time.monotonic() + timeout
    delay = 0.01
    while time.monotonic() < deadline:
        sock = _connect(sock_path)
        if sock is not None:
            return sock
        # A daemon that exited may have lost a start race to another one: keep trying to connect.
        if process.poll() is not None and process.returncode not in (0, 1):
            break
        time.sleep(delay)
        delay = min(delay * 1.5, 0.1)
    raise SystemExit(
        f"agentqueue: could not reach the daemon for {home} (socket {sock_path}). "
        f"See {paths.logs_dir(home) / 'daemon.out'} and agentqueue.log there."
    )


def _method(line: bytes) -> tuple[str | None, object]:
    if b'"method"' not in line:
        return None, None
    try:
        message = json.loads(line)
    except ValueError:
        return None, None
    return (message.get("method"), message.get("id")) if isinstance(message, dict) else (None, None)


def note(home: Path, message: str) -> None:
    """One line in logs/plugin.log (stdlib only; the plugin has no logging setup)."""
    try:
        with open(paths.logs_dir(home) / "plugin.log", "a", encoding="utf-8") as log:
            log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [{os.getpid()}] {message}\n")
    except OSError:
        pass


class Pipe:
    def __init__(self, home: Path) -> None:
        self.home = home
        self.sock = connect_or_start(home)
        self.lock = threading.Lock()
        self.handshake: list[bytes] = []  # the client's initialize request and initialized notification
        self.client_gone = threading.Event()
        # While the daemon restarts, the client's messages wait here and go to the new daemon.
        self.backlog: list[bytes] | None = None

    def send(self, data: bytes) -> None:
        with self.lock:
            if self.backlog is not None:
                self.backlog.append(data)
                return
            try:
                self.sock.sendall(data)
            except OSError:
                self.backlog = [data]  # the daemon is going away; the reader decides what happens next

    def pump_stdin(self) -> None:
        """Client -> daemon, a line at a time; at EOF half-close so the daemon answers and hangs up."""
        stdin = sys.stdin.buffer
        try:
            for line in iter(stdin.readline, b""):
                method, _ = _method(line) if len(self.handshake) < 2 else (None, None)
                if method in ("initialize", "notifications/initialized"):
                    self.handshake.append(line if line.endswith(b"\n") else line + b"\n")
                self.send(line)
        except OSError:
            pass
        finally:
            self.client_gone.set()
            with self.lock:
                try:
                    self.sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

    def reconnect(self) -> bytes | None:
        """A new connection with the handshake replayed, then the held messages; returns the id to swallow."""
        note(self.home, "daemon restarting: reconnecting")
        with self.lock:
            if self.backlog is None:
                self.backlog = []
        sock = connect_or_start(self.home)
        swallow = None
        with self.lock:
            self.sock.close()
            self.sock = sock
            for line in self.handshake:
                method, message_id = _method(line)
                if method == "initialize":
                    swallow = json.dumps(message_id).encode()
                sock.sendall(line)
            held = [line for line in self.backlog or [] if line not in self.handshake]
            for line in held:
                sock.sendall(line)
            self.backlog = None
            if self.client_gone.is_set():
                sock.shutdown(socket.SHUT_WR)
        note(self.home, f"reconnected; replayed {len(self.handshake)} handshake and {len(held)} held message(s)")
        return swallow

    def pump_daemon(self) -> None:
        stdout = sys.stdout.buffer
        swallow: bytes | None = None
        pending = b""
        while True:
            with self.lock:
                sock = self.sock
            try:
                chunk = sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self.lock:
                    if self.backlog is None:
                        self.backlog = []  # hold what the client sends from now on
                restarting = paths.restart_marker(self.home).exists()
                if self.client_gone.is_set() or not restarting:
                    return  # the client left, or the daemon stopped for good: end the session
                time.sleep(0.2)  # a restarting daemon needs a moment to let go of its lock
                swallow = self.reconnect()
                pending = b""
                continue
            if swallow is not None:
                # Drop the daemon's answer to the replayed initialize; pass everything else through.
                pending += chunk
                lines = pending.split(b"\n")
                pending = lines.pop()
                kept = []
                for line in lines:
                    if swallow is not None and b'"result"' in line and _answer_id(line) == swallow:
                        swallow = None
                        continue
                    kept.append(line + b"\n")
                chunk = b"".join(kept) + (pending if swallow is None else b"")
                if swallow is None:
                    pending = b""
            if chunk:
                stdout.write(chunk)
                stdout.flush()


def _answer_id(line: bytes) -> bytes | None:
    try:
        return json.dumps(json.loads(line).get("id")).encode()
    except (ValueError, AttributeError):
        return None


def main() -> int:
    pipe = Pipe(paths.home())
    threading.Thread(target=pipe.pump_stdin, daemon=True).start()
    try:
        pipe.pump_daemon()
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    # The stdin thread may sit in a blocking read; normal interpreter shutdown would abort on its lock.
    os._exit(0)
