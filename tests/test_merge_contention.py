"""The merge queue under contention (issue 34): real git, the real engine, `command` agents, no model.

Six tasks append a line each to the same block of one file at once, and all six land: a conflict with work that
landed after a branch left main spends none of the task's send-backs while its agent resolves it, and the reruns
of tasks on the same lines run one after another (each merges what the one before landed) instead of racing
again. A task whose agent never resolves is stopped by its own cap, saying so. A task sent back for a failing check
has the check's output in every rerun's prompt until its checks run again.

Every wait is on a state or a file with a deadline; nothing depends on a quiet machine. The agents that must be
caught mid-run wait for a file the test writes (`.go-<run>`), never for a sleep.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from agentqueue.services import Services

from .git_fixtures import commit_file, git, git_env, porcelain  # noqa: F401  (git_env: fixture)
from .processes import wait_for
from .test_engine_lifecycle import FINAL, engine_running, events, make_engine, run_until_final, status
from .test_merge_queue import CHECK, check_passes, first_parents

pytestmark = pytest.mark.anyio

DEADLINE = 600  # seconds: a bound for a machine under load, never a pace the test relies on

# What each agent does, as a model would: a first run adds the task's `LINE <text>` at the end of the block; a run
# that finds the merge the queue left in progress resolves each conflict by reading its markers and keeping both
# sides (its own lines, then the other side's), then commits the merge. With `LEAVE` in the task it leaves every
# conflict as it found it and ends (AgentQueue commits the markers; the checks never see them); with `ABORT` it gives
# up on it (`git merge --abort`) and ends: either way it never resolves. With `GATED` it first waits for the file
# `.go-<n>` in its worktree (n: its run's number, kept in `.runs`), so the test can act while it runs. Every run
# writes its prompt to `.prompts/<n>.txt`. The dot files are ignored by git.
AGENT = r"""
import pathlib, re, subprocess, sys, time
prompt = sys.stdin.read()
runs = pathlib.Path(".runs")
n = int(runs.read_text()) + 1 if runs.exists() else 1
pathlib.Path(".prompts").mkdir(exist_ok=True)
pathlib.Path(f".prompts/{n}.txt").write_text(prompt)
pathlib.Path(".runs.new").write_text(str(n))
pathlib.Path(".runs.new").replace(runs)  # whole, and after the prompt: the test reads both once it changes
if re.search(r"^GATED$", prompt, re.M):
    deadline = time.time() + 500
    while not pathlib.Path(f".go-{n}").exists() and time.time() < deadline:
        time.sleep(0.05)
git = ["git", "-c", "user.name=Agent", "-c", "user.email=agent@example.com"]
path = pathlib.Path("shared.txt")
text = path.read_text()
if "<<<<<<< " in text:
    if re.search(r"^ABORT$", prompt, re.M):
        subprocess.run(git + ["merge", "--abort"], check=True)
        print("gave up on the conflict")
        sys.exit(0)
    if re.search(r"^LEAVE$", prompt, re.M):
        print("left the conflict as it was")
        sys.exit(0)
    out, side, ours, theirs = [], None, [], []
    for line in text.splitlines():
        if line.startswith("<<<<<<< "):
            side, ours, theirs = "ours", [], []
        elif line.startswith("||||||| ") and side:
            side = "base"
        elif line == "=======" and side:
            side = "theirs"
        elif line.startswith(">>>>>>> ") and side:
            out += ours + [kept for kept in theirs if kept not in ours]
            side = None
        elif side == "ours":
            ours.append(line)
        elif side == "theirs":
            theirs.append(line)
        elif side is None:
            out.append(line)
    path.write_text("\n".join(out) + "\n")
    subprocess.run(git + ["add", "shared.txt"], check=True)
    subprocess.run(git + ["commit", "-q", "--no-edit"], check=True)
    print("resolved the conflict, keeping both sides")
