"""`agentqueue serve`: run the daemon of AGENTQUEUE_HOME in this process (clients start it on demand)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..parser import add_command, selection_flags


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(
        sub, "serve", "run the daemon for AGENTQUEUE_HOME (clients start it on demand)", run,
        "Run the daemon: the engine plus MCP over a local socket (for `agentqueue mcp`) and over HTTP "
        "with a bearer token. One daemon per AGENTQUEUE_HOME; clients start it when none runs.")
    command.add_argument("--host", default="127.0.0.1")
    command.add_argument("--port", type=int, default=None,
                         help="HTTP port (default: config.toml [server] port, AGENTQUEUE_PORT, else 8765; 0 picks a free one)")
    command.add_argument("--no-http", action="store_true", help="serve only the local socket")
    command.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                         help="a Host name HTTP clients use (repeatable); needed with a --host beyond loopback")
    selection_flags(command, "HTTP clients")


def run(args: argparse.Namespace, home: Path) -> int:
    from ... import daemon, paths, settings
    from ...toolsets import connection_options

    port = args.port
    if port is None:
        try:
            port = settings.load(home).port
        except settings.ConfigError as error:
            from ...visible import visible

            print(visible(str(error), multiline=True), file=sys.stderr)
            return paths.EXIT_CANNOT_START
    return daemon.serve(home, args.host, port, not args.no_http,
                        connection_options(args.read_only, args.toolsets), args.allow_host)
