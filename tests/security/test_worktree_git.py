"""A hostile agent attacks through its worktree's git metadata (issue 33: C1, C2, C3, H2, H3, M7).

Each agent is a real `command` agent run by the real engine inside the real sandbox; the attack is the shell script
it runs in its worktree. What a run writes at `<worktree>/.git` is its own repository (engine/run_repo.py): nothing
of it may run on the host, choose what the sandbox binds, move the person's branches or change their objects.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from agentqueue.services import Services

from ..git_fixtures import commit_file, git, git_env  # noqa: F401  (git_env: fixture)
from ..test_engine_lifecycle import checkout, make_engine, run_until_final, show, svc  # noqa: F401  (svc: fixture)

pytestmark = pytest.mark.anyio


async def run(services: Services, script: str, title: str = "Attack", timeout: float = 60, **fields: object) -> str:
    """The attack run to its end by the real engine, alone on the project (the only agent); the task's id."""
    services.agents.delete("worker")
    services.agents.create("attacker", "command", command=shlex.join(["/bin/sh", "-c", script]))
    created = services.tasks.create("demo", title, "attack", repo_id="app", **fields)  # type: ignore[arg-type]
    await run_until_final(services, make_engine(services), created.id, timeout=timeout)
    return created.id


async def test_a_filter_or_fsmonitor_the_run_configures_never_runs_on_the_host(svc: Services, tmp_path: Path) -> None:
    """C1: the run's git config gains a `clean` filter applied to every file, and an fsmonitor; then the run points
    its `.git` at a git folder of its own with the same. The daemon's commit of its leftovers runs neither."""
    ran = tmp_path / "ran-on-host"
    evil = f"touch {shlex.quote(str(ran))}; cat"
    # A git folder of the run's own (the repository's objects as an alternate) with the filter, the fsmonitor and
    # attributes that apply it; then the worktree's `.git` (and, where the run can reach it, the folder git keeps for
    # the worktree in the repository) made to lead there.
    script = ("b=$(git symbolic-ref --short HEAD); tip=$(git rev-parse HEAD);"
              " objects=$(cd \"$(git rev-parse --git-common-dir)\" && pwd)/objects;"
              " git init -q --bare own && echo \"$objects\" > own/objects/info/alternates"
              " && git --git-dir=own update-ref \"refs/heads/$b\" \"$tip\""
              " && git --git-dir=own symbolic-ref HEAD \"refs/heads/$b\" && git --git-dir=own config core.bare false"
              f" && git --git-dir=own config filter.evil.clean {shlex.quote(evil)}"
              " && git --git-dir=own config filter.evil.required true"
              f" && git --git-dir=own config core.fsmonitor {shlex.quote('touch ' + str(ran) + '-fsmonitor')}"
              " && echo '* filter=evil' > own/info/attributes && echo '/own/' >> own/info/exclude;"
              " if [ -f .git ]; then admin=$(sed 's/^gitdir: //' .git); echo \"$PWD/own\" > \"$admin/commondir\";"
              " fi; rm -rf .git; printf 'gitdir: %s/own\\n' \"$PWD\" > .git; echo changed > work.txt")
    task_id = await run(svc, script)
    assert not list(tmp_path.glob("ran-on-host*")), "a command the run configured ran on the host"
    assert svc.tasks.get(task_id).status == "COMPLETED", svc.tasks.get(task_id).reason
    assert show(checkout(svc), "main", "work.txt") == "changed"  # its work landed all the same


