"""Issue 35: folders that tools generate never land unasked. An agent (a real `command` agent run by the real engine
in the sandbox) leaves a virtualenv or node_modules in a repository whose .gitignore does not list them: the daemon's
commit of its leftovers leaves them out and says so; when the agent commits them itself, the landing waits for a
person, naming them. A build output the repository already tracks lands as any change."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from agentqueue.services import Services

from .git_fixtures import commit_file, git, git_env  # noqa: F401  (git_env: fixture)
from .test_engine_lifecycle import checkout, make_engine, run_until_final, show, svc  # noqa: F401  (svc: fixture)

pytestmark = pytest.mark.anyio

# A virtualenv as `python -m venv` leaves it (pyvenv.cfg, bin/, a site-packages with files), without running one.
VENV = ("mkdir -p {d}/bin {d}/lib/python3/site-packages/pkg && printf 'home = /usr/bin\\n' > {d}/pyvenv.cfg"
        " && for i in 1 2 3 4 5; do echo x > {d}/lib/python3/site-packages/pkg/m$i.py; done"
        " && echo '#!/bin/sh' > {d}/bin/python")
NODE_MODULES = "mkdir -p node_modules/left-pad && echo 'module.exports = 1' > node_modules/left-pad/index.js"


async def run(services: Services, script: str, **fields: object) -> str:
    services.agents.delete("worker")
    services.agents.create("agent", "command", command=shlex.join(["/bin/sh", "-c", script]))
    task = services.tasks.create("demo", "Work", "do the work", repo_id="app", **fields)  # type: ignore[arg-type]
    await run_until_final(services, make_engine(services), task.id, timeout=60)
    return task.id


def tracked(repo: Path, ref: str = "main") -> list[str]:
    return git(repo, "ls-tree", "-r", "--name-only", ref).split()


def log_of(services: Services, task_id: str) -> str:
    return (services.home / "logs" / "tasks" / f"{task_id}.log").read_text()


@pytest.mark.parametrize("folder", [".venv", "env"])
async def test_a_virtualenv_the_agent_left_is_not_committed_and_the_log_says_so(svc: Services, folder: str) -> None:
    task_id = await run(svc, VENV.format(d=folder) + f" && {NODE_MODULES} && echo done > work.txt")
    assert svc.tasks.get(task_id).status == "COMPLETED", svc.tasks.get(task_id).reason
    files = tracked(checkout(svc))
    assert "work.txt" in files, files
    assert not [f for f in files if f.startswith((f"{folder}/", "node_modules/"))], files
    said = log_of(svc, task_id)
    assert "[engine] not committed: " in said and f"{folder}/" in said and "node_modules/" in said, said
    assert not (svc.home / "worktrees" / "app" / task_id).exists(), "the landed worktree was kept"


async def test_generated_folders_the_agent_commits_itself_wait_for_a_person(svc: Services) -> None:
    script = (f"{VENV.format(d='.venv')} && {NODE_MODULES} && echo done > work.txt && git add -A"
              " && git -c user.name=A -c user.email=a@x commit -q -m 'work, and everything else'")
    task_id = await run(svc, script)
    task = svc.tasks.get(task_id)
    assert task.status == "AWAITING_APPROVAL", (task.status, task.reason)
    assert "folders that tools generate" in (task.reason or "") and ".venv/ (" in (task.reason or "") \
        and "node_modules/ (1 file)" in (task.reason or ""), task.reason
    assert "work.txt" not in tracked(checkout(svc)), "it landed without the person"


async def test_a_build_folder_the_repository_tracks_lands_as_any_change(svc: Services) -> None:
    commit_file(checkout(svc), "dist/index.js", "old\n", "the action's built file")
    script = ("mkdir -p dist && echo new > dist/index.js && echo more > dist/extra.js && git add -A"
              " && git -c user.name=A -c user.email=a@x commit -q -m 'rebuild'")
    task_id = await run(svc, script)
    assert svc.tasks.get(task_id).status == "COMPLETED", svc.tasks.get(task_id).reason
    assert show(checkout(svc), "main", "dist/extra.js") == "more"
