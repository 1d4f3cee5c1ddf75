"""The terminal's reads on a store of 1,000 tasks: `agentqueue tasks`, `show`, `status` (and --json), start to exit.

The store is grown through the services (projects, tasks with dependencies, runs recorded as the
engine records them, statuses moved by the state machine). Each command runs as a person runs it (a
new process, output to a pipe), interleaved with the anchor `git log -1` in a real repo, medians of
repeated runs; then again under load: writer processes that move tasks through their lifecycle in
transactions as a busy daemon's engine does, one per core.

    python bench/cli_reads.py [--tasks 1000] [--runs 9] [--quick] [--json PATH] [--before PATH]

--before PATH times another install's `agentqueue` too (e.g. main's .venv/bin/agentqueue), on the same
store in the same run, for a before/after table.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

GOAL_MS = 300.0
STATES = ["COMPLETED"] * 5 + ["READY"] * 2 + ["BLOCKED", "DEFINED", "FAILED"]


def run(status: str, error_type: str | None = None) -> Any:
    """An adapter's result, as Lifecycle.record_attempt takes it."""
    return SimpleNamespace(status=status, summary="did the work", error_type=error_type,
                           error_message="429 rate limit" if error_type else None,
                           tokens={"input": 1200, "output": 300, "cache_read": 0, "cache_write": 0, "total": 1500},
                           cost_usd=0.01)


def build(home: Path, count: int) -> str:
    """`count` tasks over 4 projects; returns a held task's id (the one `show` reads)."""
    from agentqueue.services import Services
    from agentqueue.services.lifecycle import Lifecycle

    svc = Services(home)
    try:
        projects = [svc.projects.create(f"Project {p}").id for p in range(4)]
        svc.agents.create("worker", "command", command="true")
        life = Lifecycle(svc.store, svc.tasks, svc.usage)
        made: list[str] = []
        held = ""
        for n in range(count):
            deps = [made[-4]] if n % 5 == 4 else []
            task = svc.tasks.create(projects[n % 4], f"Task {n}: a title of a usual length", f"Work item {n}",
                                    priority=n % 40, depends_on=deps).id
            made.append(task)
        for n, task in enumerate(made):
            target = STATES[n % len(STATES)]
            if target in ("COMPLETED", "FAILED") and svc.tasks.get(task).status == "READY":
                assert life.claim(task, "worker")
                life.started(task, None)
                life.record_attempt(task, "worker", run("completed" if target == "COMPLETED" else "failed",
                                                        None if target == "COMPLETED" else "rate_limit"), 3.0, [])
                if target == "COMPLETED":
                    life.succeeded(task, awaiting_approval=False)
                else:
                    life.failed(task, "rate_limit", "429 rate limit")
                    held = held or task
                life.free_agent("worker", task)
            elif target in ("BLOCKED",):
                svc.tasks.set_status(task, target)
        return held or made[0]
    finally:
        svc.close()


def busy_writer(home: str, stop: Any) -> None:
    """A daemon's engine at work: tasks created, claimed, run and landed, one transaction after another."""
    from agentqueue.services import Services
    from agentqueue.services.lifecycle import Lifecycle

    svc = Services(Path(home))
    agent = svc.agents.create(f"load {os.getpid()}", "command", command="true").id
    life = Lifecycle(svc.store, svc.tasks, svc.usage)
    n = 0
    while not stop.is_set():
        task = svc.tasks.create("project-0", f"Load {os.getpid()} {n}", "x", priority=99).id
        if life.claim(task, agent):
            life.started(task, None)
            life.record_attempt(task, agent, run("completed"), 0.1, [])
            life.succeeded(task, awaiting_approval=False)
            life.free_agent(agent, task)
        n += 1
    svc.close()


def timed(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, timeout=120)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0 or not done.stdout:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return elapsed


def measure(programs: dict[str, list[str]], commands: list[list[str]], env: dict[str, str], repo: Path,
            runs: int) -> dict[str, Any]:
    """Medians (ms): the anchor, and each program's each command, interleaved run by run."""
    anchor: list[float] = []
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(runs):
        anchor.append(timed(["git", "log", "-1"], env, repo))
        for label, program in programs.items():
            for command in commands:
                times.setdefault((label, " ".join(command)), []).append(timed([*program, *command], env))
    return {"anchor": statistics.median(anchor),
            "commands": {key: statistics.median(values) for key, values in times.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="3 runs each (under a minute)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--before", help="another install's agentqueue executable, timed beside this one")
    args = parser.parse_args()
    runs = 3 if args.quick else args.runs

    with tempfile.TemporaryDirectory(prefix="agentqueue-cli-reads-") as scratch:
        home = Path(scratch) / "aq"
        started = time.monotonic()
        held = build(home, args.tasks)
        built_s = time.monotonic() - started
        repo = Path(scratch) / "repo"
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-q",
                        "--allow-empty", "-m", "one"], check=True)
        env = {**os.environ, "AGENTQUEUE_HOME": str(home), "COLUMNS": "100"}
        env.pop("AGENTQUEUE_DATABASE_URL", None)
        script = Path(sys.executable).parent / "agentqueue"  # what a person types; else the module
        programs = {"after": [str(script)] if script.exists() else [sys.executable, "-m", "agentqueue"]}
        if args.before:
            programs = {"before": [args.before], **programs}
        commands = [["tasks"], ["tasks", "--json"], ["show", held], ["show", held, "--json"], ["status"],
                    ["status", "--json"]]
        idle = measure(programs, commands, env, repo, runs)
        stop = multiprocessing.Event()
        writers = [multiprocessing.Process(target=busy_writer, args=(str(home), stop))
                   for _ in range(os.cpu_count() or 2)]
        for writer in writers:
            writer.start()
        time.sleep(1.0)  # the writers are importing and starting
        try:
            loaded = measure(programs, commands, env, repo, runs)
        finally:
            stop.set()
            for writer in writers:
                writer.join(30)

    rows = []
    for load, result in (("idle", idle), ("under load", loaded)):
        for (label, command), value in result["commands"].items():
            shown = command.replace(held, "TASK")
            rows.append({"metric": f"agentqueue {shown} on {args.tasks:,} tasks, {load} ({label})",
                         "value": round(value, 1), "unit": "ms", "anchor": "git log -1",
                         "anchor_value": round(result["anchor"], 1), "ratio": round(value / result["anchor"], 1),
                         "goal": f"<= {GOAL_MS:.0f} ms", "met": value <= GOAL_MS, "program": label, "load": load,
                         "runs": runs, "build_s": round(built_s, 1)})
    print(f"{'command':58} {'median ms':>10} {'git log -1':>11} {'ratio':>7}  goal")
    for row in rows:
        print(f"{row['metric']:58} {row['value']:>10.1f} {row['anchor_value']:>11.1f} {row['ratio']:>7.1f}  "
              f"{row['goal']} {'met' if row['met'] else 'MISSED'}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
