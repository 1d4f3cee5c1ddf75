"""Batches in the merge queue (design.md "Batches"): real git, real subprocesses, `command` agents, no model.

The repo's check fails when a .txt file holds BROKEN. A dam task lands first, alone, and its check waits until the
tasks behind it are all in the queue, so they form one batch. A batch of five with one culprit lands the four and
sends the culprit back; a batch that passes lands in one first-parent commit; with batching off they land one by
one; a bad merge_batch is refused, changing nothing. Every first-parent commit on main passes the check.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from agentqueue import paths
from agentqueue.services import Services
from agentqueue.services.errors import InvalidInputError

from .conftest import db_snapshot, fail, ok
from .git_fixtures import commit_file, git, git_env, porcelain  # noqa: F401  (git_env: fixture)
from .test_engine_lifecycle import engine_running, events, make_engine, status, wait_for

pytestmark = pytest.mark.anyio

# Writes the task's `FILE <name>` with its `TEXT <text>` after `SLEEP <seconds>`; AgentQueue commits it. With
# `GATED` it first waits for a GO file in its worktree (ignored by git), which the test writes when its turn comes.
AGENT = r"""
import os, pathlib, re, sys, time
prompt = sys.stdin.read()
if re.search(r"^GATED$", prompt, re.M):
    deadline = time.time() + 300
    while not pathlib.Path("GO").exists() and time.time() < deadline:
        time.sleep(0.05)
pause = re.search(r"^SLEEP ([0-9.]+)$", prompt, re.M)
time.sleep(float(pause[1]) if pause else 0)
name = re.search(r"^FILE (\S+)$", prompt, re.M)[1]
text = re.search(r"^TEXT (.*)$", prompt, re.M)[1].replace("{cwd}", os.getcwd())
pathlib.Path(name).write_text(text + "\n")
print("wrote", name)
"""
AGENT_COMMAND = shlex.join([sys.executable, "-c", AGENT])
# The repo's check: no .txt file says BROKEN. In the dam's own worktree (its HOLD file names it) it first waits for
# a RELEASE file there (ignored by git): the test writes it once the other tasks wait in the queue.
CHECK = r"""
import os, pathlib, sys, time
hold, deadline = pathlib.Path("HOLD"), time.time() + 60
if hold.exists() and hold.read_text().strip() == os.getcwd():
    while not pathlib.Path("RELEASE").exists() and time.time() < deadline:
        time.sleep(0.05)
if pathlib.Path(".agentqueue.toml").exists() and not pathlib.Path(".deps").exists():
    sys.exit("no .deps: the setup did not run here")
for path in sorted(pathlib.Path(".").glob("*.txt")):
    if "BROKEN" in path.read_text():
        sys.exit(f"BROKEN found in {path}")
print("check passed")
"""


def setup_repo(svc: Services, merge_batch: int | None, agents: int) -> Path:
    """Project 'demo' whose check is the repo's check.py, an `init` repo 'app' batching `merge_batch`, agents."""
    svc.projects.create("Demo", max_concurrent_agents=agents, verify_command=shlex.join([sys.executable, "check.py"]))
    svc.projects.edit("demo", merge_retries=1)
    svc.repos.add("demo", "init", name="app", merge_batch=merge_batch)
    repo = Path(svc.repos.get("app").checkout_path)
    commit_file(repo, ".gitignore", "RELEASE\nGO\n", "the dam's release and the agents' gates are never committed")
    commit_file(repo, "check.py", CHECK, "the check")
    for n in range(agents):
        svc.agents.create(f"worker-{n}", "command", command=AGENT_COMMAND)
    return repo


async def land_behind_a_dam(svc: Services, texts: list[str], final: int,
                            names: dict[int, str] | None = None) -> tuple[str, list[str]]:
    """The dam task and one task per text (file `task-<n>.txt`); runs until `final` of them are final. The dam's
    check holds its landing until every other task waits in the queue. (the dam's id, the others' ids)"""
    dam = svc.tasks.create("demo", "Dam", "FILE HOLD\nTEXT {cwd}\nGATED", repo_id="app").id
    names = names or {}
    ids = [svc.tasks.create("demo", f"Task {n}", f"FILE {names.get(n, f'task-{n}.txt')}\nTEXT {text}\nGATED",
                            repo_id="app").id for n, text in enumerate(texts)]

    def entered() -> bool:
        return all(events(svc, t, "merge_queue.entered") for t in ids)

    async with engine_running(make_engine(svc)):
        # They enter the queue in order, the dam first: each agent goes on only once the one before it waits in the
        # queue (its gate), whatever the machine's load.
        for task_id in [dam, *ids]:
            await wait_for(lambda t=task_id: status(svc, t) == "IN_PROGRESS", 120, f"{task_id}'s run to start")
            (svc.home / "worktrees" / "app" / task_id / "GO").write_text("go")
            await wait_for(lambda t=task_id: events(svc, t, "merge_queue.entered"), 120, f"{task_id} to be queued")
        await wait_for(entered, 60, "the tasks to wait in the queue behind the dam")
        assert status(svc, dam) == "VERIFYING"  # still landing: its check waits
        (svc.home / "worktrees" / "app" / dam / "RELEASE").write_text("go")
        await wait_for(lambda: sum(status(svc, t) in ("COMPLETED", "BLOCKED", "FAILED", "AWAITING_APPROVAL")
                                   for t in [dam, *ids])
                       >= final, 120, "the tasks to land")
    return dam, ids