async def test_a_retry_never_binds_or_creates_what_the_runs_git_file_names(svc: Services, tmp_path: Path) -> None:
    """C2, M7: a first run writes `gitdir: <a folder of the person's>` into its `.git` and fails; its retry must
    not get that folder writable, and the daemon makes nothing in it (no refs/heads/<task>)."""
    victim = tmp_path / "victim-home"
    (victim / ".ssh").mkdir(parents=True)
    (victim / ".ssh" / "id_ed25519").write_text("the person's key\n")
    v = shlex.quote(str(victim))
    script = (f"if [ ! -e attempted ]; then touch attempted; rm -rf .git; printf 'gitdir: %s\\n' {v} > .git; exit 1;"
              f" else echo owned > {v}/owned.txt; cat {v}/.ssh/id_ed25519 > stolen.txt; echo done > work.txt; fi")
    task_id = await run(svc, script, max_retries=1)
    assert sorted(p.name for p in victim.iterdir()) == [".ssh"], "the retry wrote into the folder the run named"
    assert svc.tasks.get(task_id).status == "COMPLETED", svc.tasks.get(task_id).reason
    assert (victim / ".ssh" / "id_ed25519").read_text() == "the person's key\n"
    assert show(checkout(svc), "main", "work.txt") == "done"
    assert (show(checkout(svc), "main", "stolen.txt") or "").strip() in ("",), "the key was readable to the retry"


@pytest.mark.parametrize("how", ["head-on-main", "git-is-the-main-repo"])
async def test_a_run_never_moves_main_past_the_persons_approval(svc: Services, how: str) -> None:
    """C3: the run sets its HEAD on main, or points its `.git` at the main repository, then leaves a file; the task
    needs approval, so main must not move at all (the old leftover commit landed it there directly)."""
    main_repo = checkout(svc)
    before = git(main_repo, "rev-parse", "main")
    redirect = ("printf 'ref: refs/heads/main\\n' > \"$(git rev-parse --git-dir)/HEAD\"" if how == "head-on-main" else
                f"rm -rf .git && printf 'gitdir: %s/.git\\n' {shlex.quote(str(main_repo))} > .git")
    task_id = await run(svc, f"{redirect}; echo unreviewed > bad.txt", requires_approval=True)
    assert svc.tasks.get(task_id).status == "AWAITING_APPROVAL", svc.tasks.get(task_id).reason
    assert git(main_repo, "rev-parse", "main") == before, "main moved without the person's approval"
    assert show(main_repo, svc.tasks.get(task_id).branch or "", "bad.txt") == "unreviewed"  # kept for review


async def test_a_ref_the_run_links_to_main_never_deletes_main(svc: Services) -> None:
    """H2: the run commits its work, then replaces its branch's loose ref with a symlink whose text is
    `refs/heads/main` (git reads such a link as a symbolic ref), where its own git keeps its refs and in the person's
    repository if it can reach it. The old cleanup after the landing, `update-ref -d <task branch> <landed tip>`,
    followed that link and deleted the person's main; main must stay, moved only by the task's real landing."""
    main_repo = checkout(svc)
    before = git(main_repo, "rev-parse", "main")
    persons_refs = shlex.quote(str(main_repo / ".git" / "refs" / "heads"))
    script = ("b=$(git symbolic-ref --short HEAD); echo work > work.txt && git add work.txt"
              " && git -c user.name=a -c user.email=a@b commit -qm 'the agent commits its work';"
              f" for refs in \"$(git rev-parse --git-common-dir)/refs/heads\" {persons_refs}; do"
              " rm -f \"$refs/$b\" 2>/dev/null; ln -s refs/heads/main \"$refs/$b\" 2>/dev/null; done; exit 0")
    task_id = await run(svc, script)
    assert svc.tasks.get(task_id).status == "COMPLETED", svc.tasks.get(task_id).reason
    after = git(main_repo, "rev-parse", "--verify", "--quiet", "refs/heads/main", check=False)
    assert after, "the daemon's branch cleanup deleted the person's main"
    landed = svc.store.one("SELECT base_sha, landed_sha FROM tasks WHERE id = ?", (task_id,)) or {}
    assert (landed.get("base_sha"), landed.get("landed_sha")) == (before, after), \
        f"main moved from {before} to {after}, not by the task's landing ({landed})"
    assert show(main_repo, "main", "work.txt") == "work"  # the run's files landed all the same
    assert not git(main_repo, "for-each-ref", "--format=%(refname)", f"refs/heads/{task_id}/"), \
        "the task's branch was not cleaned up"


