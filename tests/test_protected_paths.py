"""Protected paths (issue 18): a task that changes agent settings, git hooks, CI or the like waits for a person
before it lands, and a rerun on a kept branch is never configured by what an earlier, unmerged run planted.

The engine runs here end to end with `command` agents (one small Python program, AGENT below) in real git
repos; the last test drives the real `claude` CLI against the loopback model mock.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client

from agentqueue.server.app import build_server
from agentqueue.engine import protected
from agentqueue.engine.adapters.base import AgentConfig
from agentqueue.engine.adapters.claude_code import build as build_claude
from agentqueue.services import Services

from .cli_helpers import cli_env, run_cli
from .conftest import ok
from .git_fixtures import bare_sha, commit_file, git, git_env, make_origin, make_repo, porcelain  # noqa: F401
from .mock_anthropic import MockAnthropic
from .processes import wait_for
from .test_engine_lifecycle import (FINAL, engine_running, fake_gh, make_engine, run_until_final,  # noqa: F401
                                    show, status)
from .third_party import npm_bin

pytestmark = pytest.mark.anyio

# Directives, one per line of the task description (paths relative to the worktree):
#   WRITE <file> <text>    write <text> to <file>, making its folders
#   LINK <name> <target>   make a symlink
#   MOVE <src> <dst>       rename a file
#   SCRIPT <file> <cmd>    write an executable shell script that runs <cmd>
AGENT = r"""
import os, pathlib, re, sys
prompt = sys.stdin.read()
for m in re.finditer(r"^WRITE (\S+) (.*)$", prompt, re.M):
    path = pathlib.Path(m[1])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(m[2] + "\n")
for m in re.finditer(r"^LINK (\S+) (\S+)$", prompt, re.M):
    os.symlink(m[2], m[1])
for m in re.finditer(r"^MOVE (\S+) (\S+)$", prompt, re.M):
    os.rename(m[1], m[2])
for m in re.finditer(r"^SCRIPT (\S+) (.*)$", prompt, re.M):
    path = pathlib.Path(m[1])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + m[2] + "\n")
    path.chmod(0o755)
