"""`agentqueue doctor` finds each seeded fault and says how to fix it; `agentqueue uninstall` cleans up
exactly what is ours. Real parts: the CLI (in this process at 80 columns), a daemon, git repos, client configs
in a scratch HOME.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from agentqueue import __version__, paths

from .cli_helpers import AGENT_COMMAND, cli_env, cli_in_process, start_daemon, stop_daemon
from .git_fixtures import git, make_repo, porcelain

pytestmark = [pytest.mark.integration]


def doctor(env: dict[str, str]) -> tuple[int, dict[str, dict]]:
    done = cli_in_process(env, "doctor", "--json")
    report = json.loads(done.stdout)
    assert report["ok"] == (done.returncode == 0) and report["problems"] == sum(
        c["level"] == "fail" for c in report["checks"])
    return done.returncode, {c["name"]: c for c in report["checks"]}


def fake_cli(bin_dir: Path, name: str, version: str) -> Path:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\necho '{version}'\n")
    path.chmod(0o755)
    return path


def test_doctor_finds_each_seeded_fault_with_its_fix(tmp_path: Path) -> None:
    home, user = tmp_path / "aq", tmp_path / "user"
    user.mkdir()
    (user / ".gitconfig").write_text("")  # no identity anywhere (GIT_CONFIG_NOSYSTEM=1)
    home.mkdir()
    paths.token_path(home).write_text("secret\n")
    paths.token_path(home).chmod(0o644)
    paths.daemon_info_path(home).write_text(json.dumps({"pid": 999999, "socket": "/nowhere"}))  # a crashed daemon
    desktop = user / ".config" / "Claude" / "claude_desktop_config.json"
    desktop.parent.mkdir(parents=True)
    desktop.write_text(json.dumps({"mcpServers": {"agentqueue": {
        "command": str(tmp_path / "old-venv" / "bin" / "agentqueue"), "args": ["mcp"]}}}))
    env = cli_env(home, user, PATH="/usr/bin:/bin")  # no claude anywhere
    code, checks = doctor(env)
    assert code == 1

    identity = checks["git identity"]
    assert identity["level"] == "fail" and "agentqueue@localhost" in identity["detail"]
    assert "git config --global user.name" in identity["fix"] and "user.email" in identity["fix"]

    claude = checks["claude"]
    assert claude["level"] == "fail" and "not found" in claude["detail"]
    assert "npm install -g @anthropic-ai/claude-code" in claude["fix"] and "config.toml [cli]" in claude["fix"]

    stopped = checks["daemon"]
    assert stopped["level"] == "fail" and "no daemon is running" in stopped["detail"]
    assert "without cleaning up" in stopped["detail"] and "agentqueue serve" in stopped["fix"]

    token = checks["token file"]
    assert (token["level"] == "fail" and "0644" in token["detail"]
            and token["fix"] == f"chmod 600 {paths.token_path(home)}")

    client = checks["claude-desktop"]
    assert client["level"] == "fail" and "does not exist" in client["detail"]
    assert client["fix"] == "`agentqueue install claude-desktop` writes a command that runs."
    assert checks["claude-desktop home"]["level"] == "warn"  # no env: the platform default, not this home

    text = cli_in_process(env, "doctor")
    assert text.returncode == 1 and "✘ git identity" in text.stdout and "fix: chmod 600" in text.stdout
    assert "5 problem(s)" in text.stdout


@pytest.mark.daemon
@pytest.mark.real_cli
def test_doctor_on_a_healthy_setup_passes_and_reads_the_daemons_own_environment(tmp_path: Path) -> None:
    home, user = tmp_path / "aq", tmp_path / "user"
    env = cli_env(home, user, PATH=f"{tmp_path / 'bin'}:/usr/bin:/bin", AGENTQUEUE_PORT="0")
    git("/", "config", "--file", str(user / ".gitconfig"), "user.name", "Ada")
    git("/", "config", "--file", str(user / ".gitconfig"), "user.email", "ada@example.test")
    claude = fake_cli(tmp_path / "bin", "claude", "9.9.9 (Claude Code)")
    installed = cli_in_process(env, "install", "claude-desktop")  # records claude in config.toml [cli]
    assert installed.returncode == 0, installed.stderr
    live = start_daemon({**env, "PATH": "/usr/bin:/bin"}, "--port", "0")  # a GUI client's minimal PATH
    try:
        code, checks = doctor(env)
        assert code == 0, {k: v for k, v in checks.items() if v["level"] == "fail"}
        assert checks["git identity"]["detail"] == "commits are authored as Ada <ada@example.test>"
        assert checks["daemon"]["level"] == "ok" and "GET /health answered" in checks["daemon"]["detail"]
        assert checks["token file"] == {"name": "token file", "level": "ok",
                                        "detail": f"{paths.token_path(home)} has mode 0600", "fix": None}
        assert checks["claude"]["level"] == "ok" and "9.9.9 (Claude Code)" in checks["claude"]["detail"]
        assert f"running daemon (pid {live.pid})" in checks["claude"]["detail"]
        assert "config.toml [cli]" in checks["claude"]["detail"]
        assert checks["claude-desktop"]["level"] == "ok"
        assert f"agentqueue {__version__}" in checks["claude-desktop"]["detail"]
        assert "claude-desktop home" not in checks
    finally:
        stop_daemon(live)
    (home / "config.toml").write_text("")
    live = start_daemon({**env, "PATH": "/usr/bin:/bin"}, "--port", "0")
    try:
        # That daemon cannot see what only this terminal's PATH has, and doctor says so.
        code, checks = doctor(env)
        assert code == 1 and checks["claude"]["level"] == "fail"
        assert f"running daemon (pid {live.pid})" in checks["claude"]["detail"], checks["claude"]
    finally:
        stop_daemon(live)
    # Without [cli] and with only the terminal's PATH, a GUI-started daemon may not find claude: a warning.
    code, checks = doctor(env)
    assert checks["claude"]["level"] == "warn" and "minimal PATH" in checks["claude"]["detail"]
    assert str(claude) in checks["claude"]["fix"]
    assert checks["daemon"]["level"] == "fail"


@pytest.mark.daemon
def test_uninstall_removes_our_entries_worktrees_and_task_branches_and_nothing_else(tmp_path: Path) -> None:
    home, user = tmp_path / "aq", tmp_path / "user"
    env = cli_env(home, user, PATH="/usr/bin:/bin")
    repo = make_repo(tmp_path / "repo")
    git(repo, "branch", "feature/mine")
    (repo / "notes.txt").write_text("the user's uncommitted work\n")
    for client in ("claude-desktop", "cursor"):
        assert cli_in_process(env, "install", client).returncode == 0
    cursor = user / ".cursor" / "mcp.json"
    config = json.loads(cursor.read_text())
    config["mcpServers"]["other"] = {"command": "x"}
    cursor.write_text(json.dumps(config))
    live = start_daemon(env)
    try:
        live.call("create_project", name="Demo")
        live.call("add_repo", source="link", project_id="demo", path=str(repo), name="app")
        live.call("create_agent", name="worker", agent_type="command", command=AGENT_COMMAND)
        waiting = live.call("create_task", project_id="demo", title="Needs review", requires_approval=True,
                            description="WRITE review.txt please review")
        landed = live.call("create_task", project_id="demo", title="Lands", description="WRITE landed.txt ok")
        live.wait_status(waiting["id"], "AWAITING_APPROVAL")
        live.wait_status(landed["id"], "COMPLETED")
        landed_branch = live.call("get_task", task_id=landed["id"])["branch"]
        waiting_branch = live.call("get_task", task_id=waiting["id"])["branch"]
        # The engine removes a landed task's worktree and branch just after COMPLETED (cleanup, at a lower CPU
        # priority): once that is done, a leftover branch whose work is in main is planted for uninstall to find.
        deadline = time.monotonic() + 20
        while git(repo, "branch", "--list", landed_branch) and time.monotonic() < deadline:
            time.sleep(0.05)
        git(repo, "branch", landed_branch, "main")
        before = porcelain(repo)

        refused = cli_in_process(env, "uninstall")  # no terminal, no --yes: nothing changes
        assert refused.returncode == 1 and "--yes" in refused.stderr
        assert "agentqueue" in json.loads(cursor.read_text())["mcpServers"] and live.process.poll() is None

        done = cli_in_process(env, "uninstall", "--yes")
        assert done.returncode == 0, done.stdout + done.stderr
        assert live.process.wait(timeout=20) == 0
    finally:
        stop_daemon(live)
    assert json.loads(cursor.read_text())["mcpServers"] == {"other": {"command": "x"}}
    desktop = json.loads((user / ".config" / "Claude" / "claude_desktop_config.json").read_text())
    assert desktop["mcpServers"] == {}
    branches = git(repo, "branch", "--format=%(refname:short)").splitlines()
    assert landed_branch not in branches and "feature/mine" in branches and "main" in branches
    assert waiting_branch in branches and "--purge deletes them" in done.stdout  # unmerged work is kept
    assert git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert porcelain(repo) == before and (repo / "notes.txt").read_text() == "the user's uncommitted work\n"
    assert home.exists() and f"Your data is kept in {home}" in done.stdout

    purged = cli_in_process(env, "uninstall", "--yes", "--purge")
    assert purged.returncode == 0, purged.stdout + purged.stderr
    assert not home.exists()
    branches = git(repo, "branch", "--format=%(refname:short)").splitlines()
    assert sorted(branches) == ["feature/mine", "main"] and (repo / "notes.txt").exists()


def test_doctor_and_uninstall_help_say_what_they_do() -> None:
    for command in ("doctor", "uninstall"):
        done = cli_in_process(dict(os.environ), command, "--help")
        assert done.returncode == 0 and len(done.stdout.split("\n\n")[1]) > 60, done.stdout


def test_uninstall_says_how_to_remove_the_install_the_readme_made(tmp_path: Path) -> None:
    """Issue 23: uninstall's closing advice matches the README's install (a venv and a link in ~/.local/bin)."""
    from agentqueue.cli.commands.uninstall import removal_advice

    user, base = tmp_path / "user", Path("/usr")
    venv = user / ".agentqueue-venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "agentqueue").write_text("#!/bin/sh\n")
    assert removal_advice(venv, base, user) == ("`rm -r ~/.agentqueue-venv` (its venv), or `pip uninstall "
                                                "agentqueue` in it.")
    (user / ".local" / "bin").mkdir(parents=True)
    (user / ".local" / "bin" / "agentqueue").symlink_to(venv / "bin" / "agentqueue")
    advice = removal_advice(venv, base, user)
    assert advice == "`rm -r ~/.agentqueue-venv ~/.local/bin/agentqueue` (its venv and the link on your PATH)."
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    assert "rm -r ~/.agentqueue-venv ~/.local/bin/agentqueue" in readme  # the same words in both places
    assert removal_advice(user / ".local" / "pipx" / "venvs" / "agentqueue", base, user) == \
        "`pipx uninstall agentqueue`."
    assert removal_advice(user / ".local" / "share" / "uv" / "tools" / "agentqueue", base, user) == \
        "`uv tool uninstall agentqueue`."
    assert removal_advice(base, base, user) == "`pip uninstall agentqueue`."
