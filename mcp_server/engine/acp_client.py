"""The engine's side of an ACP run: it answers what the agent asks of its client.

- `session/request_permission`: the policy decides the call (engine/acp_actions.py maps it to `Bash(…)`,
  `Edit(…)`…) through the same PermissionChannel as Claude Code's `can_use_tool`: allow and deny at once, ask
  → a permission request and WAITING_INPUT until a person answers. Allowed calls get the `allow_once` option and
  refused ones `reject_once`, so the agent asks again next time and the policy decides every call. A refusal's
  reason goes in the answer's `_meta.agentqueue.refusal`, for the session to tell the model (ACP's reject has no
  message).
- `fs/read_text_file`, `fs/write_text_file`: only inside the task's worktree, compared by resolved path (`..`,
  symlinks and absolute paths elsewhere are refused in one sentence), each decided as `Read(path)` / `Edit(path)`.
  A write or a terminal the agent was just allowed through request_permission is not decided (or asked) twice.
- `terminal/*`: a command decided as `Bash(command)` (every simple command of it), run in the worktree inside the
  same OS sandbox as the run (sandbox/runs.py), its output read from a pipe into a ring buffer in the daemon: only the
  last `outputByteLimit` bytes are kept (OUTPUT_LIMIT when the agent gives none, never over MAX_OUTPUT_LIMIT), and
  `terminal/output` says `truncated` once the front was dropped. A command printing without end costs the daemon
  at most twice that limit, on disk nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process

from ..services.cpu_priority import lower_autogroup, niced
from ..services.policy_rules import agent_action
from ..services.shell import shell_argv
from .acp_actions import tool_call_input
from .adapters.acp import answer_line, as_dict, schema
from .permissions import PermissionChannel

log = logging.getLogger("agentqueue.acp")

INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
REFUSED = -32000  # an application error: refused by AgentQueue (the message says why)
OUTPUT_LIMIT = 1_000_000  # bytes of a terminal's output kept when the agent sets no outputByteLimit
MAX_OUTPUT_LIMIT = 16 * 1024 * 1024  # the most kept whatever outputByteLimit the agent asks for
MAX_TERMINALS = 16
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # what a shell accepts before a command


class Refused(Exception):
    """A request AgentQueue will not serve; its text is the one sentence the agent sees."""


# Runs a terminal command inside the run's sandbox: (argv, cwd, env) -> a context that yields the argv and
# environment to start (the orchestrator's, from sandbox/runs.py).
Started = tuple[list[str], dict[str, str]]
Contain = Callable[[list[str], Path, dict[str, str]], contextlib.AbstractContextManager[Started]]


class Ring:
    """The last `limit` bytes of a terminal's output (ACP's outputByteLimit), fed from its pipe by a thread of its
    own; the front is dropped in whole blocks (the buffer is at most twice the limit), so each byte is moved once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.dropped = 0
        self.lock = threading.Lock()

    def feed(self, chunk: bytes) -> None:
        with self.lock:
            self.data.extend(chunk)
            if len(self.data) > 2 * self.limit:
                cut = len(self.data) - self.limit
                del self.data[:cut]
                self.dropped += cut

    def tail(self) -> tuple[bytes, bool]:
        """(the kept output, whether anything before it was dropped)."""
        with self.lock:
            keep = bytes(self.data[-self.limit:]) if self.limit else b""
            return keep, self.dropped > 0 or len(self.data) > len(keep)

    def pump(self, fd: int) -> None:
        """Read the terminal's pipe until every writer closed it (the command and anything it left running)."""
        try:
            while chunk := os.read(fd, 65536):
                self.feed(chunk)
        except OSError:
            pass
        finally:
            os.close(fd)


@dataclass
class Terminal:
    process: Process
    output: Ring
    limit: int
    stack: contextlib.ExitStack
    exit_code: int | None = None
    signal: str | None = None
    done: bool = False
    extra: list[str] = field(default_factory=list)


