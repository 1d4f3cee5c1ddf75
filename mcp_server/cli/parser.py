"""The `agentqueue` argument parser: the top-level help, then each command module's `register`, in help order."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from pathlib import Path

from .. import __version__

DESCRIPTION = """\
AgentQueue runs a queue of AI coding-agent tasks (Claude Code, Codex, Gemini
or any command) in git worktrees of your repos. Your MCP client (Claude Code,
Claude Desktop, Cursor, VS Code) is where you talk to it; this command sets it
up and shows what is happening. Data lives in AGENTQUEUE_HOME (default: the
platform's user data dir)."""

EPILOG = """\
first steps:
  agentqueue install claude-code   add it to a client (or claude-desktop,
                                   cursor, vscode)
  agentqueue doctor                check git, agent CLIs, daemon, client configs
  agentqueue status --watch        watch the queue

Every read command takes --json; `agentqueue COMMAND --help` describes one."""

# Each command and the module of cli/commands/ that declares it, in the order the help lists them (setup, the
# daemon, reading the queue, acting on it).
COMMANDS = {"install": "install", "doctor": "doctor", "uninstall": "uninstall", "serve": "serve", "mcp": "mcp",
            "stop": "stop", "restart-daemon": "restart_daemon", "backup": "backup", "restore": "restore",
            "status": "status", "tasks": "tasks", "show": "show", "logs": "logs", "diff": "diff",
            "usage": "usage", "projects": "projects", "board": "board", "chat": "chat", "add": "add",
            "approve": "approve", "allow": "answer", "deny": "answer", "request-changes": "act", "restart": "act",
            "stop-task": "act", "skip": "act", "delete": "act", "pause": "pause", "resume": "pause", "notify": "notify",
            "task": "task"}

Run = Callable[[argparse.Namespace, Path], int]


class _Help(argparse.RawDescriptionHelpFormatter):
    """Lists the commands without argparse's `{install,doctor,…}` header line."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=18)
        self._action_max_length = 14  # room for "uninstall" beside its help

    def _format_action(self, action: argparse.Action) -> str:
        text = super()._format_action(action)
        if action.nargs == argparse.PARSER:
            text = "\n".join(text.split("\n")[1:])
        return text


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv`: when it names a command, only that command's module is imported and registered (a
    read stays fast); otherwise (bare, --help, a typo) every command, for the help and argparse's error."""
    parser = argparse.ArgumentParser(prog="agentqueue", description=DESCRIPTION, epilog=EPILOG, formatter_class=_Help)
    parser.add_argument("--version", action="version", version=f"agentqueue {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    named = argv[0] if argv and argv[0] in COMMANDS else None
    for module in dict.fromkeys([COMMANDS[named]] if named else COMMANDS.values()):
        importlib.import_module(f"{__package__}.commands.{module}").register(sub)
    return parser


def add_command(sub: argparse._SubParsersAction, name: str, summary: str, run: Run,
                description: str | None = None) -> argparse.ArgumentParser:
    """A command: its one-line summary for the help, its description for `agentqueue NAME --help`, its run."""
    command = sub.add_parser(name, help=summary, description=description or summary[0].upper() + summary[1:] + ".",
                             formatter_class=argparse.HelpFormatter)
    command.set_defaults(run=run)
    return command


def json_flag(command: argparse.ArgumentParser) -> None:
    command.add_argument("--json", action="store_true", help="print JSON instead of text")


def selection_flags(parser: argparse.ArgumentParser, who: str) -> None:
    """--read-only and --toolsets: which tools a connection offers (the rest are left out of its list)."""
    from ..server.toolsets import known, parse_toolsets

    parser.add_argument("--read-only", action="store_true", help=f"offer {who} only the read-only tools")
    parser.add_argument("--toolsets", type=_toolsets_arg(parse_toolsets), metavar="SET,…",
                        help=f"offer {who} only these groups of tools: {', '.join(known())}")


def _toolsets_arg(parse: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    def convert(text: str) -> list[str]:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return convert
