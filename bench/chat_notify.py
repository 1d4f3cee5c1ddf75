"""How soon `agentqueue chat` says a task finished: the task.completed commit -> its line on the terminal.

A real daemon (HTTP, so the chat follows GET /events; then --no-http, so it polls), a `command`
agent that waits for a file, the chat idling on a pseudo-terminal. Target (issue 12): within 1 s.

    python bench/chat_notify.py [--tasks 10]   # prints a table and one JSON line; never fails on timing
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.cli_helpers import AGENT_COMMAND, cli_env, start_daemon, stop_daemon  # noqa: E402
from tests.processes import Terminal  # noqa: E402


def claude_path() -> str:
    local = ROOT / ".cache" / "node" / "node_modules" / ".bin" / "claude"
    found = str(local) if local.exists() else shutil.which("claude")
    if not found:
        raise SystemExit("needs the claude CLI (chat starts it, though this bench never sends it a message)")
    return found


def measure(tmp: Path, tasks: int, *serve_args: str) -> list[float]:
    env = cli_env(tmp / "aq", tmp / "user", AGENTQUEUE_CLAUDE_BIN=claude_path(), ANTHROPIC_API_KEY="unused")
    live = start_daemon(env, *serve_args)
    delays = []
    try:
        live.call("create_project", name="Demo")
        live.call("add_repo", source="init", project_id="demo", name="app")
        live.call("create_agent", name="worker", agent_type="command", command=AGENT_COMMAND)
        with Terminal([sys.executable, "-m", "agentqueue", "chat"], env) as chat:
            assert chat.read_until("you › ".encode(), 60), chat.text
            time.sleep(1.0)  # the watcher connects
            for n in range(tasks):
                go = live.home / f"go-{n}"
                task = live.call("create_task", project_id="demo", title=f"t{n}", agent_type="command",
                                 description=f"WAITFOR {go}\nSAY done")
                live.wait_status(task["id"], "IN_PROGRESS")
                go.write_text("")
                assert chat.read_until(f"{task['id']}".encode() + b"\x1b[0m completed", 30) or \
                    chat.read_until(f"{task['id']} completed".encode(), 1), \
                    (live.task_status(task["id"]),
                     (live.home / "logs" / "tasks" / f"{task['id']}.log").read_text()[-1500:])
                shown = time.time()
                event = live.call("get_recent_events", task_id=task["id"], event_type="task.completed")["events"][0]
                committed = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
                delays.append(shown - committed)
    finally:
        stop_daemon(live)
    return delays


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10)
    args = parser.parse_args()
    results = {}
    for label, serve_args in (("GET /events (HTTP)", ("--port", "0")), ("polling (--no-http)", ("--no-http",))):
        with tempfile.TemporaryDirectory() as tmp:
            delays = sorted(measure(Path(tmp), args.tasks, *serve_args))
        results[label] = {"median_ms": round(statistics.median(delays) * 1000),
                          "p90_ms": round(delays[int(0.9 * (len(delays) - 1))] * 1000),
                          "max_ms": round(delays[-1] * 1000), "tasks": len(delays)}
    print("| path | median | p90 | max |\n|---|---|---|---|")
    for label, row in results.items():
        print(f"| {label} | {row['median_ms']} ms | {row['p90_ms']} ms | {row['max_ms']} ms |")
    print(json.dumps(results))


if __name__ == "__main__":
    os.environ.setdefault("AGENTQUEUE_POLL_SECONDS", "0.1")
    main()
