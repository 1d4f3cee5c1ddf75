"""Costs against the task count: 1k / 10k / 100k-task stores, each 10 % READY, built by this script.

Per store: a warm daemon (orchestrator paused, so nothing runs) and the official MCP client through
the stdio plugin measure `get_task` (p50 over random ids), `get_chain_health` for a whole project,
`list_tasks` (default filter, first page of 50), `get_status`; and, in-process on the same store,
one scheduler pass (`queue_state` + `schedule`, as every engine tick does it). Medians of repeated
calls; the ratio column is 100k against 1k (1.0 is flat).

    python bench/scale.py [--sizes 1000,10000,100000] [--repeat 25] [--backend sqlite|postgres]

With --backend postgres each store is a database on a PostgreSQL server this script starts (Debian's
binaries, initdb into a temp dir, as tests/pg.py does), and the daemon reaches it over loopback TCP.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any


PROJECTS = 10
AGENTS = 4
STATUSES = ["COMPLETED"] * 78 + ["READY"] * 10 + ["DEFINED"] * 4 + ["BLOCKED"] * 3 + ["FAILED"] * 2 + \
           ["AWAITING_APPROVAL"] * 2 + ["PAUSED"] * 1
GOALS_MS = {"get_task": 5, "get_chain_health": 100, "list_tasks": 10, "get_status": 25, "scheduler_pass": 20}


def insert_many(store: Any, sql: str, rows: list[tuple[Any, ...]]) -> None:
    """Bulk rows through the backend's own driver (inside a transaction)."""
    if store.backend == "postgres":
        from agentqueue.store.postgres import translate

        store.db.conn.cursor().executemany(translate(sql), rows)
    else:
        store.db.conn.executemany(sql, rows)


def build(home: Path, count: int) -> list[str]:
    """A store of `count` tasks over PROJECTS projects (with dependency chains, results, ledger rows)."""
    from agentqueue.services import Services

    svc = Services(home)
    rng = random.Random(count)
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    stamp = lambda n: (start + timedelta(seconds=n)).isoformat(timespec="milliseconds").replace("+00:00", "Z")  # noqa: E731
    try:
        for p in range(PROJECTS):
            svc.projects.create(f"Project {p}", max_concurrent_agents=4)
        for a in range(AGENTS):
            svc.agents.create(f"worker {a}", "command", command="true")
        ids = [f"task-{n:06d}" for n in range(count)]
        tasks, deps, ledger, events = [], [], [], []
        for n, task_id in enumerate(ids):
            status = STATUSES[rng.randrange(len(STATUSES))]
            project = f"project-{n % PROJECTS}"
            tasks.append((task_id, project, f"Task {n}", f"Work item {n} " + "x" * 200, status, rng.randrange(200),
                          0, 3, 0, stamp(n), stamp(n), "why it is held" if status in ("BLOCKED", "FAILED") else None))
            if n % 10 and n >= PROJECTS:
                deps.append((task_id, ids[n - PROJECTS]))  # a chain per project
            if status == "COMPLETED":
                ledger.append((project, task_id, "worker-0", 1000, 200, 1200, 0.01, stamp(n)))
            events.append(("task.created", project, task_id, json.dumps({"title": f"Task {n}"}), stamp(n)))
        with svc.store.transaction():
            insert_many(svc.store, "INSERT INTO tasks (id, project_id, title, description, status, priority, retry_count, "
                           "max_retries, requires_approval, created_at, updated_at, reason) "
                           "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", tasks)
            insert_many(svc.store, "INSERT INTO task_dependencies (task_id, depends_on) VALUES (?, ?)", deps)
            insert_many(svc.store, "INSERT INTO token_ledger (project_id, task_id, agent_id, input, output, total, cost_usd, "
                           "timestamp) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", ledger)
            insert_many(svc.store, "INSERT INTO events (event_type, project_id, task_id, payload, timestamp) "
                           "VALUES (?, ?, ?, ?, ?)", events)
        svc.system.set_orchestrator("paused")
        svc.store.db.execute("ANALYZE")
        return ids
    finally:
        svc.close()