def first_parents(repo: Path) -> list[str]:
    """main's first-parent commits from the one that added the check."""
    start = git(repo, "log", "--format=%H", "--diff-filter=A", "main", "--", "check.py")
    return git(repo, "rev-list", "--first-parent", f"{start}^..main").split()


def check_passes(repo: Path, commit: str, tmp_path: Path) -> bool:
    """Run the repo's check on one commit, in a worktree of its own."""
    tree = tmp_path / f"at-{commit[:12]}"
    git(repo, "worktree", "add", "--quiet", "--detach", str(tree), commit)
    try:
        return subprocess.run([sys.executable, "check.py"], cwd=tree, capture_output=True).returncode == 0
    finally:
        git(repo, "worktree", "remove", "--force", str(tree))


def landed_sha(svc: Services, task_id: str) -> str | None:
    return svc.store.scalar("SELECT landed_sha FROM tasks WHERE id = ?", (task_id,))


def parents(repo: Path, commit: str) -> list[str]:
    return git(repo, "rev-list", "--parents", "-n1", commit).split()[1:]


@pytest.mark.slow
async def test_a_batch_of_five_with_one_culprit_lands_the_four_and_sends_back_the_culprit(
        services: Services, git_env: Path, tmp_path: Path) -> None:
    svc = services
    repo = setup_repo(svc, merge_batch=5, agents=6)
    texts = ["one", "two", "three", "BROKEN four", "five"]
    dam, ids = await land_behind_a_dam(svc, texts, final=6)
    culprit, good = ids[3], [t for n, t in enumerate(ids) if n != 3]

    assert [status(svc, t) for t in [dam, *good]] == ["COMPLETED"] * 5, [svc.tasks.get(t).reason for t in ids]
    for n in (0, 1, 2, 4):  # every line of the four is on main
        assert git(repo, "show", f"main:task-{n}.txt") == texts[n]
    assert "task-3.txt" not in git(repo, "ls-tree", "--name-only", "main").split()  # the culprit never landed
    # Every first-parent commit passes the check; each batch commit's first parent is main before it.
    chain = first_parents(repo)
    assert all(check_passes(repo, commit, tmp_path) for commit in chain)
    landed = {t: landed_sha(svc, t) for t in good}
    assert set(landed.values()) <= set(chain)
    for commit in set(landed.values()):
        assert parents(repo, commit)[0] == chain[chain.index(commit) + 1]
    # Each landed task says it landed in a batch, with the batch's commit; the batch held more than one task.
    for task_id in good:
        (event,) = events(svc, task_id, "merge_queue.batch_landed")
        assert event.payload["commit"] == landed[task_id] and task_id in event.payload["tasks"]
        assert event.payload["size"] == len([t for t in good if landed[t] == landed[task_id]])
    assert max(e.payload["size"] for t in good for e in events(svc, t, "merge_queue.batch_landed")) >= 2
    tested = events(svc, ids[0], "merge_queue.testing")
    assert tested and tested[0].payload["batch"] == 5 and sorted(tested[0].payload["tasks"]) == sorted(ids)
    leader = tested[0].payload["tasks"][0]  # the batch of five, in the order they entered the queue

    # The culprit was sent back to its agent with the check's output, then held once its retry was spent.
    sends = events(svc, culprit, "task.sent_back")
    assert [(e.payload["kind"], e.payload["attempt"]) for e in sends] == [("check", 1)]
    told = svc.feedback.comments(culprit)[0].comment
    assert "BROKEN found in task-3.txt" in told
    task = svc.tasks.get(culprit)
    assert task.status == "BLOCKED" and task.reason and "BROKEN found" in task.reason
    assert not events(svc, culprit, "merge_queue.batch_landed")
    assert porcelain(repo) == ""
    # The batch's worktree is kept for the next batch: detached, on no branch, holding nothing of its own.
    bench = svc.home / "worktrees" / "app" / ".batch"
    assert git(bench, "branch", "--show-current") == "" and porcelain(bench) == ""
    # Bisection stays within its bound: at most 2k-1 check runs for the batch of k = 5 (the leader's log has them).
    runs = paths.task_log(svc.home, leader).read_text().count("[verify] $")
    assert 2 <= runs <= 9


