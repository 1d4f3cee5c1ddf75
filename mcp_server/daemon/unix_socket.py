"""MCP over the home's Unix socket: every plugin connection is its own MCP session.

Each connection is fed to the SDK's `stdio_server` through a line adapter, so it is served exactly as
stdio is (both protocol eras, notifications, its own lifespan and so its own active project).
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import anyio.abc
from anyio.abc import SocketStream
from mcp.server import MCPServer
from mcp.server.stdio import stdio_server

from ..line_splitter import LineSplitter
from ..server.app import CONNECTION_OPTIONS
from ..server.toolsets import decode_preamble, socket_options
from .peer import cwd_of, lineage, peer_pid

log = logging.getLogger("agentqueue.daemon")


class _SocketLines:
    """The file-like pair `stdio_server` wants (async line iteration, write, flush) over a socket.

    Lines have no length limit: a tool result or an agent's output can be megabytes.
    """

    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self._splitter = LineSplitter(keepends=True)
        self._read: deque[bytes] = deque()  # lines read but not served yet (the preamble reads ahead)

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _receive(self) -> bool:
        """The next chunk's lines queued; False at the end of the stream."""
        try:
            chunk = await self.stream.receive(65536)
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return False
        self._read.extend(self._splitter.feed(chunk))
        return True

    async def _lines(self) -> AsyncIterator[str]:
        while True:
            while self._read:
                line = self._read.popleft()
                if line.strip():
                    yield line.decode("utf-8", errors="replace")
            if not await self._receive():
                rest = self._splitter.rest()
                if rest.strip():
                    yield rest.decode("utf-8", errors="replace")
                return

    async def preamble(self) -> dict[str, Any] | None:
        """The plugin's options line (`{"agentqueue": {...}}`), consumed if the connection opens with one."""
        while not self._read:
            if not await self._receive():
                return None
        options = decode_preamble(self._read[0][:-1])
        if options is not None:
            self._read.popleft()
        return options

    async def write(self, text: str) -> None:
        await self.stream.send(text.encode("utf-8"))

    async def flush(self) -> None:
        return None


_DISCONNECTS = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, BrokenPipeError,
                ConnectionResetError)


def is_disconnect(error: BaseException) -> bool:
    """A client that hung up (possibly wrapped in task-group exception groups): normal, not an error."""
    if isinstance(error, BaseExceptionGroup):
        return all(is_disconnect(inner) for inner in error.exceptions)
    return isinstance(error, _DISCONNECTS)


# (actor, task_id) of the engine's run a process is, or None: Engine.run_of_pid.
RunOfPid = Callable[[int], "tuple[str, str | None] | None"]


def identify_peer(stream: SocketStream, run_of_pid: RunOfPid | None) -> tuple[tuple[str, str | None] | None,
                                                                            str | None]:
    """(the engine's run the connecting process belongs to, else None; a person's client's folder, else None).

    The folder is what the kernel says of the plugin process (its client started it there), never what the peer
    claims: a relative path the person's model gives (`add_repo path="."`) is resolved against it.
    """
    raw = stream.extra(anyio.abc.SocketAttribute.raw_socket, None)
    pid = peer_pid(raw) if raw is not None else None
    if pid is None:
        return None, None
    run = _run_of(pid, run_of_pid)
    return run, cwd_of(pid) if run is None else None


def _run_of(pid: int, run_of_pid: RunOfPid | None) -> tuple[str, str | None] | None:
    """The engine's run `pid` belongs to (it or one of its ancestors is the run's process).

    A process this daemon started outside a run (a verify command, a hook's shell step, run_command) is no
    person either: it is `process:<pid>`, and is offered no person's decision.
    """
    if run_of_pid is None:
        return None
    chain = lineage(pid)
    found = next((run for p in chain if (run := run_of_pid(p)) is not None), None)
    if found is None and os.getpid() in chain[1:]:
        return f"process:{pid}", None
    return found


async def serve_connection(mcp: MCPServer, stream: SocketStream, run_of_pid: RunOfPid | None = None) -> None:
    """One plugin connection = one MCP session, with its own lifespan (and so its own active project)."""
    pipe = _SocketLines(stream)
    lowlevel = mcp._lowlevel_server
    try:
        # A socket connection is limited by what its own plugin asks for (`agentqueue mcp --read-only`), and is
        # who the kernel says it is: a process of one of the engine's runs is that run's agent or hook, never a
        # person, whatever its preamble claims. The daemon's own flags limit HTTP clients.
        preamble = await pipe.preamble()
        run, cwd = await anyio.to_thread.run_sync(identify_peer, stream, run_of_pid)  # reads /proc and the store
        options = socket_options(preamble, run)
        if cwd:
            options["cwd"] = cwd
        CONNECTION_OPTIONS.set(options)
        async with stream, stdio_server(stdin=pipe, stdout=pipe) as (read, write):  # type: ignore[arg-type]
            await lowlevel.run(read, write, lowlevel.create_initialization_options())
    except Exception as error:
        if is_disconnect(error):
            # Health checks (`claude mcp list`) hang up as soon as they have the tool list.
            log.debug("plugin connection closed by the client")
        else:
            log.exception("plugin connection failed")
