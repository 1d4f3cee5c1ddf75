"""Issue 8 items 3, 5 and 6 through the real engine: `command` agents, real git repos, the MCP tools.

- a task created without repo_id runs in its project's repo (also when the repo came after the task);
- a run that changes nothing in its repo completes with a warning, listed by get_status;
- a merge git refuses over the user's uncommitted edits says why and what to do, everywhere;
- the daemon log has one INFO line per status change, and one per run start and end.
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import Client

from agentqueue import logs
from agentqueue.server.app import build_server
from agentqueue.services import Services

from .conftest import ok
from .git_fixtures import git, git_env, make_repo, porcelain  # noqa: F401  (git_env: fixture)
from .test_engine_lifecycle import AGENT_COMMAND, FINAL, engine_running, make_engine, run_until_final, show, status
from .processes import wait_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def linked(services: Services, git_env: Path, tmp_path: Path) -> Path:
    """Project 'demo' with ONE repo, the user's own checkout `mine` linked in place, and a command agent."""
    mine = make_repo(tmp_path / "mine", files={"README.md": "# mine\n", "app.py": "print('v1')\n"})
    services.projects.create("Demo")
    services.repos.add("demo", "link", path=str(mine), name="mine")
    services.agents.create("worker", "command", command=AGENT_COMMAND)
    return mine


async def test_a_task_without_repo_id_lands_in_the_projects_only_repo(services: Services, linked: Path) -> None:
    """The newcomer's path: one linked repo, a task that names none; it used to run in the empty workspace."""
    async with Client(build_server(services)) as client:
        task = await ok(client, "create_task", project_id="demo", title="Say hello",
                        description="WRITE hello.txt hello from the queue")
    assert task["repo_id"] == "mine"
    await run_until_final(services, make_engine(services), task["id"])
    assert status(services, task["id"]) == "COMPLETED"
    assert show(linked, "main", "hello.txt") == "hello from the queue"  # in the repo's history
    assert (linked / "hello.txt").read_text() == "hello from the queue\n"  # and the user's checkout
    assert git(linked, "log", "-1", "--format=%s", "main").startswith("Say hello")
    assert not (Path(services.projects.get("demo").workspace) / "hello.txt").exists()
    _, result = services.tasks.results(task["id"])
    assert result is not None and result.files_changed == ["hello.txt"] and result.warning is None


async def test_a_task_made_before_its_repo_is_resolved_when_claimed(services: Services, git_env: Path,
                                                                    tmp_path: Path) -> None:
    services.agents.create("worker", "command", command=AGENT_COMMAND)
    services.projects.create("Later")
    early = services.tasks.create("later", "Early", "WRITE early.txt early")
    services.projects.create("Split")
    torn = services.tasks.create("split", "Torn", "WRITE torn.txt torn")
    assert early.repo_id is None and torn.repo_id is None  # no repo yet: the workspace, if it ran now
    services.system.set_orchestrator("paused")
    later = services.repos.add("later", "init", name="later-app")
    services.repos.add("split", "init", name="one")
    services.repos.add("split", "init", name="two")
    services.system.set_orchestrator("running")

    await run_until_final(services, make_engine(services), early.id, torn.id)
    assert status(services, early.id) == "COMPLETED"
    assert services.tasks.get(early.id).repo_id == "later-app"
    assert show(Path(later.checkout_path), "main", "early.txt") == "early"

    held = services.tasks.get(torn.id)
    assert held.status == "BLOCKED" and held.repo_id is None
    assert "several repos (one, two) and no default" in held.reason
    assert f"edit_task {torn.id} repo_id=" in held.next_step and "default_repo_id" in held.next_step
    assert services.tasks.results(torn.id) == (0, None)  # no agent ran
    assert services.agents.get("worker").state == "IDLE"


