"""How a chat looks in a terminal (rich): streamed text, one line per tool call and result, a footer per
turn, the queue's lines printed above the prompt without breaking what the person is typing.

Everything shown came from the model, a tool, a task or a repo, so it goes through `visible` (escapes
and controls shown, not obeyed) and is printed as a rich `Text` (markup and :emoji: codes shown as typed).
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from rich.console import Console
from rich.text import Text

from ..visible import visible
from .turns import Permission, TurnResult

PROMPT = "you › "


def money(cost: float) -> str:
    return f"${cost:.4f}" if cost >= 0.01 else f"${cost:.6f}"


def count(n: int) -> str:
    """A token count in a few characters: 950, 12.3k, 4.1M (the footer must fit 80 columns)."""
    return str(n) if n < 10_000 else f"{n / 1000:.1f}k" if n < 1_000_000 else f"{n / 1_000_000:.1f}M"


def footer_text(turn: TurnResult, width: int = 10_000) -> str:
    """The turn's tokens, cost and time in at most `width` characters: the cache detail goes first, then the
    time, when the terminal is narrow."""
    u = turn.usage
    cache = f" · {count(u.get('cache_read', 0))} cache read · {count(u.get('cache_write', 0))} cache write" \
        if u.get("cache_read") or u.get("cache_write") else ""
    tokens = f"{count(u.get('input', 0))} in · {count(u.get('output', 0))} out"
    seconds = f" · {turn.duration_ms / 1000:.1f} s"
    for shown in (f"{tokens}{cache} tokens · {money(turn.cost_usd)}{seconds}",
                  f"{tokens} tokens · {money(turn.cost_usd)}{seconds}", f"{tokens} tokens · {money(turn.cost_usd)}"):
        if len(shown) <= width:
            return shown
    return shown


def fold(arguments: dict[str, Any], width: int) -> str:
    """`key=value` pairs on one line, each value cut short: a tool call never takes more than a line."""
    parts = []
    for key, value in arguments.items():
        shown = value if isinstance(value, str) else json.dumps(value)
        shown = visible(" ".join(str(shown).split()))
        parts.append(f"{visible(str(key))}={shown[:40] + '…' if len(shown) > 41 else shown}")
    line = "  ".join(parts)
    return line[: max(width - 1, 10)] + "…" if len(line) > width else line


class TerminalView:
    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(highlight=False, soft_wrap=True)
        self.lock = threading.RLock()  # the queue watcher prints from its own thread
        self.at_line_start = True
        self.prompting = False
        self.leaving = False  # Ctrl-D answered a question: the chat ends once the reply is over

    def _print(self, text: Text | str, end: str = "\n") -> None:
        """A Text is printed as built (its parts made visible by whoever built it); a str is made visible."""
        with self.lock:
            if not self.at_line_start:
                self.console.print()
            self.console.print(Text(visible(text, multiline=True)) if isinstance(text, str) else text, end=end)
            self.at_line_start = end.endswith("\n")

    # -- the turn ---------------------------------------------------------------------------------
    def text(self, chunk: str) -> None:
        with self.lock:
            self.console.print(Text(visible(chunk, multiline=True)), end="")
            self.at_line_start = chunk.endswith("\n")

    def tool_call(self, name: str, arguments: dict[str, Any]) -> None:
        name = visible(name)
        width = self.console.width - len(name) - 5
        self._print(Text.assemble(("⚙ ", "cyan"), (name, "bold cyan"), "  ", (fold(arguments, width), "dim")))

    def tool_result(self, summary: str, is_error: bool) -> None:
        self._print(Text.assemble(("  ✗ " if is_error else "  ↳ ", "red" if is_error else "green"),
                                  (visible(summary), "red" if is_error else "dim")))

    def note(self, message: str) -> None:
        self._print(Text(visible(message, multiline=True), style="yellow"))

    def error(self, message: str) -> None:
        self._print(Text("✗ " + visible(message, multiline=True), style="bold red"))

    def footer(self, turn: TurnResult) -> None:
        label = f"── {'interrupted · ' if turn.interrupted else ''}"
        self._print(Text(label + footer_text(turn, self.console.width - len(label) - 1), style="dim"))

    def ask(self, question: str, choices: str) -> str:
        self._print(Text(visible(question, multiline=True), style="bold yellow"))
        try:
            return input(choices).strip().lower()
        except EOFError:
            self.leaving = True
            self.note("(Ctrl-D: no. The chat ends when this reply is over.)")
            return ""
        finally:
            self.at_line_start = True

    def ask_permission(self, tool: str, arguments: dict[str, Any], description: str) -> Permission:
        # The whole input, uncut: a yes runs exactly these arguments (each on its own line, made visible).
        lines = "".join(f"\n  {visible(str(key))}: {visible(value if isinstance(value, str) else json.dumps(value))}"
                        for key, value in arguments.items())
        answer = self.ask(f"claude wants to use {visible(tool)}" + (f" ({visible(description)})" if description else "")
                          + (":" + lines if lines else ""), "Allow? [y]es / [n]o / [a]lways: ")
        return "allow" if answer in ("y", "yes") else "always" if answer in ("a", "always") else "deny"

    def ask_question(self, message: str) -> bool:
        return self.ask(message, "Allow it? [y/N] ") in ("y", "yes")

    # -- the queue, from another thread -----------------------------------------------------------
    def announce(self, line: Text) -> None:
        """A line from the queue: above the prompt (which is shown again with what was typed)."""
        with self.lock:
            if self.prompting:
                buffer = _readline_buffer()
                self.console.file.write("\r\x1b[K")
                self.console.print(line)
                self.console.file.write(PROMPT + buffer)
                self.console.file.flush()
            else:
                self._print(line)


def _readline_buffer() -> str:
    try:
        import readline
    except ImportError:
        return ""
    return readline.get_line_buffer()


class ScriptView:
    """`chat -p`: the text goes to stdout as it comes (unless --json); nobody can be asked, so questions
    get a no that says why."""

    def __init__(self, stream_text: bool) -> None:
        self.stream_text = stream_text

    def text(self, chunk: str) -> None:
        if self.stream_text:  # a person may be reading it (`--json` has the text exact)
            sys.stdout.write(visible(chunk, multiline=True))
            sys.stdout.flush()

    def tool_call(self, name: str, arguments: dict[str, Any]) -> None:
        return None

    def tool_result(self, summary: str, is_error: bool) -> None:
        return None

    def note(self, message: str) -> None:
        print(visible(message, multiline=True), file=sys.stderr, flush=True)

    def ask_permission(self, tool: str, arguments: dict[str, Any], description: str) -> Permission:
        self.note(f"claude asked to use {tool}; `agentqueue chat -p` cannot ask a person, so it was refused.")
        return "deny"

    def ask_question(self, message: str) -> bool:
        self.note(f"{message} — refused: `agentqueue chat -p` cannot ask a person. Allow it with a policy rule "
                  "(edit_policy) or use the interactive chat.")
        return False
