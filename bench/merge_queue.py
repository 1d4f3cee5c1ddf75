"""Landing throughput with the merge queue (issue 21) beside the fast path without checks, in the same run.

4 `command` agents; each task writes and commits a new file (no conflicts), on a real repo. With checks, a
repo's tasks land one at a time: the branch is brought up to date (a merge), the check runs in its worktree
(inside the sandbox) and main moves to one commit with exactly that tree. The check is `true` (the queue's own
cost) and, in a third run, a check that takes CHECK_SECONDS (a real test suite's cost, paid once per task).
The anchor: the same tasks, the same agents, a project without checks (merge-tree + compare-and-swap, no wait).
Batched (design.md "Batches"): the same two checks with the repo's merge_batch at BATCH, beside one by one: the
tasks waiting behind the head land as one checked commit (nothing fails here, so no bisection).

    python bench/merge_queue.py [--tasks 40] [--agents 4] [--batch 8] [--json rows.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from agentqueue.engine.orchestrator import Engine, EngineConfig  # noqa: E402
from agentqueue.services import Services  # noqa: E402

IDENTITY = ["-c", "user.name=Bench", "-c", "user.email=bench@localhost"]
AGENT = shlex.join(["/bin/sh", "-c", "f=$(mktemp -p . work-XXXXXXXX.txt) && echo done > \"$f\" && git add -- \"$f\" "
                    f"&& git {' '.join(IDENTITY)} commit -q -m 'agent work'"])
CHECK_SECONDS = 0.2
LANDINGS: dict[str, int] = {}  # per run: how many times main moved (fewer than the tasks when batched)


async def land_all(root: Path, n: int, agents: int, check: str | None, batch: int | None = None) -> float:
    """Seconds from the first claim until all `n` tasks landed on main."""
    home = root / "home"
    svc = Services(home)
    svc.projects.create("Bench", max_concurrent_agents=agents, verify_command=check)
    svc.repos.add("bench", "init", name="repo", merge_batch=batch)
    for i in range(agents):
        svc.agents.create(f"writer-{i}", "command", command=AGENT)
    for i in range(n):
        svc.tasks.create("bench", f"Task {i}", "write a file and commit it", repo_id="repo")
    engine = Engine(svc, home, config=EngineConfig(poll_seconds=0.05))
    start = time.perf_counter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        while svc.store.scalar("SELECT count(*) FROM tasks WHERE status = 'COMPLETED'") < n:
            if svc.store.scalar("SELECT count(*) FROM tasks WHERE status IN ('BLOCKED', 'FAILED')"):
                raise SystemExit(f"a task did not land; see the task logs under {home / 'logs'}")
            await anyio.sleep(0.02)
        elapsed = time.perf_counter() - start
        await engine.shutdown()
        tg.cancel_scope.cancel()
    checkout = svc.repos.get("repo").checkout_path
    landed = subprocess.run(["git", "ls-tree", "--name-only", "main"], cwd=checkout, capture_output=True,
                            text=True).stdout.split()
    LANDINGS[root.name] = int(svc.store.scalar("SELECT count(DISTINCT landed_sha) FROM tasks"))
    svc.close()
    if sum(1 for name in landed if name.startswith("work-")) != n:
        raise SystemExit(f"main lacks some of the {n} tasks' files; see {home}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=40)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8, help="the repo's merge_batch in the batched runs")
    parser.add_argument("--quick", action="store_true", help="12 tasks a side (under a minute)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    n = 12 if args.quick else args.tasks
    root = Path(tempfile.mkdtemp(prefix="aq-bench-queue-"))
    slow_check = shlex.join([sys.executable, "-c", f"import time; time.sleep({CHECK_SECONDS})"])
    try:
        fast = anyio.run(land_all, root / "fast", n, args.agents, None)
        queued = anyio.run(land_all, root / "queued", n, args.agents, "true")
        checked = anyio.run(land_all, root / "checked", n, args.agents, slow_check)
        batched = anyio.run(land_all, root / "batched", n, args.agents, "true", args.batch)
        batched_checked = anyio.run(land_all, root / "batched-checked", n, args.agents, slow_check, args.batch)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    anchor = "the same tasks without checks (fast path), same run"
    common = {"tasks": n, "agents": args.agents}
    rows = [
        {"metric": "landing throughput through the merge queue, check `true`", "value": round(n / queued, 2),
         "unit": "tasks/s", "anchor": anchor, "anchor_value": round(n / fast, 2), "ratio": round(fast / queued, 2),
         "goal": "the queue's own cost: one landing at a time per repo", "met": True, **common},
        {"metric": f"landing throughput through the merge queue, a {CHECK_SECONDS} s check",
         "value": round(n / checked, 2), "unit": "tasks/s", "anchor": anchor, "anchor_value": round(n / fast, 2),
         "ratio": round(fast / checked, 2), "goal": "bounded by one check per task, serial per repo", "met": True,
         **common},
        {"metric": f"landing throughput batched (merge_batch {args.batch}), check `true`",
         "value": round(n / batched, 2), "unit": "tasks/s",
         "anchor": "the same tasks one by one, check `true`, same run",
         "anchor_value": round(n / queued, 2), "ratio": round(queued / batched, 2),
         "goal": "batches cost no more than one by one", "met": True, "fast_path": round(n / fast, 2),
         "landings": LANDINGS["batched"], **common},
        {"metric": f"landing throughput batched (merge_batch {args.batch}), a {CHECK_SECONDS} s check",
         "value": round(n / batched_checked, 2), "unit": "tasks/s",
         "anchor": f"the same tasks one by one, a {CHECK_SECONDS} s check, same run",
         "anchor_value": round(n / checked, 2), "ratio": round(checked / batched_checked, 2),
         "goal": "one check per batch, not per task", "met": True, "fast_path": round(n / fast, 2),
         "landings": LANDINGS["batched-checked"], **common},
    ]
    for row in rows:
        print(f"{row['metric']}: {row['value']} {row['unit']}  (anchor {row['anchor_value']} {row['unit']}, "
              f"ratio {row['ratio']})" + (f", {row['landings']} landings for {n} tasks" if "landings" in row else ""))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
