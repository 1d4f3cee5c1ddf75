"""`agentqueue chat`: the prompt loop (with the queue's lines and inline answers) and the one-shot `-p`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from ..visible import visible
from . import state
from .claude import ClaudeMissing, ClaudeProcess, argv, find_claude
from .turns import Conversation, TurnResult

HELP = """\
Talk to the dispatcher; it queues work for the agents with AgentQueue's tools.
  /allow [id]   /deny [id] [why]   /always [id]   answer an agent's permission request
                                                  (the id can be left out when one is pending)
  /approve ID   approve a task that awaits approval
  /requests     the pending permission requests
  /exit         leave (or Ctrl-D); Ctrl-C stops the current reply
`agentqueue chat --resume` continues the last conversation."""


def run(home: Path, project: str | None, model: str | None, resume: bool, prompt: str | None,
        as_json: bool) -> int:
    try:
        claude = find_claude(home)
    except ClaudeMissing as error:
        print(f"agentqueue chat: {visible(str(error), multiline=True)}", file=sys.stderr)
        return 1
    session_id = None
    if resume:
        last = state.last_session(home)
        if last is None:
            print(f"agentqueue chat: there is no earlier chat to resume in {home}; start one with "
                  "`agentqueue chat`.", file=sys.stderr)
            return 1
        session_id = last["session_id"]
        project = project or last.get("project")
    if prompt is None and not _ensure_daemon(home):
        return 1
    try:
        process = ClaudeProcess(argv(claude, home, project, model, session_id))
    except OSError as error:
        print(visible(f"agentqueue chat: {claude} could not start ({error.strerror or error}). Check it runs "
                      "(`claude --version`), reinstall it or set AGENTQUEUE_CLAUDE_BIN; `agentqueue doctor` helps."),
              file=sys.stderr)
        return 1
    conversation = Conversation(process)
    try:
        if prompt is not None:
            return _one_shot(home, project, conversation, prompt, as_json)
        return _interactive(home, project, conversation, claude)
    finally:
        process.close()


def _ensure_daemon(home: Path) -> bool:
    from ..daemon.relay import DaemonStartError, connect_or_start

    try:
        connect_or_start(home, progress=lambda line: print(visible(line), file=sys.stderr, flush=True)).close()
    except DaemonStartError as error:
        print(f"agentqueue chat: {visible(str(error), multiline=True)}", file=sys.stderr)
        return False
    return True


def _keep(home: Path, project: str | None, turn: TurnResult) -> None:
    if turn.session_id:
        state.remember(home, turn.session_id, project)


def _one_shot(home: Path, project: str | None, conversation: Conversation, prompt: str, as_json: bool) -> int:
    from .render import ScriptView

    turn = conversation.turn(prompt, ScriptView(stream_text=not as_json))
    _keep(home, project, turn)
    if as_json:
        print(json.dumps({"text": turn.text, "tool_calls": turn.tool_calls, "tokens": turn.usage,
                          "cost_usd": turn.cost_usd, "session_id": turn.session_id, "duration_ms": turn.duration_ms,
                          "is_error": not turn.ok, "error_kind": turn.error_kind, "error": turn.error}, indent=2,
                         ensure_ascii=True))
    elif turn.text and not turn.text.endswith("\n"):
        print()
    if turn.error:  # it quotes claude's stderr
        print(f"agentqueue chat: {visible(turn.error, multiline=True)}", file=sys.stderr)
    return 0 if turn.ok else 1


def _interactive(home: Path, project: str | None, conversation: Conversation, claude: str) -> int:
    from rich.text import Text

    from .render import PROMPT, TerminalView
    from .watcher import QueueWatcher

    try:
        import readline  # noqa: F401  (line editing and history for input())
    except ImportError:
        keys = None
    else:
        keys = TypeAhead.of(sys.stdin)
    view = TerminalView()
    watcher = QueueWatcher(home, view.announce)
    scope = f" · project {project}" if project else ""
    view._print(Text.assemble(("AgentQueue chat", "bold"), visible(f" · {claude}{scope}") + "\n",
                              ("Ctrl-C stops a reply · Ctrl-D or /exit leaves · /help", "dim")))
    watcher.start()
    status = 0
    try:
        if keys is not None:
            keys.hold()
        while True:
            view.prompting = True
            try:
                line = input(PROMPT)
            except EOFError:
                view.console.print()
                break
            except KeyboardInterrupt:
                view.console.print()
                view.note("(Ctrl-C stops a reply while one is coming. To leave: Ctrl-D or /exit.)")
                continue
            finally:
                view.prompting = False
                view.at_line_start = True
            text = line.strip()
            if not text:
                continue
            if text.startswith("/"):
                if _command(home, text, view, watcher) == "exit":
                    break
                continue
            turn = conversation.turn(text, view)
            _keep(home, project, turn)
            if turn.error:
                view.error(turn.error)
            if not turn.ended:
                view.footer(turn)
            else:
                status = 1
                break
            if view.leaving:  # Ctrl-D at a question during the reply: it was a no, and the person leaves
                break
    finally:
        watcher.stop()
        if keys is not None:
            keys.release()
    if conversation.session_id:
        view.note("Bye. `agentqueue chat --resume` continues this conversation.")
    return status


class TypeAhead:
    """The terminal between prompts reads key by key (no line discipline; echo and Ctrl-C as they were).

    In the terminal's own (canonical) mode a Ctrl-D typed while a reply streams becomes a NUL byte when readline
    switches the terminal for the next prompt, so the chat sat at its prompt after the person had left. Typed key
    by key it stays the byte 0x04, which readline reads at the empty prompt as the end of input. Readline
    restores the mode it found after each prompt, so setting it once holds for the whole chat."""

    def __init__(self, fd: int, saved: list[Any]) -> None:
        self.fd = fd
        self.saved = saved

    @classmethod
    def of(cls, stream: Any) -> TypeAhead | None:
        import termios

        try:
            fd = stream.fileno()
            return cls(fd, termios.tcgetattr(fd)) if os.isatty(fd) else None
        except (OSError, ValueError, termios.error):
            return None

    def hold(self) -> None:
        import termios

        mode = list(self.saved)
        mode[3] &= ~termios.ICANON  # echo stays: readline echoes only if the mode it finds does
        mode[6] = list(mode[6])
        mode[6][termios.VMIN], mode[6][termios.VTIME] = 1, 0
        try:
            termios.tcsetattr(self.fd, termios.TCSANOW, mode)  # TCSANOW: what was typed ahead is kept
        except termios.error:
            pass

    def release(self) -> None:
        import termios

        try:
            termios.tcsetattr(self.fd, termios.TCSANOW, self.saved)
        except termios.error:
            pass


def _command(home: Path, text: str, view: Any, watcher: Any) -> str | None:
    from ..daemon_client import DaemonError, ToolError, call_tool

    word, *rest = text.split(maxsplit=2)
    word = word.lower()
    if word in ("/exit", "/quit"):
        return "exit"
    if word == "/help":
        view._print(HELP)
        return None
    if word == "/requests":
        watcher.refresh_requests(announce_new=False)
        for request in watcher.pending.values():
            view.announce(watcher.request_line(request))
        if not watcher.pending:
            view.note("No permission request is waiting.")
        return None
    def typed(question: str) -> bool:
        """The policy's question about the very call the person just typed: their command is the answer."""
        view.note(f"{word}: {question.splitlines()[0] if question else ''} — yes, you typed it.")
        return True

    try:
        if word in ("/allow", "/deny", "/always"):
            request_id = rest[0] if rest else _only_request(watcher)
            arguments: dict[str, Any] = {"request_id": request_id, "decision": "deny" if word == "/deny" else "allow",
                                         "remember": word == "/always"}
            if word == "/deny" and len(rest) > 1:
                arguments["message"] = rest[1]
            done = call_tool(home, "answer_request", arguments, timeout=30, start=False, ask=typed)
            # What was answered, from the daemon's record: the same action string the request line showed.
            action = str(done.get("action") or done.get("tool") or "?")
            said = f"{request_id} {done.get('status')}: {visible(action)}"
            if word == "/always":  # the rule answer_request added (its suggested rule, else the action)
                said += f"; the project's policy now allows {visible(str(done.get('suggested_rule') or action))}"
            view.note(f"{said} — task {done.get('task_id')} goes on.")
            watcher.pending.pop(request_id, None)
        elif word == "/approve" and rest:
            call_tool(home, "approve_task", {"task_id": rest[0]}, timeout=60, start=False, ask=typed)
            view.note(f"{rest[0]} approved.")
        else:
            view.note(f"Unknown command {word}. /help lists them.")
    except LookupError as error:
        view.error(str(error))
    except (DaemonError, ToolError) as error:
        view.error(str(error))
    return None


def _only_request(watcher: Any) -> str:
    watcher.refresh_requests(announce_new=False)
    pending = list(watcher.pending)
    if len(pending) == 1:
        return pending[0]
    if not pending:
        raise LookupError("No permission request is waiting.")
    raise LookupError(f"{len(pending)} requests are waiting ({', '.join(pending)}): "
                      f"name one, e.g. /allow {pending[0]}.")
