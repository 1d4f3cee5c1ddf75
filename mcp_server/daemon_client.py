"""A minimal MCP client over the daemon's Unix socket, for the CLI's actions (stdlib only).

`agentqueue approve|pause|resume` call the daemon's own tools, so an action from the terminal gets
exactly the validation, events and engine hooks a model's call gets. One connection per call:
initialize, notifications/initialized, tools/call, then hang up.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import __version__, home_lock, paths

PROTOCOL_VERSION = "2025-11-25"


class DaemonError(RuntimeError):
    """The daemon could not be reached or answered with a protocol error."""


class ToolError(RuntimeError):
    """The tool refused the call; `str(error)` is its message (what was wrong, what to do)."""


# -- is a daemon running? -------------------------------------------------------------------------
def lock_is_held(home: Path) -> bool:
    return home_lock.is_held(home)


def daemon_info(home: Path) -> dict[str, Any] | None:
    """What the running daemon wrote about itself (pid, socket, http_url, version, started_at)."""
    try:
        info = json.loads(paths.daemon_info_path(home).read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def running_daemon(home: Path) -> dict[str, Any] | None:
    """The daemon's record when one holds the lock; None when none runs (a stale daemon.json is ignored)."""
    if not lock_is_held(home):
        return None
    return daemon_info(home) or {}


def stop(home: Path, timeout: float = 20.0) -> tuple[bool, str]:
    """SIGTERM the home's daemon and wait for its lock to be released (here, not in daemon.py: `agentqueue stop`
    would otherwise import the whole server, seconds, to send one signal)."""
    info = daemon_info(home)
    if not lock_is_held(home):
        return False, f"No AgentQueue daemon is running for {home}."
    starting = time.monotonic() + min(timeout, 30.0)
    while not info and time.monotonic() < starting and lock_is_held(home):
        time.sleep(0.1)  # a daemon that is still starting writes daemon.json once its signals are handled
        info = daemon_info(home)
    if not lock_is_held(home):
        return True, "The daemon stopped."
    if not info:
        return False, f"A daemon holds {paths.lock_path(home)} but wrote no daemon.json; stop it by its pid."
    try:
        os.kill(info["pid"], signal.SIGTERM)
    except ProcessLookupError:
        return False, f"The daemon (pid {info['pid']}) is gone."
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not lock_is_held(home):
            return True, f"Stopped the AgentQueue daemon (pid {info['pid']})."
        time.sleep(0.1)
    return False, f"The daemon (pid {info['pid']}) did not stop within {timeout:.0f} s."


# -- calling a tool -------------------------------------------------------------------------------
# A person's answer to the policy's question ("Run `rm -rf build` in project demo?"): True to allow.
Ask = Callable[[str], bool]


def ask_at_terminal(question: str) -> bool:
    """The policy's question on the terminal, answered y/N by the person who typed the command."""
    from .visible import visible

    print(visible(question, multiline=True), file=sys.stderr, flush=True)  # it quotes the call's arguments
    try:
        return input("Allow it? [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


def terminal_asker() -> Ask | None:
    """Ask on the terminal when there is one; a script gets the policy's refusal, which says how to allow."""
    return ask_at_terminal if sys.stdin.isatty() and sys.stderr.isatty() else None


class _Session:
    def __init__(self, sock: socket.socket, timeout: float, ask: Ask | None = None) -> None:
        sock.settimeout(timeout)
        self.sock = sock
        self.reader = sock.makefile("rb")
        self.next_id = 0
        self.ask = ask

    def answer_elicitation(self, message: dict[str, Any]) -> None:
        params = message.get("params") or {}
        allowed = self.ask is not None and self.ask(str(params.get("message") or "Allow this action?"))
        result = {"action": "accept", "content": {"approve": True}} if allowed else {"action": "decline"}
        self.send({"jsonrpc": "2.0", "id": message["id"], "result": result})

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(json.dumps(message).encode() + b"\n")

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        wanted = self.next_id
        self.send({"jsonrpc": "2.0", "id": wanted, "method": method, "params": params})
        while True:
            try:
                line = self.reader.readline()
            except TimeoutError:
                raise DaemonError(f"The daemon did not answer {method} in time.") from None
            if not line:
                raise DaemonError(f"The daemon closed the connection during {method}; see its log.")
            try:
                message = json.loads(line)
            except ValueError:
                continue
            if not isinstance(message, dict):
                continue
            if "method" in message:
                if message["method"] == "elicitation/create" and "id" in message:
                    self.answer_elicitation(message)
                    continue
                if "id" in message:  # a server request we do not handle: say so rather than leave it hanging
                    self.send({"jsonrpc": "2.0", "id": message["id"],
                               "error": {"code": -32601, "message": "not supported by the agentqueue CLI"}})
                continue  # notifications (progress, resource updates, logs) are not ours to show
            if message.get("id") != wanted:
                continue
            if "error" in message:
                error = message["error"] or {}
                raise DaemonError(f"The daemon refused {method}: {error.get('message', error)}")
            return message.get("result") or {}

    def close(self) -> None:
        try:
            self.reader.close()
            self.sock.close()
        except OSError:
            pass


def _tool_text(result: dict[str, Any]) -> str:
    return "\n".join(part.get("text", "") for part in result.get("content") or [] if part.get("type") == "text")


def _error_text(name: str, result: dict[str, Any]) -> str:
    text = _tool_text(result).strip()
    prefix = f"Error executing tool {name}:"
    return (text.removeprefix(prefix).strip() if text.startswith(prefix) else text) \
        or f"{name} failed without a message; see the daemon's log."


def call_tool(home: Path, name: str, arguments: dict[str, Any] | None = None, timeout: float = 120.0,
              start: bool = True, ask: Ask | None = None) -> dict[str, Any]:
    """Call one of the daemon's tools; returns its structured result or raises ToolError with its message.

    With `start` (the default) a daemon that is not running is started first, as `agentqueue mcp` does.
    With `ask`, the client supports elicitation: a question of the policy is put to `ask`.
    """
    from .daemon.relay import DaemonStartError, _connect, connect_or_start

    if start:
        try:
            sock = connect_or_start(home, progress=lambda line: print(line, file=sys.stderr, flush=True))
        except DaemonStartError as error:
            raise DaemonError(str(error)) from None
    else:
        sock = _connect(paths.socket_path(home))
        if sock is None:
            raise DaemonError(f"No AgentQueue daemon is running for {home}; `agentqueue serve` starts one.")
    session = _Session(socket.socket(fileno=sock.detach()), timeout, ask)  # the relay's _socket, with makefile
    capabilities = {"elicitation": {"form": {}}} if ask else {}
    try:
        session.request("initialize", {"protocolVersion": PROTOCOL_VERSION, "capabilities": capabilities,
                                       "clientInfo": {"name": "agentqueue-cli", "version": __version__}})
        session.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        result = session.request("tools/call", {"name": name, "arguments": arguments or {}})
    except OSError as error:
        raise DaemonError(f"Lost the connection to the daemon: {error}") from None
    finally:
        session.close()
    if result.get("isError"):
        raise ToolError(_error_text(name, result))
    structured = result.get("structuredContent")
    if isinstance(structured, dict):
        return structured
    text = _tool_text(result)
    try:
        parsed = json.loads(text)
    except ValueError:
        return {"text": text}
    return parsed if isinstance(parsed, dict) else {"result": parsed}
