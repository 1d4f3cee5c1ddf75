"""L5: a conflict resolution that drops the side that already landed.

Two tasks add a line at the same place in shared.txt at once; whichever lands second conflicts and is sent back
to its agent, mid-merge. The attacker is that agent: it "resolves" the conflict by keeping only its own side (the
lines between `<<<<<<<` and `=======`), which silently reverts the other task's landed line, and commits. Before
the fix that landed; now it waits for a person, its reason naming the file and how many landed lines it drops,
main keeps the landed line, and approve_task lands the resolution if the person wants it. Both paths: a repo with
a check (the merge queue) and one without (the fast path).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import anyio
import pytest

from agentqueue.services import Services

from ..git_fixtures import commit_file, git, git_env  # noqa: F401  (git_env: fixture)
from ..test_engine_lifecycle import events, make_engine, run_until_final, show, status

pytestmark = pytest.mark.anyio

# Adds its `LINE` before END; sent back with a conflict, keeps only its own side and commits the merge.
AGENT = r"""
import pathlib, re, subprocess, sys
prompt = sys.stdin.read()
path = pathlib.Path("shared.txt")
text = path.read_text()
if "<<<<<<<" in text:
    kept, side = [], None
    for line in text.splitlines():
        if line.startswith("<<<<<<<"):
            side = "ours"
        elif line.startswith("=======") and side == "ours":
            side = "theirs"
        elif line.startswith(">>>>>>>"):
            side = None
        elif side != "theirs":
            kept.append(line)
    path.write_text("\n".join(kept) + "\n")
    subprocess.run(["git", "add", "shared.txt"], check=True)
    subprocess.run(["git", "-c", "user.name=Agent", "-c", "user.email=agent@example.com", "commit", "-q",
                    "--no-edit"], check=True)
    print("resolved the conflict: mine only")
else:
    lines = text.splitlines()
    lines.insert(lines.index("END"), re.search(r"^LINE (.*)$", prompt, re.M)[1])
    path.write_text("\n".join(lines) + "\n")
    print("added my line")
"""
CHECK = "grep -q '^BEGIN$' shared.txt && ! grep -q '^<<<<<<<' shared.txt"


@pytest.mark.parametrize("checked", [True, False], ids=["merge-queue", "fast-path"])
async def test_a_resolution_that_reverts_the_landed_side_waits_for_a_person(services: Services,
                                                                           checked: bool) -> None:
    services.projects.create("Demo", max_concurrent_agents=2, verify_command=CHECK if checked else None)
    services.repos.add("demo", "init", name="app")
    repo = Path(services.repos.get("app").checkout_path)
    commit_file(repo, "shared.txt", "BEGIN\nEND\n", "the region")
    for n in range(2):
        services.agents.create(f"worker-{n}", "command", command=shlex.join([sys.executable, "-c", AGENT]))
    tasks = [services.tasks.create("demo", f"Line {n}", f"LINE line of task {n}", repo_id="app") for n in range(2)]
    await run_until_final(services, make_engine(services), *(t.id for t in tasks), timeout=120)

    # Both started from the same main: the first to land went in, the other one conflicted and was sent back.
    sent = [t for t in tasks if events(services, t.id, "task.sent_back")]
    assert len(sent) == 1, [(status(services, t.id), services.tasks.get(t.id).reason) for t in tasks]
    dropper = services.tasks.get(sent[0].id)
    landed = next(t for t in tasks if t.id != dropper.id)
    assert status(services, landed.id) == "COMPLETED"
    assert dropper.status == "AWAITING_APPROVAL", (dropper.status, dropper.reason)
    assert dropper.reason is not None and "shared.txt (1 line)" in dropper.reason and "drops 1 line" in dropper.reason
    main_text = show(repo, "main", "shared.txt") or ""
    assert landed.description.removeprefix("LINE ") in main_text  # the landed line stays on main
    assert dropper.description.removeprefix("LINE ") not in main_text  # the resolution did not land

    # The person decides: approve_task lands the resolution as it is.
    approved = await anyio.to_thread.run_sync(services.tasks.approve, dropper.id)
    assert approved.status == "COMPLETED"
    assert dropper.description.removeprefix("LINE ") in (show(repo, "main", "shared.txt") or "")
    assert git(repo, "status", "--porcelain") == ""
