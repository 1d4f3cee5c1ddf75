"""request_changes: a reviewer's comment sends a task back; it reruns on its branch with the comment in its prompt.

Real git repos, the real engine with a `command` agent (AGENT below), the official MCP client. The agent
saves the prompt it gets on stdin as run-<n>.txt in a folder outside the worktree and writes
change-<n>.txt in its worktree, so each run leaves one commit and the test reads what each run was told.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from agentqueue.services import Services
from agentqueue.services.errors import ConflictError, InvalidInputError, NotFoundError
from agentqueue.services.feedback import MAX_COMMENT

from .conftest import db_snapshot, fail, ok
from .git_fixtures import commit_file, git, git_env, sha  # noqa: F401  (git_env: fixture)
from .processes import wait_for
from .test_engine_lifecycle import engine_running, events, make_engine
from .cli_helpers import let_agents_write
from .test_engine_pr_poll import gh_states  # noqa: F401  (fixture: a fake `gh` on PATH)

pytestmark = pytest.mark.anyio

AGENT = r"""
import pathlib, sys
prompt = sys.stdin.read()
dumps = pathlib.Path(sys.argv[1])
n = len(list(dumps.glob("run-*.txt"))) + 1
(dumps / f"run-{n}.txt").write_text(prompt)
pathlib.Path(f"change-{n}.txt").write_text(f"run {n}\n")
print(f"run {n} done", flush=True)
"""
DESCRIPTION = "Write the change files."


@pytest.fixture
def dumps(tmp_path: Path) -> Path:
    folder = tmp_path / "prompts"
    folder.mkdir()
    return folder


@pytest.fixture
def svc(services: Services, git_env: Path, dumps: Path) -> Services:
    """Project 'demo' with an `init` repo 'app' and one command agent that records its prompts in `dumps`."""
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("worker", "command", command=shlex.join([sys.executable, "-c", AGENT, str(dumps)]))
    let_agents_write(services, dumps)
    return services


def checkout(services: Services) -> Path:
    return Path(services.repos.get("app").checkout_path)


def status(services: Services, task_id: str) -> str:
    return services.tasks.get(task_id).status


def files_at(repo: Path, ref: str) -> set[str]:
    return set(git(repo, "ls-tree", "--name-only", ref).split())


async def test_changes_rerun_on_the_same_branch_with_the_comment_then_approve_merges_once(svc, client, dumps):
    repo = checkout(svc)
    task = await ok(client, "create_task", project_id="demo", title="Greeting", description=DESCRIPTION,
                    requires_approval=True)
    engine = make_engine(svc)
    async with engine_running(engine):
        await wait_for(lambda: status(svc, task["id"]) == "AWAITING_APPROVAL", 20, "the first run")
        branch = svc.tasks.get(task["id"]).branch
        first_commit = sha(repo, branch)
        assert "change-1.txt" in files_at(repo, branch) and "change-1.txt" not in files_at(repo, "main")
        assert "Changes requested" not in (dumps / "run-1.txt").read_text()

        result = await ok(client, "request_changes", task_id=task["id"], comment="Say hello in French too.",
                          file="change-1.txt", line=1)
        assert result["previous_status"] == "AWAITING_APPROVAL" and result["branch"] == branch
        assert result["branch_restarted"] is False and result["comments"] == 1
        assert f"on its branch '{branch}'" in result["message"]

        await wait_for(lambda: (dumps / "run-2.txt").exists() and status(svc, task["id"]) == "AWAITING_APPROVAL",
                       20, "the rerun")
    prompt = (dumps / "run-2.txt").read_text()
    assert "Changes requested by the reviewer" in prompt
    assert "on change-1.txt:1] Say hello in French too." in prompt
    assert prompt.index(DESCRIPTION) < prompt.index("Changes requested by the reviewer")
    # Same branch, first run's commit still on it, and the rerun's work on top.
    assert svc.tasks.get(task["id"]).branch == branch
    git(repo, "merge-base", "--is-ancestor", first_commit, branch)
    assert {"change-1.txt", "change-2.txt"} <= files_at(repo, branch)
    assert [c.author for c in svc.feedback.comments(task["id"])] == ["mcp"]
    requested = events(svc, task["id"], "task.changes_requested")
    assert len(requested) == 1 and requested[0].payload["file"] == "change-1.txt"

    head = sha(repo, branch)
    main_before = sha(repo, "main")
    done = await ok(client, "approve_task", task_id=task["id"])
    assert done["status"] == "COMPLETED"
    assert sha(repo, "main") == head  # a fast-forward to the branch: each run's commit lands once
    assert git(repo, "rev-list", "--count", f"{main_before}..main") == "2"
    assert len(events(svc, task["id"], "task.completed")) == 1


async def test_a_merged_task_starts_its_branch_again_from_the_current_default(svc, dumps):
    repo = checkout(svc)
    task = svc.tasks.create("demo", "Greeting", DESCRIPTION)
    async with engine_running(make_engine(svc)):
        await wait_for(lambda: status(svc, task.id) == "COMPLETED", 20, "the first run to land")
    branch = svc.tasks.get(task.id).branch
    landed = sha(repo, "main")
    # The branch is still there behind the default branch (as when git could not delete it), and the
    # user committed on main since: the rerun must start from main as it is now.
    git(repo, "branch", "-f", branch, landed)
    user_commit = commit_file(repo, "user.txt", "mine\n")
    svc.tasks.edit(task.id, requires_approval=True)  # so the rerun's branch can be looked at before it lands

    result = svc.feedback.request_changes(task.id, "Also write a second file.", author="board")
    assert result.previous_status == "COMPLETED" and result.status == "READY" and result.branch_restarted
    assert "merged already" in result.message
    row = svc.store.one("SELECT landed_sha, base_sha FROM tasks WHERE id = ?", (task.id,))
    assert row == {"landed_sha": None, "base_sha": None}

    async with engine_running(make_engine(svc)):  # a new daemon's engine (a stopped one stays stopped)
        await wait_for(lambda: status(svc, task.id) == "AWAITING_APPROVAL", 20, "the rerun")
    assert "Also write a second file." in (dumps / "run-2.txt").read_text()
    git(repo, "merge-base", "--is-ancestor", user_commit, branch)  # restarted from the current main
    diff = svc.vcs.task_diff(svc.tasks.get(task.id))
    assert diff["files_changed"] == ["change-2.txt"]  # only the new work, not the landed run again
    svc.tasks.approve(task.id)
    assert {"change-1.txt", "change-2.txt", "user.txt"} <= files_at(repo, "main")
    assert [c.author for c in svc.feedback.comments(task.id)] == ["board"]


async def test_refusals_change_nothing(svc, client):
    ready = await ok(client, "create_task", project_id="demo", title="Queued", description="d")
    stopped = await ok(client, "create_task", project_id="demo", title="Stopped", description="d")
    await ok(client, "stop_task", task_id=stopped["id"])
    running = await ok(client, "create_task", project_id="demo", title="Running", description="d")
    await ok(client, "set_task_status", task_id=running["id"], status="IN_PROGRESS")
    before = db_snapshot(svc)

    assert "not found" in await fail(client, "request_changes", task_id="no-such-task", comment="x")
    assert "comment is empty" in await fail(client, "request_changes", task_id=stopped["id"], comment="  \n ")
    assert "line needs a file" in await fail(client, "request_changes", task_id=stopped["id"], comment="x", line=3)
    assert "file is empty" in await fail(client, "request_changes", task_id=stopped["id"], comment="x", file=" ")
    await fail(client, "request_changes", task_id=stopped["id"], comment="x" * (MAX_COMMENT + 1))
    await fail(client, "request_changes", task_id=stopped["id"], comment="x", file="a.py", line=0)
    await fail(client, "request_changes", task_id=stopped["id"], comment="a\0b")
    text = await fail(client, "request_changes", task_id=running["id"], comment="x")
    assert "IN_PROGRESS" in text and f"stop_task {running['id']} first" in text
    text = await fail(client, "request_changes", task_id=ready["id"], comment="x")
    assert "READY" in text and "edit_task" in text
    assert db_snapshot(svc) == before

    # The same checks in the service the board calls (a comment over the limit past the schema too).
    feedback = svc.feedback
    with pytest.raises(NotFoundError):
        feedback.request_changes("no-such-task", "x", author="board")
    with pytest.raises(InvalidInputError, match="limit is"):
        feedback.request_changes(stopped["id"], "x" * (MAX_COMMENT + 1), author="board")
    with pytest.raises(InvalidInputError, match="author"):
        feedback.request_changes(stopped["id"], "x", author="someone")  # type: ignore[arg-type]
    with pytest.raises(ConflictError, match="stop_task"):
        feedback.request_changes(running["id"], "x", author="board")
    assert db_snapshot(svc) == before

    # A stopped (BLOCKED) task may be sent back: it is queued again.
    result = await ok(client, "request_changes", task_id=stopped["id"], comment="Try again, smaller.")
    assert result["previous_status"] == "BLOCKED" and result["status"] == "READY"


async def test_the_rerun_updates_an_open_pr_and_a_merged_pr_gets_a_new_one(services, git_env, dumps, tmp_path,
                                                                           gh_states):
    seed = tmp_path / "seed"
    seed.mkdir()
    git(seed, "init", "-q", "-b", "main")
    git(seed, "commit", "-q", "--allow-empty", "-m", "init")
    git(tmp_path, "clone", "-q", "--bare", str(seed), "origin.git")
    origin = tmp_path / "origin.git"
    services.projects.create("Demo")
    services.repos.add("demo", "clone", url=str(origin), name="app")
    services.agents.create("worker", "command", command=shlex.join([sys.executable, "-c", AGENT, str(dumps)]))
    let_agents_write(services, dumps)
    task = services.tasks.create("demo", "Greeting", DESCRIPTION, requires_approval=True)
    prs = lambda: [e.payload["pr_url"] for e in events(services, task.id, "pr.created")]  # noqa: E731

    async with engine_running(make_engine(services)):
        await wait_for(lambda: status(services, task.id) == "AWAITING_APPROVAL", 20, "the first run")
    url = services.tasks.get(task.id).pr_url
    assert url and prs() == [url]
    services.feedback.request_changes(task.id, "Open PR: add a second file.", author="board")
    assert services.tasks.get(task.id).pr_url == url  # still under review
    async with engine_running(make_engine(services)):
        await wait_for(lambda: (dumps / "run-2.txt").exists() and status(services, task.id) == "AWAITING_APPROVAL",
                       20, "the rerun")
    branch = services.tasks.get(task.id).branch
    assert services.tasks.get(task.id).pr_url == url and prs() == [url]  # pushed to, not opened again
    assert "change-2.txt" in set(git(tmp_path, "--git-dir", str(origin), "ls-tree", "--name-only", branch).split())

    # GitHub squash-merged it: the rerun starts the branch again from that main and opens a new PR.
    merger = tmp_path / "merger"
    git(tmp_path, "clone", "-q", str(origin), str(merger))
    git(merger, "merge", "-q", "--squash", f"origin/{branch}")
    git(merger, "commit", "-q", "-m", "Greeting (#1)")
    git(merger, "push", "-q", "origin", "main")
    squashed = sha(merger, "HEAD")
    gh_states.write_text(json.dumps({url: {"state": "MERGED", "mergedAt": "2026-11-23T00:00:00Z"}}))
    async with engine_running(make_engine(services)):  # its first tick asks gh about the PR
        await wait_for(lambda: status(services, task.id) == "COMPLETED", 20, "the PR to be seen merged")
    result = services.feedback.request_changes(task.id, "Merged PR: one more file.", author="board")
    assert result.branch_restarted and services.tasks.get(task.id).pr_url is None
    async with engine_running(make_engine(services)):
        await wait_for(lambda: (dumps / "run-3.txt").exists() and status(services, task.id) == "AWAITING_APPROVAL",
                       20, "the third run")
    assert len(prs()) == 2 and services.tasks.get(task.id).pr_url == prs()[-1]
    rerun = services.tasks.get(task.id).branch
    assert rerun == f"{branch}-2"  # the merged PR's head is not rewritten
    repo = checkout(services)
    git(repo, "merge-base", "--is-ancestor", squashed, rerun)  # on main as GitHub left it
    assert git(repo, "rev-list", "--count", f"{squashed}..{rerun}") == "1"  # only the third run's commit
    assert "Merged PR: one more file." in (dumps / "run-3.txt").read_text()
