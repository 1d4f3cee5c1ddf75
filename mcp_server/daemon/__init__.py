"""The daemon's processes: `agentqueue serve` and the relay MCP clients launch.

    process.py      `agentqueue serve`: the Daemon (lock, socket, HTTP, engine), `serve`, `stop`, daemon.json
    unix_socket.py  MCP over the home's Unix socket: one session per plugin connection
    http.py         the one HTTP app (health, metrics, /mcp, the board), its bearer check and its server
    relay.py        `agentqueue mcp`: the stdio relay between a client and the daemon (stdlib only)

This file imports nothing: every client launch loads the package for relay.py, so the daemon's public
names below are loaded from process.py on first use (`from agentqueue import daemon; daemon.stop(home)`).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: the relay imports this package
if TYPE_CHECKING:
    from .process import (DEFAULT_PORT, AlreadyRunningError, Daemon, home_lock, load_or_create_token,
                          lock_is_held, next_steps, read_daemon_info, serve, stop)

__all__ = ["DEFAULT_PORT", "AlreadyRunningError", "Daemon", "home_lock", "load_or_create_token", "lock_is_held",
           "next_steps", "read_daemon_info", "serve", "stop"]


def __getattr__(name: str) -> object:
    if name in __all__:
        from . import process

        return getattr(process, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
