"""A soak that kills things (issue 34): tasks on real agents across two repos with a verify command, the daemon
killed with SIGKILL at chosen moments and restarted the way a client restarts it, then every invariant checked.

    python bench/soak.py [--tasks 200] [--kills 20] [--claude-agents 2] [--seed 34] [--json figures.json]
    python bench/soak.py --tmpfs 96 [--tasks 60] [--kills 4]     # AGENTQUEUE_HOME on a tmpfs that fills mid-run

What runs: one project with two linked repos (`alpha` one by one, `beta` landing in batches of up to 4), each with
`check.sh` as the project's verify command, so every landing goes through the merge queue; four agents: real
`claude` CLIs against the loopback model mock (tests/mock_anthropic.py, scenario `soak_write`) and `command` agents
(a small Python script). Each task writes one file, `soak-<key>.txt`, holding `soak-<key> ok`; a few write a bad
line on their first run, which the check refuses, so they are sent back and land on their rerun.

The daemon is only ever started as a client starts it: an MCP client (the official SDK) launches `agentqueue mcp`,
whose first call starts the daemon. The home starts at an older schema version (built by running the migrations'
history up to it, with history rows so that migrating takes a while), so the first start migrates. Each kill is
aimed at a phase, seen in the store's events or in the daemon's child processes (`/proc`):
  migration  the store between two schema versions, or mid-transaction of one (its WAL growing)
  worktree   `git worktree add` running for a claimed task
  landing    a one-by-one landing under test (`merge_queue.testing`)
  cas        the default branch being moved (`git merge --ff-only` / `update-ref` in the repo)
  batch      a batch under test (`merge_queue.testing` with `batch`)
  run        an agent mid-run with its work written but not committed
  random     whenever the dice say
After a kill the client's plugin exits (its daemon went away); a new client's first call starts the daemon again.

After the last kill the queue runs to the end and the soak checks: every task landed exactly once (one first-parent
commit of main carries its file, one `task.completed`), or is resumable with its work on its branch; every
first-parent commit of main passes the verify command; no orphaned worktree, task branch, agent process (nothing has
its cwd in a worktree of a task that is not running), lease or busy agent; the store passes `PRAGMA
integrity_check`; and the token ledger equals what the model mock served, response by response (a response the mock
wrote as a kill cut the run's stream is named as such: the daemon never read it).

With --tmpfs the home is a tmpfs of that many MiB that the soak fills to the last byte mid-run: the errors must
say so (no space), the store stay whole, and the work resume once the filler is removed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from agentqueue import paths  # noqa: E402
from agentqueue.store.sqlite import SCHEMA_VERSION, SqliteStore  # noqa: E402
from tests.mock_anthropic import USAGE, MockAnthropic  # noqa: E402
from tests.third_party import npm_bin  # noqa: E402

IDENTITY = {"GIT_AUTHOR_NAME": "Soak", "GIT_AUTHOR_EMAIL": "soak@localhost", "GIT_COMMITTER_NAME": "Soak",
            "GIT_COMMITTER_EMAIL": "soak@localhost"}
SLOWDOWN = float(os.environ.get("AGENTQUEUE_TEST_SLOWDOWN", "1") or 1)

# The repos' check (the project's verify command): every soak file holds its own name and "ok", no conflict marker.
CHECK = r"""#!/bin/sh
for f in soak-*.txt; do
  [ -e "$f" ] || continue
  want="${f%.txt} ok"
  got="$(cat "$f")"
  if [ "$got" != "$want" ]; then echo "check failed: $f holds '$got', not '$want'"; exit 1; fi
done
if grep -l '^<<<<<<<\|^>>>>>>>' soak-* 2>/dev/null; then echo "check failed: conflict markers"; exit 1; fi
sleep "${SOAK_CHECK_SECONDS:-0}"
echo "check passed"
"""
# The command agents: write the task's line to its file (a bad line on the first run of a BADFIRST task), then
# nap with the work uncommitted (a kill then leaves WIP for recovery to save). A file already there is an earlier
# run's work kept on the branch: `soak-<key>.resumed` says the rerun found it.
AGENT = r"""
import pathlib, re, sys, time
prompt = sys.stdin.read()
name = re.search(r"FILE\[(.*?)\]", prompt)[1]
line = re.search(r"LINE\[(.*?)\]", prompt)[1]
nap = re.search(r"NAP\[([0-9.]+)\]", prompt)
path = pathlib.Path(name)
if path.exists():
    pathlib.Path(name[:-4] + ".resumed").write_text("found the work of an earlier run\n")
if "BADFIRST" in prompt and "Sent back by the merge queue" not in prompt:
    line = line.replace(" ok", " bad")
