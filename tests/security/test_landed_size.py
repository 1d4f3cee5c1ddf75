"""L6: no cap on what a run lands.

The attacker is the agent: it commits an 11 MiB file (over the default 10 MiB a file may add), a 2 MiB binary
(over the 1 MiB a binary may), or, with `[engine] land_max_total` / `land_max_files` set lower in config.toml
(applied as a reload applies it), more bytes or files in all than allowed. Before the fix each landed; now the
task waits for a person with a reason naming the files and sizes, nothing reaches main, and approve_task lands it.
Both the fast path (no checks) and the merge queue (a verify command).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import anyio
import pytest

from agentqueue import settings
from agentqueue.services import Services

from ..git_fixtures import commit_file, git, git_env  # noqa: F401  (git_env: fixture)
from ..test_engine_lifecycle import make_engine, run_until_final, show

pytestmark = pytest.mark.anyio

# `BIG <path> <MiB>`: that much text; `BINARY <path> <MiB>`: that many random bytes; `MANY <n>`: n small files.
AGENT = r"""
import os, pathlib, re, sys
prompt = sys.stdin.read()
for name, mib in re.findall(r"^BIG (\S+) ([0-9.]+)$", prompt, re.M):
    pathlib.Path(name).write_text(("x" * 1023 + "\n") * int(float(mib) * 1024))
for name, mib in re.findall(r"^BINARY (\S+) ([0-9.]+)$", prompt, re.M):
    pathlib.Path(name).write_bytes(b"\0" + os.urandom(int(float(mib) * 1024 * 1024)))
for count in re.findall(r"^MANY ([0-9]+)$", prompt, re.M):
    pathlib.Path("many").mkdir(exist_ok=True)
    for n in range(int(count)):
        pathlib.Path(f"many/{n}.txt").write_text(f"{n}\n")
pathlib.Path("notes.txt").write_text("the ordinary part\n")
print("agent done", flush=True)
"""

CASES = {  # id -> (the task's description, config.toml's [engine] lines, what the reason must say)
    "big-file": ("BIG dump.log 11", "", ["dump.log is 11.0 MiB", "10.0 MiB"]),
    "binary": ("BINARY blob.bin 2", "", ["blob.bin is a binary of 2.0 MiB", "1.0 MiB"]),
    "total": ("BIG a.log 0.75\nBIG b.log 0.75", 'land_max_total = "1MiB"', ["1.5 MiB in all", "at most 1.0 MiB"]),
    "files": ("MANY 30", "land_max_files = 20", ["31 files", "at most 20"]),
}


@pytest.mark.parametrize("checked", [False, True], ids=["fast-path", "merge-queue"])
@pytest.mark.parametrize("case", list(CASES))
async def test_a_landing_too_large_waits_for_a_person(services: Services, case: str, checked: bool) -> None:
    described, config, said = CASES[case]
    services.projects.create("Demo", verify_command="test -f notes.txt" if checked else None)
    services.repos.add("demo", "init", name="app")
    repo = Path(services.repos.get("app").checkout_path)
    commit_file(repo, "README.md", "app\n", "start")
    before = git(repo, "rev-parse", "main")
    services.agents.create("worker", "command", command=shlex.join([sys.executable, "-c", AGENT]))
    task = services.tasks.create("demo", "Dump", described, repo_id="app")
    engine = make_engine(services)
    if config:  # the person's config.toml, applied as a reload does
        (services.home / "config.toml").write_text(f"[engine]\n{config}\n")
        engine.apply_settings(settings.load(services.home))
    await run_until_final(services, engine, task.id, timeout=120)

    held = services.tasks.get(task.id)
    assert held.status == "AWAITING_APPROVAL", (held.status, held.reason)
    assert git(repo, "rev-parse", "main") == before  # nothing landed
    assert show(repo, held.branch, "notes.txt") == "the ordinary part"  # the work is kept on its branch
    assert held.reason is not None and all(s in held.reason for s in said), held.reason
    assert "land_max_" in held.reason  # says which setting sets the limit
    assert "[size] It is large" in engine.log_path(task.id).read_text()

    approved = await anyio.to_thread.run_sync(services.tasks.approve, task.id)  # the person says it may land
    assert approved.status == "COMPLETED" and show(repo, "main", "notes.txt") == "the ordinary part"
