"""Team mode (issue 13): daemons with different homes share one queue on a real PostgreSQL server.

Real daemons (`python -m agentqueue serve`), real `command` agents, a real bare git repository as the
shared remote, the official MCP client for notifications. Nothing here is a stand-in for our own code.
"""

from __future__ import annotations

import itertools
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import ResourceUpdatedNotification

from agentqueue.services.team import Team
from agentqueue.settings import Settings
from agentqueue.store.postgres import PostgresStore

from .cli_helpers import AGENT, LiveDaemon, signals, cli_env, run_cli, start_daemon, stop_daemon, wait_until
from .pg import PgServer, needs_postgres
from .processes import alive
from .slowdown import scaled

pytestmark = [needs_postgres(), pytest.mark.integration]

# A command agent that records which daemon ran which task (RUN <name> in its prompt), once per run.
RECORDER = r"""
import os, re, sys
prompt = sys.stdin.read()
name = re.search(r"RUN (\S+)", prompt)[1]
with open(sys.argv[1], "a") as log:
    log.write(f"{name} {os.environ['TEAM_MEMBER']}\n")
"""


# The same, taking its time and recording when it ran (start and end), to see how many ran at once.
TIMED = r"""
import os, re, sys, time
name = re.search(r"RUN (\S+)", sys.stdin.read())[1]
start = time.time()
time.sleep(0.4)
with open(sys.argv[1], "a") as log:
    log.write(f"{name} {os.environ['TEAM_MEMBER']} {start} {time.time()}\n")
"""


def member_env(tmp_path: Path, who: str, url: str, **extra: str) -> dict[str, str]:
    """A daemon of the team: its own home and machine-ish user home, the shared database, a short lease; its agents
    get TEAM_MEMBER as a person passes a variable of theirs (a run's environment is an allowlist: issue 33)."""
    home = tmp_path / f"home-{who}"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text('[env]\npass = ["TEAM_MEMBER"]\n')
    return cli_env(tmp_path / f"home-{who}", tmp_path / f"user-{who}", AGENTQUEUE_DATABASE_URL=url,
                   AGENTQUEUE_LEASE_SECONDS="3", AGENTQUEUE_LABELS=who, TEAM_MEMBER=who, **extra)


def only_our_agents(daemon: LiveDaemon) -> None:
    """A first start may register an agent for a CLI it found; these tests choose their agents themselves."""
    for agent in daemon.call("list_agents")["agents"]:
        daemon.call("delete_agent", agent_id=agent["id"])


@pytest.fixture
def team_db(pg_server: PgServer) -> str:
    return pg_server.database()


@contextmanager
def team_of_two(tmp_path: Path, team_db: str) -> Iterator[tuple[LiveDaemon, LiveDaemon, PostgresStore]]:
    """Daemons a and b on one database (a's first-start agent removed), and a store to look at it directly."""
    a = start_daemon(member_env(tmp_path, "a", team_db))
    b = None
    store = PostgresStore(team_db)
    try:
        b = start_daemon(member_env(tmp_path, "b", team_db))
        only_our_agents(a)
        yield a, b, store
    finally:
        store.close()
        stop_daemon(a)
        if b is not None:
            stop_daemon(b)


def labelled_agents(a: LiveDaemon, b: LiveDaemon, script: str, log: Path) -> None:
    """Three command agents per daemon running `script`, each labelled with its daemon's label."""
    command = shlex.join([sys.executable, "-c", script, str(log)])
    for who, daemon in (("a", a), ("b", b)):
        for n in range(3):
            daemon.call("create_agent", name=f"{who}-{n}", agent_type="command", command=command, label=who)


