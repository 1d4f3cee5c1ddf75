"""Runs one agent process: own process group, prompt on stdin, unbounded line reads, watchdog, kill.

The engine gets back the adapter's normalized result, overridden when the run was cut short
(timeout, stall, loop, stop): those kinds come from here, not from what the CLI printed.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any, Protocol, TextIO
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
from anyio.abc import Process

from ..line_splitter import LineSplitter
from ..services.cpu_priority import lower_autogroup, niced
from .adapters.base import AgentEvent, Parser, RunResult, RunSpec
from .run_usage import UsageCheckpoint
from .watchdog import LoopDetector, WatchdogLimits

log = logging.getLogger("agentqueue.runner")

# One stream-json line can be a big tool result; a single line beyond this is dropped, not buffered whole.
MAX_LINE_BYTES = 8 * 1024 * 1024
# A run's log keeps the first LOG_HEAD bytes of its output and a rolling LOG_TAIL (written when the run ends), and
# says where it was cut and how much: 300 MB of output made a 286 MiB log (issue 33 M5). The runner's own lines
# ([watchdog], [done], [stderr]…) and the engine's are never cut.
LOG_HEAD = 8 * 1024 * 1024
LOG_TAIL = 2 * 1024 * 1024
# How long a loop kill waits for the end of the response that made the call (its usage complete in the stream).
LOOP_KILL_GRACE = 1.0
# How long an agent whose protocol session is over (ACP) may take to exit by itself once its stdin is closed.
SESSION_EXIT_GRACE = 3.0
# Env vars of an outer Claude Code session that would confuse a nested one.
_DROP_ENV = ("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT")


@dataclass
class RunHandle:
    """What the engine keeps of a live run so stop_task can kill it from any thread."""

    pid: int | None = None
    stop_reason: str | None = None  # killed | lease_lost | timeout | stalled | loop | parked
    started: float = field(default_factory=time.monotonic)
    waiting: int = 0  # questions out to a person: the watchdog's clocks stand still meanwhile
    waited_until: float = 0.0  # when the last answer came back (silence before it is not a stall)

    def kill(self, reason: str) -> bool:
        """SIGTERM the run's process group now; SIGKILL follows from the runner. True if it was running."""
        if self.stop_reason is None:
            self.stop_reason = reason
        if self.pid is None:
            return False
        return signal_group(self.pid, signal.SIGTERM)


