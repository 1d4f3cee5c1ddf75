"""`agentqueue mcp --standalone`: the MCP server on this process's stdio, no daemon.

Lines that are not one JSON-RPC message are answered here exactly as the plugin answers them
(`wire.refusal`), since the SDK's stdio transport would leave them unanswered.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
from mcp.server.stdio import stdio_server

from . import logs, paths
from .server.app import build
from .wire import refusal
from .daemon import AlreadyRunningError, home_lock, lock_is_held
from .engine.orchestrator import Engine
from .services import Services
from .settings import ConfigError
from .store.db import StoreNotMigrated, StoreOpenError

log = logging.getLogger("agentqueue.standalone")


class _CheckedStdio:
    """stdin and stdout for the SDK's stdio transport: bad lines are answered with JSON-RPC errors, never passed on.

    It holds the real descriptors privately and points fd 0 at /dev/null and fd 1 at stderr while it serves, as
    the SDK's own stdio does, so a child process or a stray print can never write into the protocol stream.
    """

    def __init__(self, stdin_fd: int, stdout_fd: int) -> None:
        self.stdin = anyio.wrap_file(os.fdopen(stdin_fd, "rb", closefd=False))
        self.stdout = anyio.wrap_file(os.fdopen(stdout_fd, "wb", closefd=False))
        self.lock = anyio.Lock()  # our answers and the SDK's lines never interleave

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        while line := await self.stdin.readline():
            forward, answer = refusal(line)
            if answer is not None:
                await self._send(answer)
            if forward:
                yield line.decode("utf-8")

    async def _send(self, data: bytes) -> None:
        async with self.lock:
            await self.stdout.write(data)
            await self.stdout.flush()

    async def write(self, text: str) -> None:
        await self._send(text.encode("utf-8"))

    async def flush(self) -> None:
        return None


@contextlib.contextmanager
def _claimed_stdio() -> Iterator[_CheckedStdio]:
    """The wire's descriptors, kept private for the session; fd 0 and 1 are restored afterwards."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
        yield _CheckedStdio(wire_in, wire_out)
    finally:
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)
        for fd in (null, wire_in, wire_out):
            os.close(fd)


async def _run_stdio(mcp: Any) -> None:
    """What `mcp.run_stdio_async()` does, over the checked stdio (returns at stdin EOF)."""
    lowlevel = mcp._lowlevel_server
    with _claimed_stdio() as pipe:
        async with stdio_server(stdin=pipe, stdout=pipe) as (read, write):  # type: ignore[arg-type]
            await lowlevel.run(read, write, lowlevel.create_initialization_options())


async def _serve(home: Path, options: dict[str, Any]) -> None:
    # With a daemon holding the home, its store is its own: opened as it is, never migrated under it (that daemon
    # runs older code when the schemas differ, and the refusal says to restart it).
    services = Services(home, migrate=not lock_is_held(home))
    try:
        message = services.agents.bootstrap_default()
        if message:
            log.info(message)
        built = build(services, {**options, "cwd": os.getcwd()})  # the client started this process in its folder
        mcp, notifier = built.mcp, built.notifier
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(home_lock(home, grace=0))  # a running daemon is the common case
            except AlreadyRunningError:
                log.warning("A daemon runs for %s: this standalone server serves MCP without its own engine.", home)
                await _run_stdio(mcp)
                return
            engine = Engine(services, home, flush=notifier.flush,
                            on_log=lambda task_id: notifier.mark(f"agentqueue://tasks/{task_id}/log"))
            async with anyio.create_task_group() as tg:
                tg.start_soon(engine.run)
                await _run_stdio(mcp)  # returns at stdin EOF: the client is gone
                await engine.shutdown()
                tg.cancel_scope.cancel()
    finally:
        services.close()


def run_standalone(home: Path, options: dict[str, Any] | None = None) -> int:
    logs.configure(home, "standalone")
    try:
        anyio.run(_serve, home, options or {})
    except StoreNotMigrated as error:
        from .cli.daemon_code import held_store

        print(f"agentqueue: {held_store(home, error.found, error.expected)}", file=sys.stderr)
        return paths.EXIT_CANNOT_START
    except (ConfigError, StoreOpenError) as error:
        print(f"agentqueue: {error}", file=sys.stderr)  # stderr: stdout is the MCP wire
        return paths.EXIT_CANNOT_START
    return 0
