"""Landing throughput with the merge queue (issue 21), beside merging without checks, in the same run.

4 `command` agents in the sandbox each write and commit one file; every task lands on main of a real repo. Three
ways, one after another on fresh homes:
- without checks: the branch lands as soon as its run ends (the engine's fast path);
- the queue, one by one: the repo's check runs on each branch brought up to date with main, and main moves only to
  a commit that passed it;
- the queue, batched: several queued tasks checked together (skipped, and said so, when this build has no batches).
The check is a command that takes `--check-seconds` (a test suite's stand-in) and fails on a file that says BROKEN.
Figures: tasks landed per second (first assigned -> last completed) and each task's landing time (its run's end
-> COMPLETED: the queue's wait, the check, the merge), medians.

    python bench/merge_queue.py [--tasks 40] [--agents 4] [--check-seconds 0.2] [--json rows.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from agentqueue.engine.orchestrator import Engine, EngineConfig  # noqa: E402
from agentqueue.services import Services  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_throughput import AGENT  # noqa: E402

FINAL = ("COMPLETED", "FAILED", "BLOCKED")


def check_command(seconds: float) -> str:
    """The repo's check: a fixed time, then a failure when any file says BROKEN."""
    return shlex.join(["/bin/sh", "-c", f"sleep {seconds} && ! grep -rqs BROKEN --include='*.txt' ."])


def stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def one_way(root: Path, n: int, agents: int, check: str | None, batch: bool) -> dict[str, Any] | None:
    """One home, one repo, n tasks through the engine; None when this build cannot batch."""
    home = root / ("batched" if batch else "checked" if check else "unchecked")
    svc = Services(home)
    svc.projects.create("Bench", max_concurrent_agents=agents, verify_command=check)
    svc.repos.add("bench", "init", name="repo")
    if batch:
        repo = svc.repos.get("repo")
        if "merge_batch" not in type(repo).model_fields:
            svc.close()
            return None
        svc.repos.update("repo", merge_batch=4)  # the batch setting of this build
    for i in range(agents):
        svc.agents.create(f"writer-{i}", "command", command=AGENT)
    ids = [svc.tasks.create("bench", f"Task {i}", "write a file and commit it", repo_id="repo").id for i in range(n)]
    engine = Engine(svc, home, config=EngineConfig(poll_seconds=0.05))
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        while svc.store.scalar(f"SELECT count(*) FROM tasks WHERE status IN ({', '.join('?' * len(FINAL))})",
                               FINAL) < n:
            await anyio.sleep(0.1)  # the bench shares the engine's process: a busier check would be measured
        await engine.shutdown()
        tg.cancel_scope.cancel()
    landing, first, last, landed = [], None, None, 0
    for task_id in ids:
        events = {r["event_type"]: stamp(r["timestamp"]) for r in svc.store.all(
            "SELECT event_type, timestamp FROM events WHERE task_id = ? AND event_type IN "
            "('task.assigned', 'task.completed') ORDER BY id", (task_id,))}
        if "task.completed" not in events:
            continue
        landed += 1
        ran = svc.store.one("SELECT duration_s FROM task_results WHERE task_id = ? ORDER BY id DESC "
                            "LIMIT 1", (task_id,))
        assigned, completed = events["task.assigned"], events["task.completed"]
        span = (completed - assigned).total_seconds()
        landing.append(span - float(ran["duration_s"] or 0) if ran else span)
        first, last = min(first or assigned, assigned), max(last or completed, completed)
    svc.close()
    if landed != n:
        raise SystemExit(f"{n - landed} of {n} tasks did not land; see {home}")
    seconds = (last - first).total_seconds() if first and last else float("nan")
    return {"tasks_per_s": n / seconds, "landing_ms": statistics.median(landing) * 1000, "seconds": seconds}


def rows_for(n: int, agents: int, check_s: float, ways: dict[str, dict[str, Any] | None]) -> list[dict[str, Any]]:
    base = ways["without checks"]
    assert base is not None
    rows = []
    for name, got in ways.items():
        common = {"tasks": n, "agents": agents, "check_seconds": check_s, "cpus": os.cpu_count()}
        if got is None:
            rows.append({"metric": f"landing throughput, {name}", "value": None, "unit": "tasks/s", "anchor": None,
                         "anchor_value": None, "ratio": None, "goal": "—", "met": True,
                         "note": "this build has no batches", **common})
            continue
        anchor = None if got is base else "without checks, same run"
        rows.append({"metric": f"landing throughput, {name}", "value": round(got["tasks_per_s"], 2),
                     "unit": "tasks/s", "anchor": anchor,
                     "anchor_value": None if anchor is None else round(base["tasks_per_s"], 2),
                     "ratio": None if anchor is None else round(got["tasks_per_s"] / base["tasks_per_s"], 2),
                     "goal": "—", "met": True, "landing_ms_median": round(got["landing_ms"], 1),
                     "seconds": round(got["seconds"], 2), **common})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--check-seconds", type=float, default=0.2)
    parser.add_argument("--quick", action="store_true", help="12 tasks a way (under a minute)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    n = 12 if args.quick else args.tasks
    root = Path(tempfile.mkdtemp(prefix="aq-bench-queue-"))
    os.environ.update(GIT_AUTHOR_NAME="Bench", GIT_AUTHOR_EMAIL="bench@localhost", GIT_COMMITTER_NAME="Bench",
                      GIT_COMMITTER_EMAIL="bench@localhost")
    check = check_command(args.check_seconds)
    ways = {"without checks": anyio.run(one_way, root, n, args.agents, None, False),
            "the queue, one by one": anyio.run(one_way, root, n, args.agents, check, False),
            "the queue, batched": anyio.run(one_way, root, n, args.agents, check, True)}
    rows = rows_for(n, args.agents, args.check_seconds, ways)
    for row in rows:
        value = "skipped (" + row["note"] + ")" if row["value"] is None else f"{row['value']} {row['unit']}"
        extra = f", landing {row['landing_ms_median']} ms median" if "landing_ms_median" in row else ""
        ratio = f" ({row['ratio']} × without checks)" if row.get("ratio") else ""
        print(f"{row['metric']}: {value}{ratio}{extra}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