def signal_group(pid: int, sig: int) -> bool:
    try:
        os.killpg(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _format(event: AgentEvent) -> str:
    if event.kind == "tool_call":
        return f"[tool] {event.tool} {str(event.args)[:500]}"
    if event.kind == "tool_result":
        return f"[result] {event.text[:500]}"
    if event.kind in ("system", "error"):
        return f"[{event.kind}] {event.text}"
    return event.text


class AgentChannel(Protocol):
    """The engine's side of a two-way run: it answers the CLI's questions (permission requests)."""

    async def answer(self, request: dict[str, Any]) -> dict[str, Any]: ...

    def encode_answer(self, request_id: str, response: dict[str, Any]) -> bytes: ...

    def encode_message(self, text: str) -> bytes: ...


KILL_MESSAGES = {
    "killed": "The run was stopped (stop_task or shutdown).",
    "lease_lost": "This daemon lost its lease and another daemon took the run over; this run was stopped.",
    "timeout": "The run exceeded its {timeout:.0f} s wall-clock limit and was killed.",
    "stalled": "No output for {stall:.0f} s; the run was killed.",
    "loop": "{loop}",
    "parked": "{parked}",
}


async def run_agent(spec: RunSpec, cwd: Path, parser: Parser, handle: RunHandle, log_path: Path,
                    limits: WatchdogLimits, on_event: Callable[[str], None] | None = None,
                    env: dict[str, str] | None = None, channel: AgentChannel | None = None,
                    nice: int = 0, checkpoint: UsageCheckpoint | None = None) -> RunResult:
    """Run one agent to its end. `env`: what it starts from (Settings.agent_environment), default the
    daemon's own. `channel`: for an interactive spec, who answers its questions. `nice`: how many niceness levels
    below the daemon the run's session goes ([engine] agent_nice). `checkpoint`: where the usage its stream shows is
    kept as it goes (run_usage.py), for a daemon that dies before the run ends."""
    return await AgentRun(spec, cwd, parser, handle, log_path, limits, on_event, channel, nice, checkpoint).run(env)


class AgentRun:
    """One agent process from spawn to result: its output read line by line into the task log and the parser,
    its questions answered, and a watchdog that kills it (SIGTERM, then SIGKILL 1.5 s later) on a timeout, a
    stall, a loop or a stop."""

    def __init__(self, spec: RunSpec, cwd: Path, parser: Parser, handle: RunHandle, log_path: Path,
                 limits: WatchdogLimits, on_event: Callable[[str], None] | None = None,
                 channel: AgentChannel | None = None, nice: int = 0, checkpoint: UsageCheckpoint | None = None) -> None:
        self.spec, self.cwd, self.parser, self.handle = spec, cwd, parser, handle
        self.checkpoint = checkpoint
        # A parser that can say what the stream has used so far (Claude Code's, response by response).
        self.running_usage: Callable[[], tuple[dict[str, int], float | None]] | None = getattr(
            parser, "running_usage", None) if checkpoint is not None else None
        self.nice = nice
        self.lowered = nice == 0  # the session's autogroup is set (cpu_priority.lower_autogroup)
        self.log_path, self.limits, self.on_event, self.channel = log_path, limits, on_event, channel
        self.interactive = spec.interactive and channel is not None
        # Who writes the answers and messages on the CLI's wire: its parser when the protocol is its own (Codex's
        # JSON-RPC), else the channel (Claude Code's stream-json).
        self.wire: AgentChannel | Any = parser if hasattr(parser, "encode_answer") else channel
        self.loops = LoopDetector(limits)
        self.last_output = time.monotonic()  # the watchdog's stall clock
        self.stderr_tail = bytearray()
        self.loop_message = ""  # why the loop detector killed the run
        self.loop_kill_at: float | None = None  # when a loop kill that waits for its response's end happens anyway
        self.process: Process | None = None
        self._stdin_lock = anyio.Lock()
        self._log: TextIO | None = None
        self._logged = 0  # bytes of output in the log's head
        self._tail: deque[str] = deque()  # output past the head, its last LOG_TAIL bytes
        self._tail_bytes = 0
        self._cut = [0, 0]  # bytes and lines of output dropped between the head and the tail

    async def run(self, env: dict[str, str] | None = None) -> RunResult:
        env = {k: v for k, v in (os.environ if env is None else env).items() if k not in _DROP_ENV}
        env.update(self.spec.env)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a", encoding="utf-8") as self._log:
            self.write(f"$ {' '.join(self.spec.shown or self.spec.argv[:3])} … (cwd {self.cwd})")
            try:
                process = await self._spawn(env)
            except OSError as error:
                self.write(f"[error] could not start: {error}")
                return RunResult("failed", error_type="crashed",
                                 error_message=f"Could not start {self.spec.argv[0]}: {error}")
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._feed_stdin)
                    tg.start_soon(self._read_stderr)
                    tg.start_soon(self._watch)
                    await self._read_stdout(tg)
                    await process.wait()
                    tg.cancel_scope.cancel()
            except BaseException:
                self._write_tail()
                # Cancelled (a shutdown past its grace) or broken: nothing of the run may outlive it. bubblewrap's
                # init of the run's PID namespace ignores the death of its parent, so only the group's kill ends it.
                signal_group(process.pid, signal.SIGKILL)
                raise
            before = getattr(self.parser, "before_finish", None)
            if before is not None:  # reads a file the run wrote: never on the event loop (run_files.py)
                await anyio.to_thread.run_sync(before)
            return self._finish(process)

    def output(self, line: str) -> None:
        """A line of the agent's output: in the log's head, else in the rolling tail (the cut said once, here)."""
        size = len(line.encode("utf-8", errors="replace")) + 1
        if not self._tail and self._logged + size <= LOG_HEAD:
            self._logged += size
            self.write(line)
            return
        if not self._tail and not any(self._cut):
            self.write(f"[runner] the log passed {LOG_HEAD >> 20} MiB: the rest of this run's output is cut; its last "
                       f"{LOG_TAIL >> 20} MiB are written when the run ends")
        line = line[-LOG_TAIL:]
        self._tail.append(line)
        self._tail_bytes += size
        while self._tail_bytes > LOG_TAIL and len(self._tail) > 1:
            dropped = self._tail.popleft()
            gone = len(dropped.encode("utf-8", errors="replace")) + 1
            self._tail_bytes -= gone
            self._cut[0] += gone
            self._cut[1] += 1
        if self.on_event:
            self.on_event(line)

    def _write_tail(self) -> None:
        """The rolling tail, after a line that says how much was cut before it."""
        if self._log is None or not (self._tail or any(self._cut)):
            return
        tail, self._tail = self._tail, deque()
        self.write(f"[runner] {self._cut[0]:,} bytes ({self._cut[1]:,} lines) of output were cut here; the last "
                   f"{self._tail_bytes:,} bytes follow")
        self._cut = [0, 0]
        for line in tail:
            self._log.write(line + "\n")
        self._log.flush()

    def write(self, line: str) -> None:
        """A line in the task log (flushed: the log is read while the run goes on), told to `on_event`."""
        assert self._log is not None
        self._log.write(line + "\n")
        self._log.flush()
        if self.on_event:
            self.on_event(line)

    # -- the process ---------------------------------------------------------------------------------
    async def _spawn(self, env: dict[str, str]) -> Process:
        """The agent in a session of its own, its CPU priority lowered (a stop that came while it started is sent at
        once); raises OSError when it cannot start."""
        spec = self.spec
        self.process = await anyio.open_process(
            niced(spec.argv, self.nice), stdin=subprocess.PIPE if spec.stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(self.cwd), env=env, start_new_session=True)
        self.handle.pid = self.process.pid
        self._lower()
        if self.handle.stop_reason:  # stopped while starting
            signal_group(self.process.pid, signal.SIGTERM)
        return self.process

    def _lower(self) -> None:
        """The run's session as a whole below the daemon ([engine] agent_nice); tried again by the watchdog while the
        kernel says to wait (it takes one such change in 0.1 s from a process without CAP_SYS_ADMIN)."""
        if not self.lowered and self.process is not None and self.process.returncode is None:
            self.lowered = lower_autogroup(self.process.pid, self.nice)

    async def _watch(self) -> None:
        """Kill the run on its wall-clock timeout or a stall; then SIGKILL whatever of it outlives SIGTERM."""
        assert self.process is not None
        handle, limits = self.handle, self.limits
        started = time.monotonic()
        paused = 0.0  # time spent waiting for a person: neither a stall nor part of the wall clock
        while self.process.returncode is None:
            self._lower()
            now = time.monotonic()
            if handle.stop_reason is None and self.loop_kill_at is not None and now >= self.loop_kill_at:
                handle.kill("loop")  # the response that made the looping call never said it ended
            if handle.waiting:
                paused += 0.2
            elif handle.stop_reason is None:
                quiet_since = max(self.last_output, handle.waited_until)
                if now - started - paused > limits.timeout_seconds:
                    self.write(f"[watchdog] wall-clock timeout after {limits.timeout_seconds:.0f} s; killing")
                    handle.kill("timeout")
                elif now - quiet_since > limits.stall_seconds:
                    self.write(f"[watchdog] no output for {limits.stall_seconds:.0f} s: stalled; killing")
                    handle.kill("stalled")
            if handle.stop_reason is not None:
                # Escalate: whatever of the group ignores SIGTERM for 1.5 s gets SIGKILL.
                await anyio.sleep(1.5)
                signal_group(self.process.pid, signal.SIGKILL)
                return
            await anyio.sleep(0.2)

    def _finish(self, process: Process) -> RunResult:
        """The parser's result, overridden by why the run was killed; the stderr tail logged."""
        self._write_tail()
        handle, limits, tail = self.handle, self.limits, self.stderr_tail
        if handle.stop_reason:
            signal_group(process.pid, signal.SIGKILL)  # no stragglers of a killed run
        result = self.parser.finish(process.returncode)
        if tail.strip():
            self.write("[stderr] " + tail.decode("utf-8", errors="replace")[-2000:])
        found = getattr(self.parser, "account_error", None)
        if handle.stop_reason == "parked" and found is not None:
            # Stopped at the first error line: the login or the limit is the failure, not the stop.
            result.status, result.error_type, result.error_message = "failed", found.kind, found.message
            result.resets_at = found.resets_at
        elif handle.stop_reason:
            result.status = "failed"
            result.error_type = handle.stop_reason
            result.error_message = KILL_MESSAGES[handle.stop_reason].format(
                timeout=limits.timeout_seconds, stall=limits.stall_seconds, loop=self.loop_message, parked="")
        elif result.status == "failed" and result.error_type == "crashed" and tail.strip():
            result.error_message = f"{result.error_message} stderr: {tail.decode(errors='replace')[-500:]}"
        self.write(f"[done] {result.status}"
                   + (f" ({result.error_type}: {result.error_message})" if result.error_type else ""))
        return result

    # -- stdin ---------------------------------------------------------------------------------------
    async def _send(self, data: bytes) -> bool:
        async with self._stdin_lock:
            if self.process is None or self.process.stdin is None:
                return False
            try:
                await self.process.stdin.send(data)
                return True
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError, ConnectionResetError):
                return False  # the agent exited (or closed stdin)

    async def _close_stdin(self) -> None:
        async with self._stdin_lock:
            if self.process is not None and self.process.stdin is not None:
                with anyio.CancelScope(shield=True):
                    await self.process.stdin.aclose()

    async def _feed_stdin(self) -> None:
        if self.process is None or self.process.stdin is None:
            return
        await self._send(self.spec.stdin or b"")
        drive = getattr(self.parser, "drive", None)  # a parser that is the client of a protocol (ACP) drives it
        if self.interactive and drive is not None:
            await drive(self._send, self._close_stdin, self.cwd)
            await self._end_lingering()
        elif not self.interactive:
            await self._close_stdin()

    async def _end_lingering(self) -> None:
        """The session is over and stdin closed: an agent still running SESSION_EXIT_GRACE later is ended (Gemini in
        ACP mode stays up while an MCP server it started is connected); the run's result is the session's."""
        assert self.process is not None
        with anyio.move_on_after(SESSION_EXIT_GRACE):
            await self.process.wait()
        if self.process.returncode is None and self.handle.stop_reason is None:
            self.write(f"[runner] the session is over but the agent is still running after {SESSION_EXIT_GRACE:g} s; "
                       "ending it")
            signal_group(self.process.pid, signal.SIGTERM)
            with anyio.move_on_after(1.5):
                await self.process.wait()
            signal_group(self.process.pid, signal.SIGKILL)

    async def _answer(self, event: AgentEvent) -> None:
        """A question from the CLI: the channel decides (maybe after a person answers); the run waits."""
        assert self.channel is not None and event.data is not None
        request_id = str(event.data.get("request_id"))
        if getattr(self.channel, "holds_watchdog", False):  # it stops the clocks itself, only while a person decides
            response = await self.channel.answer(event.data.get("request") or {})
        else:
            self.handle.waiting += 1
            try:
                response = await self.channel.answer(event.data.get("request") or {})
            finally:
                self.handle.waiting -= 1
                self.handle.waited_until = time.monotonic()
        await self._send(self.wire.encode_answer(request_id, response))

    # -- stdout and stderr ---------------------------------------------------------------------------
    async def _read_stdout(self, tg: anyio.abc.TaskGroup) -> None:
        assert self.process is not None and self.process.stdout is not None
        lines = LineSplitter(MAX_LINE_BYTES, on_drop=lambda size: self.write(
            f"[runner] an output line of {size:,} bytes was dropped (over {MAX_LINE_BYTES:,})"))
        async for chunk in self.process.stdout:
            self.last_output = time.monotonic()
            for line in lines.feed(chunk):
                await self._handle_line(tg, line.decode("utf-8", errors="replace"))
        rest = lines.rest()
        if rest:
            await self._handle_line(tg, rest.decode("utf-8", errors="replace"))

    async def _handle_line(self, tg: anyio.abc.TaskGroup, line: str) -> None:
        events = self.parser.feed(line)
        for event in events:
            if event.kind == "control":
                if self.interactive:
                    tg.start_soon(self._answer, event)
                continue
            if event.kind == "send":
                if self.interactive:
                    await self._send(event.text.encode())
                continue
            if event.kind == "done":
                if self.interactive:
                    await self._close_stdin()  # the result is in: let the CLI exit
                continue
            if event.kind == "usage":
                if self.loop_kill_at is not None:
                    self.handle.kill("loop")  # at the end of the response that made the call: all of it counted
                continue
            self.output(_format(event))
            if event.kind == "tool_result":
                self.loops.observe_result(event.text)
            elif event.kind == "tool_call":
                await self._observe_call(event)
        if events and self.running_usage is not None and self.checkpoint is not None:
            self.checkpoint.update(*self.running_usage())
        self._stop_if_parked()

    def _stop_if_parked(self) -> None:
        """A failed login or a usage limit in the stream (the parser's `account_error`): stop the run now, not after
        the CLI's own retries; the engine parks the agent kind (engine/parking.py)."""
        found = getattr(self.parser, "account_error", None)
        if found is not None and self.handle.stop_reason is None:
            self.write(f"[queue] {found.kind} at the first error line: stopping the run ({found.message[:300]})")
            self.handle.kill("parked")

    async def _observe_call(self, event: AgentEvent) -> None:
        """The loop detector's verdict on a tool call: a warning (to the agent when it can be told) or a kill."""
        finding = self.loops.observe(event.tool, event.args)
        if finding.verdict == "warn":
            warn = getattr(self.parser, "warn", None)  # a protocol client tells the model its own way (ACP: a prompt)
            if warn is not None:
                told = self.interactive and await warn(finding.message)
            else:
                note = self.wire.encode_message(finding.message) if self.interactive and self.wire is not None else b""
                told = bool(note) and await self._send(note)  # empty: the CLI cannot be told right now
            self.write(f"[watchdog] {finding.pattern}: {event.tool} {finding.count} times; warned the "
                       + ("agent in this run" if told else "log (this CLI has no channel for messages)"))
        elif finding.verdict == "kill" and self.handle.stop_reason is None and self.loop_kill_at is None:
            # Killed once the response that made the call has ended (its usage then whole in the stream, so the run
            # is paid for to the token), or LOOP_KILL_GRACE later by the watchdog for a CLI that never says so.
            self.loop_message = finding.message
            self.write(f"[watchdog] {finding.pattern}: {event.tool} {finding.count} times; killing the run")
            if getattr(self.parser, "drive", None) is not None:
                self.handle.kill("loop")  # an ACP agent reports usage only at a turn's end: no response to wait for
            else:
                self.loop_kill_at = time.monotonic() + LOOP_KILL_GRACE

    async def _read_stderr(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        feed = getattr(self.parser, "feed_stderr", None)  # a CLI that reports its HTTP errors on stderr
        lines = LineSplitter(64 * 1024)
        async for chunk in self.process.stderr:
            self.stderr_tail.extend(chunk)
            del self.stderr_tail[:-20_000]
            if feed is not None:
                for line in lines.feed(chunk):
                    feed(line.decode("utf-8", errors="replace"))
                self._stop_if_parked()
