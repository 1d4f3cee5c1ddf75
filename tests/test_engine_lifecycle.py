"""The engine end to end with the `command` agent type: real git repos, real subprocesses, no model.

Every agent here is one small Python program (AGENT below) run as `python -c …`. It reads its prompt
on stdin and obeys directives written at the start of lines of the task description:

    WRITE <file> <text>   write <text> to <file> (relative to its working directory)
    DUMP <file>           write the whole prompt it received to <file>
    SAY <text>            print <text> (becomes the run's summary)
    SLEEP <seconds>       sleep
    EXIT <code>           exit with that status (default 0)
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from agentqueue.engine.orchestrator import Engine, EngineConfig
from agentqueue.engine.watchdog import WatchdogLimits
from agentqueue.services import Services
from agentqueue.services.errors import ServiceError

from .git_fixtures import bare_sha, git, git_env, make_origin, porcelain, sha  # noqa: F401  (git_env: fixture)
from .engine_runs import passes
from .processes import group_alive, wait_for

from .conftest import on_both_backends
from .slowdown import scaled

pytestmark = pytest.mark.anyio

store_backend = on_both_backends()  # the store's suite: every test here runs on SQLite and on PostgreSQL

AGENT = r"""
import pathlib, re, sys, time
prompt = sys.stdin.read()
for m in re.finditer(r"^WRITE (\S+) (.*)$", prompt, re.M):
    pathlib.Path(m[1]).write_text(m[2] + "\n")
for m in re.finditer(r"^DUMP (\S+)$", prompt, re.M):
    pathlib.Path(m[1]).write_text(prompt)
for m in re.finditer(r"^SAY (.*)$", prompt, re.M):
    print(m[1], flush=True)
m = re.search(r"^SLEEP ([0-9.]+)$", prompt, re.M)
if m:
    time.sleep(float(m[1]))
m = re.search(r"^EXIT ([0-9]+)$", prompt, re.M)
print("agent done", flush=True)
sys.exit(int(m[1]) if m else 0)
"""
AGENT_COMMAND = shlex.join([sys.executable, "-c", AGENT])
FINAL = ("COMPLETED", "BLOCKED", "AWAITING_APPROVAL", "PAUSED")


# -- helpers -----------------------------------------------------------------------------------------
@pytest.fixture
def svc(services: Services, git_env: Path) -> Services:
    """Project 'demo' (max 2 agents) with an `init` repo 'app' and one command agent 'worker'."""
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("worker", "command", command=AGENT_COMMAND)
    return services


def make_engine(services: Services) -> Engine:
    config = EngineConfig(poll_seconds=0.1, rate_limit_backoff=30,
                          limits=WatchdogLimits(stall_seconds=scaled(30), timeout_seconds=scaled(60)))
    return Engine(services, services.home, config=config)


@asynccontextmanager
async def engine_running(engine: Engine) -> AsyncIterator[Engine]:
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        try:
            yield engine
        finally:
            with anyio.CancelScope(shield=True):
                await engine.shutdown(grace=10)
            tg.cancel_scope.cancel()



def status(services: Services, task_id: str) -> str:
    return services.tasks.get(task_id).status


async def run_until_final(services: Services, engine: Engine, *task_ids: str, timeout: float = 20) -> None:
    async with engine_running(engine):
        await wait_for(lambda: all(status(services, t) in FINAL for t in task_ids), timeout,
                       f"tasks {task_ids} to finish")


def events(services: Services, task_id: str, kind: str | None = None) -> list:
    """A task's events, oldest first."""
    return list(reversed(services.events.recent(500, task_id=task_id, event_type=kind)))


def checkout(services: Services, repo_id: str = "app") -> Path:
    return Path(services.repos.get(repo_id).checkout_path)


def show(repo: Path, ref: str, path: str) -> str | None:
    done = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=repo, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def branches(repo: Path, pattern: str) -> list[str]:
    return git(repo, "branch", "--list", "--format=%(refname:short)", pattern).split()