async def test_a_run_that_changes_nothing_completes_with_a_warning(services: Services, linked: Path) -> None:
    idle = services.tasks.create("demo", "Fix the bug", "SAY nothing to fix here")
    busy = services.tasks.create("demo", "Add notes", "WRITE notes.txt notes")
    await run_until_final(services, make_engine(services), idle.id, busy.id)

    assert status(services, idle.id) == status(services, busy.id) == "COMPLETED"
    _, result = services.tasks.results(idle.id)
    assert result is not None and result.files_changed == []
    assert result.warning == "The agent finished without changing any file in repo 'mine'."
    assert services.tasks.results(busy.id)[1].warning is None
    async with Client(build_server(services)) as client:
        info = await ok(client, "get_task_result", task_id=idle.id)
        assert info["result"]["warning"] == result.warning
        warnings = (await ok(client, "get_status"))["warnings"]
    assert (f"Task {idle.id} completed with no change in repo mine: read its log; restart_task to run it again."
            in warnings)
    assert not any(busy.id in w for w in warnings)


async def test_a_merge_refused_for_uncommitted_changes_says_why_and_what_to_do(services: Services,
                                                                               linked: Path) -> None:
    (linked / "app.py").write_text("print('my edit, not committed')\n")  # the user is editing the same file
    task = services.tasks.create("demo", "Bump version", "WRITE app.py print('v2')")
    await run_until_final(services, make_engine(services), task.id)

    assert status(services, task.id) == "BLOCKED"
    assert (linked / "app.py").read_text() == "print('my edit, not committed')\n"  # nothing of theirs lost
    assert show(linked, "main", "app.py") == "print('v1')"
    async with Client(build_server(services)) as client:
        held = await ok(client, "get_task", task_id=task.id)
        assert "uncommitted changes to app.py" in held["reason"]
        assert str(linked) in held["reason"] and held["branch"] in held["reason"]
        assert "Commit or stash" in held["next_step"] and f"restart_task {task.id}" in held["next_step"]

        error = await ok(client, "get_agent_error", task_id=task.id)
        assert error["status"] == "BLOCKED" and error["error_type"] == "Merge failed"
        assert error["error_message"] == held["reason"] and error["suggested_fix"] == held["next_step"]
        assert "succeeded" not in str(error.get("message"))  # it used to say "The last run succeeded"

        warnings = (await ok(client, "get_status"))["warnings"]
        line = next(w for w in warnings if w.startswith(f"Task {task.id} "))
        assert "is BLOCKED" in line and held["reason"] in line and held["next_step"] in line

        # The next step works: stash the edit, restart the task, and its work lands.
        git(linked, "stash")
        await ok(client, "restart_task", task_id=task.id)
    async with engine_running(make_engine(services)):
        await wait_for(lambda: status(services, task.id) in FINAL, what="the restarted run")
    done = services.tasks.get(task.id)
    assert done.status == "COMPLETED" and done.reason is None and done.next_step is None
    assert show(linked, "main", "app.py") == "print('v2')" and porcelain(linked) == ""


async def test_a_repo_gone_from_disk_blocks_the_task_instead_of_leaving_it_assigned(services: Services,
                                                                                       linked: Path) -> None:
    task = services.tasks.create("demo", "Write it", "WRITE it.txt it")
    shutil.rmtree(linked)  # the user moved or deleted their checkout
    await run_until_final(services, make_engine(services), task.id)
    held = services.tasks.get(task.id)
    assert held.status == "BLOCKED" and held.assigned_agent is None
    assert "worktree could not be made" in held.reason and str(linked) in held.reason
    assert f"restart_task {task.id}" in held.next_step
    assert services.agents.get("worker").state == "IDLE"


@pytest.fixture
def daemon_log(services: Services) -> Iterator[Path]:
    """Logging set up as the daemon sets it up (agentqueue.logs.configure), undone afterwards."""
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    path = logs.configure(services.home, "agentqueue")
    yield path
    for handler in list(root.handlers):
        root.removeHandler(handler)
        if handler not in saved[0]:
            handler.close()
    for handler in saved[0]:
        root.addHandler(handler)
    root.setLevel(saved[1])


