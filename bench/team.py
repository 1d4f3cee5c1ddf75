"""Team mode's limits, measured on a real PostgreSQL server this script starts (as tests/pg.py does).

1. Writes: write transactions per second from 1, 2, 4 and 8 processes, each with its own connection
   (as daemons have). Every ordinary write takes the one exclusive advisory lock, so they queue;
   claim passes take it shared and keep apart by row locks, so they run side by side. SQLite (one
   file, the same processes) beside it. Medians of --repeat runs.
2. Drain: 1, 2, 4 and 8 daemons (each with 4 `command` agents running `true`) drain --tasks tasks;
   tasks per second, and the transactions the server committed per task (reads included: each read
   outside a transaction is one).

3. Writes per run: the write transactions the engine makes per run of a trivial task (counted
   in-process over 40 runs, SQLite; the same code writes the same on PostgreSQL).

    python bench/team.py [--repeat 3] [--tasks 400]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.cli_helpers import cli_env, start_daemon, stop_daemon, wait_until  # noqa: E402
from tests.pg import PgServer  # noqa: E402

WRITES = 300  # per process


def open_store(target: str):  # type: ignore[no-untyped-def]
    from agentqueue.store.postgres import PostgresStore
    from agentqueue.store.sqlite import SqliteStore

    return PostgresStore(target) if target.startswith("postgresql://") else SqliteStore(Path(target))


def _writer(target: str, worker: int, concurrent: bool, start: multiprocessing.synchronize.Event) -> None:
    store = open_store(target)
    start.wait()
    for n in range(WRITES):
        with store.transaction(concurrent=concurrent):
            store.set_setting(f"writer-{worker}", str(n))
    store.close()


def writes_per_second(target: str, processes: int, concurrent: bool = False) -> float:
    open_store(target).close()  # the schema exists before the clock starts
    start = multiprocessing.Event()
    workers = [multiprocessing.Process(target=_writer, args=(target, n, concurrent, start)) for n in range(processes)]
    for worker in workers:
        worker.start()
    time.sleep(1.0)  # every worker connected
    began = time.perf_counter()
    start.set()
    for worker in workers:
        worker.join()
    return processes * WRITES / (time.perf_counter() - began)


def drain(server: PgServer, daemons: int, tasks: int) -> tuple[float, float]:
    """(tasks per second, write transactions per task) for `daemons` daemons on one fresh database."""
    url = server.database()
    scratch = Path(tempfile.mkdtemp(prefix="agentqueue-team-"))
    store = open_store(url)
    live = []
    try:
        for n in range(daemons):
            live.append(start_daemon(cli_env(scratch / f"home-{n}", scratch / f"user-{n}", AGENTQUEUE_DATABASE_URL=url,
                                             AGENTQUEUE_LABELS=f"d{n}", AGENTQUEUE_POLL_SECONDS="1")))
        first = live[0]
        for agent in first.call("list_agents")["agents"]:
            first.call("delete_agent", agent_id=agent["id"])
        first.call("create_project", name="Drain", max_concurrent_agents=4 * daemons)
        for n, member in enumerate(live):
            for k in range(4):
                member.call("create_agent", name=f"d{n}-{k}", agent_type="command", command="true", label=f"d{n}")
        first.call("orchestrator_control", action="pause")
        for n in range(tasks):
            first.call("create_task", project_id="drain", title=f"t{n}", description="nothing")
        commits = lambda: store.scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")  # noqa: E731
        before = commits()
        began = time.perf_counter()
        first.call("orchestrator_control", action="resume")
        wait_until(lambda: store.scalar("SELECT count(*) FROM tasks WHERE status = 'COMPLETED'") == tasks, 600,
                   "the drain")
        elapsed = time.perf_counter() - began
        time.sleep(1.0)  # the statistics collector catches up
        return tasks / elapsed, (commits() - before) / tasks
    finally:
        for member in live:
            stop_daemon(member)
        store.close()
        shutil.rmtree(scratch, ignore_errors=True)


def writes_per_run(runs: int = 40) -> float:
    """Outermost store transactions per run, over `runs` runs of `true` by 4 command agents."""
    from contextlib import contextmanager

    import anyio

    from agentqueue.engine.orchestrator import Engine, EngineConfig
    from agentqueue.services import Services
    from agentqueue.store.sqlite import SqliteStore

    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch) / "aq"
        os.environ.pop("AGENTQUEUE_DATABASE_URL", None)
        svc = Services(home)
        svc.projects.create("P", max_concurrent_agents=4)
        for n in range(4):
            svc.agents.create(f"w{n}", "command", command="true")
        for n in range(runs):
            svc.tasks.create("p", f"t{n}", "d")
        counted = {"n": 0}
        atomic = SqliteStore._atomic

        @contextmanager
        def counting(self, concurrent):  # type: ignore[no-untyped-def]
            counted["n"] += not self.db.conn.in_transaction
            with atomic(self, concurrent):
                yield
        SqliteStore._atomic = counting  # type: ignore[method-assign]
        engine = Engine(svc, home, config=EngineConfig(poll_seconds=0.05))

        async def drain_all() -> None:
            async with anyio.create_task_group() as tg:
                tg.start_soon(engine.run)
                while svc.store.scalar("SELECT count(*) FROM tasks WHERE status = 'COMPLETED'") < runs:
                    await anyio.sleep(0.05)
                await engine.shutdown()
                tg.cancel_scope.cancel()
        try:
            anyio.run(drain_all)
        finally:
            SqliteStore._atomic = atomic  # type: ignore[method-assign]
            svc.close()
        return counted["n"] / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=400)
    args = parser.parse_args()
    server = PgServer()
    try:
        print("| writers | SQLite writes/s | PostgreSQL writes/s (exclusive) | PostgreSQL claim passes/s (shared) |")
        print("|---|---|---|---|")
        for processes in (1, 2, 4, 8):
            sqlite_runs, pg_runs, shared_runs = [], [], []
            for _ in range(args.repeat):
                with tempfile.TemporaryDirectory() as scratch:
                    sqlite_runs.append(writes_per_second(str(Path(scratch) / "aq.db"), processes))
                pg_runs.append(writes_per_second(server.database(), processes))
                shared_runs.append(writes_per_second(server.database(), processes, concurrent=True))
            print(f"| {processes} | {statistics.median(sqlite_runs):.0f} | {statistics.median(pg_runs):.0f} | "
                  f"{statistics.median(shared_runs):.0f} |", flush=True)
        print("\n| daemons | tasks/s | server transactions per task (reads included) |")
        print("|---|---|---|")
        for daemons in (1, 2, 4, 8):
            rates, per_task = [], []
            for _ in range(args.repeat):
                rate, writes = drain(server, daemons, args.tasks)
                rates.append(rate)
                per_task.append(writes)
            print(f"| {daemons} | {statistics.median(rates):.1f} | {statistics.median(per_task):.1f} |", flush=True)
        print(f"\nwrite transactions per run: {writes_per_run():.1f}")
        print(f"machine: {os.cpu_count()} cores; PostgreSQL on loopback, fsync off (as in the tests)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
