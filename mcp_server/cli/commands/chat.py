"""`agentqueue chat`: talk to the queue in this terminal (the package mcp_server/chat/ is the chat itself)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..output import CliError
from ..parser import add_command, json_flag


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(
        sub, "chat", "talk to the queue in this terminal (the claude CLI with AgentQueue's tools)", run,
        "Chat with the dispatcher: the real `claude` CLI (as the engine finds it) with AgentQueue's MCP "
        "server and the dispatcher prompt. The queue speaks up when a task completes, fails, blocks or "
        "asks permission; /allow and /deny answer. Ctrl-C stops a reply, Ctrl-D leaves.")
    command.add_argument("--project", help="the active project (the dispatcher creates tasks in it)")
    command.add_argument("--model", help="the model claude uses (e.g. sonnet, opus)")
    command.add_argument("--resume", action="store_true", help="continue the last conversation")
    command.add_argument("-p", "--print", dest="prompt", metavar="MESSAGE",
                         help="one turn, no prompt: print the answer (for scripts)")
    json_flag(command)


def run(args: argparse.Namespace, home: Path) -> int:
    from ...chat.repl import run as chat

    if args.json and args.prompt is None:
        raise CliError("--json goes with -p MESSAGE (one turn for a script); the interactive chat has no JSON.")
    return chat(home, args.project, args.model, args.resume, args.prompt, args.json)