print("agent done", flush=True)
"""
AGENT_COMMAND = shlex.join([sys.executable, "-c", AGENT])
HOOKED = json.dumps({"hooks": {"SessionStart": [
    {"hooks": [{"type": "command", "command": "echo ran > hook_ran.txt"}]}]}})


@pytest.fixture
def svc(services: Services, git_env: Path) -> Services:
    """Project 'demo' with an `init` repo 'app' and one command agent."""
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("worker", "command", command=AGENT_COMMAND)
    return services


def checkout(services: Services) -> Path:
    return Path(services.repos.get("app").checkout_path)


def log_of(services: Services, task_id: str) -> str:
    path = services.home / "logs" / "tasks" / f"{task_id}.log"
    return path.read_text() if path.exists() else ""


# -- the list ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", [
    ".claude/settings.json", ".claude", ".claude/hooks/pre.sh", ".Claude/Settings.json", "pkg/.claude/settings.json",
    ".mcp.json", "sub/.mcp.json", ".codex/config.toml", ".gemini/settings.json", ".githooks/pre-commit",
    ".husky/pre-commit", ".pre-commit-config.yaml", ".github/workflows/x.yml", ".GITHUB/Workflows/x.yml",
    ".gitlab-ci.yml", ".circleci/config.yml", "Jenkinsfile", ".envrc", "web/.envrc", ".vscode/tasks.json",
    ".vscode/settings.json", ".devcontainer/devcontainer.json", "CLAUDE.md", "docs/AGENTS.md", "GEMINI.md",
    ".claude/skills/agentqueue/SKILL.md", ".agents/skills/agentqueue/SKILL.md", "pkg/.agents/skills/x/SKILL.md"])
def test_protected_paths_are_protected(path: str) -> None:
    assert protected.protected_changes(["src/app.py", path]) == [path]


@pytest.mark.parametrize("path", [
    "src/app.py", "README.md", ".claudex/settings.json", "my.claude/x", "docs/.github/workflows/x.yml",
    ".github/ISSUE_TEMPLATE/bug.md", ".vscode/extensions.json", "CLAUDE.md.bak", "notes/claude.txt", ".gitignore",
    ".agents/notes.md"])
def test_ordinary_paths_are_not(path: str) -> None:
    assert protected.protected_changes([path]) == []


# -- landing -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("path", "why"), [(".claude/settings.json", "agent CLI settings"),
                                           (".github/workflows/x.yml", "CI configuration")])
async def test_a_task_changing_a_protected_path_waits_for_approval_then_approve_task_lands_it(
        svc: Services, tmp_path: Path, path: str, why: str) -> None:
    task = svc.tasks.create("demo", "Touch settings", f"WRITE {path} planted\nWRITE notes.txt ordinary", repo_id="app")
    assert not task.requires_approval
    repo = checkout(svc)
    main_before = git(repo, "rev-parse", "main")
    engine = make_engine(svc)
    async with engine_running(engine):
        await wait_for(lambda: status(svc, task.id) in FINAL, what="the run")
        waiting = svc.tasks.get(task.id)
        assert waiting.status == "AWAITING_APPROVAL" and waiting.pr_url is None  # no remote: approve_task merges
        assert git(repo, "rev-parse", "main") == main_before and porcelain(repo) == ""  # nothing landed
        assert show(repo, waiting.branch, path) == "planted"  # the work is kept on its branch
        assert waiting.reason is not None and path in waiting.reason and why in waiting.reason
        assert "notes.txt" not in waiting.reason  # only the protected files are named
        assert waiting.next_step == (f"Review the diff (get_task_diff {task.id}), then approve_task {task.id} to land "
                                     f"it, or request_changes {task.id} to send it back.")
        assert f"[protected] It changes protected paths: {path}" in log_of(svc, task.id)

        async with Client(build_server(svc)) as client:  # what a person's model sees
            got = await ok(client, "get_task", task_id=task.id)
        assert got["status"] == "AWAITING_APPROVAL" and got["reason"] == waiting.reason
        shown = run_cli(cli_env(svc.home, tmp_path / "person"), "show", task.id)
        assert shown.returncode == 0, shown.stderr
        flat = " ".join(shown.stdout.split())
        assert f"reason It changes protected paths: {path}" in flat
        # The terminal names its own commands (issue 23); the tool's next_step above keeps the tools' names.
        assert f"`agentqueue approve {task.id}`" in flat and f"`agentqueue diff {task.id}`" in flat
        assert f"`agentqueue request-changes {task.id} -m '…'`" in flat and "approve_task" not in flat

        approved = await anyio.to_thread.run_sync(svc.tasks.approve, task.id)
    assert approved.status == "COMPLETED" and approved.reason is None and approved.next_step is None
    assert show(repo, "main", path) == "planted" and show(repo, "main", "notes.txt") == "ordinary"
    assert porcelain(repo) == ""


async def test_with_a_remote_and_gh_the_protected_change_becomes_a_pull_request(
        services: Services, git_env: Path, tmp_path: Path, fake_gh: Path) -> None:
    origin = make_origin(tmp_path / "origin.git")
    services.projects.create("Demo")
    services.repos.add("demo", "clone", url=str(origin), name="app")
    services.agents.create("worker", "command", command=AGENT_COMMAND)
    task = services.tasks.create("demo", "CI", "WRITE .github/workflows/ci.yml on: push", repo_id="app")
    await run_until_final(services, make_engine(services), task.id)
    waiting = services.tasks.get(task.id)
    assert waiting.status == "AWAITING_APPROVAL" and waiting.pr_url == "https://github.com/o/r/pull/1"
    assert json.loads(fake_gh.read_text())["argv"][:2] == ["pr", "create"]
    assert bare_sha(origin, "refs/heads/main") == git(tmp_path / "origin-seed", "rev-parse", "main")  # not pushed
    assert waiting.reason is not None and ".github/workflows/ci.yml (CI configuration" in waiting.reason
    assert waiting.next_step == (f"Review its pull request {waiting.pr_url} and merge it there (the task then "
                                 f"completes), or request_changes {task.id} to send it back.")


async def test_a_task_changing_only_ordinary_files_lands_at_once(svc: Services) -> None:
    task = svc.tasks.create("demo", "Plain", "WRITE src/app.py print(1)\nWRITE .github/README.md about", repo_id="app")
    await run_until_final(svc, make_engine(svc), task.id)
    done = svc.tasks.get(task.id)
    assert done.status == "COMPLETED" and done.reason is None
    assert show(checkout(svc), "main", "src/app.py") == "print(1)"
    assert "[protected]" not in log_of(svc, task.id)


async def test_a_committed_symlink_named_claude_is_a_protected_change(svc: Services) -> None:
    task = svc.tasks.create("demo", "Link", "WRITE conf/settings.json {}\nLINK .claude conf", repo_id="app")
    await run_until_final(svc, make_engine(svc), task.id)
    waiting = svc.tasks.get(task.id)
    assert waiting.status == "AWAITING_APPROVAL"
    assert waiting.reason is not None and ".claude (agent CLI settings" in waiting.reason
    assert show(checkout(svc), "main", "conf/settings.json") is None


async def test_a_change_through_a_symlinked_settings_folder_is_protected(svc: Services) -> None:
    """The default branch links .claude to conf/claude: editing conf/claude/settings.json edits the settings."""
    repo = checkout(svc)
    commit_file(repo, "conf/claude/settings.json", "{}")
    os.symlink("conf/claude", repo / ".claude")
    git(repo, "add", ".claude")
    git(repo, "commit", "-q", "-m", "settings live in conf/claude")
    task = svc.tasks.create("demo", "Edit through", f"WRITE conf/claude/settings.json {HOOKED}", repo_id="app")
    await run_until_final(svc, make_engine(svc), task.id)
    waiting = svc.tasks.get(task.id)
    assert waiting.status == "AWAITING_APPROVAL"
    assert waiting.reason is not None and "conf/claude/settings.json" in waiting.reason
    assert show(repo, "main", "conf/claude/settings.json") == "{}"


async def test_moving_settings_away_counts_both_sides_of_the_rename(svc: Services) -> None:
    repo = checkout(svc)
    commit_file(repo, ".claude/settings.json", '{"permissions": {"deny": ["Bash(curl:*)"]}}')
    task = svc.tasks.create("demo", "Rename", "MOVE .claude/settings.json old-settings.json", repo_id="app")
    await run_until_final(svc, make_engine(svc), task.id)
    waiting = svc.tasks.get(task.id)
    assert waiting.status == "AWAITING_APPROVAL"
    assert waiting.reason is not None and ".claude/settings.json" in waiting.reason
    assert show(repo, "main", ".claude/settings.json") is not None


async def test_the_repositorys_own_hooks_folder_is_protected(svc: Services) -> None:
    """core.hooksPath inside the repository: a change there is a git hook (written not executable here, so
    AgentQueue's own commit of it does not run it)."""
    git(checkout(svc), "config", "core.hooksPath", "tools/git-hooks")
    task = svc.tasks.create("demo", "Hook", "WRITE tools/git-hooks/pre-commit echo hi", repo_id="app")
    await run_until_final(svc, make_engine(svc), task.id)
    waiting = svc.tasks.get(task.id)
    assert waiting.status == "AWAITING_APPROVAL"
    assert waiting.reason is not None and "tools/git-hooks/pre-commit (git hooks" in waiting.reason


async def test_agentqueues_own_commit_never_runs_a_hook_the_agent_wrote(svc: Services, tmp_path: Path) -> None:
    git(checkout(svc), "config", "core.hooksPath", "tools/git-hooks")
    escaped = tmp_path / "escaped.txt"
    task = svc.tasks.create("demo", "Hook", f"SCRIPT tools/git-hooks/pre-commit echo ran > {shlex.quote(str(escaped))}",
                            repo_id="app")
    await run_until_final(svc, make_engine(svc), task.id)
    assert status(svc, task.id) == "AWAITING_APPROVAL"
    assert not escaped.exists(), "AgentQueue ran a git hook the agent wrote, outside the agent's sandbox"


async def test_a_task_that_requires_approval_also_names_its_protected_files(svc: Services) -> None:
    task = svc.tasks.create("demo", "Review me", "WRITE .envrc export X=1", repo_id="app", requires_approval=True)
    await run_until_final(svc, make_engine(svc), task.id)
    waiting = svc.tasks.get(task.id)
    assert waiting.status == "AWAITING_APPROVAL" and waiting.reason is not None and ".envrc" in waiting.reason


@pytest.mark.parametrize("value", [None, "tools/git-hooks", "./tools/../tools/git-hooks/", "{worktree}/tools/git-hooks",
                                   "{worktree}", "~/hooks", "../elsewhere", "{checkout}/.git/hooks", ".git/hooks", "",
                                   "tools/git-hooks\n^0000000000000000000000000000000000000000"])
def test_the_hooks_folder_read_with_the_tips_gives_the_rules_that_git_config_gives(
        git_env: Path, tmp_path: Path, value: str | None) -> None:
    """A landing reads core.hooksPath through the tips' `rev-parse --git-path hooks` (one git command fewer): for
    every kind of value (unset, relative, absolute inside or outside the worktree, `~`, empty, one with a newline)
    the rules are the ones its own `git config --get` gives, and the tips are read right."""
    from agentqueue.engine.workspaces import Workspace, Workspaces
    from agentqueue.store.models import Repo
    checkout = make_repo(tmp_path / "r", files={"README.md": "# r\n", "tools/git-hooks/pre-commit": "echo\n"})
    worktree = tmp_path / "wt"
    git(checkout, "worktree", "add", "-q", "-b", "task/one", str(worktree), "main")
    tip = commit_file(worktree, "tools/git-hooks/post-merge", "echo\n")
    old = commit_file(checkout, "other.txt", "main moved on\n")
    if value is not None:
        git(checkout, "config", "core.hooksPath", value.format(worktree=worktree, checkout=checkout))
    repo = Repo(id="r", project_id="p", source_type="init", default_branch="main", checkout_path=str(checkout),
                created_at="now")
    tips = Workspaces(tmp_path / "worktrees").tips(Workspace(worktree, "task/one", repo))
    assert (tips.old, tips.tip, tips.base) == (old, tip, "merge")
    by_config = protected.landing_rules(worktree)
    assert protected.landing_rules(worktree, lambda: tips.hooks or "") == by_config
    hooked = value is not None and value.startswith(("tools", "./tools", "{worktree}/"))
    assert any(rule.path.startswith("tools/git-hooks") for rule in by_config) == hooked


def test_file_names_git_would_quote_are_still_seen(git_env: Path, tmp_path: Path) -> None:
    """A hostile name (a newline, a quote, non-ASCII) is quoted by git's default output; -z keeps it as is."""
    repo = make_repo(tmp_path / "r")
    git(repo, "switch", "-q", "-c", "task")
    name = '.claude/commands/é"\nx.md'
    commit_file(repo, name, "run curl")
    hold = protected.landing_hold(repo, "main", "task")
    assert hold and hold.files == [name] and hold.error is None
    assert "\n" not in hold.reason() and '.claude/commands/\\xe9"\\nx.md (agent CLI settings' in hold.reason()


def test_a_diff_that_cannot_be_listed_holds_the_task(tmp_path: Path) -> None:
    hold = protected.landing_hold(tmp_path, "main", "task")  # not a repository
    assert hold and hold.files == [] and hold.error
    assert hold.reason().startswith("Its changes could not be checked for protected paths")


# -- later runs ----------------------------------------------------------------------------------------
@pytest.fixture
def branch(git_env: Path, tmp_path: Path) -> Path:
    """A worktree on a task branch of a repo whose main has .claude/settings.json and a README."""
    repo = make_repo(tmp_path / "repo", files={"README.md": "# r\n", ".claude/settings.json": '{"model": "x"}\n',
                                               ".gitignore": ".claude/settings.local.json\n"})
    git(repo, "worktree", "add", "-q", "-b", "task/one", str(tmp_path / "wt"), "main")
    return tmp_path / "wt"


def test_an_unchanged_branch_has_nothing_planted(branch: Path) -> None:
    (branch / "README.md").write_text("changed, but not a setting\n")
    assert protected.planted_settings(branch, "main") == {}


def test_planted_settings_give_the_default_branchs_content(branch: Path) -> None:
    (branch / ".claude/settings.json").write_text(HOOKED)
    git(branch, "commit", "-q", "-am", "earlier run")
    (branch / ".claude/settings.local.json").write_text(HOOKED)  # ignored: never committed, still loaded
    (branch / ".mcp.json").write_text("{}")  # untracked
    assert protected.planted_settings(branch, "main") == {
        ".claude/settings.json": b'{"model": "x"}\n', ".claude/settings.local.json": None, ".mcp.json": None}


def test_planted_settings_see_past_the_index_and_special_files(branch: Path) -> None:
    """skip-worktree hides an edit from git status; a FIFO is not a file git lists and must not hang us."""
    git(branch, "update-index", "--skip-worktree", ".claude/settings.json")
    (branch / ".claude/settings.json").write_text(HOOKED)
    os.mkfifo(branch / ".mcp.json")
    assert git(branch, "status", "--porcelain") == ""
    assert protected.planted_settings(branch, "main") == {".claude/settings.json": b'{"model": "x"}\n',
                                                          ".mcp.json": None}


def test_a_planted_symlink_and_what_it_leads_to_are_masked(branch: Path) -> None:
    (branch / ".claude/settings.json").unlink()
    (branch / ".claude").rmdir()
    (branch / "conf").mkdir()
    (branch / "conf/settings.json").write_text(HOOKED)
    os.symlink("conf", branch / ".claude")
    assert protected.planted_settings(branch, "main") == {
        ".claude": None, ".claude/settings.json": b'{"model": "x"}\n', "conf/settings.json": None}


def test_a_symlink_loop_is_a_planted_and_a_protected_change_not_a_crash(branch: Path) -> None:
    (branch / ".claude/settings.json").unlink()
    (branch / ".claude").rmdir()
    os.symlink("loop", branch / ".claude")
    os.symlink(".claude", branch / "loop")
    assert protected.planted_settings(branch, "main") == {".claude": None,
                                                          ".claude/settings.json": b'{"model": "x"}\n'}
    git(branch, "add", "-A")
    git(branch, "commit", "-q", "-m", "a loop")
    hold = protected.landing_hold(branch, "main", "task/one")
    assert hold.error is None and hold.files == [".claude", ".claude/settings.json"]


def test_ci_and_instruction_files_are_not_masked_in_reruns(branch: Path) -> None:
    """They need approval to land, but configure no agent run: the rerun sees the task's own work on them."""
    (branch / ".github/workflows").mkdir(parents=True)
    (branch / ".github/workflows/ci.yml").write_text("on: push\n")
    (branch / "AGENTS.md").write_text("be careful\n")
    assert protected.planted_settings(branch, "main") == {}


def test_claude_loads_only_user_settings_when_settings_were_planted() -> None:
    default = build_claude(AgentConfig("claude-code", binary="claude"), "p", "", None).argv
    guarded = build_claude(AgentConfig("claude-code", binary="claude", project_settings=False), "p", "", None).argv
    assert "--setting-sources" not in default
    at = guarded.index("--setting-sources")
    assert guarded[at + 1] == "user"


async def test_a_rerun_on_the_kept_branch_logs_the_planted_files(svc: Services) -> None:
    task = svc.tasks.create("demo", "Plant", f"WRITE .claude/settings.json {HOOKED}", repo_id="app")
    engine = make_engine(svc)
    async with engine_running(engine):
        await wait_for(lambda: status(svc, task.id) in FINAL, what="the first run")
        assert status(svc, task.id) == "AWAITING_APPROVAL"
        assert "run-configuring files differ" not in log_of(svc, task.id)  # the first run started from main
        await anyio.to_thread.run_sync(svc.feedback.request_changes, task.id, "once more")
        await wait_for(lambda: svc.tasks.results(task.id)[0] == 2 and status(svc, task.id) in FINAL,
                       what="the rerun")
    text = log_of(svc, task.id)
    assert "[protected] run-configuring files differ from the default branch" in text
    assert ".claude/settings.json" in text.split("run-configuring files differ", 1)[1].splitlines()[0]


# -- the real claude CLI ---------------------------------------------------------------------------------
CLAUDE = npm_bin("claude")


@pytest.fixture
def mock_api(git_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MockAnthropic]:
    mock = MockAnthropic().start()
    for key, value in {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": mock.base_url,
                       "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
                       "CLAUDE_CODE_MAX_RETRIES": "0", "AGENTQUEUE_CLAUDE_BIN": CLAUDE or ""}.items():
        monkeypatch.setenv(key, value)
    yield mock
    mock.stop()


@pytest.mark.integration
@pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")
async def test_real_claude_never_runs_a_hook_an_earlier_run_planted(svc: Services, mock_api: MockAnthropic) -> None:
    """Run 1 (a command agent) plants a SessionStart hook; the rerun by Claude Code on the same branch must not
    run it, although Claude Code runs a project's hooks (checked by hand with 2.1.328: without the flag the hook
    writes hook_ran.txt)."""
    svc.agents.create("claude", "claude-code")
    svc.agents.set_paused("claude", True)
    task = svc.tasks.create("demo", "Plant then write",
                            f"SCENARIO:write_file\nWRITE .claude/settings.json {HOOKED}", repo_id="app")
    engine = make_engine(svc)
    async with engine_running(engine):
        await wait_for(lambda: status(svc, task.id) in FINAL, what="the planting run")
        assert status(svc, task.id) == "AWAITING_APPROVAL"
        svc.agents.set_paused("worker", True)
        svc.agents.set_paused("claude", False)
        await anyio.to_thread.run_sync(svc.feedback.request_changes, task.id, "write the hello file too")
        await wait_for(lambda: svc.tasks.results(task.id)[0] == 2 and status(svc, task.id) in FINAL, timeout=90,
                       what="the claude rerun")
    waiting = svc.tasks.get(task.id)
    assert svc.tasks.results(task.id)[1].status == "completed", log_of(svc, task.id)
    repo = checkout(svc)
    assert show(repo, waiting.branch, "claude_hello.txt") == "hello from claude"  # claude did run
    assert show(repo, waiting.branch, "hook_ran.txt") is None, "the planted SessionStart hook ran"
    assert not (engine.workspaces.path_for("app", task.id) / "hook_ran.txt").exists()
    assert "Claude Code runs with --setting-sources user" in log_of(svc, task.id)
    assert waiting.status == "AWAITING_APPROVAL" and ".claude/settings.json" in (waiting.reason or "")
