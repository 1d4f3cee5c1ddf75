"""`agentqueue restore PATH [--yes]`: put a backup (`agentqueue backup`'s folder, or the copy a migration kept of the
store) in place of the home's store and files, with no daemon running; what it replaces is kept beside it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ...visible import visible
from ..output import CliError, print_json, say
from ..parser import add_command, json_flag


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(
        sub, "restore", "put a backup back in place of the store and files (the daemon stopped; asks first)", run,
        "Replace the home's store (and config.toml, policy.toml, token when the backup has them) with a backup: a "
        "folder `agentqueue backup` made, or a store file such as the copy a migration keeps beside the store "
        "(agentqueue.schema-N.<time>.db). The daemon must be stopped (`agentqueue stop`); what is replaced is kept "
        "beside it as *.before-restore.<time>. On a terminal you are asked first; without one, --yes is needed.")
    command.add_argument("path", type=Path, help="the backup folder, or a store file")
    command.add_argument("--yes", action="store_true", help="restore without asking")
    json_flag(command)


def run(args: argparse.Namespace, home: Path) -> int:
    from ... import home_lock
    from .. import home_backup
    from ..reads import read_settings_url

    if read_settings_url(home):
        raise CliError("This home's queue is a team's PostgreSQL database: restore it with pg_restore, not here.")
    source = args.path.expanduser().absolute()
    try:
        held = home_backup.describe(source)
    except home_backup.BackupError as error:
        raise CliError(str(error)) from None
    running = " (stop it first: `agentqueue stop`, then restore)"
    if home_lock.is_held(home):
        raise CliError(f"Not restored: an AgentQueue daemon is running for {home}{running}.")
    if not args.yes and not _confirmed(home, source, held):
        print("Not restored.")
        return 1
    try:
        with home_lock.hold(home, running, grace=0):  # no daemon starts on a half-restored home
            kept = home_backup.restore(home, held)
    except home_lock.AlreadyRunningError as error:
        raise CliError(f"Not restored: {error}") from None
    except home_backup.BackupError as error:
        raise CliError(str(error)) from None
    if args.json:
        print_json({"restored": True, "from": source, "schema": held["schema"], "tasks": held["tasks"],
                    "files": held["files"], "kept": kept})
        return 0
    files = f" and {', '.join(held['files'])}" if held["files"] else ""
    say(f"Restored {visible(str(home))} from {visible(str(source))}: the store (schema {held['schema']}, "
        f"{held['tasks'] or 0} task(s)){files}.")
    if kept:
        say("What it replaced is kept: " + ", ".join(visible(p.name) for p in kept) + f" in {visible(str(home))}.")
    say("`agentqueue serve` (or a client) starts the daemon on it; a store of an older schema is migrated then, "
        "after a copy is kept.")
    return 0


def _confirmed(home: Path, source: Path, held: dict) -> bool:
    if not sys.stdin.isatty():
        raise CliError(f"Not restored: there is no terminal to ask. Pass --yes to replace the store of {home} with "
                       f"{source}.")
    answer = input(visible(f"Replace the store of {home} with {source} (schema {held['schema']}, "
                           f"{held['tasks'] or 0} task(s))? What it replaces is kept beside it. [y/N] "))
    return answer.strip().lower() in ("y", "yes")
