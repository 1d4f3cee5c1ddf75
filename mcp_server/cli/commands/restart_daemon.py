"""`agentqueue restart-daemon [--yes] [--timeout S]`: the terminal form of the restart_daemon tool.

It calls the running daemon's own restart_daemon (so the policy's question and the `daemon.restarting` event are a
model's call's), which answers, stops its engine (running agents are stopped, their tasks requeued with their work
and no retry counted) and re-executes itself from the installed code, same pid: connected plugins reconnect and
replay their client's handshake, so clients keep their sessions (docs/design.md "restart_daemon"). It then waits for
the daemon to serve again and says which code it runs now. This is how an upgrade takes effect; `restart TASK` stays
the task command.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from ... import paths
from ...visible import visible
from ..output import CliError, duration, print_json, say
from ..parser import add_command, json_flag


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(
        sub, "restart-daemon", "restart the daemon on the installed code; connected clients keep their sessions",
        run,
        "Restart the daemon, as the restart_daemon tool does: it re-executes itself from the installed code (run "
        "this after upgrading), connected MCP clients keep their sessions, running agents are stopped and their "
        "tasks requeued with their work (no retry counted). The policy asks first (on a terminal, here); --yes "
        "answers yes. `agentqueue restart TASK` is the task command.")
    command.add_argument("--yes", action="store_true", help="answer the policy's question yes (no terminal needed)")
    command.add_argument("--timeout", type=float, default=120.0, metavar="SECONDS",
                         help="how long to wait for the daemon to serve again (default 120)")
    json_flag(command)


def run(args: argparse.Namespace, home: Path) -> int:
    from ...daemon_client import DaemonError, ToolError, call_tool, running_daemon, terminal_asker
    from ..daemon_code import running_code
    from .stop import running_agents

    before = running_daemon(home)
    if before is None or not before.get("pid"):
        raise CliError(f"No AgentQueue daemon is running for {home}, so there is none to restart: `agentqueue serve` "
                       "starts one on the installed code (a client starts it on first use).")
    code = running_code(home, before)
    interrupted = running_agents(home, before.get("pid"))
    if interrupted and not args.json:
        print(f"Restarting the daemon stops {len(interrupted)} running agent(s); their tasks go back to READY with "
              "their work (no retry counted) and run again on the restarted daemon:")
        for row in interrupted:
            print(f"  {visible(row['agent_id'] or '-'):<14} {visible(row['task_id']):<16} {row['status']:<11} "
                  f"{duration(row['elapsed_s']):>8}  {visible(row['title'][:40])}")
    ask = _yes if args.yes else terminal_asker()
    copies_before = _store_copies(home)
    try:
        call_tool(home, "restart_daemon", {}, start=False, ask=ask)
    except (ToolError, DaemonError) as error:
        raise CliError(f"Not restarted: {error}") from None
    after = _wait_restarted(home, before, args.timeout)
    now = running_code(home, after)
    copies = [path for path in _store_copies(home) if path not in copies_before]  # the migration's, if it ran
    if args.json:
        print_json({"restarted": True, "pid": after.get("pid"), "before": code.as_json(), "after": now.as_json(),
                    "interrupted": [r["task_id"] for r in interrupted], "store_copy": copies[-1] if copies else None})
        return 0
    was = f" (it ran {code.version})" if code.version and code.version != now.version else ""
    say(f"Restarted the daemon (pid {after.get('pid')}): it runs AgentQueue {now.version}{was}; connected clients "
        "keep their sessions.")
    if code.schema is not None and now.schema is not None and now.schema != code.schema:
        kept = f"; the store as it was is kept at {visible(str(copies[-1]))}" if copies else ""
        say(f"Its store was migrated from schema {code.schema} to {now.schema}{kept}.")
    if interrupted:
        say(f"{len(interrupted)} task(s) that were running are back in the queue with their work: `agentqueue status`.")
    if now.advice():
        say(str(now.advice()))
    return 0


def _yes(question: str) -> bool:
    """--yes: the person who typed the command answers the policy's question yes."""
    print(visible(question, multiline=True) + " yes (--yes)", file=sys.stderr, flush=True)
    return True


def _wait_restarted(home: Path, before: dict[str, Any], timeout: float) -> dict[str, Any]:
    """daemon.json of the daemon serving again (a new start time, its socket, the restart marker gone); a refusal
    naming its log when it does not come back."""
    from ...daemon.relay import alive
    from ...daemon_client import daemon_info, lock_is_held

    asked = time.time()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = daemon_info(home)
        if (info and info.get("started_at") != before.get("started_at") and lock_is_held(home)
                and paths.socket_path(home).exists() and not paths.restart_marker(home).exists()):
            return info
        if not alive(int(before["pid"])):
            break  # the re-executed daemon exited (exec keeps the pid): it could not start on the installed code
        time.sleep(0.1)
    logs = paths.logs_dir(home)
    said = _last_line(logs / "daemon.out", asked)
    raise CliError(f"The daemon did not come back after being asked to restart{f' ({said})' if said else ''}: see "
                   f"{logs / 'agentqueue.log'} and {logs / 'daemon.out'}, fix what they say, then `agentqueue "
                   "serve`.")




def _last_line(path: Path, since: float) -> str:
    """The last line a daemon started by a client wrote to logs/daemon.out, when it wrote it after `since`."""
    try:
        if path.stat().st_mtime < since:
            return ""
        lines = [line.strip() for line in path.read_text(errors="replace").splitlines()[-20:] if line.strip()]
    except OSError:
        return ""
    return visible(lines[-1][:400]) if lines else ""


def _store_copies(home: Path) -> list[Path]:
    """The copies migrations kept beside the store, oldest schema first."""
    from ...store.backup import migration_backups

    return [path for _schema, path in migration_backups(paths.db_path(home))]
