"""Landing near the git floor: the landed commit is built off to the side, and only the move of the default
branch (a compare-and-swap on the tip it was built from) holds the repo's lock.

Real repos and real git. One landing is held mid-build (an Event inside the build step) while another lands:
with the lock around the whole landing the second would wait for the first; here it must not.
"""

from __future__ import annotations

import os
import shlex
import threading
from pathlib import Path

import pytest

from agentqueue.engine import workspaces as workspaces_module
from agentqueue.engine.workspaces import Landing, Workspace, Workspaces
from agentqueue.services import Services

from .git_fixtures import commit_file, git, git_env, porcelain, sha  # noqa: F401  (git_env: fixture)
from .test_engine_lifecycle import make_engine, run_until_final

WAIT = 20  # seconds: a bound for a step that should take milliseconds


@pytest.fixture
def svc(services: Services, git_env: Path) -> Services:
    """Project 'demo' with an `init` repo 'app' (main checked out in its checkout)."""
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    return services


def two_tasks(svc: Services, same_file: bool = False) -> tuple[Workspaces, Workspace, Workspace, Path]:
    """Two prepared task worktrees, each with one commit (on the same file when `same_file`)."""
    repo = svc.repos.get("app")
    workspaces = Workspaces(svc.home / "worktrees")
    first = workspaces.prepare(repo, "task-a", "A")
    second = workspaces.prepare(repo, "task-b", "B")
    commit_file(first.path, "same.txt" if same_file else "a.txt", "from a\n", "work of a")
    commit_file(second.path, "same.txt" if same_file else "b.txt", "from b\n", "work of b")
    return workspaces, first, second, Path(repo.checkout_path)


def held_build(monkeypatch: pytest.MonkeyPatch, held: Workspace) -> tuple[threading.Event, threading.Event]:
    """Hold `held`'s first build of its landed commit until released: (it is building, release it)."""
    building, release = threading.Event(), threading.Event()
    real = Workspaces._landed_commit

    def build(main, workspace, *args, **kwargs):  # noqa: ANN001, ANN202
        if workspace is held and not release.is_set():
            building.set()
            assert release.wait(WAIT), "the held landing was never released"
        return real(main, workspace, *args, **kwargs)

    monkeypatch.setattr(Workspaces, "_landed_commit", staticmethod(build))
    return building, release


def land_in_thread(workspaces: Workspaces, workspace: Workspace) -> tuple[threading.Thread, dict[str, Landing]]:
    out: dict[str, Landing] = {}
    thread = threading.Thread(target=lambda: out.setdefault("landing", workspaces.land(workspace)), daemon=True)
    thread.start()
    return thread, out


@pytest.mark.parametrize("checked_out", [True, False], ids=["main-checked-out", "main-not-checked-out"])
def test_a_slow_landing_does_not_hold_another_and_the_slow_one_lands_once_after_main_moved(
        svc: Services, monkeypatch: pytest.MonkeyPatch, checked_out: bool) -> None:
    workspaces, slow, quick, repo = two_tasks(svc)
    if not checked_out:
        git(repo, "switch", "-q", "-c", "elsewhere")  # the person works on another branch: main moves by update-ref
    start = sha(repo, "main")
    building, release = held_build(monkeypatch, slow)
    slow_thread, slow_out = land_in_thread(workspaces, slow)
    assert building.wait(WAIT)

    quick_thread, quick_out = land_in_thread(workspaces, quick)
    quick_thread.join(WAIT)
    assert not quick_thread.is_alive(), "the second landing waited for the first one's merge"
    assert quick_out["landing"].merged and quick_out["landing"].sha == sha(repo, "main")
    assert slow_thread.is_alive()  # still held mid-build: it did not hold the other up

    release.set()
    slow_thread.join(WAIT)
    landing = slow_out["landing"]
    assert landing.merged and landing.attempts == 2  # main moved under it: built again from the new tip
    assert landing.sha == sha(repo, "main") and landing.base_sha == quick_out["landing"].sha
    assert landing.files_changed == ["a.txt"]
    # Each task's work is on main exactly once, with nothing lost: start, b, a, and the merge of the two.
    log = git(repo, "log", "--format=%s", "main").splitlines()
    assert log.count("work of a") == 1 and log.count("work of b") == 1 and len(log) == 4
    assert git(repo, "rev-list", "--count", f"{start}..main") == "3"
    assert sorted(git(repo, "ls-tree", "--name-only", "main").split()) == ["a.txt", "b.txt"]
    if checked_out:
        assert porcelain(repo) == "" and (repo / "a.txt").read_text() == "from a\n"  # the checkout followed
    else:
        assert git(repo, "branch", "--show-current") == "elsewhere" and not (repo / "a.txt").exists()