@pytest.mark.daemon
def test_two_daemons_drain_200_tasks_and_each_runs_exactly_once(tmp_path: Path, team_db: str) -> None:
    runs = signals(tmp_path) / "runs.log"
    with team_of_two(tmp_path, team_db) as (a, b, store):
        a.call("create_project", name="Team", max_concurrent_agents=8)
        labelled_agents(a, b, RECORDER, runs)  # each daemon runs its own agents: they carry its label
        names = [f"t{n:03d}" for n in range(200)]
        for n, name in enumerate(names):  # half the tasks arrive through each daemon
            (a if n % 2 else b).call("create_task", project_id="team", title=name, description=f"RUN {name}")
        wait_until(lambda: store.scalar("SELECT count(*) FROM tasks WHERE status = 'COMPLETED'") == 200, 240,
                   "the two daemons to drain 200 tasks")

        lines = runs.read_text().split()
        ran = Counter(lines[0::2])
        assert sorted(ran) == names and set(ran.values()) == {1}, "every task ran exactly once"
        by = Counter(lines[1::2])
        assert set(by) == {"a", "b"}, f"both daemons ran tasks: {by}"
        ran_on = dict(zip(lines[0::2], lines[1::2], strict=True))
        agent_of = {r["title"]: r["agent_id"] for r in store.all(
            "SELECT t.title, r.agent_id FROM task_results r JOIN tasks t ON t.id = r.task_id")}
        assert all(agent_of[name].startswith(f"{who}-") for name, who in ran_on.items()), \
            "an agent ran only on the daemon that has its label"
        owners = {r["owner"] for r in store.all("SELECT DISTINCT owner FROM tasks")}
        assert len(owners) == 2 and all(o.startswith(os.uname().nodename) for o in owners)
        results = store.all("SELECT task_id, count(*) AS n, sum(total) AS total FROM task_results GROUP BY task_id")
        ledger = store.all("SELECT task_id, count(*) AS n, sum(total) AS total FROM token_ledger "
                           "WHERE task_id IS NOT NULL GROUP BY task_id")
        assert len(results) == 200 and {r["n"] for r in results} == {1}
        rows = lambda table: sorted((r["task_id"], r["n"], r["total"]) for r in table)  # noqa: E731
        assert rows(results) == rows(ledger), "results and ledger agree"
        assert store.scalar("SELECT count(*) FROM task_results WHERE status != 'completed'") == 0
        assert store.scalar("SELECT sum(retry_count) FROM tasks") == 0
        counts = {r["status"]: r["n"] for r in store.all("SELECT status, n FROM task_counts WHERE n != 0")}
        assert counts == {"COMPLETED": 200}, "the trigger-kept counts held under two writers"
        assert {d["id"] for d in store.all("SELECT id FROM daemons")} == owners
        status = a.call("get_status")
        assert {d["home"] for d in status["daemons"]} == {str(a.home), str(b.home)}
        assert all(d["running"] == 0 for d in status["daemons"])
        on_b = next(name for name, who in ran_on.items() if who == "b")
        task_on_b = store.scalar("SELECT id FROM tasks WHERE title = ?", (on_b,))
        assert Team(store, a.home, Settings()).ran_elsewhere(task_on_b) == f"{os.uname().nodename} {b.home}", \
            "a's log resource says which machine has the log of a task b ran"
        report = json.loads(run_cli(a.env, "doctor", "--json", timeout=120).stdout)
        team = next(c for c in report["checks"] if c["name"] == "team database")
        assert team["level"] == "ok" and str(a.home) in team["detail"] and str(b.home) in team["detail"]


@pytest.mark.daemon
def test_a_projects_concurrency_cap_holds_across_daemons(tmp_path: Path, team_db: str) -> None:
    """Two daemons with three agents each, one project capped at two runs: never more than two at once."""
    runs = signals(tmp_path) / "runs.log"
    with team_of_two(tmp_path, team_db) as (a, b, store):
        a.call("create_project", name="Capped", max_concurrent_agents=2)
        labelled_agents(a, b, TIMED, runs)
        for n in range(16):
            (a if n % 2 else b).call("create_task", project_id="capped", title=f"c{n}", description=f"RUN c{n}")
        wait_until(lambda: store.scalar("SELECT count(*) FROM tasks WHERE status = 'COMPLETED'") == 16, 120,
                   "the capped project to drain")
        spans = [(float(line.split()[2]), float(line.split()[3])) for line in runs.read_text().splitlines()]
        assert len(spans) == 16
        most = max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans)
        assert most == 2, f"{most} runs at once in a project capped at 2"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def seeded_origin(tmp_path: Path) -> Path:
    """A bare repository with one commit on main: the team's shared remote."""
    origin = tmp_path / "origin.git"
    seed = tmp_path / "seed"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    git(tmp_path, "init", "-q", "-b", "main", str(seed))
    (seed / "README.md").write_text("app\n")
    git(seed, "add", ".")
    git(seed, "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qm", "start")
    git(seed, "push", "-q", str(origin), "main")
    return origin


