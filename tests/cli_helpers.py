"""Running the `agentqueue` CLI: in this process at a fixed width (`cli_in_process`), or as a person does (a
subprocess: `run_cli`, `installed_cli`), with a scratch HOME, against a real daemon."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentqueue import paths
from agentqueue.daemon_client import call_tool, running_daemon

from .slowdown import scaled

# Variables from the machine that would make a test depend on it.
_MACHINE = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "AGENTQUEUE_TOKEN", "AGENTQUEUE_CLAUDE_BIN", "AGENTQUEUE_CODEX_BIN",
            "AGENTQUEUE_GEMINI_BIN", "AGENTQUEUE_GH_BIN", "AGENTQUEUE_CLAUDE_AGENT_ACP_BIN", "AGENTQUEUE_CODEX_ACP_BIN",
            "AGENTQUEUE_PORT", "GIT_CONFIG_GLOBAL", "GIT_AUTHOR_NAME",
            "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL")

# What a client launch must not load: the server's libraries, and the stdlib modules the relay has no use for
# (argparse: `mcp` reads its flags by hand; pathlib, typing: the plugin holds the home as a str; subprocess,
# hashlib, tempfile: only to start a daemon or for a home too long for a socket path; socket, selectors,
# threading: the relay uses the interpreter's built-in _socket and _thread).
HEAVY_FOR_A_LAUNCH = {"mcp", "pydantic", "git", "rich", "sqlite_utils", "anyio", "uvicorn", "agentqueue.services",
                      "socket", "selectors", "threading",
                      "argparse", "pathlib", "typing", "subprocess", "hashlib", "tempfile"}


# What pip installed from bin/agentqueue (pyproject's script-files): the command a person types.
INSTALLED_SCRIPT = Path(sys.executable).parent / "agentqueue"


def cli_env(home: Path, user_home: Path, **extra: str) -> dict[str, str]:
    user_home.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in _MACHINE}
    return {**env, "AGENTQUEUE_HOME": str(home), "HOME": str(user_home), "GIT_CONFIG_NOSYSTEM": "1",
            "AGENTQUEUE_POLL_SECONDS": "0.1", "COLUMNS": "80", **extra}


def run_cli(env: dict[str, str], *args: str, timeout: float = 60, stdin: Any = subprocess.DEVNULL,
            cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agentqueue", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=stdin, cwd=cwd)


def cli_json(env: dict[str, str], *args: str) -> Any:
    done = run_cli(env, *args, "--json")
    assert done.returncode == 0, f"agentqueue {' '.join(args)} --json failed: {done.stderr}"
    return json.loads(done.stdout)


def installed_cli(env: dict[str, str], *args: str, timeout: float = 60,
                  cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The `agentqueue` script pip installed beside this interpreter, run as a person types it."""
    return subprocess.run([str(INSTALLED_SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, cwd=cwd)


@dataclass
class Ran:
    """What an in-process run of the CLI printed, and its exit status (as subprocess.CompletedProcess has them)."""

    returncode: int
    stdout: str
    stderr: str


def cli_in_process(env: dict[str, str], *args: str, width: int = 80) -> Ran:
    """`agentqueue ARGS` in this process, laid out in `width` columns, with `env` as its whole environment and
    no terminal on stdin (as run_cli gives it): the same output as the subprocess, without starting Python."""
    import io
    from unittest import mock

    from agentqueue import cli as agentqueue_cli

    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, env, clear=True), mock.patch("sys.stdin", io.StringIO()):
        code = agentqueue_cli.run(list(args), stdout=out, stderr=err, width=width)
    return Ran(code, out.getvalue(), err.getvalue())


def cli_json_in_process(env: dict[str, str], *args: str) -> Any:
    """`agentqueue ARGS --json` in this process: the JSON it printed (it must succeed)."""
    done = cli_in_process(env, *args, "--json")
    assert done.returncode == 0, f"agentqueue {' '.join(args)} --json failed: {done.stderr}"
    return json.loads(done.stdout)


def wait_until(condition: Callable[[], Any], timeout: float = 60, what: str = "the condition") -> Any:
    """Until `condition()` is truthy (returned); `timeout` is a quiet machine's seconds (tests/slowdown.py)."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.05)


@dataclass
class LiveDaemon:
    home: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid

    def call(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """A tool call by the person running the test: the policy's questions are answered yes."""
        return call_tool(self.home, tool, arguments, start=False, ask=lambda _question: True)

    def task_status(self, task_id: str) -> str:
        return cli_json(self.env, "show", task_id)["task"]["status"]

    def wait_status(self, task_id: str, *statuses: str, timeout: float = 60) -> str:
        return wait_until(lambda: (s := self.task_status(task_id)) in statuses and s,
                          timeout, f"task {task_id} to reach {statuses}")


def signals(tmp_path: Path) -> Path:
    """A folder beside the homes whose files a test's agents can see through the sandbox (WAITFOR gates, logs)."""
    folder = tmp_path / "signals"
    folder.mkdir(exist_ok=True)
    return folder


def let_agents_write(services: Any, *folders: Path) -> None:
    """An in-process engine's runs may write these folders (as `[sandbox] writable` in config.toml would allow)."""
    from agentqueue.sandbox.rules import SandboxSettings

    services.settings.sandbox = SandboxSettings(writable=tuple(folders)).over(services.settings.sandbox)


def let_agents_see_signals(home: Path) -> None:
    """The sandbox shows agents nothing under /tmp but their worktree: a test's daemon lets them use `signals`."""
    config = home / "config.toml"
    text = config.read_text() if config.exists() else ""
    if "[sandbox]" not in text:
        config.write_text(text + f'\n[sandbox]\nwritable = ["{signals(home.parent)}"]\n')


def start_daemon(env: dict[str, str], *args: str, installed: bool = False) -> LiveDaemon:
    """`agentqueue serve` in the background (`installed`: by the installed script); returns once it accepts
    connections."""
    home = Path(env["AGENTQUEUE_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    let_agents_see_signals(home)
    out = open(home / "serve.out", "ab")
    program = [str(INSTALLED_SCRIPT)] if installed else [sys.executable, "-m", "agentqueue"]
    process = subprocess.Popen([*program, "serve", *(args or ("--no-http",))], env=env,
                               stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    out.close()
    wait_until(lambda: process.poll() is not None or (running_daemon(home) and paths.socket_path(home).exists()),
               60, "the daemon to start")
    assert process.poll() is None, (home / "serve.out").read_text()
    return LiveDaemon(home, env, process)


def stop_daemon(live: LiveDaemon) -> None:
    if live.process.poll() is None:
        live.process.terminate()
        try:
            live.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            live.process.kill()
            live.process.wait()


# An agent (the `command` type) that obeys lines of its prompt:
#   WRITE <file> <text>  write a file   SAY <text>  print a line   WAITFOR <path>  wait until it exists
#   ECHO  print the whole prompt (what the engine told the agent)
AGENT = r"""
import pathlib, re, sys, time
prompt = sys.stdin.read()
for line in prompt.splitlines():
    word, _, rest = line.partition(" ")
    if word == "WRITE":
        name, _, text = rest.partition(" ")
        pathlib.Path(name).write_text(text + "\n")
    elif word == "SAY":
        print(rest, flush=True)
    elif word == "ECHO":
        print(prompt, flush=True)
    elif word == "WAITFOR":
        while not pathlib.Path(rest).exists():
            time.sleep(0.05)
"""
AGENT_COMMAND = shlex.join([sys.executable, "-c", AGENT])


class Output:
    """A child's output read as it comes (raw reads: no buffer hides a line that already arrived)."""

    def __init__(self, stream: Any) -> None:
        self.fd = stream.fileno()
        self.text = b""
        self.closed = False

    def read_until(self, needle: bytes, timeout: float = 60) -> bytes:
        import select

        deadline = time.monotonic() + timeout
        while needle not in self.text:
            if self.closed or time.monotonic() > deadline:
                raise AssertionError(f"{needle!r} not seen (closed={self.closed}); got {self.text[-2000:]!r}")
            if select.select([self.fd], [], [], 0.1)[0]:
                chunk = os.read(self.fd, 65536)
                self.closed = not chunk
                self.text += chunk
        return self.text

    def drain(self, timeout: float = 60) -> bytes:
        try:
            self.read_until(b"\0never\0", timeout)
        except AssertionError:
            pass
        return self.text
