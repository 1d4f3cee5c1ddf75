"""`agentqueue stop [--force]`: stop the daemon; it lists the agents that would be interrupted and asks first."""

from __future__ import annotations

import argparse
import socket
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


def running_agents(home: Path, pid: int | None = None) -> list[dict[str, Any]]:
    """The claimed tasks (what stopping the daemon interrupts: a run waiting for input too), read from the store. On
    a team's shared queue, only the runs of this home's daemon (`pid`): the other daemons' runs go on."""
    from ...services.task_states import CLAIMED
    from ...store.base import StoreNotMigrated
    from ...store.reader import SqliteReader, open_read_store
    from ..reads import may_migrate, store_exists
    from .status import running_tasks

    exists, url = store_exists(home)  # a team's PostgreSQL queue has no file in the home
    if not exists:
        return []
    try:
        store = open_read_store(paths.db_path(home), url, migrate=lambda: may_migrate(home, url))
    except StoreNotMigrated:
        if url:
            return []  # a team's database at another schema: its daemons' runs are theirs to list
        # A daemon of older code holds the store at its older schema: read it as it is (the columns this reads are
        # in every schema), never migrate it under that daemon.
        store = SqliteReader(paths.db_path(home))
    try:
        rows = running_tasks(store, CLAIMED)
        if store.shared and pid is not None:
            # A claim's owner is the daemon's id, host:pid:random (services/team.py).
            ours = f"{socket.gethostname()}:{pid}:"
            owners = {r["id"]: r["owner"] for r in store.all(
                f"SELECT id, owner FROM tasks WHERE id IN ({','.join('?' * len(rows))})", [r["task_id"] for r in rows])
                } if rows else {}
            rows = [r for r in rows if (owners.get(r["task_id"]) or "").startswith(ours)]
        return rows
    finally:
        store.close()


def run(args: argparse.Namespace, home: Path) -> int:
    """Stop the daemon; with agents running, list them and ask (a TTY) or require --force (no TTY)."""
    from ...daemon_client import running_daemon
    from ...daemon_client import stop as stop_daemon

    info = running_daemon(home)
    if info is None:
        print(f"No AgentQueue daemon is running for {home}.")
        return 1
    running = running_agents(home, info.get("pid"))
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
