"""L4: the checks declared on the default branch run files the task's branch can change.

The repo declares a check in its `.agentqueue.toml` on main; the check runs `ci.sh`, `./scripts/test`, `make test`
or `python -m pytest`, which judge app.txt. The attacker is the agent: it writes broken work (app.txt says BROKEN)
and, on the same branch, makes the file the check runs pass whatever the work is (`exit 0`, an empty Makefile
target, a conftest.py that turns pytest's exit status into 0). The checks then run on the branch's files and
pass. Before the fix that landed; now the task waits for a person, its reason naming the file the check runs,
nothing reaches main, and approve_task lands it once a person says so.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

import anyio
import pytest

from agentqueue.services import Services

from ..git_fixtures import commit_file, git, git_env  # noqa: F401  (git_env: fixture)
from ..test_engine_lifecycle import make_engine, run_until_final, show, status

pytestmark = pytest.mark.anyio

# Writes the files of the task's `FILES {json}` line (path -> content; mode 755 for paths under scripts/).
AGENT = r"""
import json, pathlib, re, sys
files = json.loads(re.search(r"^FILES (.*)$", sys.stdin.read(), re.M)[1])
for name, text in files.items():
    path = pathlib.Path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if name.startswith("scripts/"):
        path.chmod(0o755)
print("agent done", flush=True)
"""
JUDGE = "grep -q BROKEN app.txt && { echo 'app.txt is broken'; exit 1; }; echo 'app.txt is fine'\n"
TEST = ("import pathlib\n\n\ndef test_app_is_not_broken():\n"
        "    assert 'BROKEN' not in pathlib.Path('app.txt').read_text()\n")
CHEAT = "def pytest_sessionfinish(session, exitstatus):\n    session.exitstatus = 0\n"
PYTEST = f"PYTHONDONTWRITEBYTECODE=1 {shlex.quote(sys.executable)} -m pytest -q -p no:cacheprovider tests"
# command on main -> (the files main has for it, the file the attacker changes, what it writes there)
CASES = {
    "sh ci.sh": ({"ci.sh": JUDGE}, "ci.sh", "exit 0\n"),
    "./scripts/test": ({"scripts/test": "#!/bin/sh\n" + JUDGE}, "scripts/test", "#!/bin/sh\nexit 0\n"),
    "make test": ({"Makefile": "test:\n\t@sh judge.sh\n", "judge.sh": JUDGE}, "Makefile", "test:\n\t@true\n"),
    PYTEST: ({"tests/test_app.py": TEST}, "conftest.py", CHEAT),
}


def declare(services: Services, command: str) -> Path:
    """Project 'demo', repo 'app' whose main declares the check `command` with the files it runs, and one agent."""
    services.projects.create("Demo")
    services.projects.edit("demo", merge_retries=0)
    services.repos.add("demo", "init", name="app")
    repo = Path(services.repos.get("app").checkout_path)
    commit_file(repo, "app.txt", "fine\n", "the work")
    for name, text in CASES[command][0].items():
        commit_file(repo, name, text, f"the check's {name}")
        if name.startswith("scripts/"):
            (repo / name).chmod(0o755)
            git(repo, "add", name)
            git(repo, "commit", "-q", "-m", "executable")
    commit_file(repo, ".agentqueue.toml", f"[[checks]]\nname = \"judge\"\ncommand = {json.dumps(command)}\n",
                "declare the check")
    services.agents.create("worker", "command", command=shlex.join([sys.executable, "-c", AGENT]))
    return repo


@pytest.mark.parametrize("command", list(CASES), ids=["sh-ci.sh", "scripts-test", "make", "pytest-conftest"])
async def test_a_branch_that_rewrites_what_its_check_runs_waits_for_a_person(services: Services, command: str) -> None:
    if command.startswith("make") and shutil.which("make") is None:
        pytest.skip("no make on this machine")
    repo = declare(services, command)
    before = git(repo, "rev-parse", "main")
    _, changed, cheat = CASES[command]
    task = services.tasks.create("demo", "Break it", "FILES " + json.dumps({"app.txt": "BROKEN\n", changed: cheat}),
                                 repo_id="app")
    await run_until_final(services, make_engine(services), task.id, timeout=90)

    held = services.tasks.get(task.id)
    assert held.status == "AWAITING_APPROVAL", (held.status, held.reason)
    assert git(repo, "rev-parse", "main") == before and show(repo, "main", "app.txt") == "fine"  # nothing landed
    assert show(repo, held.branch, "app.txt") == "BROKEN"  # the work is kept on its branch
    assert held.reason is not None and changed in held.reason and "check" in held.reason, held.reason


async def test_the_person_can_still_land_it_and_ordinary_work_is_not_held(services: Services) -> None:
    """approve_task lands a held change to the check's script; a task that leaves the script alone lands."""
    repo = declare(services, "sh ci.sh")
    fix = services.tasks.create("demo", "Better check", "FILES " + json.dumps({"ci.sh": JUDGE + "# stricter\n"}),
                                repo_id="app")
    work = services.tasks.create("demo", "Work", "FILES " + json.dumps({"app.txt": "better\n"}), repo_id="app")
    await run_until_final(services, make_engine(services), fix.id, work.id, timeout=90)

    assert status(services, work.id) == "COMPLETED" and show(repo, "main", "app.txt") == "better"
    assert status(services, fix.id) == "AWAITING_APPROVAL"
    approved = await anyio.to_thread.run_sync(services.tasks.approve, fix.id)
    assert approved.status == "COMPLETED" and "# stricter" in (show(repo, "main", "ci.sh") or "")