else:
    line = re.search(r"^LINE (.*)$", prompt, re.M)[1]
    lines = text.splitlines()
    if line not in lines:
        lines.insert(lines.index("END"), line)
        path.write_text("\n".join(lines) + "\n")
    print("added", line)
"""
AGENT_COMMAND = shlex.join([sys.executable, "-c", AGENT])
CHECK_COMMAND = shlex.join([sys.executable, "check.py"])


@pytest.fixture
def svc(services: Services, git_env: Path) -> Services:
    """Project 'demo' (default merge_retries: 2) whose verify command is the repo's check.py (no BAD line, no marker,
    the block intact), with an `init` repo 'app' holding the block in shared.txt."""
    services.projects.create("Demo", max_concurrent_agents=6, verify_command=CHECK_COMMAND)
    services.repos.add("demo", "init", name="app")
    repo = checkout(services)
    commit_file(repo, ".gitignore", ".runs\n.runs.new\n.go-*\n.prompts/\n", "the agents' own files")
    commit_file(repo, "check.py", CHECK, "the check")
    commit_file(repo, "shared.txt", "BEGIN\nEND\n", "the region")
    return services


def checkout(svc: Services) -> Path:
    return Path(svc.repos.get("app").checkout_path)


def worktree(svc: Services, task_id: str) -> Path:
    return svc.home / "worktrees" / "app" / task_id


def runs_of(svc: Services, task_id: str) -> int:
    try:
        return int((worktree(svc, task_id) / ".runs").read_text())
    except OSError:  # not there yet
        return 0


def results(svc: Services, task_id: str) -> list[dict]:
    return svc.store.all("SELECT attempt, status, error_type FROM task_results WHERE task_id = ? ORDER BY attempt",
                         (task_id,))


def person_adds(repo: Path, line: str) -> None:
    """The person commits a line at the start of the block on main: where a task's first run adds its line, and
    where a resolution that puts the task's lines first left them, so it conflicts with the task's branch."""
    lines = git(repo, "show", "main:shared.txt").splitlines()
    lines.insert(lines.index("BEGIN") + 1, line)
    commit_file(repo, "shared.txt", "\n".join(lines) + "\n", f"the person adds {line!r}")


async def release(svc: Services, task_id: str, run: int, before: object = None) -> None:
    """Wait until the task's agent runs its `run`-th run (waiting at its gate), do `before`, then let it go on."""
    await wait_for(lambda: runs_of(svc, task_id) >= run or status(svc, task_id) in FINAL, DEADLINE,
                   f"run {run} of {task_id}")
    assert runs_of(svc, task_id) == run, (status(svc, task_id), svc.tasks.get(task_id).reason)
    if callable(before):
        before()
    (worktree(svc, task_id) / f".go-{run}").write_text("go")


async def test_six_tasks_appending_to_one_block_all_land(svc: Services, tmp_path: Path) -> None:
    for n in range(6):
        svc.agents.create(f"worker-{n}", "command", command=AGENT_COMMAND)
    tasks = [svc.tasks.create("demo", f"Line {n}", f"LINE task {n} was here", repo_id="app").id for n in range(6)]
    await run_until_final(svc, make_engine(svc), *tasks, timeout=DEADLINE)

    assert [status(svc, t) for t in tasks] == ["COMPLETED"] * 6, [
        (status(svc, t), len(results(svc, t)), svc.tasks.get(t).reason) for t in tasks]
    repo = checkout(svc)
    block = git(repo, "show", "main:shared.txt").splitlines()
    assert block[0] == "BEGIN" and block[-1] == "END"
    assert sorted(block[1:-1]) == [f"task {n} was here" for n in range(6)]  # every line, each once
    assert all(check_passes(repo, commit, CHECK_COMMAND, tmp_path) for commit in first_parents(repo))
    assert porcelain(repo) == ""
    # No send-back spent a retry: each was a conflict with work that landed after the branch left main.
    sends = {t: events(svc, t, "task.sent_back") for t in tasks}
    assert all(e.payload["kind"] == "conflict" and e.payload["spends"] is None for s in sends.values() for e in s)
    # The reruns ran one after another, each after the one before it landed: every task was sent back at most once
    # (N tasks on the same lines: at most N-1 send-backs in all), and no two reruns overlapped.
    assert all(len(s) <= 1 for s in sends.values()), {t: len(s) for t, s in sends.items()}
    assert sum(len(s) for s in sends.values()) <= 5
    spans = []
    for task_id, sent in sends.items():
        if not sent:
            continue
        moves = [e for e in events(svc, task_id) if e.id > sent[0].id and e.payload.get("to")]
        started = next(e.id for e in moves if e.payload["to"] == "IN_PROGRESS")
        landed = next(e.id for e in moves if e.payload["to"] == "COMPLETED")
        spans.append((started, landed))
    spans.sort()
    assert all(a[1] < b[0] for a, b in zip(spans, spans[1:], strict=False)), spans


