"""`agentqueue mcp --standalone`: the MCP server on this process's stdio, no daemon."""

from __future__ import annotations

import contextlib
import logging
import sys
from pathlib import Path
from typing import Any

import anyio

from . import logs, paths
from .app import build_server
from .daemon import AlreadyRunningError, home_lock
from .engine.orchestrator import Engine
from .services import Services
from .settings import ConfigError
from .store.db import StoreOpenError

log = logging.getLogger("agentqueue.standalone")


async def _serve(home: Path, options: dict[str, Any]) -> None:
    services = Services(home)
    try:
        message = services.agents.bootstrap_default()
        if message:
            log.info(message)
        mcp = build_server(services, options)
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(home_lock(home, grace=0))  # a running daemon is the common case
            except AlreadyRunningError:
                log.warning("A daemon runs for %s: this standalone server serves MCP without its own engine.", home)
                await mcp.run_stdio_async()
                return
            notifier = mcp.notifier  # type: ignore[attr-defined]
            engine = Engine(services, home, flush=notifier.flush,
                            on_log=lambda task_id: notifier.mark(f"agentqueue://tasks/{task_id}/log"))
            async with anyio.create_task_group() as tg:
                tg.start_soon(engine.run)
                await mcp.run_stdio_async()  # returns at stdin EOF: the client is gone
                await engine.shutdown()
                tg.cancel_scope.cancel()
    finally:
        services.close()


def run_standalone(home: Path, options: dict[str, Any] | None = None) -> int:
    logs.configure(home, "standalone")
    try:
        anyio.run(_serve, home, options or {})
    except (ConfigError, StoreOpenError) as error:
        print(f"agentqueue: {error}", file=sys.stderr)  # stderr: stdout is the MCP wire
        return paths.EXIT_CANNOT_START
    return 0
