"""Engine throughput as users get it: 4 `command` agents, each task changes and commits one file, and the
engine merges every task into main of a real repo.

Per task the engine pays claim, `git worktree add` on a new branch, the sandboxed run, leftovers, the
protected-paths check, the landing (a merge or a fast-forward of main) and the worktree's removal.
The figure is each task's span assigned -> completed minus its agent's own run (`task_results.duration_s`,
which starts before the sandbox is set up and so holds the sandbox's start too: that cost is issue 18's,
measured by bench/sandbox_start.py, and is not counted here as engine overhead).

The anchor, in the same run: the same git steps by hand in a loop on another repo (worktree add -b, write
+ commit, fast-forward main, worktree remove, branch delete) = the git floor. Goal (issue 19): overhead
<= 2 x the floor. Every git command either side runs is counted through a `git` shim first on PATH (both
sides pay the shim's own start), and listed by kind.

    python bench/engine_throughput.py [--tasks 100] [--agents 4] [--rounds 3] [--json rows.json] [--quick] [--trace]

It runs the floor, the engine and the floor again `--rounds` times (one with --quick) and reports the round whose
ratio is the median, each round's ratio beside it: this machine's speed moves within minutes (the floor alone
has measured 35 to 90 ms), and a single round is as much the minute's figure as the engine's.

`--trace` prints the git commands of one task (the middle one): those run in its worktree or naming its branch,
and those run in the checkout between its first and last (with more than one agent, other tasks' too).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from agentqueue.engine.orchestrator import Engine, EngineConfig  # noqa: E402
from agentqueue.services import Services  # noqa: E402

METRIC = ("engine overhead per task, {agents} agents each committing one file, {tasks} tasks (assigned → completed, "
          "minus the agent's own run)")
REAL_GIT = shutil.which("git") or "/usr/bin/git"
IDENTITY = ["-c", "user.name=Bench", "-c", "user.email=bench@localhost"]
# The agent: a new file, committed on the task branch, as an agent that follows "commit your work" does. It
# calls git by its full path, so its own commands (part of its run) are not counted as the engine's.
AGENT_SCRIPT = (f"f=$(mktemp -p . work-XXXXXXXX.txt) && echo done > \"$f\" && {REAL_GIT} add -- \"$f\" && "
         f"{REAL_GIT} {' '.join(IDENTITY)} commit -q -m 'agent work'")
AGENT = shlex.join(["/bin/sh", "-c", AGENT_SCRIPT])


def git_shim(root: Path) -> tuple[Path, Path]:
    """A `git` that logs its cwd and argv (one line each) and runs the real one; (its folder, its log)."""
    folder, log = root / "shim", root / "git-calls.log"
    folder.mkdir()
    shim = folder / "git"
    shim.write_text(f"#!/bin/sh\nprintf '%s\\t%s\\n' \"$PWD\" \"$*\" >> {log} 2>/dev/null\nexec {REAL_GIT} \"$@\"\n")
    shim.chmod(0o755)
    return folder, log


def read_calls(log: Path) -> list[tuple[str, list[str]]]:
    if not log.exists():
        return []
    return [(cwd, argv.split(" ")) for cwd, argv in (line.split("\t", 1) for line in log.read_text().splitlines())]


def kind(argv: list[str]) -> str:
    """The git subcommand of an argv, past the global `-c k=v` options (e.g. 'worktree add', 'rev-parse')."""
    words = [w for i, w in enumerate(argv) if w != "-c" and (i == 0 or argv[i - 1] != "-c")]
    if not words:
        return "?"
    sub = words[0]
    if sub in ("worktree", "remote", "symbolic-ref", "config") and len(words) > 1:
        return f"{sub} {words[1]}"
    return sub


def by_kind(calls: list[tuple[str, list[str]]], tasks: int) -> dict[str, float]:
    counts = Counter(kind(argv) for _, argv in calls)
    return {name: round(n / tasks, 2) for name, n in counts.most_common()}


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and of every child it has waited for: a figure that holds on a
    busy machine, where the wall time does not."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy so far (/proc/stat): what the benchmark's own children
    figure misses, the sandboxed agents' processes that PID 1 reaps (the inner bubblewrap outlives the outer one)."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            ticks = [int(x) for x in stat.readline().split()[1:]]
    except OSError:
        return 0.0
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle and iowait


def floor(root: Path, n: int, log: Path) -> tuple[float, int, dict[str, float], float]:
    """The same git steps by hand, one task after another: seconds per task, commands, their kinds, and CPU
    seconds per task (git's, and this loop's)."""
    repo = root / "floor"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    subprocess.run(["git", *IDENTITY, "commit", "-q", "--allow-empty", "-m", "init"], cwd=repo, check=True)
    before = len(read_calls(log))
    start, cpu = time.perf_counter(), cpu_seconds()
    for i in range(n):
        tree, branch = root / "floor-trees" / str(i), f"t{i}/work"
        subprocess.run(["git", "worktree", "add", "-q", "-b", branch, str(tree), "main"], cwd=repo, check=True)
        (tree / f"work-{i}.txt").write_text("done\n")
        subprocess.run(["git", "add", "-A"], cwd=tree, check=True)
        subprocess.run(["git", *IDENTITY, "commit", "-q", "-m", "work"], cwd=tree, check=True)
        subprocess.run(["git", "merge", "--ff-only", "-q", branch], cwd=repo, check=True)
        subprocess.run(["git", "worktree", "remove", str(tree)], cwd=repo, check=True)
        subprocess.run(["git", "branch", "-q", "-d", branch], cwd=repo, check=True)
    elapsed, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    calls = read_calls(log)[before:]
    return elapsed / n, len(calls), by_kind(calls, n), cpu / n


def trace(calls: list[tuple[str, list[str]]], task_id: str) -> list[str]:
    """The commands of one task, in order: '*' marks those that name it (its worktree, its branch)."""
    mine = [i for i, (cwd, argv) in enumerate(calls) if task_id in cwd or any(task_id in a for a in argv)]
    if not mine:
        return []
    return [f"{'*' if i in mine else ' '} {kind(argv):<16} {' '.join(a for a in argv if len(a) < 60)[:150]}"
            for i, (cwd, argv) in enumerate(calls[mine[0]:mine[-1] + 1], start=mine[0])
            if i in mine or "/worktrees/" not in cwd]


async def engine_run(root: Path, n: int, agents: int, log: Path) -> dict[str, object]:
    home = root / "home"
    svc = Services(home)
    svc.projects.create("Bench", max_concurrent_agents=agents)
    svc.repos.add("bench", "init", name="repo")
    for i in range(agents):
        svc.agents.create(f"writer-{i}", "command", command=AGENT)
    ids = [svc.tasks.create("bench", f"Task {i}", "write a file and commit it", repo_id="repo").id for i in range(n)]
    engine = Engine(svc, home, config=EngineConfig(poll_seconds=0.05))
    before = len(read_calls(log))
    start, cpu, own, busy = time.perf_counter(), cpu_seconds(), time.process_time(), machine_busy_seconds()
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        # Checked every 0.1 s in one query: the bench shares the engine's process (its GIL, its store), so a
        # busier check would be measured as the engine's overhead. The elapsed time comes from the events.
        while (counts := svc.store.one(
                "SELECT count(*) FILTER (WHERE status = 'COMPLETED') AS done, count(*) FILTER (WHERE status NOT IN "
                "('COMPLETED', 'READY', 'ASSIGNED', 'IN_PROGRESS', 'VERIFYING')) AS stuck FROM tasks"))["done"] < n:
            if counts["stuck"]:
                raise SystemExit("a task did not complete; see the task logs under " + str(home / "logs"))
            await anyio.sleep(0.1)
        await engine.shutdown()
        tg.cancel_scope.cancel()
    cpu, own = cpu_seconds() - cpu, time.process_time() - own  # the engine and the children it waited for
    busy = machine_busy_seconds() - busy  # the whole machine: the agents' sandboxes too, and anything else running
    calls = read_calls(log)[before:]
    overheads, runs, first, last = [], [], None, None
    for task_id in ids:  # assigned -> completed, minus the agent process's own run
        stamps = {r["event_type"]: r["timestamp"] for r in svc.store.all(
            "SELECT event_type, timestamp FROM events WHERE task_id = ? AND event_type IN "
            "('task.assigned', 'task.completed')", (task_id,))}
        assigned, completed = (datetime.fromisoformat(stamps[e].replace("Z", "+00:00"))
                               for e in ("task.assigned", "task.completed"))
        span = (completed - assigned).total_seconds()
        first, last = min(first or assigned, assigned), max(last or completed, completed)
        run = svc.store.scalar("SELECT duration_s FROM task_results WHERE task_id = ?", (task_id,)) or 0
        overheads.append(span - run)
        runs.append(run)
    checkout = svc.repos.get("repo").checkout_path
    landed = subprocess.run(["git", "ls-tree", "--name-only", "main"], cwd=checkout, capture_output=True,
                            text=True).stdout.split()
    left = subprocess.run(["git", "for-each-ref", "--format=%(refname)", "refs/heads/"], cwd=checkout,
                          capture_output=True, text=True).stdout.split()
    trees = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=checkout, capture_output=True,
                           text=True).stdout.count("worktree ")
    svc.close()
    if len(left) > 1 or trees > 1:
        print(f"left behind: {len(left) - 1} task branches, {trees - 1} worktrees", file=sys.stderr)
    files = sum(1 for name in landed if name.startswith("work-"))
    if files != n:
        raise SystemExit(f"main has {files} of the {n} tasks' files; see {home}")
    elapsed = (last - first).total_seconds() if first and last else time.perf_counter() - start
    return {"seconds": elapsed, "overheads": overheads, "runs": runs, "calls": len(calls),
            "kinds": by_kind(calls, n), "left": {"branches": len(left) - 1, "worktrees": trees - 1},
            "cpu": cpu / n, "own_cpu": own / n, "machine_cpu": busy / n, "trace": trace(calls, ids[n // 2])}


def rows_for(n: int, agents: int, eng: dict, floor_s: float, floor_calls: int, floor_kinds: dict,
             floor_cpu: float) -> list[dict]:
    overhead = statistics.median(eng["overheads"])
    p90 = sorted(eng["overheads"])[int(len(eng["overheads"]) * 0.9)]
    ratio = overhead / floor_s
    per_task = eng["calls"] / n
    common = {"tasks": n, "agents": agents, "cpus": os.cpu_count()}
    return [
        {"metric": METRIC.format(agents=agents, tasks=n), "value": round(overhead * 1000, 1), "unit": "ms/task",
         "anchor": "the same git steps by hand in a loop", "anchor_value": round(floor_s * 1000, 1),
         "ratio": round(ratio, 2), "goal": "≤ 2 × the floor", "met": ratio <= 2.0,
         "p90_ms": round(p90 * 1000, 1), "agent_run_ms_median": round(statistics.median(eng["runs"]) * 1000, 1),
         "left_behind": eng["left"], "cpu_ms_per_task": round(eng["cpu"] * 1000, 1),
         "engine_process_cpu_ms_per_task": round(eng["own_cpu"] * 1000, 1),
         "machine_cpu_ms_per_task": round(eng["machine_cpu"] * 1000, 1),
         "floor_cpu_ms_per_task": round(floor_cpu * 1000, 1), **common},
        {"metric": "engine throughput, the same run", "value": round(n / eng["seconds"], 2), "unit": "tasks/s",
         "anchor": None, "anchor_value": None, "ratio": None, "goal": "—", "met": True,
         "seconds": round(eng["seconds"], 2), **common},
        {"metric": "git commands per task, the same run", "value": round(per_task, 1), "unit": "commands",
         "anchor": "the same git steps by hand in a loop", "anchor_value": round(floor_calls / n, 1),
         "ratio": round(per_task / (floor_calls / n), 2), "goal": "what landing needs", "met": True,
         "by_kind": eng["kinds"], "anchor_by_kind": floor_kinds, **common},
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=100)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="30 tasks (under a minute)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    parser.add_argument("--trace", action="store_true", help="print the git commands of one task")
    parser.add_argument("--rounds", type=int, default=3,
                        help="floor, engine, floor again this many times; the median round is reported (default 3)")
    args = parser.parse_args()
    n = 30 if args.quick else args.tasks
    root = Path(tempfile.mkdtemp(prefix="aq-bench-engine-"))
    shim, log = git_shim(root)
    os.environ["PATH"] = f"{shim}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ.update(GIT_AUTHOR_NAME="Bench", GIT_AUTHOR_EMAIL="bench@localhost", GIT_COMMITTER_NAME="Bench",
                      GIT_COMMITTER_EMAIL="bench@localhost")
    rounds: list[tuple[list[dict], dict]] = []
    for r in range(1 if args.quick else args.rounds):
        base = root / f"round-{r + 1}"
        floor_before = floor(base / "before", n, log)
        eng = anyio.run(engine_run, base, n, args.agents, log)
        floor_after = floor(base / "after", n, log)
        floor_s = statistics.mean([floor_before[0], floor_after[0]])
        rows = rows_for(n, args.agents, eng, floor_s, floor_before[1], floor_before[2],
                        statistics.mean([floor_before[3], floor_after[3]]))
        rounds.append((rows, eng))
        print(f"round {r + 1}: overhead {rows[0]['value']} ms/task, floor {rows[0]['anchor_value']} ms/task, "
              f"ratio {rows[0]['ratio']}", flush=True)
    # The median round by its ratio, all of its figures together (one round's engine beside its own floors).
    rows, eng = sorted(rounds, key=lambda side: side[0][0]["ratio"])[len(rounds) // 2]
    rows[0]["round_ratios"] = [side[0][0]["ratio"] for side in rounds]
    for row in rows:
        anchor = f"  (anchor {row['anchor_value']} {row['unit']}, ratio {row['ratio']})" if row["anchor"] else ""
        print(f"{row['metric']}: {row['value']} {row['unit']}{anchor}")
    print(f"CPU per task: {rows[0]['cpu_ms_per_task']} ms (the engine and the children it waited for; the engine "
          f"process alone {rows[0]['engine_process_cpu_ms_per_task']} ms; the whole machine "
          f"{rows[0]['machine_cpu_ms_per_task']} ms, sandboxed agents included), the floor's "
          f"{rows[0]['floor_cpu_ms_per_task']} ms")
    print("engine git commands per task by kind:", json.dumps(rows[2]["by_kind"]))
    print("floor git commands per task by kind: ", json.dumps(rows[2]["anchor_by_kind"]))
    if args.trace:
        print(f"git commands of task {n // 2} (* names the task):", *eng["trace"], sep="\n  ")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
