"""`agentqueue notify test`: a test message to every [notify] URL, through the daemon; each one's result."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...visible import visible
from ..output import call_daemon_tool, print_json
from ..parser import add_command, json_flag


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(sub, "notify", "send a test notification to every [notify] URL", run,
                          "Send a test message to every notifier URL in config.toml's [notify] section (through the "
                          "daemon, with its settings) and print each one's result. Exit status 1 if one failed.")
    command.add_argument("action", choices=["test"], help="test: send a test message")
    json_flag(command)


def run(args: argparse.Namespace, home: Path) -> int:
    results = call_daemon_tool(home, "notify_test", {})["results"]
    failed = sum(not r["ok"] for r in results)
    if args.json:
        print_json(results)
        return 1 if failed else 0
    for result in results:
        print(visible(f"{'✔' if result['ok'] else '✘'} {result['url']}"
                      + ("" if result["ok"] else f": {result['error'] or 'failed'}")))
    print(f"{len(results) - failed} of {len(results)} notifier(s) answered.")
    return 1 if failed else 0
