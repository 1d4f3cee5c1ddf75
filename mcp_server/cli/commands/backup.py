"""`agentqueue backup [PATH]`: a consistent copy of the home's store, config.toml, policy.toml and token, while the
daemon runs (cli/home_backup.py); `agentqueue restore PATH` puts one back."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...visible import visible
from ..output import CliError, print_json, say
from ..parser import add_command, json_flag


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(
        sub, "backup", "copy the store, config.toml and policy.toml into a folder (the daemon may run)", run,
        "Copy the home's store (SQLite's online backup: consistent as of one commit, while the daemon runs and "
        "writes), config.toml, policy.toml and the token (each mode 0600) into PATH, by default "
        "$AGENTQUEUE_HOME/backups/<time>. `agentqueue restore PATH` puts it back. A team's PostgreSQL database is "
        "not copied: back it up with pg_dump.")
    command.add_argument("path", nargs="?", type=Path, help="a new (or empty) folder for the copy")
    json_flag(command)


def run(args: argparse.Namespace, home: Path) -> int:
    from .. import home_backup
    from ..reads import read_settings_url

    url = read_settings_url(home)
    folder = (args.path or home_backup.default_folder(home)).expanduser().absolute()
    try:
        made = home_backup.make(home, folder, url)
    except home_backup.BackupError as error:
        raise CliError(str(error)) from None
    if args.json:
        print_json({"path": made.folder, "schema": made.schema, "tasks": made.tasks, "files": made.files,
                    "store_copied": made.schema is not None})
        return 0
    if made.schema is not None:
        what = f"the store (schema {made.schema}, {made.tasks or 0} task(s))"
    else:
        what = ("no store: the home's queue is a team's PostgreSQL database, which pg_dump backs up "
                "(pg_dump --format=custom DATABASE_URL)")
    others = [name for name in made.files if name != home_backup.STORE]
    say(f"Backed up {visible(str(home))} to {visible(str(made.folder))}: {what}"
        + (f", {', '.join(others)} (mode 0600)" if others else "") + ".")
    say(f"Restore it with `agentqueue restore {visible(str(made.folder))}` (with the daemon stopped). Not in it: logs, "
        "worktrees (a task's work is on its branch in the repo) and workspaces/ (scratch folders and notes).")
    return 0