class AcpChannel:
    """Answers one ACP run's requests (see the module's docstring). `close()` ends its terminals."""

    holds_watchdog = True  # the runner's clocks stop only while a person decides, not while a command runs

    def __init__(self, permissions: PermissionChannel, contain: Contain, env: dict[str, str],
                 handle: Any = None, masks: dict[Path, bytes | None] | None = None, nice: int = 0) -> None:
        self.permissions = permissions
        self.nice = nice  # its terminals run as far below the daemon as the agent ([engine] agent_nice)
        self.root = Path(os.path.realpath(permissions.root))
        # Run-configuring files an unmerged earlier run planted: the sandbox shows the run the default branch's
        # copy, read-only (None: no such file there), and so do fs/* (engine/protected.py).
        self.masks = {Path(os.path.realpath(path)): content for path, content in (masks or {}).items()}
        self.contain = contain
        self.env = env
        self.handle = handle
        # Edit(path) and Bash(command) actions allowed through request_permission: their fs/write or terminal/create
        # is not decided (or asked) a second time.
        self.granted: set[str] = set()
        self.terminals: dict[str, Terminal] = {}
        self._ids = 0

    # -- the wire ------------------------------------------------------------------------------------
    def encode_answer(self, request_id: str, response: dict[str, Any]) -> bytes:
        return answer_line(request_id, response)  # the session writes the run's answers (AcpSession.encode_answer)

    def encode_message(self, text: str) -> bytes:
        return b""  # a loop warning goes as a prompt (adapters/acp.py AcpSession.warn)

    # -- dispatch ------------------------------------------------------------------------------------
    async def answer(self, message: dict[str, Any]) -> dict[str, Any]:
        method = str(message.get("method") or "")
        params = as_dict(message.get("params"))
        handler = self.HANDLERS.get(method)
        if handler is None:
            return _error(METHOD_NOT_FOUND, f"AgentQueue does not serve {method!r}.")
        try:
            return {"result": await handler(self, params)}
        except Refused as error:
            self.permissions.write_log(f"[acp] refused {method}: {error}")
            return _error(REFUSED, str(error))
        except ValueError as error:  # pydantic's ValidationError is one
            return _error(INVALID_PARAMS, f"{method}: invalid params ({str(error)[:500]})")

    async def _decide(self, tool: str, tool_input: dict[str, Any], description: str | None = None) -> dict[str, Any]:
        """The policy's answer (maybe a person's) in Claude Code's shape: {"behavior": "allow"|"deny", …}."""
        request = {"subtype": "can_use_tool", "tool_name": tool, "input": tool_input, "description": description}
        if self.handle is None:
            return await self.permissions.answer(request)
        self.handle.waiting += 1
        try:
            return await self.permissions.answer(request)
        finally:
            self.handle.waiting -= 1
            self.handle.waited_until = time.monotonic()

    async def _require(self, tool: str, tool_input: dict[str, Any]) -> None:
        verdict = await self._decide(tool, tool_input)
        if verdict.get("behavior") != "allow":
            raise Refused(str(verdict.get("message") or f"{tool} was refused."))

    async def _require_once(self, tool: str, tool_input: dict[str, Any]) -> None:
        """Decided unless the agent was allowed this very action through request_permission just before."""
        action = str(agent_action(tool, tool_input, self.root))
        if action in self.granted:
            self.granted.discard(action)
        else:
            await self._require(tool, tool_input)

    # -- permission ----------------------------------------------------------------------------------
    async def request_permission(self, params: dict[str, Any]) -> dict[str, Any]:
        request = schema().RequestPermissionRequest.model_validate(params)
        call = request.tool_call.model_dump(by_alias=True, exclude_none=True)
        tool, tool_input = tool_call_input(call, self.root)
        verdict = await self._decide(tool, tool_input, call.get("title"))
        allowed = verdict.get("behavior") == "allow"
        kinds = ("allow_once", "allow_always") if allowed else ("reject_once", "reject_always")
        options = {o.kind: o.option_id for o in reversed(request.options)}
        chosen = next((options[k] for k in kinds if k in options), None)
        if allowed and tool in ("Edit", "Bash"):  # its fs/write or terminal/create follows: decided once
            self.granted.add(str(agent_action(tool, tool_input, self.root)))
        outcome = {"outcome": "selected", "optionId": chosen} if chosen is not None else {"outcome": "cancelled"}
        reason = str(verdict.get("message") or "")
        if allowed or not reason:
            return {"outcome": outcome}
        # ACP's reject has no message: the reason rides in `_meta` (which the protocol lets any result carry), and the
        # session sends it to the model as its next prompt (adapters/acp.py AcpSession.encode_answer).
        return {"outcome": outcome, "_meta": {"agentqueue": {"refusal": reason}}}

    # -- files ---------------------------------------------------------------------------------------
    def jailed(self, path: str) -> Path:
        """The path resolved (symlinks and `..` followed) when it is inside the worktree; else Refused."""
        given = Path(path)
        full = Path(os.path.realpath(given if given.is_absolute() else self.root / given))
        if full != self.root and not full.is_relative_to(self.root):
            raise Refused(f"{path} is outside this task's worktree ({self.root}): AgentQueue serves files only "
                          "inside it.")
        return full

    async def read_text_file(self, params: dict[str, Any]) -> dict[str, Any]:
        request = schema().ReadTextFileRequest.model_validate(params)
        full = self.jailed(request.path)
        await self._require("Read", {"file_path": str(full)})
        if full in self.masks:
            masked = self.masks[full]
            if masked is None:
                raise Refused(f"{request.path} cannot be read: No such file or directory.")
            text = masked.decode("utf-8", errors="replace")
        else:
            try:
                text = await anyio.Path(full).read_text(encoding="utf-8", errors="replace")
            except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as error:
                raise Refused(f"{request.path} cannot be read: {error.strerror}.") from None
        if request.line is not None or request.limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((request.line or 1) - 1, 0)
            text = "".join(lines[start:start + request.limit] if request.limit is not None else lines[start:])
        return {"content": text}

    async def write_text_file(self, params: dict[str, Any]) -> dict[str, Any]:
        request = schema().WriteTextFileRequest.model_validate(params)
        full = self.jailed(request.path)
        if full in self.masks:
            raise Refused(f"{request.path} is a run-configuring file an earlier, unmerged run changed: this run sees "
                          "the default branch's copy, read-only.")
        await self._require_once("Edit", {"file_path": str(full)})
        full.parent.mkdir(parents=True, exist_ok=True)
        await anyio.Path(full).write_text(request.content, encoding="utf-8")
        return {}

    # -- terminals -----------------------------------------------------------------------------------
    async def create_terminal(self, params: dict[str, Any]) -> dict[str, Any]:
        request = schema().CreateTerminalRequest.model_validate(params)
        command = shlex.join([request.command, *request.args]) if request.args else request.command
        cwd = self.jailed(request.cwd) if request.cwd else self.root
        if len(self.terminals) >= MAX_TERMINALS:
            raise Refused(f"{MAX_TERMINALS} terminals are open: terminal/release one first.")
        variables = {v.name: v.value for v in request.env or []}
        bad = [name for name in variables if not VARIABLE_NAME.fullmatch(name)]
        if bad:
            raise Refused(f"Not an environment variable name: {bad[0][:100]!r}. Nothing was run.")
        # The policy decides the command with its variables, as if typed `PATH=./bin ls`: a variable that changes
        # what runs (PATH, LD_PRELOAD, BASH_ENV) is asked about there, never slipped past an allowed `ls`.
        assigned = " ".join(f"{name}={shlex.quote(value)}" for name, value in variables.items())
        await self._require_once("Bash", {"command": f"{assigned} {command}" if assigned else command})
        env = {**self.env, **variables}
        self._ids += 1
        terminal_id = f"term-{self._ids}"
        asked = request.output_byte_limit
        limit = min(max(asked, 0), MAX_OUTPUT_LIMIT) if asked is not None else OUTPUT_LIMIT
        output = Ring(limit)
        stack = contextlib.ExitStack()
        try:
            # bash, not /bin/sh: the policy judged the command by bash's grammar (docs/design.md, issue 33)
            argv, inner_env = stack.enter_context(self.contain(shell_argv(command), cwd, env))
            reader, writer = os.pipe()  # close-on-exec: only the command gets the write end, as its stdout
            try:
                # The agent's work in a session of its own: lowered as the agent's is (its autogroup: one try).
                process = await anyio.open_process(niced(argv, self.nice), stdin=subprocess.DEVNULL, stdout=writer,
                                                   stderr=subprocess.STDOUT, cwd=str(cwd), env=inner_env,
                                                   start_new_session=True)
            except BaseException:
                os.close(reader)
                raise
            finally:
                os.close(writer)
            threading.Thread(target=output.pump, args=(reader,), daemon=True, name=f"acp {terminal_id}").start()
            if self.nice:
                lower_autogroup(process.pid, self.nice)
        except BaseException:
            stack.close()
            raise
        self.terminals[terminal_id] = Terminal(process, output, limit, stack)
        self.permissions.write_log(f"[acp] terminal {terminal_id}: {command[:300]}")
        return {"terminalId": terminal_id}

    def _terminal(self, params: dict[str, Any]) -> Terminal:
        terminal = self.terminals.get(str(params.get("terminalId") or ""))
        if terminal is None:
            raise Refused(f"No terminal {params.get('terminalId')!r} (released, or never created).")
        return terminal

    @staticmethod
    def _status(terminal: Terminal) -> dict[str, Any] | None:
        code = terminal.process.returncode
        if code is None:
            return None
        return {"exitCode": code, "signal": None} if code >= 0 else {"exitCode": None,
                                                                     "signal": signal.Signals(-code).name}

    async def terminal_output(self, params: dict[str, Any]) -> dict[str, Any]:
        terminal = self._terminal(params)
        data, truncated = terminal.output.tail()
        text = data.decode("utf-8", errors="ignore")  # a cut at the front may split a character: dropped
        return {"output": text, "truncated": truncated, "exitStatus": self._status(terminal)}

    async def wait_for_exit(self, params: dict[str, Any]) -> dict[str, Any]:
        terminal = self._terminal(params)
        await terminal.process.wait()
        return self._status(terminal) or {}

    async def kill_terminal(self, params: dict[str, Any]) -> dict[str, Any]:
        _kill(self._terminal(params))
        return {}

    async def release_terminal(self, params: dict[str, Any]) -> dict[str, Any]:
        terminal = self._terminal(params)
        self.terminals.pop(str(params.get("terminalId")), None)
        _kill(terminal)
        with anyio.CancelScope(shield=True):
            with contextlib.suppress(Exception):
                await terminal.process.wait()
        terminal.stack.close()
        return {}

    def close(self) -> None:
        """At the end of the run: every terminal killed, its sandbox closed (its output goes with it)."""
        for terminal in self.terminals.values():
            _kill(terminal)
            terminal.stack.close()
        self.terminals.clear()

    HANDLERS = {
        "session/request_permission": request_permission, "fs/read_text_file": read_text_file,
        "fs/write_text_file": write_text_file, "terminal/create": create_terminal, "terminal/output": terminal_output,
        "terminal/wait_for_exit": wait_for_exit, "terminal/kill": kill_terminal,
        "terminal/release": release_terminal,
    }


