"""`agentqueue stop [--force]`: stop the daemon; it lists the agents that would be interrupted and asks first."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ... import paths
from ...visible import visible
from ..output import CliError, duration
from ..parser import add_command


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(
        sub, "stop", "stop the daemon (asks first when agents are running)", run,
        "Stop the daemon. Running agents are interrupted and their tasks recovered at the next start; "
        "they are listed first, and on a terminal you are asked. Without a terminal, --force is needed.")
    command.add_argument("--force", action="store_true", help="stop even though agents are running, without asking")


def running_agents(home: Path) -> list[dict[str, Any]]:
    """The claimed tasks (what stopping the daemon interrupts: a run waiting for input too), read from the store."""
    if not paths.db_path(home).exists():
        return []
    from ...services.task_states import CLAIMED
    from ..reads import open_store_for_reading
    from .status import running_tasks

    store = open_store_for_reading(home)
    try:
        return running_tasks(store, CLAIMED)
    finally:
        store.close()


def run(args: argparse.Namespace, home: Path) -> int:
    """Stop the daemon; with agents running, list them and ask (a TTY) or require --force (no TTY)."""
    from ...daemon_client import running_daemon
    from ...daemon_client import stop as stop_daemon

    if running_daemon(home) is None:
        print(f"No AgentQueue daemon is running for {home}.")
        return 1
    running = running_agents(home)
    if running:
        print(f"Stopping the daemon interrupts {len(running)} running agent(s):")
        for row in running:
            print(f"  {visible(row['agent_id'] or '-'):<14} {visible(row['task_id']):<16} {row['status']:<11} "
                  f"{duration(row['elapsed_s']):>8}  {visible(row['title'][:40])}")
        print("Their tasks are recovered when the daemon starts again (work kept as a WIP commit, the task "
              "back to READY).")
        if not args.force:
            if not sys.stdin.isatty():
                raise CliError("Not stopped: agents are running and there is no terminal to ask. "
                               "Pass --force to stop anyway.")
            answer = input("Stop the daemon and interrupt them? [y/N] ").strip().lower()
            if answer not in ("y", "yes"):
                print("Not stopped.")
                return 1
    stopped, message = stop_daemon(home)
    print(visible(message, multiline=True))
    return 0 if stopped else 1