def running_rows(services: Services, project_id: str | None = None) -> int:
    where = " AND project_id = ?" if project_id else ""
    return int(services.store.scalar(
        f"SELECT count(*) FROM tasks WHERE status IN ('ASSIGNED', 'IN_PROGRESS', 'VERIFYING'){where}",
        (project_id,) if project_id else ()))


def agent_row(services: Services, agent_id: str) -> dict:
    row = services.store.one("SELECT * FROM agents WHERE id = ?", (agent_id,))
    assert row is not None
    return row


def git_dir_has(worktree: Path, name: str) -> bool:
    return Path(git(worktree, "rev-parse", "--path-format=absolute", "--git-path", name)).exists()


# -- 1. success ----------------------------------------------------------------------------------------
async def test_a_task_lands_on_the_default_branch_and_its_worktree_is_cleaned(svc: Services) -> None:
    task = svc.tasks.create("demo", "Say hello", "WRITE hello.txt hello world\nSAY wrote hello.txt", repo_id="app")
    svc.projects.create("Loose")  # a project without repos runs its tasks in its workspace
    loose = svc.tasks.create("loose", "No repo", "WRITE loose.txt outside any repo")
    engine = make_engine(svc)
    await run_until_final(svc, engine, task.id, loose.id)

    done = svc.tasks.get(task.id)
    assert done.status == "COMPLETED"
    assert done.branch == f"{task.id}/say-hello"
    repo = checkout(svc)
    assert show(repo, "main", "hello.txt") == "hello world"
    assert not engine.workspaces.path_for("app", task.id).exists()
    assert branches(repo, f"{task.id}/*") == []
    assert porcelain(repo) == ""
    kinds = [e.event_type for e in events(svc, task.id)]
    for kind in ("task.assigned", "task.started", "task.completed"):
        assert kind in kinds, kinds
    assert kinds.index("task.assigned") < kinds.index("task.started") < kinds.index("task.completed")
    attempts, result = svc.tasks.results(task.id)
    assert attempts == 1 and result is not None
    assert result.status == "completed" and result.files_changed == ["hello.txt"]
    assert result.duration_s is not None and result.duration_s > 0
    assert result.agent_id == "worker" and "wrote hello.txt" in result.summary
    assert "hello world" in svc.vcs.task_diff(done)["diff"]  # the landed range outlives the branch
    assert "[done] completed" in engine.log_path(task.id).read_text()

    # Without a repo: the agent ran in the project workspace, and nothing was merged anywhere.
    assert status(svc, loose.id) == "COMPLETED" and svc.tasks.get(loose.id).repo_id is None
    workspace = Path(svc.projects.get("loose").workspace)
    assert (workspace / "loose.txt").read_text() == "outside any repo\n"
    assert show(repo, "main", "loose.txt") is None
    attempts, result = svc.tasks.results(loose.id)
    assert attempts == 1 and result is not None and result.files_changed == []
    agent = svc.agents.get("worker")
    assert agent.state == "IDLE" and agent.current_task is None


# -- 2. dependencies ------------------------------------------------------------------------------------
async def test_a_dependent_runs_after_its_dependency_and_sees_its_result(svc: Services) -> None:
    svc.agents.create("helper", "command", command=AGENT_COMMAND)  # a free agent must still not start B early
    first = svc.tasks.create("demo", "Make alpha", "WRITE alpha.txt alpha\nSAY ALPHA-RESULT-7f3\nSLEEP 0.5",
                             repo_id="app")
    second = svc.tasks.create("demo", "Use alpha", "DUMP prompt_b.txt", repo_id="app", depends_on=[first.id])
    assert second.status == "DEFINED"
    await run_until_final(svc, make_engine(svc), first.id, second.id)

    assert status(svc, first.id) == status(svc, second.id) == "COMPLETED"
    completed_a = events(svc, first.id, "task.completed")[0].id
    started_b = events(svc, second.id, "task.started")[0].id
    assert started_b > completed_a
    ready_b = events(svc, second.id, "task.ready")
    assert ready_b and ready_b[0].payload["reason"] == "deps_met"
    prompt = show(checkout(svc), "main", "prompt_b.txt")
    assert prompt is not None
    assert first.id in prompt and "ALPHA-RESULT-7f3" in prompt and "Make alpha" in prompt
    assert show(checkout(svc), "main", "alpha.txt") == "alpha"