async def test_conflict_send_backs_spend_no_retry_while_the_agent_resolves(svc: Services) -> None:
    """The person lands a line on the block during each of the task's first three runs: three conflicts, each with
    work that landed after its branch last took main in, each resolved by its agent. With merge_retries 2 it still
    lands, none of its send-backs spent; get_task says so, with the cap."""
    svc.agents.create("worker", "command", command=AGENT_COMMAND)
    task = svc.tasks.create("demo", "Mine", "LINE the task's line\nGATED", repo_id="app").id
    repo = checkout(svc)
    async with engine_running(make_engine(svc)):
        for run in (1, 2, 3):
            await release(svc, task, run, before=lambda run=run: person_adds(repo, f"person {run}"))
            await wait_for(lambda run=run: len(events(svc, task, "task.sent_back")) >= run
                           or status(svc, task) in FINAL, DEADLINE, f"send-back {run}")
            assert status(svc, task) not in FINAL, svc.tasks.get(task).reason
            counts = svc.tasks.get(task).send_backs
            assert counts is not None and (counts.check, counts.conflict, counts.free, counts.cap) == (0, 0, run, 2)
        await release(svc, task, 4)
        await wait_for(lambda: status(svc, task) in FINAL, DEADLINE, "the task to land")

    assert status(svc, task) == "COMPLETED", svc.tasks.get(task).reason
    sends = events(svc, task, "task.sent_back")
    assert [(e.payload["kind"], e.payload["spends"]) for e in sends] == [("conflict", None)] * 3
    assert len(results(svc, task)) == 4
    block = git(repo, "show", "main:shared.txt").splitlines()
    assert sorted(block[1:-1]) == ["person 1", "person 2", "person 3", "the task's line"]
    assert "spends none of the task's send-backs" in svc.feedback.comments(task)[-1].comment
    shown = svc.tasks.get(task).model_dump(mode="json")["send_backs"]
    assert shown == {"check": 0, "conflict": 0, "cap": 2, "free": 3, "free_cap": 10, "waits_for": []}


@pytest.mark.parametrize(("how", "kind"), [("LEAVE", "unresolved"), ("ABORT", "conflict")])
async def test_a_task_that_never_resolves_is_stopped_by_its_own_cap(svc: Services, how: str, kind: str) -> None:
    """Its agent leaves every conflict it is given as it found it (its markers stay in the work), or aborts the merge:
    the first conflict is free, then each send-back without a new resolution spends one of merge_retries (2); then it
    is BLOCKED, its reason naming that cap."""
    svc.agents.create("quitter", "command", command=AGENT_COMMAND)
    task = svc.tasks.create("demo", "Gives up", f"LINE the quitter's line\nGATED\n{how}", repo_id="app").id
    repo = checkout(svc)
    async with engine_running(make_engine(svc)):
        await release(svc, task, 1, before=lambda: person_adds(repo, "the person's line"))
        for run in (2, 3, 4):
            await release(svc, task, run)
        await wait_for(lambda: status(svc, task) in FINAL, DEADLINE, "the quitter to be held")

    held = svc.tasks.get(task)
    assert held.status == "BLOCKED"
    sends = events(svc, task, "task.sent_back")
    assert [(e.payload["kind"], e.payload["spends"], e.payload["attempt"], e.payload["cap"]) for e in sends] == [
        ("conflict", None, 1, 10), (kind, "conflict", 1, 2), (kind, "conflict", 2, 2)]
    assert len(results(svc, task)) == 4
    assert held.reason and "conflicts with 'main'" in held.reason and "shared.txt" in held.reason
    assert "no new resolution" in held.reason and "merge_retries" in held.reason
    assert held.next_step and "git merge" in held.next_step
    for commit in first_parents(repo):
        assert "<<<<<<<" not in git(repo, "show", f"{commit}:shared.txt")
    assert held.send_backs is not None and (held.send_backs.conflict, held.send_backs.cap) == (2, 2)
    assert git(repo, "show", "main:shared.txt").splitlines() == ["BEGIN", "the person's line", "END"]
    assert "Sent back 2 of 2 time(s) without a new resolution" in svc.feedback.comments(task)[-1].comment