async def test_the_daemon_log_tells_the_life_of_each_task(services: Services, linked: Path,
                                                          daemon_log: Path) -> None:
    good = services.tasks.create("demo", "Write it", "WRITE it.txt it")
    bad = services.tasks.create("demo", "Break it", "EXIT 3", max_retries=0)
    await run_until_final(services, make_engine(services), good.id, bad.id)
    for handler in logging.getLogger().handlers:
        handler.flush()
    text = daemon_log.read_text()

    def line(pattern: str) -> str:
        found = re.search(r"^.* INFO agentqueue\.\w+ .*" + pattern + ".*$", text, re.M)
        assert found, f"no INFO line matching {pattern!r} in:\n{text}"
        return found.group(0)

    g, b = re.escape(good.id), re.escape(bad.id)
    line(rf"task {g} READY → ASSIGNED \(claimed by worker\)")
    line(rf"task {g} ASSIGNED → IN_PROGRESS \(on branch {g}/write-it\)")
    line(rf"run of {g} started: agent worker \(command\) in \S+ on branch {g}/write-it")
    line(rf"run of {g} ended: completed after [0-9.]+ s, 0 tokens")
    line(rf"task {g} VERIFYING → COMPLETED \(merged 1 file into main of mine\)")
    line(rf"run of {b} ended: failed \(crashed\) after")
    line(rf"task {b} IN_PROGRESS → FAILED \(crashed: The run failed \(Agent crashed\): command exited with status 3")
    blocked = line(rf"task {b} FAILED → BLOCKED \(max_retries: ")
    assert "It failed 1 time and has no retries left (max_retries=0)" in blocked
    assert services.tasks.get(bad.id).reason in blocked
    assert "Traceback" not in text


async def test_a_project_whose_add_repo_failed_warns_everywhere_its_tasks_run_in_a_scratch_folder(
        services: Services, tmp_path: Path) -> None:
    """Issue 23: the model's add_repo failed and its next create_task ran anyway, in the project's scratch folder;
    it ended COMPLETED, "files changed none", and the file sat where nobody would look. Decision: such a task still
    runs (a project without a repo is how non-code work runs), and says where, everywhere a person or model looks."""
    services.projects.create("Demo")
    services.agents.create("worker", "command", command=AGENT_COMMAND)
    async with Client(build_server(services)) as client:
        failed = await client.call_tool("add_repo", {"project_id": "demo", "source": "link",
                                                     "path": str(tmp_path / "no-such-checkout")})
        assert failed.is_error
        task = await ok(client, "create_task", project_id="demo", title="Fix the bug",
                        description="WRITE fix.py print('fixed')")
        workspace = services.projects.get("demo").workspace
        assert task["repo_id"] is None and "has no repo" in task["warning"] and workspace in task["warning"]
        assert "add_repo" in task["warning"]
        await run_until_final(services, make_engine(services), task["id"])
        assert status(services, task["id"]) == "COMPLETED"
        assert (Path(workspace) / "fix.py").exists()  # where the warning says it is
        result = (await ok(client, "get_task_result", task_id=task["id"]))["result"]
        assert result["warning"] == task["warning"]
        warnings = (await ok(client, "get_status"))["warnings"]
        assert any(w.startswith(f"Task {task['id']} completed in its project's scratch folder") for w in warnings)

    from .cli_helpers import cli_env, cli_in_process
    shown = cli_in_process(cli_env(services.home, tmp_path / "user"), "show", task["id"], width=200)
    assert shown.returncode == 0 and shown.stdout.count("has no repo") == 1 and workspace in shown.stdout

    # Acted on: once the project has a repo, its tasks no longer say it has none.
    services.repos.add("demo", "link", path=str(make_repo(tmp_path / "mine")), name="mine")
    assert services.tasks.get(task["id"]).warning is None