def _kill(terminal: Terminal) -> None:
    if terminal.process.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(terminal.process.pid, signal.SIGKILL)


def _error(code: int, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def sandboxed(services: Any, root: Path, project_id: str, task_id: str | None, preset: str,
              actor: str, log_line: Callable[[str], None] | None = None) -> Contain:
    """Terminal commands inside the OS sandbox of the run's worktree: its rules as for the run (worktree writable
    unless readonly, the network through the gate's allowlist, secrets hidden); as they are only where a person set
    `[sandbox] required = false` and none can start (the run itself then ran unsandboxed too)."""
    sandbox = services.sandbox

    @contextlib.contextmanager
    def contain(argv: list[str], cwd: Path, env: dict[str, str]) -> Iterator[Started]:
        if sandbox.unavailable():
            yield argv, env
            return
        rules = sandbox.rules_for(root, project_id, preset=preset, env=env, agent_socket=True,
                                  argv0=argv[0])
        with sandbox.contained(argv, env, rules, sandbox.deny_recorder(actor, project_id, task_id, log_line),
                               lambda host, port: sandbox.registry_allowed(project_id, host, port)) as inner:
            yield inner
    return contain


@contextlib.contextmanager
def uncontained(argv: list[str], cwd: Path, env: dict[str, str]) -> Iterator[tuple[list[str], dict[str, str]]]:
    """No sandbox (a unit test's, or `[sandbox] required = false` where none can start)."""
    yield argv, env
