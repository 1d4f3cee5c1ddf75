"""Small helpers the process-level tests share: liveness checks, waiting, the env for a mocked `claude`."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pyte

from .slowdown import scaled


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs. Not `killpg(pgid, 0)`: that also finds a zombie, dead and waiting
    for its parent to read its exit (a sandbox's inner bubblewrap, orphaned to PID 1, waits for as long as PID 1
    takes to reap it)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _ppid, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, ValueError):
            continue
        if int(group) == pgid and state != "Z":
            return True
    return False


def in_group(pgid: int, word: bytes) -> bool:
    """Whether a live process of the group has `word` in its command line."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            state, _ppid, group = (proc / "stat").read_text().rsplit(")", 1)[1].split()[:3]
            if int(group) == pgid and state != "Z" and word in (proc / "cmdline").read_bytes():
                return True
        except (OSError, ValueError):
            continue
    return False


def own_children(*words: str) -> list[int]:
    """Pids of this process's children whose command line holds all of `words`."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and all(word.encode() in cmdline for word in words):
            found.append(int(proc.name))
    return found


async def wait_for(condition: Callable[[], object], timeout: float = 20, what: str = "the condition") -> None:
    """Until `condition()` holds; `timeout` is a quiet machine's seconds (scaled: tests/slowdown.py)."""
    timeout = scaled(timeout)
    try:
        with anyio.fail_after(timeout):
            while not condition():
                await anyio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}") from None



async def parent_and_follow_up(store: Any, home: Path, timeout: float = 120,
                               said: Callable[[], object] = lambda: "") -> tuple[dict[str, Any], dict[str, Any]]:
    """The first task and the follow-up its agent queued, once both are COMPLETED. On a timeout the error shows the
    tasks, what the agents were told (`said`) and the end of every task log of the daemon's home."""
    def tasks() -> list[dict[str, Any]]:
        return store.all("SELECT id, title, status, parent_task_id, depth FROM tasks ORDER BY created_at")

    try:
        await wait_for(lambda: len(tasks()) == 2 and all(t["status"] == "COMPLETED" for t in tasks()), timeout,
                       "the task and its follow-up to complete")
    except AssertionError as error:
        logs = "\n".join(p.read_text()[-3000:] for p in sorted((home / "logs" / "tasks").glob("*.log")))
        raise AssertionError(f"{error}: {tasks()} {said()}\n{logs}") from None
    parent, child = tasks()
    return parent, child

def claude_env(tmp_path: Path, base_url: str, claude: str, **extra: str) -> dict[str, str]:
    """The environment for a real `claude` talking to a loopback model mock: scratch HOME, no telemetry."""
    user_home = tmp_path / "user-home"
    user_home.mkdir(exist_ok=True)
    return {**os.environ, "HOME": str(user_home), "ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": base_url,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
            "AGENTQUEUE_CLAUDE_BIN": claude, **extra}


def run_cli_in_new_repo(argv: list[str], workdir: Path, env: dict[str, str],
                        timeout: float) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]], float]:
    """Run an agent CLI (stdin closed) in a fresh `git init` repo; returns the run, its JSONL events, seconds."""
    workdir.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=workdir, check=True)
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=workdir, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout)
    elapsed = time.monotonic() - started
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return proc, events, elapsed


def as_terminal_job() -> None:
    """In a child about to get Ctrl-C: SIGINT as a terminal's foreground job has it (a test run started in
    the background inherits it ignored, and Python then never raises KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Terminal:
    """A command on a pseudo-terminal, as a person's shell runs it: read what it shows, type, press Ctrl-C.

    `foreground=True` gives it its own session with a terminal's SIGINT (for Ctrl-C tests).
    """

    def __init__(self, argv: list[str], env: dict[str, str], foreground: bool = False, cwd: Path | None = None) -> None:
        master, slave = pty.openpty()
        self.process = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd,
                                        start_new_session=foreground,
                                        preexec_fn=as_terminal_job if foreground else None)
        os.close(slave)
        self.master = master
        self.seen = b""
        # What a person sees: 80 columns, as the program falls back to on a pty with no size; tall, so that a
        # full-screen program's redraw (cursor up over its last frame) never runs off the top.
        self._vt = pyte.Screen(80, 200)
        self._screen_feed = pyte.ByteStream(self._vt)

    def _read(self) -> bool:
        """Take what it printed in the next 0.2 s; False once it has ended and nothing more can come."""
        if select.select([self.master], [], [], 0.2)[0]:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: the program and everything that held its terminal have gone
                return False
            self._take(chunk)
            return bool(chunk)
        return True

    def read_until(self, needle: bytes, timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        while needle not in self.seen and time.monotonic() < deadline and self._read():
            pass
        return needle in self.seen

    def shows(self, text: str, timeout: float = 60) -> bool:
        """Whether `text` comes to be on the screen. Not the bytes: a program that redraws only what changed (Claude
        Code's renderer) sends "Allow it?" as "Allow", a cursor move over a space already there, and "it?"."""
        deadline = time.monotonic() + timeout
        while not self.showing(text) and time.monotonic() < deadline and self._read():
            pass
        return self.showing(text)

    def showing(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    @property
    def lines(self) -> list[str]:
        """The screen's lines as a person sees them, without colours."""
        return list(self._vt.display)

    def type(self, data: bytes) -> None:
        os.write(self.master, data)

    def drain(self) -> None:
        """What it printed after the last read, up to its end."""
        while select.select([self.master], [], [], 0.1)[0]:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            self._take(chunk)

    def _take(self, chunk: bytes) -> None:
        """What it printed: kept as bytes and drawn on the screen, on every way of reading."""
        self.seen += chunk
        self._screen_feed.feed(chunk)

    @property
    def text(self) -> str:
        return self.seen.decode(errors="replace")

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
        os.close(self.master)


def at_a_terminal(argv: list[str], env: dict[str, str], typed: str, timeout: float = 60) -> tuple[int, str]:
    """Run `argv` with a pseudo-terminal as its stdin and stderr (a person at a terminal), `typed` already typed."""
    leader, follower = pty.openpty()
    try:
        os.write(leader, typed.encode())
        done = subprocess.run(argv, env=env, stdin=follower, stderr=follower, stdout=subprocess.PIPE, text=True,
                              timeout=timeout)
    finally:
        os.close(follower)
    said = b""
    os.set_blocking(leader, False)
    try:
        while chunk := os.read(leader, 65536):
            said += chunk
    except (BlockingIOError, OSError):
        pass
    os.close(leader)
    return done.returncode, done.stdout + said.decode(errors="replace")
