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
from typing import Any, Protocol
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import anyio.abc
from anyio.abc import Process

from .adapters.base import AgentEvent, Parser, RunResult, RunSpec
from .watchdog import LoopDetector, WatchdogLimits

log = logging.getLogger("agentqueue.runner")

# One stream-json line can be a big tool result; a single line beyond this is dropped, not buffered whole.
MAX_LINE_BYTES = 8 * 1024 * 1024
# Env vars of an outer Claude Code session that would confuse a nested one.
_DROP_ENV = ("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT")


@dataclass
class RunHandle:
    """What the engine keeps of a live run so stop_task can kill it from any thread."""

    pid: int | None = None
    stop_reason: str | None = None  # killed | lease_lost | timeout | stalled | loop
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
}


async def run_agent(spec: RunSpec, cwd: Path, parser: Parser, handle: RunHandle, log_path: Path,
                    limits: WatchdogLimits, on_event: Callable[[str], None] | None = None,
                    env: dict[str, str] | None = None, channel: AgentChannel | None = None) -> RunResult:
    """Run one agent to its end. `env`: what it starts from (Settings.agent_environment), default the
    daemon's own. `channel`: for an interactive spec, who answers its questions."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if k not in _DROP_ENV}
    env.update(spec.env)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    loops = LoopDetector(limits)
    last_output = time.monotonic()
    stderr_tail = bytearray()
    loop_message = ""
    interactive = spec.interactive and channel is not None
    with log_path.open("a", encoding="utf-8") as task_log:
        def write(line: str) -> None:
            task_log.write(line + "\n")
            task_log.flush()
            if on_event:
                on_event(line)

        write(f"$ {' '.join(spec.shown or spec.argv[:3])} … (cwd {cwd})")
        try:
            process: Process = await anyio.open_process(
                spec.argv, stdin=subprocess.PIPE if spec.stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(cwd), env=env,
                start_new_session=True)
        except OSError as error:
            write(f"[error] could not start: {error}")
            return RunResult("failed", error_type="crashed", error_message=f"Could not start {spec.argv[0]}: {error}")
        handle.pid = process.pid
        if handle.stop_reason:  # stopped while starting
            signal_group(process.pid, signal.SIGTERM)
        stdin_lock = anyio.Lock()

        async def send(data: bytes) -> bool:
            async with stdin_lock:
                if process.stdin is None:
                    return False
                try:
                    await process.stdin.send(data)
                    return True
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError, ConnectionResetError):
                    return False  # the agent exited (or closed stdin)

        async def close_stdin() -> None:
            async with stdin_lock:
                if process.stdin is not None:
                    with anyio.CancelScope(shield=True):
                        await process.stdin.aclose()

        async def feed_stdin() -> None:
            if process.stdin is None:
                return
            await send(spec.stdin or b"")
            if not interactive:
                await close_stdin()

        async def answer(tg: anyio.abc.TaskGroup, event: AgentEvent) -> None:
            """A question from the CLI: the channel decides (maybe after a person answers); the run waits."""
            assert channel is not None and event.data is not None
            request_id = str(event.data.get("request_id"))
            handle.waiting += 1
            try:
                response = await channel.answer(event.data.get("request") or {})
            finally:
                handle.waiting -= 1
                handle.waited_until = time.monotonic()
            await send(channel.encode_answer(request_id, response))

        async def read_stdout(tg: anyio.abc.TaskGroup) -> None:
            nonlocal last_output
            buffer = bytearray()
            cut = -1  # >= 0 while dropping the rest of an over-long line: how many bytes it had so far
            async for chunk in process.stdout:  # type: ignore[union-attr]
                last_output = time.monotonic()
                buffer += chunk
                while True:
                    newline = buffer.find(b"\n")
                    if cut >= 0:  # a line over MAX_LINE_BYTES: dropped as it arrives, never held whole
                        cut += len(buffer) if newline < 0 else newline
                        if newline < 0:
                            buffer.clear()
                            break
                        del buffer[: newline + 1]
                        write(f"[runner] an output line of {cut:,} bytes was dropped (over {MAX_LINE_BYTES:,})")
                        cut = -1
                        continue
                    if newline < 0:
                        if len(buffer) > MAX_LINE_BYTES:
                            cut, _ = len(buffer), buffer.clear()
                        break
                    line = buffer[:newline].decode("utf-8", errors="replace")
                    del buffer[: newline + 1]
                    await handle_line(tg, line)
            if buffer and cut < 0:
                await handle_line(tg, buffer.decode("utf-8", errors="replace"))

        async def handle_line(tg: anyio.abc.TaskGroup, line: str) -> None:
            nonlocal loop_message
            for event in parser.feed(line):
                if event.kind == "control":
                    if interactive:
                        tg.start_soon(answer, tg, event)
                    continue
                if event.kind == "done":
                    if interactive:
                        await close_stdin()  # the result is in: let the CLI exit
                    continue
                write(_format(event))
                if event.kind == "tool_result":
                    loops.observe_result(event.text)
                elif event.kind == "tool_call":
                    finding = loops.observe(event.tool, event.args)
                    if finding.verdict == "warn":
                        told = interactive and await send(channel.encode_message(finding.message))  # type: ignore[union-attr]
                        write(f"[watchdog] {finding.pattern}: {event.tool} {finding.count} times; warned the "
                              + ("agent in this run" if told else "log (this CLI has no channel for messages)"))
                    elif finding.verdict == "kill" and handle.stop_reason is None:
                        loop_message = finding.message
                        write(f"[watchdog] {finding.pattern}: {event.tool} {finding.count} times; killing the run")
                        handle.kill("loop")

        async def read_stderr() -> None:
            async for chunk in process.stderr:  # type: ignore[union-attr]
                stderr_tail.extend(chunk)
                del stderr_tail[:-20_000]

        async def watch() -> None:
            started = time.monotonic()
            paused = 0.0  # time spent waiting for a person: neither a stall nor part of the wall clock
            while process.returncode is None:
                now = time.monotonic()
                if handle.waiting:
                    paused += 0.2
                elif handle.stop_reason is None:
                    quiet_since = max(last_output, handle.waited_until)
                    if now - started - paused > limits.timeout_seconds:
                        write(f"[watchdog] wall-clock timeout after {limits.timeout_seconds:.0f} s; killing")
                        handle.kill("timeout")
                    elif now - quiet_since > limits.stall_seconds:
                        write(f"[watchdog] no output for {limits.stall_seconds:.0f} s: stalled; killing")
                        handle.kill("stalled")
                if handle.stop_reason is not None:
                    # Escalate: whatever of the group ignores SIGTERM for 1.5 s gets SIGKILL.
                    await anyio.sleep(1.5)
                    signal_group(process.pid, signal.SIGKILL)
                    return
                await anyio.sleep(0.2)

        async with anyio.create_task_group() as tg:
            tg.start_soon(feed_stdin)
            tg.start_soon(read_stderr)
            tg.start_soon(watch)
            await read_stdout(tg)
            await process.wait()
            tg.cancel_scope.cancel()
        if handle.stop_reason:
            signal_group(process.pid, signal.SIGKILL)  # no stragglers of a killed run
        result = parser.finish(process.returncode)
        if stderr_tail.strip():
            write("[stderr] " + stderr_tail.decode("utf-8", errors="replace")[-2000:])
        if handle.stop_reason:
            result.status = "failed"
            result.error_type = handle.stop_reason
            result.error_message = KILL_MESSAGES[handle.stop_reason].format(
                timeout=limits.timeout_seconds, stall=limits.stall_seconds, loop=loop_message)
        elif result.status == "failed" and result.error_type == "crashed" and stderr_tail.strip():
            result.error_message = f"{result.error_message} stderr: {stderr_tail.decode(errors='replace')[-500:]}"
        write(f"[done] {result.status}" + (f" ({result.error_type}: {result.error_message})" if result.error_type else ""))
        return result