def scheduler_pass_ms(home: Path, repeat: int) -> float:
    from agentqueue.engine.orchestrator import Engine
    from agentqueue.engine.scheduler import schedule
    from agentqueue.services import Services

    svc = Services(home)
    try:
        svc.system.set_orchestrator("running")  # the daemon is stopped by now: nothing starts a run
        engine = Engine(svc, home)
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            state = engine.queue_state()
            assignments = schedule(state)
            times.append((time.perf_counter() - started) * 1000)
        assert assignments, "the pass assigned nothing: the store has no runnable READY task"
        return statistics.median(times)
    finally:
        svc.close()


class RawClient:
    """JSON-RPC lines over the stdio plugin, as a client sends them: the measure is the server's and the
    pipe's, not a client library's own result validation (the Python SDK's jsonschema check of a
    50-task list costs more than the server's answer)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "agentqueue", "mcp"], env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.next_id = 0
        self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "0"}})
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _send(self, message: dict[str, Any]) -> None:
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        self._send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            answer = json.loads(self.process.stdout.readline())
            if answer.get("id") == self.next_id:
                return answer

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


def tool_ms(home: Path, ids: list[str], repeat: int) -> dict[str, float]:
    env = {**os.environ, "AGENTQUEUE_HOME": str(home)}
    server = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--no-http"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not (home / "daemon.json").exists():
            time.sleep(0.05)
        client = RawClient(env)
        rng = random.Random(7)
        calls = {"get_task": lambda: {"task_id": rng.choice(ids)},
                 "get_chain_health": lambda: {"project_id": "project-3"},
                 "list_tasks": lambda: {},
                 "get_status": lambda: {}}
        figures = {}
        for name, arguments in calls.items():
            client.request("tools/call", {"name": name, "arguments": arguments()})  # warm
            times = []
            for _ in range(repeat):
                started = time.perf_counter()
                answer = client.request("tools/call", {"name": name, "arguments": arguments()})
                times.append((time.perf_counter() - started) * 1000)
                assert not answer["result"].get("isError"), answer
            figures[name] = statistics.median(times)
        client.close()
        return figures
    finally:
        server.terminate()
        server.wait(timeout=30)


def measure(sizes: list[int], repeat: int, new_database: Any = None) -> dict[int, dict[str, float]]:
    table = {}
    for size in sizes:
        if new_database is not None:
            os.environ["AGENTQUEUE_DATABASE_URL"] = new_database()
        with tempfile.TemporaryDirectory(prefix=f"agentqueue-scale-{size}-") as scratch:
            home = Path(scratch) / "aq"
            started = time.monotonic()
            ids = build(home, size)
            built = time.monotonic() - started
            figures = tool_ms(home, ids, repeat)
            figures["scheduler_pass"] = scheduler_pass_ms(home, repeat)
            figures["build_s"] = built
            table[size] = figures
            print(f"{size:>7} tasks (built in {built:.1f} s): "
                  + ", ".join(f"{k} {v:.1f} ms" for k, v in figures.items() if k != "build_s"), flush=True)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeat", type=int, default=25)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    server = None
    if args.backend == "postgres":
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from tests.pg import PgServer

        server = PgServer()
    else:
        os.environ.pop("AGENTQUEUE_DATABASE_URL", None)
    try:
        table = measure(sizes, args.repeat, server.database if server else None)
    finally:
        if server is not None:
            server.stop()
    print(f"\nbackend: {args.backend}")
    first, last = sizes[0], sizes[-1]
    print(f"\n| call | " + " | ".join(f"{s:,}" for s in sizes) + f" | ratio {last:,}/{first:,} | goal |")
    print("|---|" + "---|" * len(sizes) + "---|---|")
    for name, goal in GOALS_MS.items():
        cells = " | ".join(f"{table[s][name]:.1f} ms" for s in sizes)
        ratio = table[last][name] / table[first][name]
        mark = "✔" if table[last][name] <= goal else "✘"
        print(f"| {name} | {cells} | {ratio:.2f} | ≤ {goal} ms {mark} |")
    print(json.dumps({str(s): {k: round(v, 2) for k, v in f.items()} for s, f in table.items()}))


if __name__ == "__main__":
    main()
