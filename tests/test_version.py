"""The version that changes (issue 34): the package metadata's release, with the commit when AgentQueue runs from a
git checkout, shown by `--version`, `status`, `doctor`, the daemon's /health and the board's footer. It said 0.1.0
before and after 631 commits."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agentqueue import daemon
from agentqueue.version import checkout_commit, release_tuple, version

from .cli_helpers import cli_env, run_cli, start_daemon, stop_daemon

SHA = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"


def checkout(root: Path) -> Path:
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'agentqueue'\n")
    (root / ".git" / "refs" / "heads").mkdir(parents=True)
    return root


def test_a_checkouts_commit_is_read_from_its_git_files(tmp_path: Path) -> None:
    root = checkout(tmp_path / "repo")
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".git" / "refs" / "heads" / "main").write_text(SHA + "\n")
    assert checkout_commit(str(root)) == SHA
    (root / ".git" / "refs" / "heads" / "main").unlink()  # after `git gc`: only in packed-refs
    (root / ".git" / "packed-refs").write_text(f"# pack-refs with: peeled\n{OTHER} refs/heads/other\n"
                                               f"{SHA} refs/heads/main\n")
    assert checkout_commit(str(root)) == SHA
    (root / ".git" / "HEAD").write_text(OTHER + "\n")  # detached
    assert checkout_commit(str(root)) == OTHER
    (root / ".git" / "HEAD").write_text("ref: refs/heads/new\n")  # a branch with no commit yet
    assert checkout_commit(str(root)) is None


def test_a_worktrees_commit_is_read_through_its_gitdir_file(tmp_path: Path) -> None:
    main = checkout(tmp_path / "repo")
    (main / ".git" / "refs" / "heads" / "feature").write_text(SHA + "\n")
    private = main / ".git" / "worktrees" / "wt"
    private.mkdir(parents=True)
    (private / "HEAD").write_text("ref: refs/heads/feature\n")
    (private / "commondir").write_text("../..\n")
    tree = tmp_path / "wt"
    tree.mkdir()
    (tree / "pyproject.toml").write_text("")
    (tree / ".git").write_text(f"gitdir: {private}\n")
    assert checkout_commit(str(tree)) == SHA


def test_an_install_is_no_checkout(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()  # a .git without our pyproject.toml beside the package (a venv inside a repo)
    assert checkout_commit(str(tmp_path)) is None


def test_release_numbers_order_versions() -> None:
    assert release_tuple("0.2.0+g0123456789ab") == (0, 2, 0) > release_tuple("0.1.0")
    assert release_tuple("1.10rc1") == (1, 10) and release_tuple("0+unknown") == (0,)


def test_the_release_is_the_package_metadatas(tmp_path: Path) -> None:
    """`--version` reads the metadata the install has (a dist-info first on the path names another release)."""
    dist = tmp_path / "site" / "agentqueue-9.8.7.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: agentqueue\nVersion: 9.8.7\n\nThe README.\n")
    done = subprocess.run([sys.executable, "-m", "agentqueue", "--version"], capture_output=True, text=True,
                          timeout=60, env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0 and done.stdout.startswith("agentqueue 9.8.7"), done.stdout + done.stderr


def test_this_processs_version_names_the_checkout_it_runs_from() -> None:
    import agentqueue

    package = Path(agentqueue.__file__).resolve().parent
    commit = checkout_commit(str(package.parent))
    if commit is None:
        assert "+g" not in version()  # an install: the release alone
        return
    head = subprocess.run(["git", "-C", str(package.parent), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert version().endswith(f"+g{head.stdout.strip()[:12]}")
    assert agentqueue.__version__ == version()


@pytest.mark.daemon
@pytest.mark.integration
def test_every_surface_shows_the_version(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "aq", tmp_path / "user")
    shown = run_cli(env, "--version")
    assert shown.returncode == 0
    expected = shown.stdout.strip().removeprefix("agentqueue ")
    assert expected == version()  # the CLI's subprocess and this one run the same code
    live = start_daemon(env, "--port", "0")
    try:
        info = daemon.read_daemon_info(live.home)
        assert info["version"] == expected
        base = info["http_url"].removesuffix("/mcp")
        with urllib.request.urlopen(base + "/health", timeout=30) as answer:
            assert json.loads(answer.read())["version"] == expected
        try:
            urllib.request.urlopen(base + "/login", timeout=30)
        except urllib.error.HTTPError as refused:  # no login code: the login page, with the footer
            page = refused.read().decode()
        assert f'<footer class="foot">AgentQueue {expected}</footer>' in page
        status = json.loads(run_cli(env, "status", "--json").stdout)
        assert status["version"] == status["daemon"]["version"] == expected
        assert status["daemon"]["code"]["relation"] == "same"
        assert f"AgentQueue {expected}" in run_cli(env, "status").stdout
        doctor = json.loads(run_cli(env, "doctor", "--json").stdout)
        assert doctor["version"] == expected and "daemon version" not in {c["name"] for c in doctor["checks"]}
    finally:
        stop_daemon(live)


def test_a_daemons_code_is_older_or_newer_than_the_installed_one() -> None:
    from agentqueue.cli.daemon_code import DaemonCode, relation

    assert relation("0.2.0", "0.2.0") == "same"
    assert relation("0.1.0", "0.2.0") == relation("", "0.2.0") == "older"  # "": a daemon too old to say
    assert relation("0.2.0+g0123456789ab", "0.2.0+gfedcba987654") == "older"  # a checkout that moved on
    assert relation("0.3.0", "0.2.0+g0123456789ab") == "newer"
    older = DaemonCode(pid=7, version="0.1.0", installed="0.2.0", relation="older", schema=11).advice() or ""
    assert older.startswith("The daemon runs older code than the one installed; run `agentqueue restart-daemon`")
    newer = DaemonCode(pid=7, version="0.3.0", installed="0.2.0", relation="newer", schema=20).advice() or ""
    assert "newer code" in newer and "install that AgentQueue again" in newer