async def test_a_check_failures_output_is_in_every_rerun_prompt_until_it_is_checked_again(svc: Services) -> None:
    """Its work fails the check; its rerun changes nothing that fixes it, and meanwhile the person lands a line on
    the block, so the next send-back is for a conflict (the check cannot run on conflicted work): that rerun's prompt
    still carries the check's output, beside the conflict. Then the check fails again and again: BLOCKED."""
    svc.agents.create("red", "command", command=AGENT_COMMAND)
    task = svc.tasks.create("demo", "Red", "LINE BAD red\nGATED", repo_id="app").id
    repo = checkout(svc)

    def prompt(n: int) -> str:
        return (worktree(svc, task) / ".prompts" / f"{n}.txt").read_text()

    def told_the_check(n: int) -> None:
        assert "BAD line found: BAD red" in prompt(n), (n, prompt(n)[-3000:])

    async with engine_running(make_engine(svc)):
        await release(svc, task, 1)
        await release(svc, task, 2, before=lambda: (told_the_check(2), person_adds(repo, "the person's line")))
        await release(svc, task, 3, before=lambda: told_the_check(3))  # sent back for the conflict this time
        await release(svc, task, 4, before=lambda: told_the_check(4))
        await wait_for(lambda: status(svc, task) in FINAL, DEADLINE, "the red task to be held")

    assert status(svc, task) == "BLOCKED"
    kinds = [(e.payload["kind"], e.payload["spends"]) for e in events(svc, task, "task.sent_back")]
    assert kinds == [("check", "check"), ("conflict", None), ("check", "check")]
    assert "BAD line found" not in prompt(1)
    assert "conflicts with 'main' in shared.txt" in prompt(3)
    assert "## The checks failed on your last checked work" in prompt(3)
    assert "## The checks failed on your last checked work" not in prompt(4)  # the send-back itself carries it
    assert "BAD" not in git(repo, "show", "main:shared.txt")


async def test_a_run_retried_for_its_failing_check_is_told_the_output(svc: Services) -> None:
    """A task held for approval runs its checks itself (no queue): a failing check fails the run, retried like any
    failure; the retry's prompt carries the check's output."""
    svc.agents.create("red", "command", command=AGENT_COMMAND)
    task = svc.tasks.create("demo", "Red, reviewed", "LINE BAD reviewed", repo_id="app", requires_approval=True,
                            max_retries=1).id
    await run_until_final(svc, make_engine(svc), task, timeout=DEADLINE)

    assert status(svc, task) == "BLOCKED"
    assert [r["error_type"] for r in results(svc, task)] == ["verify_failed"] * 2
    retried = (worktree(svc, task) / ".prompts" / "2.txt").read_text()
    assert "## The checks failed on your last checked work" in retried
    assert "BAD line found: BAD reviewed" in retried
    assert "BAD line found" not in (worktree(svc, task) / ".prompts" / "1.txt").read_text()
