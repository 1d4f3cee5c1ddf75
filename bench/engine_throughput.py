"""Engine throughput: N tasks run by the `command` adapter with a no-op, C at a time, in a real repo.

Each task pays the whole engine path: claim, git worktree on a new branch, spawn, commit, merge
into main, worktree removal, bookkeeping. The baseline runs the same no-op N times, C at a time,
with bare subprocesses, side by side in the same run. Target (issue 4): >= 5 tasks/s.

    python bench/engine_throughput.py [--tasks 200] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from agentqueue.engine.orchestrator import Engine, EngineConfig  # noqa: E402
from agentqueue.services import Services  # noqa: E402

NOOP = "true"


def baseline(n: int, concurrency: int) -> float:
    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda _: subprocess.run([NOOP], input=b"prompt", check=True), range(n)))
    return time.perf_counter() - start


async def engine_run(n: int, concurrency: int) -> tuple[float, list[float]]:
    home = Path(tempfile.mkdtemp(prefix="aq-bench-engine-"))
    svc = Services(home)
    svc.projects.create("Bench", max_concurrent_agents=concurrency)
    svc.repos.add("bench", "init", name="repo")
    for i in range(concurrency):
        svc.agents.create(f"noop-{i}", "command", command=NOOP)
    ids = [svc.tasks.create("bench", f"Task {i}", "do nothing", repo_id="repo").id for i in range(n)]
    engine = Engine(svc, home, config=EngineConfig(poll_seconds=0.05))
    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        while svc.store.scalar("SELECT count(*) FROM tasks WHERE status = 'COMPLETED'") < n:
            if svc.store.scalar("SELECT count(*) FROM tasks WHERE status = 'BLOCKED'"):
                raise SystemExit("a task was BLOCKED; see the task logs under " + str(home / "logs"))
            await anyio.sleep(0.02)
        elapsed = time.perf_counter() - start
        await engine.shutdown()
        tg.cancel_scope.cancel()
    # Per task: assigned -> completed, minus the agent process's own run time.
    overheads = []
    for task_id in ids:
        stamps = {r["event_type"]: r["timestamp"] for r in svc.store.all(
            "SELECT event_type, timestamp FROM events WHERE task_id = ? AND event_type IN "
            "('task.assigned', 'task.completed')", (task_id,))}
        span = (datetime.fromisoformat(stamps["task.completed"].replace("Z", "+00:00"))
                - datetime.fromisoformat(stamps["task.assigned"].replace("Z", "+00:00"))).total_seconds()
        run = svc.store.scalar("SELECT duration_s FROM task_results WHERE task_id = ?", (task_id,)) or 0
        overheads.append(span - run)
    commits = subprocess.run(["git", "rev-list", "--count", "main"], cwd=svc.repos.get("repo").checkout_path,
                             capture_output=True, text=True).stdout.strip()
    print(f"engine: {n} tasks landed ({commits} commits on main)", file=sys.stderr)
    svc.close()
    return elapsed, overheads


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    base = baseline(args.tasks, args.concurrency)
    elapsed, overheads = anyio.run(engine_run, args.tasks, args.concurrency)
    base_after = baseline(args.tasks, args.concurrency)
    base_s = statistics.median([base, base_after])
    figures = {
        "tasks": args.tasks, "concurrency": args.concurrency, "engine_seconds": round(elapsed, 2),
        "tasks_per_second": round(args.tasks / elapsed, 2),
        "overhead_per_task_ms_median": round(statistics.median(overheads) * 1000, 1),
        "overhead_per_task_ms_p90": round(sorted(overheads)[int(len(overheads) * 0.9)] * 1000, 1),
        "baseline_subprocess_seconds": round(base_s, 2),
        "ratio_engine_over_baseline": round(elapsed / base_s, 1),
        "cpus": os.cpu_count(),
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
