"""`agentqueue mcp`: the stdio server MCP clients launch. Its usual launch never gets here: `cli.main` reads
its flags by hand (`mcp_flags`) and starts it before any parser is built; this is the parser for the rest
(`--help`, a typo, a bad toolset), so argparse words every error."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..parser import add_command, selection_flags


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(
        sub, "mcp", "the stdio MCP server that clients launch (not for typing)", run,
        "The stdio plugin MCP clients launch: it relays to the daemon, starting it if needed.")
    command.add_argument("--standalone", action="store_true", help="serve MCP in this process, no daemon")
    selection_flags(command, "this client")


def run(args: argparse.Namespace, home: Path) -> int:
    from ...toolsets import client_options
    from .. import run_mcp

    run_mcp(args.standalone, client_options(args.read_only, args.toolsets))
    return 0  # run_mcp exits