async def test_the_shared_objects_are_read_only_to_a_run(svc: Services) -> None:
    """H3: the run rewrites the loose object of main's README (same id, its own bytes): every later checkout, and
    the person's, would get them. The repository's objects must be read-only inside the sandbox."""
    main_repo = checkout(svc)
    commit_file(main_repo, "README.md", "the real readme\n", "readme")
    blob = git(main_repo, "rev-parse", "main:README.md")
    loose = main_repo / ".git" / "objects" / blob[:2] / blob[2:]
    assert loose.is_file()
    original = loose.read_bytes()
    script = (f"python3 -c \"import zlib,sys; sys.stdout.buffer.write(zlib.compress(b'blob 8\\\\0forged!\\\\n'))\""
              f" > forged.bin; chmod u+w {shlex.quote(str(loose))} 2>/dev/null;"
              f" cat forged.bin > {shlex.quote(str(loose))} 2>/dev/null; rm -f forged.bin; echo tried > work.txt")
    task_id = await run(svc, script)
    assert svc.tasks.get(task_id).status == "COMPLETED", svc.tasks.get(task_id).reason
    assert loose.read_bytes() == original, "a run rewrote one of the repository's objects"
    assert git(main_repo, "cat-file", "-p", blob) == "the real readme"


async def test_a_run_that_packed_its_objects_has_its_commit_taken_by_a_fetch(svc: Services) -> None:
    """A run's new objects are taken from its loose objects; one that packed them (`git repack`, as `git gc` does)
    has them fetched instead, with fsck, and its commit lands as its own."""
    script = ("echo packed > work.txt && git add work.txt && git -c user.name=a -c user.email=a@b commit -qm "
              "'the agent packed this' && git repack -q -a -d")
    task_id = await run(svc, script)
    assert svc.tasks.get(task_id).status == "COMPLETED", svc.tasks.get(task_id).reason
    main_repo = checkout(svc)
    assert show(main_repo, "main", "work.txt") == "packed"
    assert "the agent packed this" in git(main_repo, "log", "--format=%s", "main")


@pytest.mark.parametrize("kept", ["awaiting-approval", "failed"])
async def test_a_kept_worktrees_git_is_the_daemons_when_the_person_looks(svc: Services, tmp_path: Path,
                                                                          kept: str) -> None:
    """A run configures an fsmonitor and a hook in its own repository, leaves a file, and its worktree is kept (held
    for approval, or failed): the person's own `git status` and `git commit` there must run nothing the run wrote."""
    ran = tmp_path / "ran-for-the-person"
    plant = (f"git config core.fsmonitor {shlex.quote('touch ' + str(ran) + '-fsmonitor')};"
             f" printf '#!/bin/sh\\ntouch %s-hook\\n' {shlex.quote(str(ran))} > .git/hooks/pre-commit;"
             " chmod +x .git/hooks/pre-commit; echo left > left.txt")
    if kept == "awaiting-approval":
        task_id = await run(svc, plant, requires_approval=True)
        assert svc.tasks.get(task_id).status == "AWAITING_APPROVAL", svc.tasks.get(task_id).reason
    else:
        task_id = await run(svc, plant + "; exit 3", max_retries=0)
        assert svc.tasks.get(task_id).status in ("FAILED", "BLOCKED"), svc.tasks.get(task_id).status
    worktree = svc.home / "worktrees" / "app" / task_id
    assert worktree.is_dir(), "the worktree was not kept"
    person = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", "status", "--short"], cwd=worktree, env=person, check=True, capture_output=True)
    (worktree / "mine.txt").write_text("the person's own change\n")
    subprocess.run(["git", "add", "mine.txt"], cwd=worktree, env=person, check=True, capture_output=True)
    subprocess.run(["git", "-c", "user.name=P", "-c", "user.email=p@x", "commit", "-q", "-m", "mine"],
                   cwd=worktree, env=person, check=True, capture_output=True)
    assert not list(tmp_path.glob("ran-for-the-person*")), "the person's git ran what the run configured"