@pytest.mark.slow
async def test_a_batch_that_passes_lands_all_at_once_in_one_first_parent_commit(
        services: Services, git_env: Path, tmp_path: Path) -> None:
    svc = services
    repo = setup_repo(svc, merge_batch=8, agents=5)
    dam, ids = await land_behind_a_dam(svc, ["a", "b", "c", "d"], final=5)

    assert [status(svc, t) for t in [dam, *ids]] == ["COMPLETED"] * 5, [svc.tasks.get(t).reason for t in [dam, *ids]]
    batch = landed_sha(svc, ids[0])
    assert batch and {landed_sha(svc, t) for t in ids} == {batch}
    assert git(repo, "rev-parse", "main") == batch
    chain = first_parents(repo)
    dam_sha = landed_sha(svc, dam)
    assert chain[:2] == [batch, dam_sha]  # one first-parent commit for the four, right after the dam's
    # Its parents: main before it, then each task's tip, in queue order.
    assert parents(repo, batch)[0] == dam_sha and len(parents(repo, batch)) == 5
    assert all(check_passes(repo, commit, tmp_path) for commit in chain)
    for task_id in ids:
        (event,) = events(svc, task_id, "merge_queue.batch_landed")
        assert event.payload["size"] == 4 and event.payload["commit"] == batch
        completed = events(svc, task_id, "task.completed")
        assert completed and completed[-1].payload["note"] == "merged 1 file into main of app in a batch of 4"
    assert [git(repo, "show", f"main:task-{n}.txt") for n in range(4)] == ["a", "b", "c", "d"]
    assert git(repo, "branch", "--list", "*/task-*") == ""  # the landed branches are deleted, as one by one


@pytest.mark.slow
async def test_work_a_protected_path_rule_holds_is_never_batched(services: Services, git_env: Path) -> None:
    svc = services
    repo = setup_repo(svc, merge_batch=8, agents=4)
    dam, ids = await land_behind_a_dam(svc, ["a", "ci: yes", "c"], final=4, names={1: ".gitlab-ci.yml"})

    assert [status(svc, t) for t in [dam, ids[0], ids[2]]] == ["COMPLETED"] * 3
    assert status(svc, ids[1]) == "AWAITING_APPROVAL"  # checked on its own turn, then held for a person
    assert ".gitlab-ci.yml" not in git(repo, "ls-tree", "--name-only", "main").split()
    assert not events(svc, ids[1], "merge_queue.batch_landed")
    assert landed_sha(svc, ids[0]) == landed_sha(svc, ids[2]) == git(repo, "rev-parse", "main")  # a batch of two
    assert [e.payload["size"] for e in events(svc, ids[0], "merge_queue.batch_landed")] == [2]


@pytest.mark.slow
async def test_a_task_that_conflicts_while_combining_is_left_out_and_sent_back_on_its_turn(
        services: Services, git_env: Path) -> None:
    svc = services
    repo = setup_repo(svc, merge_batch=8, agents=4)
    dam, ids = await land_behind_a_dam(svc, ["first", "second", "third"], final=4,
                                       names={0: "same.txt", 1: "same.txt"})

    # Its rerun resolves the conflict by writing its own text over the landed "first": that waits for a person
    # (tests/security/test_resolution_reverts.py), who approves it here.
    assert [status(svc, t) for t in [dam, *ids]] == ["COMPLETED", "COMPLETED", "AWAITING_APPROVAL", "COMPLETED"], \
        [svc.tasks.get(t).reason for t in ids]
    assert "drops 1 line that landed on 'main'" in (svc.tasks.get(ids[1]).reason or "")
    await anyio.to_thread.run_sync(svc.tasks.approve, ids[1])
    batch = landed_sha(svc, ids[0])
    assert landed_sha(svc, ids[2]) == batch != landed_sha(svc, ids[1])  # the two that combine, in one commit
    assert [e.payload["size"] for e in events(svc, ids[2], "merge_queue.batch_landed")] == [2]
    assert not events(svc, ids[1], "merge_queue.batch_landed")
    # Left out, it took its own turn: the conflict went back to its agent, whose rerun is held, then approved.
    assert [e.payload["kind"] for e in events(svc, ids[1], "task.sent_back")] == ["conflict"]
    assert "left out of the batch: conflicts in same.txt" in paths.task_log(svc.home, ids[1]).read_text()
    assert git(repo, "show", "main:same.txt") == "second" and git(repo, "show", "main:task-2.txt") == "third"


