"""`agentqueue mcp --standalone`: the MCP server on this process's stdio, no daemon."""

from __future__ import annotations

import logging
from pathlib import Path

import anyio

from . import logs
from .app import build_server
from .services import Services

log = logging.getLogger("agentqueue.standalone")


async def _serve(home: Path) -> None:
    services = Services(home)
    try:
        message = services.agents.bootstrap_default()
        if message:
            log.info(message)
        mcp = build_server(services)
        await mcp.run_stdio_async()
    finally:
        services.close()


def run_standalone(home: Path) -> int:
    logs.configure(home, "standalone")
    anyio.run(_serve, home)
    return 0
