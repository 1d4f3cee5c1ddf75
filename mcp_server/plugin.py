"""`agentqueue mcp`: the stdio plugin MCP clients launch. Stdlib only, so it starts in milliseconds.

It connects to the daemon of AGENTQUEUE_HOME (starting it detached if none answers) and copies bytes
both ways: client stdin -> daemon socket -> client stdout. The daemon serves the connection as a
full MCP session; this process understands nothing of MCP.
"""

from __future__ import annotations

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
            [sys.executable, "-m", "mcp_server", "serve"],
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


def _pump_stdin(sock: socket.socket) -> None:
    """Client -> daemon; at EOF, half-close so the daemon finishes answering and then hangs up."""
    stdin = sys.stdin.buffer.raw if hasattr(sys.stdin.buffer, "raw") else sys.stdin.buffer
    try:
        while True:
            chunk = stdin.read(65536)
            if not chunk:
                break
            sock.sendall(chunk)
    except OSError:
        pass
    finally:
        try:
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def main() -> int:
    home = paths.home()
    sock = connect_or_start(home)
    threading.Thread(target=_pump_stdin, args=(sock,), daemon=True).start()
    stdout = sys.stdout.buffer
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            stdout.write(chunk)
            stdout.flush()
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        sock.close()
    return 0
