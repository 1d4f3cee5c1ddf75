"""One long-lived `claude -p` on stream-json both ways: messages and control answers go in, events come out.

Started in its own session (process group): the terminal's Ctrl-C reaches only `agentqueue chat`,
which turns it into a `control_request` interrupt, so the turn stops and the conversation stays.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..engine.adapters.base import load_json
from ..engine.adapters.claude_code import control_response, user_message

SERVER = "agentqueue"


class ClaudeMissing(Exception):
    """No `claude` where AgentQueue looks; the message says how to install or point at it."""


def find_claude(home: Path) -> str:
    """The engine's lookup: AGENTQUEUE_CLAUDE_BIN, config.toml [cli] claude, else PATH."""
    from .. import settings
    from ..services.agents import INSTALL_HINTS

    install = f"Install Claude Code with `{INSTALL_HINTS['claude-code']}` and log in once with `claude`."
    try:
        found = settings.load(home).find("claude")
    except settings.ConfigError as error:
        raise ClaudeMissing(f"{error} {install}") from None
    if found:
        return found
    override = os.environ.get("AGENTQUEUE_CLAUDE_BIN", "").strip()
    where = f"AGENTQUEUE_CLAUDE_BIN={override} is not an executable" if override else \
        "no `claude` in config.toml [cli], AGENTQUEUE_CLAUDE_BIN or PATH"
    raise ClaudeMissing(f"The Claude Code CLI was not found ({where}). {install} Or set AGENTQUEUE_CLAUDE_BIN "
                        "to its path; then run `agentqueue chat` again.")


# The dispatcher prompt names tools of `tasks` (skip_task, get_chain_health) and `system` (get_recent_events)
# beside the first-session list; `default` keeps enable_toolsets for the rest.
CHAT_TOOLSETS = "default,tasks,system"


def mcp_config(home: Path) -> dict[str, Any]:
    """This install's `agentqueue mcp` by absolute path with the home pinned, as `agentqueue install` writes it,
    listing what the dispatcher prompt names."""
    from ..cli.client_configs import server_entry

    entry = server_entry("claude-code", home)
    entry["args"] = [*entry["args"], "--toolsets", CHAT_TOOLSETS]
    return {"mcpServers": {SERVER: entry}}


def system_prompt(project: str | None) -> str:
    from ..prompts import load

    text = load("dispatcher")
    if project:
        text += (f"\n\nThe active project is `{project}`: call `set_active_project` with it before other tools, and "
                 "create tasks in it unless the user names another.")
    return text


def argv(claude: str, home: Path, project: str | None, model: str | None, resume: str | None) -> list[str]:
    # --strict-mcp-config: only our server (a workspace .mcp.json would otherwise start too, unasked).
    # AgentQueue's tools are allowed outright (its own policy gates the risky ones, asking us by
    # elicitation); anything else the model wants (Bash, Edit…) is asked of the person (can_use_tool).
    args = [claude, "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
            "--include-partial-messages", "--strict-mcp-config", "--mcp-config", json.dumps(mcp_config(home)),
            "--allowedTools", f"mcp__{SERVER}", "--permission-mode", "default", "--permission-prompt-tool", "stdio",
            "--append-system-prompt", system_prompt(project)]
    if model:
        args += ["--model", model]
    if resume:
        args += ["--resume", resume]
    return args


@dataclass
class Line:
    raw: str
    event: dict[str, Any] | None


EXITED = object()  # put on the queue when claude's stdout closes


class ClaudeProcess:
    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.args = args
        self.events: queue.Queue[Any] = queue.Queue()
        self.stderr_tail: deque[str] = deque(maxlen=20)
        self.next_request = 0
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     env=env, start_new_session=True)
        threading.Thread(target=self._read_stdout, daemon=True, name="claude-stdout").start()
        threading.Thread(target=self._read_stderr, daemon=True, name="claude-stderr").start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace")
            self.events.put(Line(line, load_json(line)))
        self.proc.wait()
        self.events.put(EXITED)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            text = raw.decode(errors="replace").rstrip()
            if text:
                self.stderr_tail.append(text)

    def _write(self, data: bytes) -> bool:
        with self.lock:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
                return True
            except (OSError, ValueError):  # claude is gone; the reader reports how it ended
                return False

    def send(self, text: str) -> bool:
        return self._write(user_message(text))

    def interrupt(self) -> None:
        self.next_request += 1
        self._write((json.dumps({"type": "control_request", "request_id": f"chat_{self.next_request}",
                                 "request": {"subtype": "interrupt"}}) + "\n").encode())

    def answer(self, request_id: str, response: dict[str, Any]) -> None:
        self._write(control_response(request_id, response))

    def refuse(self, request_id: str, message: str) -> None:
        self._write((json.dumps({"type": "control_response", "response": {
            "subtype": "error", "request_id": request_id, "error": message}}) + "\n").encode())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def why_it_ended(self) -> str:
        tail = " ".join(list(self.stderr_tail)[-3:])
        return f"claude exited with status {self.proc.poll()}" + (f": {tail}" if tail else " and said nothing")

    def close(self, grace: float = 10.0) -> None:
        """EOF on stdin ends claude after its current turn; it is terminated if it lingers."""
        with self.lock:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