def run_waiting_task(a: LiveDaemon, store: PostgresStore, origin: Path, go: Path) -> tuple[str, dict]:
    """On daemon a: a task whose agent saves a first file, waits for `go` (so the daemon can be stopped
    mid-run), then writes the last; returns the task id and its run (owner, agent pid) once it waits."""
    only_our_agents(a)
    a.call("create_project", name="App")
    a.call("add_repo", project_id="app", source="clone", url=str(origin), name="app")
    a.call("create_agent", name="worker", agent_type="command", command=shlex.join([sys.executable, "-c", AGENT]))
    task = a.call("create_task", project_id="app", title="Two files",
                  description=f"WRITE wip.txt started\nWAITFOR {go}\nWRITE done.txt finished")["id"]
    row = wait_until(lambda: store.one("SELECT t.owner, t.status, a.pid FROM tasks t JOIN agents a "
                                       "ON a.current_task = t.id WHERE t.id = ? AND t.status = 'IN_PROGRESS' "
                                       "AND a.pid IS NOT NULL", (task,)), 60, "daemon a to run the task")
    wait_until(lambda: list((a.home / "worktrees").rglob("wip.txt")), 30, "the agent's first file")
    return task, row


def landed_once(tmp_path: Path, origin: Path) -> str:
    """The remote's main has the task's work, its last file in exactly one commit; returns the subjects."""
    check = tmp_path / "check"
    git(tmp_path, "clone", "-q", str(origin), str(check))
    assert (check / "done.txt").read_text() == "finished\n" and (check / "wip.txt").read_text() == "started\n"
    assert len(git(check, "log", "--oneline", "--", "done.txt").splitlines()) == 1, "the work landed once"
    return git(check, "log", "--format=%s")


@dataclass
class Handover:
    """Daemon a runs a task whose agent waits for `go`; daemon b has just joined; `run` is a's run of it."""

    a: LiveDaemon
    b: LiveDaemon
    store: PostgresStore
    origin: Path
    go: Path
    task: str
    run: dict


@contextmanager
def a_run_on_a_then_b_joins(tmp_path: Path, team_db: str) -> Iterator[Handover]:
    origin = seeded_origin(tmp_path)
    go = signals(tmp_path) / "go"
    a = start_daemon(member_env(tmp_path, "a", team_db))
    store = PostgresStore(team_db)
    b = None
    try:
        task, run = run_waiting_task(a, store, origin, go)
        b = start_daemon(member_env(tmp_path, "b", team_db))
        yield Handover(a, b, store, origin, go, task, run)
    finally:
        store.close()
        if a.process.poll() is None:
            stop_daemon(a)
        if b is not None:
            stop_daemon(b)


def task_end(store: PostgresStore, task: str) -> dict:
    return wait_until(lambda: (r := store.one("SELECT * FROM tasks WHERE id = ?", (task,))) and
                      r["status"] in ("COMPLETED", "BLOCKED") and r, 60, "the task to end")


@pytest.mark.daemon
def test_a_killed_daemons_run_is_taken_over_after_its_lease_and_lands_once(tmp_path: Path, team_db: str) -> None:
    with a_run_on_a_then_b_joins(tmp_path, team_db) as h:
        h.a.process.send_signal(signal.SIGKILL)
        h.a.process.wait(timeout=10)
        orphan = h.run["pid"]
        # The sandboxed agent dies with its daemon (bwrap --die-with-parent); right after the kill it may still be a
        # zombie nobody reaped yet, so whether it looks alive here is a race. What counts: it never runs on.
        h.go.touch()  # from now on a run of the agent finishes: only the takeover's run may land
        wait_until(lambda: not alive(orphan), 30, "daemon b to stop the dead daemon's agent after the lease")
        done = task_end(h.store, h.task)
        assert done["status"] == "COMPLETED", done
        assert done["owner"] != h.run["owner"] and done["retry_count"] == 1
        assert "WIP: interrupted run" in landed_once(tmp_path, h.origin), "the dead daemon's work was kept"
        assert h.store.scalar("SELECT count(*) FROM task_results WHERE task_id = ?", (h.task,)) == 1
        requeued = h.store.all("SELECT payload FROM events WHERE task_id = ? AND event_type = 'task.ready'",
                               (h.task,))
        assert [json.loads(e["payload"])["reason"] for e in requeued][-1] == "recovered"