path.write_text(line + "\n")
print("wrote", name, flush=True)
time.sleep(float(nap[1]) if nap else 0)
"""
PHASES = ("migration", "worktree", "landing", "cas", "batch", "run", "random")
DONE = ("COMPLETED",)
RESUMABLE = ("READY", "ASSIGNED", "IN_PROGRESS", "VERIFYING", "PAUSED", "DEFINED")


def plan_kills(kills: int, rng: random.Random, migration: bool) -> list[str]:
    """The phases the kills aim at: the migration first (it is the first start), then the aimed ones and random ones
    in a random order."""
    aimed = ["worktree", "landing", "cas", "batch", "run"]
    plan: list[str] = []
    left = kills - (1 if migration else 0)
    while left > 0:
        take = aimed[:left] if len(plan) < 10 else []
        plan += take
        left -= len(take)
        if left > 0:
            plan.append("random")
            left -= 1
    body = plan[:kills - (1 if migration else 0)]
    rng.shuffle(body)
    return (["migration"] if migration else []) + body


@dataclass
class Kill:
    phase: str
    hit: str = ""  # what was seen at the kill ("" when its phase never came and it fell back to random)
    at: float = 0.0  # seconds since the soak's start
    pid: int = 0
    running: list[str] = field(default_factory=list)  # tasks claimed at the kill
    restart_s: float = 0.0  # kill -> the new daemon answering the client's first call
    schema: int | None = None  # the store's schema version at the kill (migration)


@dataclass
class SoakConfig:
    tasks: int = 200
    kills: int = 20
    agents: int = 4
    claude_agents: int = 2
    seed: int = 34
    old_schema: int | None = 11  # the home starts at this schema version (None: a new home)
    history_rows: int = 200_000  # ledger rows written at the old version: its migration (12) reads them all
    bad_every: int = 17  # every n-th task writes a bad line first (sent back by the check)
    tmpfs_mb: int | None = None  # AGENTQUEUE_HOME on a tmpfs of this size, filled mid-run
    plan: list[str] | None = None  # the kills' phases, instead of plan_kills
    deadline_s: float = 3600.0
    root: Path | None = None
    keep: bool = False
    inspect: bool = True  # a soak that failed keeps its folder (and its tmpfs mounted) to be looked at
    claude_only_pinned: bool = False  # the real CLI runs only the tasks pinned to it (the rest: command agents)
    verbose: bool = True


class Soak:
    def __init__(self, config: SoakConfig) -> None:
        self.cfg = config
        self.rng = random.Random(config.seed)
        self.root = config.root or Path(tempfile.mkdtemp(prefix="aq-soak-"))
        self.home = self.root / "home"
        self.user_home = self.root / "user-home"
        self.repos = {"alpha": self.root / "alpha", "beta": self.root / "beta"}
        self.started = time.monotonic()
        self.mock = MockAnthropic()
        self.claude = npm_bin("claude")
        self.kills: list[Kill] = []
        self.plan = config.plan if config.plan is not None else plan_kills(
            config.kills, self.rng, config.old_schema is not None)
        self.keys: dict[str, str] = {}  # task id -> key
        self.created: list[str] = []  # keys submitted, in order
        self.client: Any = None
        self.holder: ClientHolder | None = None
        self.tg: Any = None
        self.restarts = 0
        self.failures: list[str] = []
        self.notes: list[str] = []
        self.fill: dict[str, Any] = {}
        self.tmpfs = False
        self._events_seen = 0
        self._db: sqlite3.Connection | None = None

    # -- output --------------------------------------------------------------------------------------
    def say(self, text: str) -> None:
        if self.cfg.verbose:
            print(f"[{time.monotonic() - self.started:7.1f}s] {text}", flush=True)

    def fail(self, text: str) -> None:
        self.failures.append(text)
        self.say("FAIL " + text)

    # -- setup -----------------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        env = {**os.environ, **IDENTITY, "AGENTQUEUE_HOME": str(self.home), "AGENTQUEUE_PORT": "0",
               "AGENTQUEUE_POLL_SECONDS": "0.1", "HOME": str(self.user_home), "ANTHROPIC_API_KEY": "test-key",
               "ANTHROPIC_BASE_URL": self.mock.base_url, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
               "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_MAX_RETRIES": "0"}
        if self.claude:
            env["AGENTQUEUE_CLAUDE_BIN"] = self.claude
        else:
            env["AGENTQUEUE_CLAUDE_BIN"] = "/nonexistent/claude"
        for key in ("AGENTQUEUE_DATABASE_URL", "CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT"):
            env.pop(key, None)
        return env

    def setup_files(self) -> None:
        self.user_home.mkdir(parents=True, exist_ok=True)
        (self.user_home / ".gitconfig").write_text("[user]\n\tname = Soak\n\temail = soak@localhost\n")
        for name, repo in self.repos.items():
            repo.mkdir(parents=True)
            self.git(repo, "init", "-q", "-b", "main")
            # beta's check is slower: tasks wait behind one another there, so its queue lands them in batches
            nap = "0.3" if name == "alpha" else "3"
            (repo / "check.sh").write_text(CHECK.replace("${SOAK_CHECK_SECONDS:-0}", nap))
            (repo / "README.md").write_text(f"# {name}\n\nA repo of the soak.\n")
            self.git(repo, "add", "-A")
            self.git(repo, "commit", "-q", "-m", "the check")
        (self.root / "agent.py").write_text(AGENT)
        if self.cfg.tmpfs_mb:
            self.home.mkdir(parents=True)
            done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.cfg.tmpfs_mb}m,mode=0700", "tmpfs",
                                   str(self.home)], capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"cannot mount a tmpfs on {self.home}: {done.stderr.strip()}")
            self.tmpfs = True
        if self.cfg.old_schema is not None:
            self.old_store(self.cfg.old_schema)

    def old_store(self, version: int) -> None:
        """A store at an older schema version, made by running the migrations' history up to it, with rows of old
        runs (30 days old: outside every window) that migration 12 reads to build its hourly sums."""
        path = paths.db_path(self.home)
        SqliteStore(path, migrate_to=version).close()
        conn = sqlite3.connect(path)
        day = datetime.now(UTC).timestamp() - 30 * 86400
        stamps = [datetime.fromtimestamp(day + h * 3600, UTC).strftime("%Y-%m-%dT%H:00:00.000000Z")
                  for h in range(24 * 7)]
        with conn:
            conn.executemany(
                "INSERT INTO token_ledger (project_id, task_id, agent_id, input, output, cache_read, cache_write, "
                "total, cost_usd, timestamp) VALUES ('history', ?, 'old', 10, 5, 0, 0, 15, 0.0, ?)",
                ((f"old-{i % 5000}", stamps[i % len(stamps)]) for i in range(self.cfg.history_rows)))
            conn.executemany(
                "INSERT INTO audit_log (time, actor, action, task_id, project_id, decision, outcome) "
                "VALUES (?, 'old', 'tool:get_status', ?, 'history', 'allow', 'ok')",
                ((stamps[i % len(stamps)], f"old-{i % 5000}") for i in range(self.cfg.history_rows // 2)))
        conn.close()
        self.say(f"home at schema version {version} of {SCHEMA_VERSION}, {self.cfg.history_rows:,} ledger rows "
                 "of history")

    @staticmethod
    def git(cwd: Path, *args: str, check: bool = True) -> str:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              env={**os.environ, **IDENTITY})
        if check and done.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)} in {cwd}: {done.stderr.strip()}")
        return done.stdout.strip()

    # -- the store, read from here -----------------------------------------------------------------------
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = sqlite3.connect(f"file:{paths.db_path(self.home)}?mode=ro", uri=True, timeout=30)
            self._db.row_factory = sqlite3.Row
        return self._db

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        for _ in range(50):
            try:
                return self.db().execute(sql, params).fetchall()
            except sqlite3.OperationalError as error:
                if "no such table" in str(error) or "locked" in str(error) or "disk" in str(error):
                    time.sleep(0.1)
                    continue
                raise
        return self.db().execute(sql, params).fetchall()

    def statuses(self) -> dict[str, str]:
        return {r["id"]: r["status"] for r in self.rows("SELECT id, status FROM tasks WHERE project_id = 'soak'")}

    # -- the client ------------------------------------------------------------------------------------
    async def connect(self) -> float:
        """A new MCP client on a new plugin; its first call starts the daemon when none runs. Seconds to answer."""
        from mcp import StdioServerParameters

        await self.disconnect()
        began = time.monotonic()
        params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp", "--toolsets", "all"],
                                       env=self.env(), cwd=str(self.root))
        holder = ClientHolder(params)
        assert self.tg is not None
        self.tg.start_soon(holder.hold)
        with anyio.fail_after(120 * SLOWDOWN):
            await holder.ready.wait()
        if holder.client is None:
            raise ConnectionError(f"the client did not connect: {holder.error!r}")
        self.holder, self.client = holder, holder.client
        await self.call("get_status", {})
        return time.monotonic() - began

    async def disconnect(self) -> None:
        holder, self.holder, self.client = self.holder, None, None
        if holder is not None:
            await holder.close()

    async def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        if self.client is None:
            raise ConnectionError("no client")
        with anyio.fail_after(90 * SLOWDOWN):
            result = await self.client.call_tool(tool, args)
        if result.is_error:
            raise ToolError(f"{tool}: {result.content[0].text if result.content else '?'}")
        return result.structured_content or {}

    async def call_retrying(self, tool: str, args: dict[str, Any], done: Any = None) -> dict[str, Any]:
        """A call that a kill may interrupt: reconnect and call again, unless `done()` says it went through."""
        for _ in range(5):
            try:
                return await self.call(tool, args)
            except ToolError:
                raise
            except Exception as error:  # the daemon went away under the call
                self.say(f"{tool} interrupted ({type(error).__name__}); reconnecting")
                await self.wait_daemon_gone()
                await self.connect()
                if done is not None and done():
                    return {}
        raise RuntimeError(f"{tool} kept failing")

    def daemon_pid(self) -> int | None:
        try:
            return int(json.loads(paths.daemon_info_path(self.home).read_text())["pid"])
        except (OSError, ValueError, KeyError):
            return None

    async def wait_daemon_gone(self) -> None:
        pid = self.daemon_pid()
        deadline = time.monotonic() + 30 * SLOWDOWN
        while pid and running(pid) and time.monotonic() < deadline:
            await anyio.sleep(0.05)

    # -- the queue ---------------------------------------------------------------------------------------
    async def configure(self) -> None:
        have = {r["id"] for r in self.rows("SELECT id FROM projects")}
        if "soak" not in have:
            await self.call_retrying("create_project", {
                "name": "Soak", "max_concurrent_agents": self.cfg.agents, "verify_command": "sh check.sh"},
                lambda: bool(self.rows("SELECT 1 FROM projects WHERE id = 'soak'")))
        await self.call_retrying("edit_project", {"project_id": "soak", "merge_retries": 4})
        for name, path in self.repos.items():
            if not self.rows("SELECT 1 FROM repos WHERE id = ?", (name,)):
                await self.call_retrying("add_repo", {"project_id": "soak", "source": "link", "path": str(path),
                                                      "name": name},
                                         lambda n=name: bool(self.rows("SELECT 1 FROM repos WHERE id = ?", (n,))))
        await self.call_retrying("edit_repo", {"repo_id": "beta", "merge_batch": 4})
        agents = {r["id"]: r["agent_type"] for r in self.rows("SELECT id, agent_type FROM agents")}
        claude_wanted = self.cfg.claude_agents if self.claude else 0
        command = shlex.join([sys.executable, "-I", str(self.root / "agent.py")])
        wanted = [(f"claude-{i}", "claude-code", None) for i in range(1, claude_wanted + 1)]
        wanted += [(f"writer-{i}", "command", command) for i in range(1, self.cfg.agents - claude_wanted + 1)]
        if "claude" in agents and claude_wanted:  # the agent the first start registered counts as claude-1
            wanted = [w for w in wanted if w[0] != "claude-1"]
        elif "claude" in agents:
            await self.call_retrying("delete_agent", {"agent_id": "claude"})
        for name, kind, cmd in wanted:
            if name not in agents:
                args = {"name": name, "agent_type": kind} | ({"command": cmd} if cmd else {})
                await self.call_retrying("create_agent", args,
                                         lambda n=name: bool(self.rows("SELECT 1 FROM agents WHERE id = ?", (n,))))
        got = self.rows("SELECT id, agent_type FROM agents")
        self.say("agents: " + ", ".join(f"{r['id']} ({r['agent_type']})" for r in got))

    def description(self, index: int, key: str) -> tuple[str, dict[str, Any]]:
        nap = round(self.rng.uniform(0.2, 1.5), 2)
        bad = self.cfg.bad_every and index % self.cfg.bad_every == self.cfg.bad_every - 1
        text = (f"SCENARIO:soak_write Write the file FILE[{key}.txt] holding one line: LINE[{key} ok]. "
                f"NAP[{nap}]" + (" BADFIRST" if bad else ""))
        extra: dict[str, Any] = {"max_retries": 12}
        if bad:
            extra["agent_type"] = "command"  # its rerun must see the check's words: the script reads them
        elif self.claude and self.cfg.claude_agents and index % 8 == 1:
            extra["agent_type"] = "claude-code"  # a share for the real CLI (it is slower than the script)
        elif self.cfg.claude_only_pinned:
            extra["agent_type"] = "command"
        return text, extra

    async def top_up(self, backlog: int) -> None:
        """Submit tasks until `backlog` wait (or all are submitted), through the client as a person's model would."""
        statuses = self.statuses()
        waiting = sum(1 for s in statuses.values() if s in RESUMABLE)
        while len(self.created) < self.cfg.tasks and waiting < backlog:
            index = len(self.created)
            repo = "alpha" if index % 3 == 0 else "beta"  # beta's slow check makes a queue: batches
            key = f"soak-{repo[0]}{index:03d}"
            title = f"Soak task {key}"
            text, extra = self.description(index, key)

            def made(t: str = title) -> bool:
                return bool(self.rows("SELECT 1 FROM tasks WHERE title = ?", (t,)))
            if not made():
                await self.call_retrying("create_task", {"project_id": "soak", "title": title, "description": text,
                                                         "repo_id": repo, **extra}, made)
            self.created.append(key)
            waiting += 1
        for row in self.rows("SELECT id, title FROM tasks WHERE project_id = 'soak'"):
            self.keys[row["id"]] = row["title"].removeprefix("Soak task ")

    # -- kills -----------------------------------------------------------------------------------------
    def children(self, pid: int) -> list[list[str]]:
        out = []
        for children in Path(f"/proc/{pid}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                for child in children.read_text().split():
                    with contextlib.suppress(OSError):
                        argv = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
                        out.append([a.decode(errors="replace") for a in argv if a])
        return out

    def new_events(self) -> list[sqlite3.Row]:
        rows = self.rows("SELECT id, event_type, task_id, payload FROM events WHERE id > ? ORDER BY id",
                         (self._events_seen,))
        if rows:
            self._events_seen = rows[-1]["id"]
        return rows

    def seen(self, phase: str, pid: int) -> str:
        """What shows the phase is under way now ("" when it is not)."""
        if phase in ("worktree", "cas"):
            for argv in self.children(pid):
                if "git" not in os.path.basename(argv[0]) if argv else True:
                    continue
                if phase == "worktree" and "worktree" in argv and "add" in argv:
                    return "git " + " ".join(argv[1:6])
                if phase == "cas" and (("merge" in argv and "--ff-only" in argv) or "update-ref" in argv):
                    return "git " + " ".join(argv[1:6])
            return ""
        if phase in ("landing", "batch"):
            for event in self.new_events():
                if event["event_type"] != "merge_queue.testing":
                    continue
                payload = json.loads(event["payload"] or "{}")
                if (phase == "batch") == bool(payload.get("batch")):
                    return f"merge_queue.testing of {event['task_id']}" + (
                        f" (batch of {payload['batch']})" if payload.get("batch") else "")
            return ""
        if phase == "run":
            for row in self.rows("SELECT t.id, t.repo_id FROM tasks t JOIN agents a ON a.current_task = t.id "
                                 "WHERE t.status = 'IN_PROGRESS' AND a.pid IS NOT NULL AND a.agent_type = 'command'"):
                tree = self.home / "worktrees" / row["repo_id"] / row["id"]
                key = self.keys.get(row["id"])
                if key and (tree / f"{key}.txt").exists():
                    return f"{row['id']} mid-run, its file written and not committed"
            return ""
        return ""

    async def aimed_kill(self, phase: str, patience: float) -> Kill:
        """Wait (at most `patience` s) for the phase, then kill the daemon; a random moment if it never came."""
        pid = self.daemon_pid()
        assert pid, "no daemon to kill"
        kill = Kill(phase)
        self.new_events()  # only what happens from now on
        deadline = time.monotonic() + patience
        if phase == "random":
            deadline = time.monotonic() + self.rng.uniform(0.5, 6.0)
        topped = time.monotonic()
        while time.monotonic() < deadline:
            if time.monotonic() - topped > 1:  # the queue keeps its work while the kill waits for its moment
                await self.top_up(backlog=24)
                topped = time.monotonic()
            if phase != "random":
                kill.hit = self.seen(phase, pid)
                if kill.hit:
                    break
            await anyio.sleep(0.01 if phase in ("worktree", "cas") else 0.02)
        if phase == "random":
            kill.hit = "random moment"
        await self.kill(pid, kill)
        return kill

    async def kill(self, pid: int, kill: Kill) -> None:
        os.kill(pid, signal.SIGKILL)
        kill.at = time.monotonic() - self.started
        kill.pid = pid
        self.kills.append(kill)
        await self.wait_daemon_gone()
        kill.running = [r["id"] for r in self.rows(
            "SELECT id FROM tasks WHERE status IN ('ASSIGNED', 'IN_PROGRESS', 'VERIFYING')")]
        self.say(f"kill {len(self.kills)} ({kill.phase}): {kill.hit or 'phase not seen: at a random moment'}; "
                 f"{len(kill.running)} claimed")
        await self.disconnect()
        began = time.monotonic()
        await self.connect()
        kill.restart_s = round(time.monotonic() - began, 2)
        self.restarts += 1
        self.say(f"restarted by a client in {kill.restart_s:.1f} s (daemon {self.daemon_pid()})")

    async def migration_kill(self) -> Kill:
        """The first start migrates the old store: kill it between two versions, or mid-way through one."""
        kill = Kill("migration")
        wal = Path(str(paths.db_path(self.home)) + "-wal")
        wal_before = wal.stat().st_size if wal.exists() else 0
        old = self.cfg.old_schema

        async def start() -> None:
            with contextlib.suppress(Exception):
                await self.connect()
        async with anyio.create_task_group() as tg:
            tg.start_soon(start)
            probe = sqlite3.connect(f"file:{paths.db_path(self.home)}?mode=ro", uri=True, timeout=0.05)
            deadline = time.monotonic() + 120 * SLOWDOWN
            pid = None
            while time.monotonic() < deadline:
                pid = pid or self.daemon_pid_by_proc()
                version = None
                with contextlib.suppress(sqlite3.Error):
                    version = int(probe.execute("PRAGMA user_version").fetchone()[0])
                grown = (wal.stat().st_size if wal.exists() else 0) - wal_before
                if pid and version is not None and old is not None and old < version < SCHEMA_VERSION:
                    kill.hit = f"store between schema versions ({version} of {SCHEMA_VERSION} committed)"
                elif pid and version == old and grown > 4 * 1024 * 1024:
                    kill.hit = f"migration {old + 1} under way ({grown >> 20} MiB of it in the WAL)"
                if kill.hit or version == SCHEMA_VERSION:
                    kill.schema = version
                    break
                await anyio.sleep(0.003)
            probe.close()
            if pid is None:
                raise RuntimeError("no daemon started for the migration")
            os.kill(pid, signal.SIGKILL)
            kill.at, kill.pid = time.monotonic() - self.started, pid
            tg.cancel_scope.cancel()
        self.kills.append(kill)
        await self.disconnect()
        while running(pid):
            await anyio.sleep(0.05)
        self.say(f"kill 1 (migration): {kill.hit or 'the migration was over before it was seen'}")
        began = time.monotonic()
        await self.connect()
        kill.restart_s = round(time.monotonic() - began, 2)
        self.restarts += 1
        version = int(self.rows("PRAGMA user_version")[0][0])
        if version != SCHEMA_VERSION:
            self.fail(f"after the restart the store is at schema {version}, not {SCHEMA_VERSION}")
        self.say(f"restarted by a client in {kill.restart_s:.1f} s: schema {version}")
        return kill

    def daemon_pid_by_proc(self) -> int | None:
        """The `agentqueue serve` of this home, from /proc (daemon.json comes after the store is open)."""
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
                if b"serve" not in argv or not any(b"agentqueue" in a for a in argv):
                    continue
                environ = (proc / "environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"AGENTQUEUE_HOME={self.home}".encode() in environ:
                return int(proc.name)
        return None

    # -- a full disk -------------------------------------------------------------------------------------
    async def fill_disk(self) -> None:
        """Fill the home's tmpfs to the last byte while work runs; watch what the queue says; free the space."""
        filler = self.home / "filler"
        stat = os.statvfs(self.home)
        free = stat.f_bavail * stat.f_frsize
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for size in (1 << 20, 4096, 1):  # to the last byte
                with contextlib.suppress(OSError):
                    while os.write(fd, b"\0" * size):
                        pass
        finally:
            os.close(fd)
        self.say(f"filled the home's tmpfs: {free >> 20} MiB were free")
        began = time.monotonic()
        before = dict(self.statuses())
        errors: list[str] = []
        # Hold it full until the queue has met the wall (a failed run, a refused write) or for 20 s.
        told = ""
        while time.monotonic() - began < 20 * SLOWDOWN:
            await anyio.sleep(0.5)
            errors = self.disk_errors()
            if not told:  # what a client is told while the disk is full
                with contextlib.suppress(Exception):
                    status = await self.call("get_status", {})
                    told = next((w for w in status.get("warnings", []) if "AgentQueue's home" in w), "")
            if told and time.monotonic() - began > 6:
                break
        if not told:
            self.fail("get_status never said the home's disk is full")
        held = time.monotonic() - began
        alive = bool(self.daemon_pid() and running(self.daemon_pid() or 0))
        integrity = self.rows("PRAGMA integrity_check")[0][0]
        if integrity != "ok":
            self.fail(f"the store on the full disk: integrity_check says {integrity}")
        filler.unlink()
        freed = time.monotonic()
        last_event = int(self.rows("SELECT coalesce(max(id), 0) FROM events")[0][0])
        claimed = [r["id"] for r in self.rows(
            "SELECT id FROM tasks WHERE status IN ('ASSIGNED', 'IN_PROGRESS', 'VERIFYING')")]
        self.say(f"freed the space after {held:.0f} s; daemon alive throughout: {alive}; "
                 f"{len(errors)} line(s) about the disk; {len(claimed)} claimed")
        for line in errors[:5]:
            self.say("  " + line[:200])
        if not alive:
            self.fail("the daemon died on the full disk")
        # Work resumes by itself: every task claimed when the space came back moves on (no restart helps here).
        stuck = claimed
        while stuck and time.monotonic() - freed < 120 * SLOWDOWN:
            await anyio.sleep(0.5)
            await self.top_up(backlog=24)
            stuck = [t for t in claimed if not self.rows("SELECT 1 FROM events WHERE task_id = ? AND id > ?",
                                                         (t, last_event))]
        if stuck:
            self.fail(f"{len(stuck)} task(s) claimed when the space was freed never moved on: {stuck}")
        self.fill = {"free_mib": free >> 20, "held_s": round(held, 1), "errors": errors[:8], "get_status": told,
                     "daemon_alive_when_full": alive, "integrity_when_full": integrity,
                     "resumed_s": round(time.monotonic() - freed, 1), "stuck": len(stuck),
                     "moved_while_full": sum(1 for k, v in self.statuses().items() if before.get(k) != v)}

    def disk_errors(self) -> list[str]:
        """What the queue said about the full disk: task reasons, the daemon's log, its output at start."""
        found = []
        pattern = re.compile(r"no space|disk is full|disk full|ENOSPC|database or disk", re.I)
        for name in ("agentqueue.log", "daemon.out"):
            path = paths.logs_dir(self.home) / name
            with contextlib.suppress(OSError):
                found += [line.strip() for line in path.read_text(errors="replace").splitlines()
                          if pattern.search(line)]
        with contextlib.suppress(sqlite3.Error):
            for row in self.rows("SELECT id, payload FROM events WHERE payload LIKE '%space%' OR payload LIKE "
                                 "'%disk%' ORDER BY id DESC LIMIT 20"):
                found.append(f"event of {row['id']}: {row['payload'][:300]}")
        return found

    # -- the run ---------------------------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        async with anyio.create_task_group() as tg:
            self.tg = tg
            figures = await self._run()
            tg.cancel_scope.cancel()
        return figures

    async def _run(self) -> dict[str, Any]:
        self.mock.start()
        figures: dict[str, Any] = {}
        try:
            self.setup_files()
            if self.plan and self.plan[0] == "migration":
                await self.migration_kill()
                plan = self.plan[1:]
            else:
                await self.connect()
                plan = list(self.plan)
            await self.configure()
            await self.top_up(backlog=24)
            fill_at = self.cfg.tasks // 2 if self.cfg.tmpfs_mb else None
            marks = [round(self.cfg.tasks * (i + 1) / (len(plan) + 1)) for i in range(len(plan))]
            deadline = time.monotonic() + self.cfg.deadline_s * SLOWDOWN
            last_report = 0.0
            while True:
                statuses = self.statuses()
                done = sum(1 for s in statuses.values() if s in DONE)
                if plan and done >= marks[0]:
                    marks.pop(0)
                    phase = plan.pop(0)
                    await self.aimed_kill(phase, patience=90 * SLOWDOWN)
                    continue
                if fill_at is not None and done >= fill_at:
                    fill_at = None
                    await self.fill_disk()
                    continue
                await self.top_up(backlog=24)
                if done >= self.cfg.tasks and not plan:
                    break
                held = [k for k, s in statuses.items() if s in ("BLOCKED", "FAILED")]
                if held:
                    await self.explain_held(held)
                    break
                if time.monotonic() > deadline:
                    self.fail(f"the queue did not finish within {self.cfg.deadline_s * SLOWDOWN:.0f} s: "
                              f"{Counter(statuses.values())}")
                    break
                if time.monotonic() - last_report > 15:
                    last_report = time.monotonic()
                    self.say(f"{done}/{self.cfg.tasks} landed; {dict(Counter(statuses.values()))}")
                await anyio.sleep(0.25)
            figures = await self.verify()
        finally:
            await self.disconnect()
            self.stop_daemon()
            self.mock.stop()
            if self._db is not None:
                self._db.close()
            leave = self.cfg.keep or (bool(self.failures) and self.cfg.inspect)
            if self.tmpfs and not leave:
                subprocess.run(["umount", "-l", str(self.home)], capture_output=True)
            elif self.tmpfs:
                self.say(f"the home's tmpfs stays mounted: umount {self.home}")
            if not leave:
                shutil.rmtree(self.root, ignore_errors=True)
        return figures

    async def explain_held(self, held: list[str]) -> None:
        for task_id in held[:5]:
            row = self.rows("SELECT status, reason, next_step FROM tasks WHERE id = ?", (task_id,))
            self.fail(f"task {task_id} ({self.keys.get(task_id)}) is {row[0]['status']}: {row[0]['reason']}; "
                      f"{(row[0]['next_step'] or '')[:300]}")

    def stop_daemon(self) -> None:
        pid = self.daemon_pid()
        if pid is None:
            return
        subprocess.run([sys.executable, "-m", "agentqueue", "stop", "--force"], env=self.env(), capture_output=True,
                       timeout=60)
        deadline = time.monotonic() + 30
        while running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if running(pid):
            os.kill(pid, signal.SIGKILL)

    # -- the checks ------------------------------------------------------------------------------------
    async def verify(self) -> dict[str, Any]:
        # The last landing's cleanup (worktree and branch removal) comes after its COMPLETED: let it finish.
        await self.settle()
        statuses = self.statuses()
        tasks = {r["id"]: dict(r) for r in self.rows("SELECT * FROM tasks WHERE project_id = 'soak'")}
        landings = self.landings()
        duplicates, lost, resumable = [], [], []
        completed_events = Counter(r["task_id"] for r in self.rows(
            "SELECT task_id FROM events WHERE event_type = 'task.completed'"))
        for task_id, task in tasks.items():
            key = self.keys[task_id]
            commits = landings.get(key, [])
            if task["status"] == "COMPLETED":
                if len(commits) != 1 or completed_events[task_id] != 1:
                    duplicates.append(f"{key}: {len(commits)} landing commit(s), {completed_events[task_id]} "
                                      "task.completed event(s)")
                repo = self.repos[task["repo_id"]]
                shown = self.git(repo, "show", f"main:{key}.txt", check=False)
                if shown != f"{key} ok":
                    lost.append(f"{key}: COMPLETED but main holds {shown!r}")
            elif task["status"] in RESUMABLE:
                if commits:
                    duplicates.append(f"{key}: landed ({len(commits)}) yet {task['status']}")
                resumable.append(key)
                if task["branch"] and not self.branch_has_work(task, key):
                    lost.append(f"{key}: {task['status']} and its branch {task['branch']} lacks its work")
            else:
                lost.append(f"{key}: {task['status']} ({task['reason']})")
        missing = [k for k in self.created if k not in set(self.keys.values())]
        lost += [f"{k}: submitted, not in the store" for k in missing]
        for problem in duplicates:
            self.fail("duplicate: " + problem)
        for problem in lost:
            self.fail("lost: " + problem)
        red = self.red_first_parents()
        for problem in red:
            self.fail("main: " + problem)
        orphans = self.orphans(tasks)
        for problem in orphans:
            self.fail("orphan: " + problem)
        integrity = self.rows("PRAGMA integrity_check")[0][0]
        if integrity != "ok":
            self.fail(f"store integrity_check: {integrity}")
        ledger = self.ledger(tasks)
        for problem in ledger.pop("problems"):
            self.fail("ledger: " + problem)
        resumed = sum(1 for repo in self.repos.values()
                      for _ in self.git(repo, "ls-tree", "--name-only", "main").split() if _.endswith(".resumed"))
        phases = Counter(k.phase for k in self.kills)
        hits = Counter(k.phase for k in self.kills if k.hit and k.hit != "random moment")
        figures = {
            "tasks": len(tasks), "submitted": len(self.created),
            "landed": sum(1 for s in statuses.values() if s == "COMPLETED"),
            "resumable": len(resumable),
            "kills": len(self.kills), "kills_by_phase": dict(phases), "kills_that_hit_their_phase": dict(hits),
            "restarts": self.restarts,
            "restart_s_max": max((k.restart_s for k in self.kills), default=0),
            "restart_s_median": sorted(k.restart_s for k in self.kills)[len(self.kills) // 2] if self.kills else 0,
            "duplicates": len(duplicates), "lost_work": len(lost), "orphans": len(orphans),
            "red_first_parent_commits": len(red),
            "first_parent_commits": sum(self.first_parent_count(r) for r in self.repos.values()),
            "runs": int(self.rows("SELECT count(*) FROM task_results r JOIN tasks t ON t.id = r.task_id "
                                  "WHERE t.project_id = 'soak'")[0][0]),
            "recovered_runs": int(self.rows("SELECT count(*) FROM events WHERE event_type = 'task.ready' AND "
                                            "payload LIKE '%recovered%'")[0][0]),
            "sent_back": int(self.rows("SELECT count(*) FROM events WHERE event_type = 'task.sent_back'")[0][0]),
            "reruns_that_found_their_wip": resumed,
            "batches_landed": int(self.rows("SELECT count(*) FROM events WHERE event_type = "
                                            "'merge_queue.batch_landed'")[0][0]),
            "store_integrity": integrity, **ledger,
            "engine_errors_logged": self.logged_errors(),
            "fill": self.fill or None,
            "seconds": round(time.monotonic() - self.started, 1),
            "failures": self.failures,
            "kill_log": [asdict(k) for k in self.kills],
        }
        return figures

    def logged_errors(self) -> int:
        """ERROR lines in the daemons' log (each with its traceback): a run that failed inside the engine."""
        try:
            return sum(1 for line in (paths.logs_dir(self.home) / "agentqueue.log").read_text(
                errors="replace").splitlines() if " ERROR " in line)
        except OSError:
            return -1

    async def settle(self) -> None:
        deadline = time.monotonic() + 60 * SLOWDOWN
        while time.monotonic() < deadline:
            if not self.orphans({r["id"]: dict(r) for r in self.rows("SELECT * FROM tasks WHERE project_id = 'soak'")}):
                return
            await anyio.sleep(0.5)

    def landings(self) -> dict[str, list[str]]:
        """Per task key, the first-parent commits of main that changed its file."""
        out: dict[str, list[str]] = {}
        for repo in self.repos.values():
            for sha in self.git(repo, "rev-list", "--first-parent", "main").split():
                parent = self.git(repo, "rev-parse", "--verify", "-q", f"{sha}^1", check=False)
                if not parent:
                    continue
                for name in self.git(repo, "diff", "--name-only", parent, sha).split():
                    if name.endswith(".txt") and name.startswith("soak-"):
                        out.setdefault(name[:-4], []).append(sha)
        return out

    def first_parent_count(self, repo: Path) -> int:
        return len(self.git(repo, "rev-list", "--first-parent", "main").split())

    def red_first_parents(self) -> list[str]:
        """Every first-parent commit of main, checked out alone and judged by the verify command (16 at once: the
        checks mostly sleep)."""
        from concurrent.futures import ThreadPoolExecutor

        def judge(name: str, repo: Path, sha: str) -> str | None:
            with tempfile.TemporaryDirectory(dir=self.root) as scratch:
                archive = subprocess.run(["git", "archive", sha], cwd=repo, capture_output=True, check=True)
                subprocess.run(["tar", "-x", "-C", scratch], input=archive.stdout, check=True)
                done = subprocess.run(["sh", "check.sh"], cwd=scratch, capture_output=True, text=True)
                if done.returncode != 0:
                    return f"{name} {sha[:12]} fails the check: {done.stdout.strip()[:200]}"
            return None

        commits = [(name, repo, sha) for name, repo in self.repos.items()
                   for sha in self.git(repo, "rev-list", "--first-parent", "main").split()]
        with ThreadPoolExecutor(16) as pool:
            return [red for red in pool.map(lambda c: judge(*c), commits) if red]

    def branch_has_work(self, task: dict[str, Any], key: str) -> bool:
        repo = self.repos[task["repo_id"]]
        tree = self.home / "worktrees" / task["repo_id"] / task["id"]
        if tree.exists() and (tree / f"{key}.txt").exists():
            return True
        return bool(self.git(repo, "show", f"{task['branch']}:{key}.txt", check=False))

    def orphans(self, tasks: dict[str, dict[str, Any]]) -> list[str]:
        """Whatever outlived its task: worktrees and branches of COMPLETED tasks, processes working in the worktree
        of a task that is not running, busy agents, leases and questions of runs that are over."""
        running_ids = {i for i, t in tasks.items() if t["status"] in ("ASSIGNED", "IN_PROGRESS", "VERIFYING")}
        finished = {i for i, t in tasks.items() if t["status"] == "COMPLETED"}
        return (self.orphan_trees(finished, running_ids) + self.orphan_processes(running_ids)
                + self.orphan_rows(running_ids))

    def orphan_trees(self, finished: set[str], claimed: set[str]) -> list[str]:
        """Worktree folders (a `.orphan-*` one set aside too) and registered worktrees of no task that holds one now
        (a claimed task's, or a resumable one's kept for its rerun), branches of COMPLETED tasks, and the usage records
        of runs that are over."""
        out = []
        keeps = {i for i, s in self.statuses().items() if s != "COMPLETED"}
        for repo_id in self.repos:
            folder = self.home / "worktrees" / repo_id
            for tree in folder.iterdir() if folder.exists() else []:
                if tree.name != ".batch" and tree.name not in keeps:
                    out.append(f"worktree folder {tree}")
        for name, repo in self.repos.items():
            for ref in self.git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads/").split():
                if ref.split("/", 1)[0] in finished:
                    out.append(f"branch {ref} in {name} of a COMPLETED task")
            for block in self.git(repo, "worktree", "list", "--porcelain").split("\n\n"):
                path = Path(block.split("\n", 1)[0].removeprefix("worktree "))
                if path.is_relative_to(self.home) and path.name != ".batch" and path.name not in keeps:
                    out.append(f"registered worktree {path} in {name}")
        for record in (self.home / "logs" / "tasks").glob("*.usage.json"):
            if record.name.removesuffix(".usage.json") not in claimed:
                out.append(f"usage record {record.name} of a run that is over")
        return out

    def orphan_processes(self, running_ids: set[str]) -> list[str]:
        out = []
        worktrees = self.home / "worktrees"
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                cwd = Path(os.readlink(proc / "cwd"))
                state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if state == "Z" or not cwd.is_relative_to(worktrees):
                continue
            parts = cwd.relative_to(worktrees).parts
            if (parts[1] if len(parts) > 1 else "") not in running_ids:
                argv = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
                out.append(f"process {proc.name} in {cwd} ({argv}) of a task that is not running")
        return out

    def orphan_rows(self, running_ids: set[str]) -> list[str]:
        out = []
        for row in self.rows("SELECT id, state, current_task FROM agents"):
            if row["current_task"] and row["current_task"] not in running_ids:
                out.append(f"agent {row['id']} {row['state']} on {row['current_task']}, which is not running")
        live = self.daemon_pid()
        for row in self.rows("SELECT id, pid FROM daemons"):
            if row["pid"] != live:
                out.append(f"lease of daemon {row['id']} (pid {row['pid']}), which is gone")
        for row in self.rows("SELECT pid FROM daemon_lease"):
            if row["pid"] != live:
                out.append(f"daemon_lease row of pid {row['pid']}, which is gone")
        for row in self.rows("SELECT id, task_id FROM permission_requests WHERE status = 'pending'"):
            if row["task_id"] not in running_ids:
                out.append(f"pending permission request {row['id']} of {row['task_id']}")
        return out

    def ledger(self, tasks: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """The ledger against what the mock served, per task (each response is named by the task's key)."""
        by_key: dict[str, Counter[str]] = {}
        responses = Counter()
        for served in list(self.mock.served):
            text = json.dumps(served["request"].get("messages"))
            found = re.search(r"FILE\[(soak-[a-z]\d+)\.txt\]", text)
            key = found[1] if found else "?"
            usage = served["usage"]
            counts = by_key.setdefault(key, Counter())
            counts["input"] += usage["input_tokens"]
            counts["output"] += usage["output_tokens"]
            counts["cache_read"] += usage["cache_read_input_tokens"]
            counts["cache_write"] += usage["cache_creation_input_tokens"]
            responses[key] += 1
        ids = {v: k for k, v in self.keys.items()}
        problems = []
        cut = 0
        equal = 0
        served_total = sum(sum(c.values()) for c in by_key.values())
        ledger_total = 0
        for key, served in sorted(by_key.items()):
            task_id = ids.get(key)
            if task_id is None:
                problems.append(f"the mock served {responses[key]} response(s) to no soak task ({key})")
                continue
            row = self.rows("SELECT coalesce(sum(input), 0) AS input, coalesce(sum(output), 0) AS output, "
                            "coalesce(sum(cache_read), 0) AS cache_read, coalesce(sum(cache_write), 0) AS "
                            "cache_write FROM token_ledger WHERE task_id = ?", (task_id,))[0]
            ledger = {k: int(row[k]) for k in ("input", "output", "cache_read", "cache_write")}
            ledger_total += sum(ledger.values())
            if ledger == dict(served):
                equal += 1
                continue
            cut_by_kill = self.cut_responses(task_id, served, ledger)
            if cut_by_kill is None:
                problems.append(f"{key}: the ledger holds {ledger}, the mock served {dict(served)} "
                                f"({responses[key]} responses)")
            else:
                cut += cut_by_kill
        claude_runs = int(self.rows("SELECT count(*) FROM task_results r JOIN agents a ON a.id = r.agent_id "
                                    "WHERE a.agent_type = 'claude-code'")[0][0])
        return {"ledger_tokens": ledger_total, "mock_served_tokens": served_total,
                "mock_responses": sum(responses.values()), "tasks_with_model_calls": len(by_key),
                "ledger_equal_tasks": equal, "responses_cut_by_a_kill": cut, "claude_runs": claude_runs,
                "problems": problems}

    def cut_responses(self, task_id: str, served: Counter[str], ledger: dict[str, int]) -> int | None:
        """How many responses the ledger lacks when the difference is what kills cut: responses the mock wrote while
        the daemon reading that run's stream was being killed, so that it never read them (whole: none of their
        tokens; begun: all but their final output count). At most one per kill that cut a run of the task; None
        when the difference is anything else."""
        per = {"input": USAGE["input_tokens"], "output": USAGE["output_tokens"],
               "cache_read": USAGE["cache_read_input_tokens"], "cache_write": USAGE["cache_creation_input_tokens"]}
        missing = {k: served[k] - ledger[k] for k in per}
        whole, rest = divmod(missing["input"], per["input"])
        if rest or any(missing[k] != whole * per[k] for k in ("cache_read", "cache_write")):
            return None
        begun, rest = divmod(missing["output"] - whole * per["output"], per["output"] - 1)
        if rest or begun < 0:
            return None
        cuts = sum(1 for k in self.kills if task_id in k.running)
        return whole + begun if whole + begun <= cuts else None


class ClientHolder:
    """One MCP client session, held open by a task of its own (its context must be entered and left there); a
    daemon that dies under it ends it."""

    def __init__(self, params: Any) -> None:
        self.params = params
        self.client: Any = None
        self.error: BaseException | None = None
        self.ready = anyio.Event()
        self.closing = anyio.Event()
        self.closed = anyio.Event()
        self.scope = anyio.CancelScope()

    async def hold(self) -> None:
        from mcp import Client
        from mcp.types import ElicitResult

        async def person_says_yes(context: Any, params: Any) -> ElicitResult:
            return ElicitResult(action="accept", content={"approve": True})

        try:
            with self.scope:
                async with Client(self.params, elicitation_callback=person_says_yes) as client:
                    self.client = client
                    self.ready.set()
                    await self.closing.wait()
        except Exception as error:  # the plugin went away with its daemon
            self.error = error
        finally:
            self.ready.set()
            self.closed.set()

    async def close(self) -> None:
        self.closing.set()
        with anyio.move_on_after(10):
            await self.closed.wait()
        self.scope.cancel()


class ToolError(Exception):
    """A tool answered with an error (not a connection that broke)."""


def can_mount_tmpfs() -> str | None:
    """None when this process can mount a tmpfs (root, and mount allowed here), else why not."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    if shutil.which("mount") is None:
        return "no mount command"
    with tempfile.TemporaryDirectory() as target:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", target], capture_output=True,
                              text=True)
        if done.returncode != 0:
            return f"mount -t tmpfs was refused: {done.stderr.strip() or done.returncode}"
        subprocess.run(["umount", target], capture_output=True)
    return None


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def table(figures: dict[str, Any]) -> str:
    rows = [("tasks", figures["tasks"]), ("landed", figures["landed"]), ("resumable (not landed)",
            figures["resumable"]), ("kills (SIGKILL of the daemon)", figures["kills"]),
            ("  by phase", ", ".join(f"{k} {v}" for k, v in figures["kills_by_phase"].items())),
            ("  that hit their phase", ", ".join(f"{k} {v}" for k, v in figures["kills_that_hit_their_phase"].items())),
            ("restarts by a client", figures["restarts"]),
            ("restart, median / max (s)", f"{figures['restart_s_median']} / {figures['restart_s_max']}"),
            ("duplicates", figures["duplicates"]), ("lost work", figures["lost_work"]),
            ("orphans", figures["orphans"]),
            ("first-parent commits on main (red)", f"{figures['first_parent_commits']} "
                                                   f"({figures['red_first_parent_commits']})"),
            ("runs (recovered after a kill)", f"{figures['runs']} ({figures['recovered_runs']})"),
            ("sent back by the check", figures["sent_back"]), ("batches landed", figures["batches_landed"]),
            ("reruns that found their WIP", figures["reruns_that_found_their_wip"]),
            ("ledger = mock, tasks with model calls", f"{figures['ledger_equal_tasks']} of "
                                                      f"{figures['tasks_with_model_calls']}"),
            ("tokens: ledger / mock served", f"{figures['ledger_tokens']:,} / {figures['mock_served_tokens']:,}"),
            ("responses cut by a kill", figures["responses_cut_by_a_kill"]),
            ("store integrity_check", figures["store_integrity"]),
            ("ERROR lines in the daemons' log", figures["engine_errors_logged"]), ("seconds", figures["seconds"])]
    if figures.get("fill"):
        fill = figures["fill"]
        rows.append(("tmpfs filled: free MiB, held s", f"{fill['free_mib']}, {fill['held_s']}"))
        rows.append(("  daemon alive when full", fill["daemon_alive_when_full"]))
        rows.append(("  store integrity_check when full", fill["integrity_when_full"]))
        rows.append(("  claimed tasks stuck after space was freed", fill["stuck"]))
        rows.append(("  all claimed tasks moved on after (s)", fill["resumed_s"]))
        rows.append(("  get_status said", fill["get_status"][:90] + "…"))
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"| {name:<{width}} | {value} |" for name, value in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--claude-agents", type=int, default=2)
    parser.add_argument("--seed", type=int, default=34)
    parser.add_argument("--tmpfs", type=int, metavar="MIB", help="AGENTQUEUE_HOME on a tmpfs of this size, filled")
    parser.add_argument("--new-home", action="store_true", help="start from a new home (no migration)")
    parser.add_argument("--plan", help="the kills' phases, comma-separated (" + ", ".join(PHASES) + ")")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep the soak's folder")
    args = parser.parse_args()
    config = SoakConfig(tasks=args.tasks, kills=args.kills, agents=args.agents, claude_agents=args.claude_agents,
                        seed=args.seed, tmpfs_mb=args.tmpfs, keep=args.keep,
                        old_schema=None if args.new_home else 11,
                        plan=args.plan.split(",") if args.plan else None)
    soak = Soak(config)
    print(f"soak in {soak.root}: {config.tasks} tasks, kills {soak.plan}", flush=True)
    figures = anyio.run(soak.run)
    figures["load"] = os.getloadavg()
    figures["date"] = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(table(figures))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=str))
    if figures["failures"]:
        print(f"{len(figures['failures'])} failure(s); the soak's folder is kept: {soak.root}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