def test_a_merge_built_while_main_moved_is_not_written_and_the_landing_builds_again(
        svc: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    workspaces, slow, quick, repo = two_tasks(svc)
    first = workspaces.prepare(svc.repos.get("app"), "task-c", "C")
    commit_file(first.path, "c.txt", "from c\n", "work of c")
    assert workspaces.land(first).merged  # main moves on: both tasks now land as merges
    building, release = held_build(monkeypatch, slow)
    slow_thread, slow_out = land_in_thread(workspaces, slow)
    assert building.wait(WAIT)
    assert workspaces.land(quick).merged  # main moves again while the slow merge is being built
    release.set()
    slow_thread.join(WAIT)
    landing = slow_out["landing"]
    assert landing.merged and landing.attempts == 2 and landing.sha == sha(repo, "main")
    # The merge of the stale tip was never written as a commit: every commit in the repository is on a branch.
    assert "commit" not in git(repo, "fsck", "--unreachable", "--no-reflogs")
    assert sorted(git(repo, "ls-tree", "--name-only", "main").split()) == ["a.txt", "b.txt", "c.txt"]
    log = git(repo, "log", "--format=%s", "main").splitlines()
    assert [log.count(f"work of {name}") for name in "abc"] == [1, 1, 1]


def test_a_conflict_found_on_the_retry_loses_nothing(svc: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    workspaces, slow, quick, repo = two_tasks(svc, same_file=True)
    slow_tip = sha(slow.path, "HEAD")
    building, release = held_build(monkeypatch, slow)
    slow_thread, slow_out = land_in_thread(workspaces, slow)
    assert building.wait(WAIT)
    assert workspaces.land(quick).merged
    landed = sha(repo, "main")
    release.set()
    slow_thread.join(WAIT)

    landing = slow_out["landing"]
    assert not landing.merged and landing.conflicts == ["same.txt"]
    assert sha(repo, "main") == landed and (repo / "same.txt").read_text() == "from b\n"  # main as b left it
    assert sha(slow.path, "HEAD") == slow_tip and sha(repo, slow.branch or "") == slow_tip  # the branch as it was
    assert porcelain(slow.path) == "" and porcelain(repo) == ""  # no half merge anywhere


def test_the_users_commit_on_main_while_a_landing_builds_is_kept(svc: Services,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    workspaces, slow, _, repo = two_tasks(svc)
    building, release = held_build(monkeypatch, slow)
    thread, out = land_in_thread(workspaces, slow)
    assert building.wait(WAIT)
    mine = commit_file(repo, "mine.txt", "the person's\n", "the person's own commit")
    release.set()
    thread.join(WAIT)
    landing = out["landing"]
    assert landing.merged and landing.base_sha == mine
    assert git(repo, "merge-base", "--is-ancestor", mine, "main") == ""
    assert sorted(git(repo, "ls-tree", "--name-only", "main").split()) == ["a.txt", "mine.txt"]


SHIM = """#!/bin/sh
printf '%s\\n' "$*" >> {log}
exec {git} "$@"
"""


@pytest.mark.anyio
async def test_a_task_costs_at_most_ten_git_commands(svc: Services, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A size, not a timing: the git commands AgentQueue runs for one task that commits one file and lands as a
    fast-forward (the agent's own git is its run, not counted). The floor by hand is worktree add, the
    commit, the merge, worktree remove and branch delete; what the engine adds is listed in the message."""
    real_git = git(tmp_path, "--exec-path")  # a real path, so the count holds whatever PATH has
    real_git = str(Path(real_git) / "git")
    log, shim = tmp_path / "git-calls.log", tmp_path / "shim"
    shim.mkdir()
    (shim / "git").write_text(SHIM.format(log=log, git=real_git))
    (shim / "git").chmod(0o755)
    identity = "-c user.name=Agent -c user.email=agent@localhost"
    script = (f"echo done > work.txt && {real_git} add work.txt && {real_git} {identity} commit -q -m 'agent work'")
    svc.agents.create("writer", "command", command=shlex.join(["/bin/sh", "-c", script]))
    task = svc.tasks.create("demo", "Write", "write a file and commit it", repo_id="app")
    monkeypatch.setenv("PATH", f"{shim}:{os.environ['PATH']}")
    engine = make_engine(svc)
    await run_until_final(svc, engine, task.id)

    assert svc.tasks.get(task.id).status == "COMPLETED"
    repo = Path(svc.repos.get("app").checkout_path)
    assert (repo / "work.txt").read_text() == "done\n"
    calls = [line.replace("-c core.hooksPath=/dev/null -c core.fsmonitor=false ", "")
             for line in log.read_text().splitlines()]
    assert len(calls) <= 10, "\n".join(calls)
    # Every one of them with hooks and fsmonitor off, but the read of core.hooksPath itself (protected paths): the
    # tips' rev-parse asks git for the hooks folder, and runs no hook.
    raw = log.read_text().splitlines()
    assert all(line.startswith("-c core.hooksPath=/dev/null -c core.fsmonitor=false ") or
               line == "config --get core.hooksPath" or
               line.startswith("-c core.fsmonitor=false -c maintenance.auto=false rev-parse --git-path hooks ")
               for line in raw), "\n".join(raw)


def test_tasks_prepared_landed_and_removed_at_once_each_land_once_and_leave_nothing(svc: Services) -> None:
    """Worktree adds and removes run without a lock (git's own race falls back to the careful path, or a second
    try under the lock): eight tasks at once, each added, committed, landed and removed, all land exactly once."""
    repo = svc.repos.get("app")
    workspaces = Workspaces(svc.home / "worktrees")
    landings: dict[str, Landing] = {}
    errors: list[BaseException] = []

    def one(n: int) -> None:
        try:
            workspace = workspaces.prepare(repo, f"task-{n}", f"Task {n}")
            commit_file(workspace.path, f"f{n}.txt", f"from {n}\n", f"work of {n}")
            landing = workspaces.land(workspace)
            landings[f"task-{n}"] = landing
            assert workspaces.remove(workspace, landed_tip=landing.tip)
        except BaseException as error:  # noqa: BLE001  (reported below, from the test's own thread)
            errors.append(error)

    threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT * 3)
    assert not errors, errors
    assert len(landings) == 8 and all(landing.merged for landing in landings.values())
    checkout = Path(repo.checkout_path)
    log = git(checkout, "log", "--format=%s", "main").splitlines()
    assert all(log.count(f"work of {n}") == 1 for n in range(8))
    assert sorted(git(checkout, "ls-tree", "--name-only", "main").split()) == sorted(f"f{n}.txt" for n in range(8))
    assert git(checkout, "worktree", "list", "--porcelain").count("worktree ") == 1  # only the checkout itself
    assert git(checkout, "for-each-ref", "--format=%(refname)", "refs/heads/").split() == ["refs/heads/main"]
    assert porcelain(checkout) == ""


def test_git_maintenance_runs_every_few_landings_never_inside_one(svc: Services, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A merge's automatic `git maintenance run --auto` is a process inside the landing's lock: AgentQueue's git
    never starts it (SAFE_GIT), and runs it itself once every MAINTAIN_EVERY landings of a repo."""
    monkeypatch.setattr(workspaces_module, "MAINTAIN_EVERY", 3)
    trace = tmp_path / "git-trace.log"
    monkeypatch.setenv("GIT_TRACE", str(trace))
    repo = svc.repos.get("app")
    workspaces = Workspaces(svc.home / "worktrees")
    for n in range(4):  # main is checked out in the repo's checkout: each lands by `merge --ff-only` there
        workspace = workspaces.prepare(repo, f"task-{n}", f"Task {n}")
        (workspace.path / f"f{n}.txt").write_text(f"from {n}\n")
        git(workspace.path, "add", "--", f"f{n}.txt")  # the agent's commit may start maintenance: not counted
        git(workspace.path, "-c", "maintenance.auto=false", "commit", "-q", "-m", f"work of {n}")
        assert workspaces.land(workspace).merged
    workspaces_module._MAINTENANCE.submit(lambda: None).result(WAIT)  # one worker: the maintenance ran before
    started = [line for line in trace.read_text().splitlines() if "built-in: git maintenance " in line]
    assert len(started) == 1 and "maintenance run --auto --quiet" in started[0], started


def test_the_removal_of_a_landed_worktree_runs_no_git_there_and_its_deletion_runs_below_the_daemon(
        svc: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Cleanup nobody waits for yields the CPU to the starts and landings people wait for; and it runs no git with
    the worktree's own `.git` (`git worktree remove` would: a run wrote it). A `git` first on PATH notes every
    command; the deletion's thread is asked its niceness."""
    notes, shim = tmp_path / "git.log", tmp_path / "shim"
    shim.mkdir()
    real_git = next(Path(d) / "git" for d in os.environ["PATH"].split(os.pathsep) if (Path(d) / "git").is_file())
    (shim / "git").write_text(f"#!/bin/sh\necho \"$*\" >> {shlex.quote(str(notes))}\n"
                              f"exec {shlex.quote(str(real_git))} \"$@\"\n")
    (shim / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim}{os.pathsep}{os.environ['PATH']}")
    own = os.getpriority(os.PRIO_PROCESS, 0)
    workspaces, first, _, repo = two_tasks(svc)
    landing = workspaces.land(first)
    assert landing.merged
    assert workspaces.remove(first, landed_tip=landing.tip)
    assert not first.path.exists()  # renamed away at once; deleted in the background
    assert "task-a/" not in git(repo, "branch", "--list", "task-a/*")  # the branch went with it
    assert not any("worktree remove" in line for line in notes.read_text().splitlines())
    niceness = workspaces_module._REMOVALS.submit(
        lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())).result(WAIT)
    assert niceness == min(own + 10, 19)
    workspaces_module._REMOVALS.submit(lambda: None).result(WAIT)  # one worker: the deletion ran before
    assert not [p for p in first.path.parent.iterdir() if p.name.startswith(".removed-")]