@pytest.mark.daemon
def test_a_daemon_frozen_past_its_lease_drops_its_run_and_the_taker_lands_it_once(tmp_path: Path,
                                                                                  team_db: str) -> None:
    """Split brain: daemon a is frozen (SIGSTOP) while it runs a task, b takes the run over, then a wakes up.
    a must notice it lost its lease, stop its run without recording or landing anything, and rejoin."""
    with a_run_on_a_then_b_joins(tmp_path, team_db) as h:
        h.a.process.send_signal(signal.SIGSTOP)
        try:
            wait_until(lambda: h.store.scalar("SELECT owner FROM tasks WHERE id = ?", (h.task,)) != h.run["owner"],
                       60, "daemon b to take the run over")
        finally:
            h.a.process.send_signal(signal.SIGCONT)
        wait_until(lambda: h.store.scalar("SELECT count(*) FROM daemons WHERE id = ?", (h.run["owner"],)) == 1, 30,
                   "daemon a to notice it lost its lease and rejoin")
        h.go.touch()
        done = task_end(h.store, h.task)
        assert done["status"] == "COMPLETED" and done["retry_count"] == 1, done  # requeued once; either may rerun it
        landed_once(tmp_path, h.origin)
        assert h.store.scalar("SELECT count(*) FROM task_results WHERE task_id = ?", (h.task,)) == 1
        # The agent is freed just after its task completes (a step of its own): it must become idle, not stay busy.
        wait_until(lambda: h.store.one("SELECT state, current_task FROM agents WHERE id = 'worker'") == {
            "state": "IDLE", "current_task": None}, 15, "the agent to be free again")
        assert h.a.process.poll() is None, "daemon a lives on, a member of the team again"
        said = (h.a.home / "serve.out").read_text()
        assert "lease ran out" in said and "its result is dropped" in said, "a dropped its stale run"


# A daemon's store, frozen (SIGSTOP) inside a write transaction: it holds the write lock every daemon takes.
FROZEN_WRITER = """
import os, signal, sys
from agentqueue.store.postgres import PostgresStore
store = PostgresStore(sys.argv[1], lease_seconds=3)
with store.transaction() as db:
    db.execute("UPDATE daemons SET labels = labels WHERE id = 'nobody'")
    print("holding", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
"""


def test_a_daemon_frozen_inside_a_write_holds_the_others_up_no_longer_than_its_lease(team_db: str) -> None:
    """A daemon frozen mid-write (a laptop's lid shut, a debugger, a swap storm) holds the team's write lock: the
    server ends its transaction once its lease would have run out, so the other daemons' writes go on, not after a
    minute (and their lease-based take-over with them)."""
    frozen = subprocess.Popen([sys.executable, "-c", FROZEN_WRITER, team_db], stdout=subprocess.PIPE, text=True)
    store = None
    try:
        assert frozen.stdout is not None and frozen.stdout.readline().strip() == "holding"
        wait_until(lambda: open(f"/proc/{frozen.pid}/stat").read().split()[2] == "T", 30, "the writer to freeze")
        store = PostgresStore(team_db, lease_seconds=3)
        started = time.monotonic()
        with store.transaction() as db:  # waits for the frozen writer's lock (lock_timeout: 30 s, then an error)
            db.execute("UPDATE daemons SET labels = labels WHERE id = 'nobody'")
        waited = time.monotonic() - started
        assert waited < 25, f"a write waited {waited:.1f} s behind a frozen daemon with a 3 s lease"
    finally:
        frozen.kill()
        frozen.wait(timeout=30)
        if store is not None:
            store.close()


@pytest.mark.daemon
def test_a_daemon_pointed_at_an_unreachable_database_says_so_and_doctor_too(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "home", tmp_path / "user", AGENTQUEUE_DATABASE_URL="postgresql://aq:pw@127.0.0.1:9/q")
    served = run_cli(env, "serve", "--no-http", timeout=60)
    assert served.returncode != 0 and "Cannot use the PostgreSQL database at postgresql://aq:••••@127.0.0.1:9/q" \
        in served.stderr + served.stdout and "Traceback" not in served.stderr
    report = json.loads(run_cli(env, "doctor", "--json", timeout=120).stdout)
    team = next(c for c in report["checks"] if c["name"] == "team database")
    assert team["level"] == "fail" and "AGENTQUEUE_DATABASE_URL" in team["detail"]