@pytest.mark.slow
async def test_the_batch_worktree_is_set_up_as_a_tasks_is(services: Services, git_env: Path) -> None:
    """The repo's .agentqueue.toml setup (it makes the ignored .deps the check needs) runs in the batch worktree
    too, once for every batch after it."""
    svc = services
    repo = setup_repo(svc, merge_batch=8, agents=3)
    commit_file(repo, ".gitignore", "RELEASE\nGO\n.deps\n", "ignore what setup makes")
    commit_file(repo, ".agentqueue.toml", 'setup = "echo ok > .deps"\n', "the setup")
    dam, ids = await land_behind_a_dam(svc, ["a", "b"], final=3)

    assert [status(svc, t) for t in [dam, *ids]] == ["COMPLETED"] * 3, [svc.tasks.get(t).reason for t in ids]
    assert landed_sha(svc, ids[0]) == landed_sha(svc, ids[1]) == git(repo, "rev-parse", "main")
    leader = events(svc, ids[0], "merge_queue.testing")[0].payload["tasks"][0]
    assert "[setup] batch worktree: $ echo ok > .deps -> 0" in paths.task_log(svc.home, leader).read_text()
    assert (svc.home / "worktrees" / "app" / ".batch" / ".deps").read_text() == "ok\n"


@pytest.mark.slow
async def test_with_batching_off_tasks_land_one_by_one(services: Services, git_env: Path, tmp_path: Path) -> None:
    svc = services
    repo = setup_repo(svc, merge_batch=None, agents=4)
    dam, ids = await land_behind_a_dam(svc, ["x", "y", "z"], final=4)

    assert [status(svc, t) for t in [dam, *ids]] == ["COMPLETED"] * 4, [svc.tasks.get(t).reason for t in [dam, *ids]]
    shas = [landed_sha(svc, t) for t in ids]
    assert len(set(shas)) == 3  # three landings
    assert not any(events(svc, t, "merge_queue.batch_landed") for t in ids)
    assert all("batch" not in e.payload for t in ids for e in events(svc, t, "merge_queue.testing"))
    assert [git(repo, "show", f"main:task-{n}.txt") for n in range(3)] == ["x", "y", "z"]


@pytest.mark.parametrize("bad", [0, -1, 17, 2.5, True, "3"])
def test_a_bad_merge_batch_is_refused_and_changes_nothing(services: Services, bad: object) -> None:
    services.projects.create("Demo")
    before = services.store.scalar("SELECT count(*) FROM events")
    with pytest.raises(InvalidInputError) as refused:
        services.repos.add("demo", "init", name="app", merge_batch=bad)  # type: ignore[arg-type]
    message = str(refused.value)
    assert message.startswith("merge_batch must be a whole number from 1") and "16" in message
    assert message.count(". ") == 0  # one sentence
    assert services.repos.list("demo") == []
    assert not (Path(services.projects.get("demo").workspace) / "repos" / "app").exists()
    assert services.store.scalar("SELECT count(*) FROM events") == before
    # The good values are kept.
    assert services.repos.add("demo", "init", name="app", merge_batch=4).merge_batch == 4
    assert services.repos.add("demo", "init", name="solo").merge_batch is None


async def test_edit_repo_turns_batching_on_and_refuses_bad_values_changing_nothing(client, services: Services,
                                                                                   git_env: Path) -> None:
    """Through the MCP tools a person uses: add_repo, then edit_repo merge_batch."""
    services.projects.create("Demo")
    added = await ok(client, "add_repo", project_id="demo", source="init", name="app")
    assert added["merge_batch"] is None  # off by default
    for args, needles in [({"merge_batch": 0}, ["merge_batch must be a whole number from 1", "16"]),
                          ({"merge_batch": 17}, ["merge_batch must be a whole number from 1", "got '17'"]),
                          ({"merge_batch": -2}, ["merge_batch must be a whole number from 1"]),
                          ({"merge_batch": 2.5}, ["merge_batch", "integer"]),
                          ({"merge_batch": "lots"}, ["merge_batch", "integer"]),
                          ({}, ["Nothing to change", "merge_batch"]),
                          ({"update_method": "squash"}, ["update_method", "rebase"])]:
        before = db_snapshot(services)
        text = await fail(client, "edit_repo", repo_id="app", **args)
        assert all(needle in text for needle in needles), (args, text)
        assert db_snapshot(services) == before, args
    text = await fail(client, "edit_repo", repo_id="ghost", merge_batch=4)
    assert "'ghost' not found" in text
    assert (await ok(client, "edit_repo", repo_id="app", merge_batch=4))["merge_batch"] == 4
    assert (await ok(client, "list_repos", project_id="demo"))["repos"][0]["merge_batch"] == 4
    edited = await ok(client, "edit_repo", repo_id="app", update_method="rebase", merge_batch=1)
    assert (edited["update_method"], edited["merge_batch"]) == ("rebase", 1)  # 1: off again
