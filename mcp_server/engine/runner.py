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
from dataclasses import dataclass, field
from pathlib import Path

import anyio
from anyio.abc import Process

from .adapters.base import AgentEvent, Parser, RunResult, RunSpec
from .watchdog import LoopDetector, WatchdogLimits

log = logging.getLogger("agentqueue.runner")

# Env vars of an outer Claude Code session that would confuse a nested one.
_DROP_ENV = ("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT")


@dataclass
class RunHandle:
    """What the engine keeps of a live run so stop_task can kill it from any thread."""

    pid: int | None = None
    stop_reason: str | None = None  # killed | timeout | stalled | loop
    started: float = field(default_factory=time.monotonic)

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


async def run_agent(spec: RunSpec, cwd: Path, parser: Parser, handle: RunHandle, log_path: Path,
                    limits: WatchdogLimits, on_event: Callable[[str], None] | None = None,
                    env: dict[str, str] | None = None) -> RunResult:
    """`env`: what the agent starts from (Settings.agent_environment); default the daemon's own."""
    env = {k: v for k, v in (os.environ if env is None else env).items() if k not in _DROP_ENV}
    env.update(spec.env)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    loops = LoopDetector(limits)
    last_output = time.monotonic()
    stderr_tail = bytearray()
    with log_path.open("a", encoding="utf-8") as task_log:
        def write(line: str) -> None:
            task_log.write(line + "\n")
            task_log.flush()
            if on_event:
                on_event(line)

        write(f"$ {' '.join(spec.argv[:3])} … (cwd {cwd})")
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

        async def feed_stdin() -> None:
            if process.stdin is not None:
                try:
                    await process.stdin.send(spec.stdin or b"")
                except (anyio.BrokenResourceError, anyio.ClosedResourceError, BrokenPipeError, ConnectionResetError):
                    pass  # the agent exited (or closed stdin) without reading its prompt
                finally:
                    await process.stdin.aclose()

        async def read_stdout() -> None:
            nonlocal last_output
            buffer = bytearray()
            async for chunk in process.stdout:  # type: ignore[union-attr]
                last_output = time.monotonic()
                buffer += chunk
                while (newline := buffer.find(b"\n")) >= 0:
                    line = buffer[:newline].decode("utf-8", errors="replace")
                    del buffer[: newline + 1]
                    handle_line(line)
            if buffer:
                handle_line(buffer.decode("utf-8", errors="replace"))

        def handle_line(line: str) -> None:
            for event in parser.feed(line):
                write(_format(event))
                if event.kind == "tool_call":
                    verdict, count = loops.observe(event.tool, event.args)
                    if verdict == "warn":
                        write(f"[watchdog] the same {event.tool} call {count} times in the last "
                              f"{limits.loop_window}: possible loop")
                    elif verdict == "kill" and handle.stop_reason is None:
                        write(f"[watchdog] loop detected: {event.tool} repeated {count} times; killing the run")
                        handle.kill("loop")

        async def read_stderr() -> None:
            async for chunk in process.stderr:  # type: ignore[union-attr]
                stderr_tail.extend(chunk)
                del stderr_tail[:-20_000]

        async def watch() -> None:
            started = time.monotonic()
            while process.returncode is None:
                now = time.monotonic()
                if handle.stop_reason is None:
                    if now - started > limits.timeout_seconds:
                        write(f"[watchdog] wall-clock timeout after {limits.timeout_seconds:.0f} s; killing")
                        handle.kill("timeout")
                    elif now - last_output > limits.stall_seconds:
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
            await read_stdout()
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
            result.error_message = {
                "killed": "The run was stopped (stop_task or shutdown).",
                "timeout": f"The run exceeded its {limits.timeout_seconds:.0f} s wall-clock limit and was killed.",
                "stalled": f"No output for {limits.stall_seconds:.0f} s; the run was killed.",
                "loop": f"The same tool call repeated {limits.loop_kill} times in {limits.loop_window}; killed.",
            }[handle.stop_reason]
        elif result.status == "failed" and result.error_type == "crashed" and stderr_tail.strip():
            result.error_message = f"{result.error_message} stderr: {stderr_tail.decode(errors='replace')[-500:]}"
        write(f"[done] {result.status}" + (f" ({result.error_type}: {result.error_message})" if result.error_type else ""))
        return result