@pytest.mark.daemon
def test_hooks_fire_once_across_the_team(tmp_path: Path, team_db: str) -> None:
    """A periodic hook's slot is taken by one daemon; an event hook fires on the daemon that made the change."""
    with team_of_two(tmp_path, team_db) as (a, b, store):
        a.call("create_project", name="Ticks")
        a.call("create_project", name="Src")
        a.call("create_hook", name="tick", project_id="ticks", trigger={"type": "periodic", "interval_seconds": 2},
               cooldown_seconds=0,
               action="create_task", task_template={"title": "tick", "description": "from the periodic hook"})
        a.call("create_hook", name="echo", project_id="src", action="create_task", cooldown_seconds=0,
               trigger={"type": "event", "event_type": "task.created", "filter": {"project_id": "src"}},
               task_template={"title": "echo", "description": "from the event hook"})
        for n in range(3):
            b.call("create_task", project_id="src", title=f"by b {n}", description="made on daemon b")
        wait_until(lambda: store.scalar("SELECT count(*) FROM tasks WHERE project_id = 'ticks'") >= 3, 30,
                   "three periodic slots")
        wait_until(lambda: store.scalar("SELECT count(*) FROM tasks WHERE title = 'echo'") >= 3, 30, "the echoes")
        anyio.run(anyio.sleep, 2.5)  # time for a duplicate, if any daemon were to make one
        starts = [r["started_at"] for r in store.all(
            "SELECT h.started_at FROM hook_runs h WHERE h.hook_id = 'tick' AND h.status != 'skipped' "
            "ORDER BY h.started_at")]
        ticks = store.scalar("SELECT count(*) FROM tasks WHERE project_id = 'ticks'")
        assert ticks == len(starts), "one task per run of the periodic hook"
        gaps = [b_ - a_ for a_, b_ in itertools.pairwise(map(_seconds, starts))]
        assert all(gap > 1.5 for gap in gaps), f"no slot ran twice: {starts}"
        assert store.scalar("SELECT count(*) FROM tasks WHERE title = 'echo'") == 3, "each event fired the hook once"


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@pytest.mark.anyio
@pytest.mark.daemon
async def test_a_client_of_one_daemon_hears_a_change_made_through_another(tmp_path: Path, team_db: str) -> None:
    with team_of_two(tmp_path, team_db) as (a, b, _store):
        a.call("create_project", name="Notes")
        task = a.call("create_task", project_id="notes", title="Waits", description="no agent takes it")["id"]
        uri = f"agentqueue://tasks/{task}"
        heard = anyio.Event()

        async def on_message(message: object) -> None:
            if isinstance(message, ResourceUpdatedNotification) and str(message.params.uri) == uri:
                heard.set()

        params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"], env=a.env)
        async with Client(params, mode="legacy", message_handler=on_message) as client:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # resources/subscribe: deprecated in 2026, current in 2025
                await client.subscribe_resource(uri)
            before = json.loads((await client.read_resource(uri)).contents[0].text)["status"]
            await anyio.to_thread.run_sync(lambda: b.call("stop_task", task_id=task))
            with anyio.fail_after(scaled(10)):
                await heard.wait()
            after = json.loads((await client.read_resource(uri)).contents[0].text)["status"]
        assert (before, after) == ("READY", "BLOCKED")


@pytest.mark.anyio
@pytest.mark.daemon
async def test_a_standalone_server_is_a_member_of_the_team_while_it_runs(tmp_path: Path, team_db: str) -> None:
    """`agentqueue mcp --standalone` runs an engine too: it holds a lease like a daemon, so no daemon takes its
    runs for a dead one's, and it leaves when its client goes."""
    env = member_env(tmp_path, "s", team_db)
    params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp", "--standalone"], env=env)
    store = PostgresStore(team_db)
    try:
        async with Client(params, mode="legacy") as client:
            homes = await anyio.to_thread.run_sync(lambda: wait_until(
                lambda: [d["home"] for d in store.all("SELECT home FROM daemons")], 30, "the server to join"))
            assert homes == [str(tmp_path / "home-s")]
            status = (await client.call_tool("get_status", {})).structured_content
            assert [d["home"] for d in status["daemons"]] == homes
        await anyio.to_thread.run_sync(lambda: wait_until(
            lambda: store.scalar("SELECT count(*) FROM daemons") == 0, 30, "the server to leave"))
    finally:
        store.close()