# -- 3. failures and retries -------------------------------------------------------------------------------
async def test_failures_retry_up_to_max_retries_then_block(svc: Services) -> None:
    svc.agents.create("helper", "command", command=AGENT_COMMAND)
    retried = svc.tasks.create("demo", "Fails twice", "SAY trying\nEXIT 3", repo_id="app", max_retries=1)
    once = svc.tasks.create("demo", "Fails once", "EXIT 3", repo_id="app", max_retries=0)
    await run_until_final(svc, make_engine(svc), retried.id, once.id)

    blocked = svc.tasks.get(retried.id)
    assert blocked.status == "BLOCKED" and blocked.retry_count == 1
    assert svc.store.scalar("SELECT count(*) FROM task_results WHERE task_id = ?", (retried.id,)) == 2
    assert [e.payload["reason"] for e in events(svc, retried.id, "task.started")] == ["agent_started"] * 2
    assert len(events(svc, retried.id, "task.failed")) == 2
    assert len(events(svc, retried.id, "task.blocked")) == 1
    error = svc.tasks.agent_error(retried.id)
    assert error["status"] == "BLOCKED" and error["retries"] == "1 / 1"
    assert error["error_type"] == "Agent crashed" and "status 3" in error["error_message"]
    assert "restart_task" in error["suggested_fix"]
    assert "trying" in error["agent_summary"]

    assert status(svc, once.id) == "BLOCKED"
    attempts, result = svc.tasks.results(once.id)
    assert attempts == 1 and result is not None and result.status == "failed" and result.error_type == "crashed"
    assert len(events(svc, once.id, "task.started")) == 1
    repo = checkout(svc)
    assert git(repo, "rev-list", "--count", "main") == "1" and porcelain(repo) == ""  # failed runs land nothing


# -- 4. approval ------------------------------------------------------------------------------------------
async def test_approval_without_a_remote_waits_then_approve_task_merges(svc: Services) -> None:
    task = svc.tasks.create("demo", "Needs review", "WRITE reviewed.txt looks good", repo_id="app",
                            requires_approval=True)
    engine = make_engine(svc)
    repo = checkout(svc)
    async with engine_running(engine):
        await wait_for(lambda: status(svc, task.id) in FINAL, what="the run")
        waiting = svc.tasks.get(task.id)
        assert waiting.status == "AWAITING_APPROVAL" and waiting.pr_url is None
        assert show(repo, "main", "reviewed.txt") is None  # not merged yet
        assert engine.workspaces.path_for("app", task.id).is_dir()  # worktree and branch kept
        assert show(repo, waiting.branch, "reviewed.txt") == "looks good"
        assert events(svc, task.id, "task.awaiting_approval")
        assert not svc.events.recent(10, event_type="pr.created")

        approved = await anyio.to_thread.run_sync(svc.tasks.approve, task.id)
    assert approved.status == "COMPLETED"
    assert show(repo, "main", "reviewed.txt") == "looks good"
    assert porcelain(repo) == ""
    assert not engine.workspaces.path_for("app", task.id).exists()
    assert branches(repo, f"{task.id}/*") == []
    assert svc.vcs.task_diff(approved)["files_changed"] == ["reviewed.txt"]


