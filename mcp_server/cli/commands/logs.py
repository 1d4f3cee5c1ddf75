"""`agentqueue logs TASK [-f]`: print a task's agent log; -f follows it while the agent runs."""

from __future__ import annotations

import argparse
import codecs
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from ... import paths
from ...line_splitter import LineSplitter
from ...services.task_states import FOLLOWABLE
from ...visible import visible
from .. import reads as cli_reads
from ..output import print_json
from ..parser import add_command, json_flag

if TYPE_CHECKING:
    from ...store.base import Store


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(
        sub, "logs", "print a task's agent log; -f follows it while the agent runs", run,
        "Print $AGENTQUEUE_HOME/logs/tasks/<task>.log. With -f, keep printing what the agent writes "
        "until the task is no longer READY, ASSIGNED, IN_PROGRESS, WAITING_INPUT or VERIFYING (Ctrl-C stops).")
    command.add_argument("task", help="task id")
    command.add_argument("-f", "--follow", action="store_true", help="follow the log as the agent writes it")
    json_flag(command)


def run(args: argparse.Namespace, home: Path) -> int:
    return logs(home, args.task, args.follow, args.json)


def logs(home: Path, task_id: str, follow: bool, as_json: bool) -> int:
    store = cli_reads.open_store_for_reading(home)
    try:
        status = cli_reads.task_status(store, task_id)  # a clear error for an unknown id
        path = paths.task_log(home, task_id)
        if not follow:
            text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
            if as_json:
                print_json({"task_id": task_id, "status": status, "path": str(path),
                            "exists": path.exists(), "text": text})
            elif text:
                sys.stdout.write(visible(text, multiline=True))
            else:
                print(visible(f"No log yet for {task_id} ({status}): no agent has run it. "
                              f"`agentqueue logs {task_id} -f` waits for one."), file=sys.stderr)
            return 0
        return _follow(store, task_id, path, as_json)
    finally:
        store.close()


def _json_line(task_id: str, line: bytes) -> str:
    # ensure_ascii: the line's escapes and controls arrive as \u001b, never raw.
    return json.dumps({"task_id": task_id, "line": line.decode("utf-8", "replace")}, ensure_ascii=True) + "\n"


def _follow(store: Store, task_id: str, path: Path, as_json: bool) -> int:
    """Print the log as the agent writes it; stop once the task can produce no more (or on Ctrl-C)."""
    offset = 0
    json_lines = LineSplitter()  # --json: one object per whole line
    announced = False
    out = sys.stdout
    # Chunks end anywhere: a character cut in two is decoded once whole, and a trailing \r waits for the
    # next chunk to tell a CRLF line end (kept) from a line overwriting itself (shown as \r).
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    held = ""
    try:
        while True:
            status = cli_reads.task_status(store, task_id)  # read before the file: its last lines precede the change
            if path.exists():
                with path.open("rb") as handle:
                    handle.seek(offset)
                    chunk = handle.read()
                offset += len(chunk)
                if chunk:
                    if as_json:
                        for line in json_lines.feed(chunk):
                            out.write(_json_line(task_id, line))
                    else:
                        text = held + decoder.decode(chunk)
                        text, held = (text[:-1], "\r") if text.endswith("\r") else (text, "")
                        out.write(visible(text, multiline=True))
                    out.flush()
            if status not in FOLLOWABLE:
                if not as_json and (rest := held + decoder.decode(b"", final=True)):
                    out.write(visible(rest, multiline=True))
                    out.flush()
                if as_json and (last := json_lines.rest()):
                    out.write(_json_line(task_id, last))
                print(f"[{task_id} is {status}]", file=sys.stderr, flush=True)
                return 0
            if status == "READY" and not announced:
                print(f"Waiting for {task_id} to start (READY)… Ctrl-C stops following.", file=sys.stderr, flush=True)
                announced = True
            time.sleep(0.2)
    except KeyboardInterrupt:
        out.flush()
        return 0