@pytest.fixture
def fake_gh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A `gh` on PATH that records its argv and cwd and prints a PR URL."""
    bindir = tmp_path / "fake-bin"
    bindir.mkdir()
    record = tmp_path / "gh-calls.json"
    script = bindir / "gh"
    script.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                      f"open({str(record)!r}, 'w').write(json.dumps({{'argv': sys.argv[1:], 'cwd': os.getcwd()}}))\n"
                      "print('Creating pull request...')\nprint('https://github.com/o/r/pull/1')\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return record


async def test_approval_with_a_remote_opens_a_pr_with_gh(services: Services, git_env: Path, tmp_path: Path,
                                                         fake_gh: Path) -> None:
    origin = make_origin(tmp_path / "origin.git")
    services.projects.create("Demo")
    services.repos.add("demo", "clone", url=str(origin), name="app")
    services.agents.create("worker", "command", command=AGENT_COMMAND)
    task = services.tasks.create("demo", "Open a PR", "WRITE pr.txt for review", repo_id="app",
                                 requires_approval=True)
    await run_until_final(services, make_engine(services), task.id)

    waiting = services.tasks.get(task.id)
    assert waiting.status == "AWAITING_APPROVAL"
    assert waiting.pr_url == "https://github.com/o/r/pull/1"
    created = services.events.recent(10, event_type="pr.created")
    assert len(created) == 1
    assert created[0].payload["pr_url"] == waiting.pr_url and created[0].payload["branch"] == waiting.branch
    assert created[0].task_id == task.id  # the PR is findable from the task's events
    repo = checkout(services)
    assert bare_sha(origin, f"refs/heads/{waiting.branch}") == sha(repo, waiting.branch)  # pushed
    assert show(repo, waiting.branch, "pr.txt") == "for review"
    assert show(repo, "origin/main", "pr.txt") is None and show(repo, "main", "pr.txt") is None
    call = json.loads(fake_gh.read_text())
    argv = call["argv"]
    assert argv[:2] == ["pr", "create"]
    assert argv[argv.index("--head") + 1] == waiting.branch
    assert argv[argv.index("--base") + 1] == "main"
    assert argv[argv.index("--title") + 1] == "Open a PR"
    assert task.id in argv[argv.index("--body") + 1]


# -- 5. merge conflict -------------------------------------------------------------------------------------
async def test_a_merge_conflict_blocks_the_second_task_and_loses_nothing(svc: Services) -> None:
    svc.projects.edit("demo", merge_retries=0)  # not sent back to its agent (test_merge_queue.py covers that)
    svc.agents.create("helper", "command", command=AGENT_COMMAND)
    one = svc.tasks.create("demo", "Version one", "WRITE same.txt version one\nSLEEP 0.8", repo_id="app")
    two = svc.tasks.create("demo", "Version two", "WRITE same.txt version two\nSLEEP 1.6", repo_id="app")
    engine = make_engine(svc)
    async with engine_running(engine):
        # Both worktrees exist at once, so both branches start from the same commit.
        await wait_for(lambda: status(svc, one.id) == status(svc, two.id) == "IN_PROGRESS", what="both runs")
        await wait_for(lambda: status(svc, one.id) in FINAL and status(svc, two.id) in FINAL, what="both to end")

    assert status(svc, one.id) == "COMPLETED"
    loser = svc.tasks.get(two.id)
    assert loser.status == "BLOCKED"
    conflicts = events(svc, two.id, "merge.conflict")
    assert len(conflicts) == 1 and conflicts[0].payload["conflicts"] == ["same.txt"]
    assert conflicts[0].payload["branch"] == loser.branch
    repo = checkout(svc)
    assert show(repo, "main", "same.txt") == "version one"
    assert porcelain(repo) == "" and not git_dir_has(repo, "MERGE_HEAD")
    # The loser's work is intact on its branch; its worktree is clean and not mid-merge.
    assert show(repo, loser.branch, "same.txt") == "version two"
    worktree = engine.workspaces.path_for("app", two.id)
    assert porcelain(worktree) == "" and not git_dir_has(worktree, "MERGE_HEAD")
    error = svc.tasks.agent_error(two.id)
    assert error["status"] == "BLOCKED"


async def test_runs_finishing_together_all_land(svc: Services) -> None:
    """Runs of one repo that end at the same moment, touching different files: every one merges.

    Their landings happen in parallel threads; unserialised, one would find the default branch moved
    under it and be BLOCKED with a 'merge conflict' that lists no conflicting file."""
    svc.projects.edit("demo", max_concurrent_agents=4)
    for n in range(3):
        svc.agents.create(f"helper-{n}", "command", command=AGENT_COMMAND)
    tasks = [svc.tasks.create("demo", f"Part {n}", f"WRITE part{n}.txt part {n}\nSLEEP 1", repo_id="app")
             for n in range(4)]
    await run_until_final(svc, make_engine(svc), *(t.id for t in tasks))
    assert [status(svc, t.id) for t in tasks] == ["COMPLETED"] * 4, \
        [e.payload for t in tasks for e in events(svc, t.id, "merge.conflict")]
    repo = checkout(svc)
    for n in range(4):
        assert show(repo, "main", f"part{n}.txt") == f"part {n}"
    assert porcelain(repo) == "" and branches(repo, "*/part-*") == []


async def test_approving_conflicting_work_refuses_and_keeps_everything(svc: Services) -> None:
    waiting = svc.tasks.create("demo", "Reviewed edit", "WRITE same.txt reviewed", repo_id="app",
                               requires_approval=True)
    engine = make_engine(svc)
    repo = checkout(svc)
    async with engine_running(engine):
        await wait_for(lambda: status(svc, waiting.id) in FINAL, what="the first run")
        landed = svc.tasks.create("demo", "Direct edit", "WRITE same.txt direct", repo_id="app")
        await wait_for(lambda: status(svc, landed.id) in FINAL, what="the second run")
        assert status(svc, landed.id) == "COMPLETED"
        with pytest.raises(ServiceError, match="same.txt"):
            await anyio.to_thread.run_sync(svc.tasks.approve, waiting.id)
    task = svc.tasks.get(waiting.id)
    assert task.status == "AWAITING_APPROVAL"
    assert show(repo, "main", "same.txt") == "direct"
    assert show(repo, task.branch, "same.txt") == "reviewed"
    worktree = engine.workspaces.path_for("app", waiting.id)
    assert porcelain(worktree) == "" and not git_dir_has(worktree, "MERGE_HEAD")
    assert porcelain(repo) == "" and not git_dir_has(repo, "MERGE_HEAD")


# -- 6. orchestrator pause --------------------------------------------------------------------------------
async def test_a_paused_orchestrator_starts_nothing_until_resumed(svc: Services) -> None:
    svc.system.set_orchestrator("paused")
    task = svc.tasks.create("demo", "Wait for me", "WRITE later.txt later", repo_id="app")
    async with engine_running(make_engine(svc)) as engine:
        await passes(engine, 10)
        assert status(svc, task.id) == "READY"
        assert not events(svc, task.id, "task.assigned")
        svc.system.set_orchestrator("running")
        await wait_for(lambda: status(svc, task.id) in FINAL, what="the resumed run")
    assert status(svc, task.id) == "COMPLETED"
    assert show(checkout(svc), "main", "later.txt") == "later"


# -- 7. project pause and max_concurrent_agents ---------------------------------------------------------------
@pytest.mark.slow  # seconds of real waits (timeouts, caps, periods): left out of the fast loop
async def test_project_pause_and_concurrency_cap_hold(svc: Services) -> None:
    svc.agents.create("helper", "command", command=AGENT_COMMAND)
    svc.projects.create("Capped", max_concurrent_agents=1)
    svc.repos.add("capped", "init", name="capped-repo")
    capped = [svc.tasks.create("capped", f"Capped {n}", f"WRITE c{n}.txt c{n}\nSLEEP 0.4", repo_id="capped-repo")
              for n in range(3)]
    svc.projects.set_status("capped", "PAUSED")
    peak_capped = peak_all = 0
    async with engine_running(make_engine(svc)) as engine:
        await passes(engine, 10)
        assert all(status(svc, t.id) == "READY" for t in capped)  # paused project: nothing started
        svc.projects.set_status("capped", "ACTIVE")
        other = svc.tasks.create("demo", "Other project", "WRITE o.txt o\nSLEEP 1", repo_id="app")
        with anyio.fail_after(scaled(30)):
            while not all(status(svc, t.id) in FINAL for t in [*capped, other]):
                peak_capped = max(peak_capped, running_rows(svc, "capped"))
                peak_all = max(peak_all, running_rows(svc))
                busy = svc.store.scalar("SELECT count(*) FROM agents WHERE state = 'BUSY'")
                assert busy <= 2
                await anyio.sleep(0.02)
    assert [status(svc, t.id) for t in capped] == ["COMPLETED"] * 3
    assert status(svc, other.id) == "COMPLETED"
    assert peak_capped == 1  # never two runs of the capped project at once
    assert peak_all == 2  # while the second agent worked for the other project
    # The capped runs did not overlap: each started after the previous one ended.
    spans = sorted((events(svc, t.id, "task.assigned")[0].id, events(svc, t.id, "task.completed")[0].id)
                   for t in capped)
    assert all(spans[i][1] < spans[i + 1][0] for i in range(len(spans) - 1)), spans


# -- 8. shutdown --------------------------------------------------------------------------------------------
async def test_shutdown_kills_the_run_saves_wip_and_requeues(svc: Services) -> None:
    task = svc.tasks.create("demo", "Long job", "WRITE wip.txt half done\nSLEEP 60", repo_id="app", max_retries=2)
    engine = make_engine(svc)
    worktree = engine.workspaces.path_for("app", task.id)
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        wip = worktree / "wip.txt"
        await wait_for(lambda: wip.exists() and wip.read_text() == "half done\n" and task.id in engine.running
                       and engine.running[task.id].pid is not None, what="the agent to write and sleep")
        pid = engine.running[task.id].pid
        assert agent_row(svc, "worker")["pid"] == pid
        assert group_alive(pid)
        with anyio.fail_after(scaled(10)):
            await engine.shutdown(grace=10)
        tg.cancel_scope.cancel()
    assert not group_alive(pid)
    requeued = svc.tasks.get(task.id)
    assert requeued.status == "READY" and requeued.retry_count == 0
    assert events(svc, task.id, "task.ready")[-1].payload["reason"] == "shutdown"
    repo = checkout(svc)
    assert show(repo, requeued.branch, "wip.txt") == "half done"  # WIP committed on the task branch
    assert git(repo, "log", "-1", "--format=%s", requeued.branch).startswith("WIP")
    assert show(repo, "main", "wip.txt") is None
    assert porcelain(worktree) == ""
    agent = agent_row(svc, "worker")
    assert agent["state"] == "IDLE" and agent["pid"] is None and agent["current_task"] is None


# -- 9. recovery ---------------------------------------------------------------------------------------------
def sleeper(cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=cwd,
                            start_new_session=True)


async def test_recover_kills_the_orphan_saves_wip_and_requeues(svc: Services, tmp_path: Path) -> None:
    svc.agents.create("other", "command", command=AGENT_COMMAND)
    engine = make_engine(svc)  # not running: this is the state a dead engine left behind
    repo = svc.repos.get("app")
    orphaned = svc.tasks.create("demo", "Orphaned", "WRITE never.txt x", repo_id="app", max_retries=3)
    assert engine.lifecycle.claim(orphaned.id, "worker")
    workspace = engine.workspaces.prepare(repo, orphaned.id, orphaned.title)
    engine.lifecycle.started(orphaned.id, workspace.branch)
    (workspace.path / "unsaved.txt").write_text("work in progress\n")
    orphan = sleeper(workspace.path)
    engine.lifecycle.set_pid("worker", orphan.pid)

    # A second stale task whose recorded pid now belongs to an unrelated process elsewhere.
    reused = svc.tasks.create("demo", "Pid reused", "WRITE never.txt x", repo_id="app")
    assert engine.lifecycle.claim(reused.id, "other")
    other_ws = engine.workspaces.prepare(repo, reused.id, reused.title)
    engine.lifecycle.started(reused.id, other_ws.branch)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    bystander = sleeper(elsewhere)
    engine.lifecycle.set_pid("other", bystander.pid)
    try:
        recovered = await anyio.to_thread.run_sync(engine.recover)
        assert sorted(recovered) == sorted([orphaned.id, reused.id])
        assert orphan.wait(timeout=5) == -signal.SIGTERM  # killed: it ran in the task's worktree
        assert bystander.poll() is None  # not killed: it runs somewhere else
    finally:
        for process in (orphan, bystander):
            if process.poll() is None:
                process.kill()
                process.wait()

    task = svc.tasks.get(orphaned.id)
    assert task.status == "READY" and task.retry_count == 1
    assert events(svc, orphaned.id, "task.ready")[-1].payload["reason"] == "recovered"
    checkout_path = Path(repo.checkout_path)
    assert show(checkout_path, workspace.branch, "unsaved.txt") == "work in progress"
    assert git(checkout_path, "log", "-1", "--format=%s", workspace.branch).startswith("WIP")
    assert porcelain(workspace.path) == ""
    assert svc.tasks.get(reused.id).status == "READY"
    for agent_id in ("worker", "other"):
        agent = agent_row(svc, agent_id)
        assert agent["state"] == "IDLE" and agent["pid"] is None and agent["current_task"] is None


async def test_recover_blocks_a_task_whose_retries_are_spent(svc: Services) -> None:
    engine = make_engine(svc)
    task = svc.tasks.create("demo", "Last chance", "WRITE x.txt x", repo_id="app", max_retries=0)
    assert engine.lifecycle.claim(task.id, "worker")
    assert await anyio.to_thread.run_sync(engine.recover) == [task.id]
    assert status(svc, task.id) == "BLOCKED"


# -- 10. paused tasks resume -----------------------------------------------------------------------------------
async def test_a_paused_task_resumes_when_its_time_has_come(svc: Services) -> None:
    engine = make_engine(svc)
    due = svc.tasks.create("demo", "Due", "WRITE due.txt resumed", repo_id="app")
    later = svc.tasks.create("demo", "Later", "WRITE later.txt x", repo_id="app")
    for task, seconds in ((due, -1), (later, 3600)):  # a rate-limited run, paused by the lifecycle
        assert engine.lifecycle.claim(task.id, "worker")
        engine.lifecycle.started(task.id, None)
        assert engine.lifecycle.failed(task.id, "rate_limit", "429 Too Many Requests", seconds) == "PAUSED"
        engine.lifecycle.free_agent("worker")
    assert status(svc, due.id) == status(svc, later.id) == "PAUSED"

    claims = await anyio.to_thread.run_sync(engine.tick)
    assert claims == [(due.id, "worker")]  # resumed to READY, then claimed in the same tick
    resumed = events(svc, due.id, "task.ready")
    assert resumed[-1].payload["reason"] == "resume"
    assert svc.tasks.get(due.id).resume_after is None and svc.tasks.get(due.id).retry_count == 0
    assert status(svc, later.id) == "PAUSED"

    # That claim is what a dead engine would leave: the real loop recovers it, runs it, lands it.
    async with engine_running(engine):
        await wait_for(lambda: status(svc, due.id) in FINAL, what="the resumed task")
        await passes(engine, 3)  # and the later one stays paused
    assert status(svc, due.id) == "COMPLETED"
    assert show(checkout(svc), "main", "due.txt") == "resumed"
    assert status(svc, later.id) == "PAUSED"
