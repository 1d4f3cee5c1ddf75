"""Issue 8, the defects a newcomer hit before any agent work landed, each tested the way it was found.

Real processes throughout: the venv's `agentqueue` script (what client configs name), the daemon it
starts, the real `claude mcp list` health check, a pseudo-terminal for a person typing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentqueue import daemon, paths

from .processes import Terminal, alive
from .third_party import npm_bin

pytestmark = [pytest.mark.daemon, pytest.mark.integration]

SCRIPT = Path(sys.executable).parent / "agentqueue"  # the console script pip put beside this venv's python
CLAUDE = npm_bin("claude")

INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}


def shadowing_project(root: Path) -> Path:
    """A client's cwd with top-level packages named like ours, each of which fails loudly if imported."""
    for name in ("mcp_server", "agentqueue", "tools", "prompts"):
        package = root / name
        package.mkdir(parents=True)
        for module in ("__init__.py", "__main__.py"):
            (package / module).write_text(f"raise SystemExit('shadowed by {package}')\n")
    return root


def minimal_env(home: Path, **extra: str) -> dict[str, str]:
    """What a GUI client gives the servers it launches: hardly anything."""
    return {"PATH": "/usr/bin:/bin", "AGENTQUEUE_HOME": str(home), "AGENTQUEUE_PORT": "0", **extra}


def initialize_through(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 60) -> tuple[dict, float]:
    """Start a plugin, send `initialize`, return the first answer and how long it took."""
    started = time.monotonic()
    plugin = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    try:
        answer, _ = plugin.communicate(json.dumps(INITIALIZE).encode() + b"\n", timeout=timeout)
    finally:
        if plugin.poll() is None:
            plugin.kill()
    first = answer.splitlines()[0] if answer.strip() else b"{}"
    return json.loads(first), time.monotonic() - started


def test_a_folder_named_like_our_packages_in_the_clients_cwd_cannot_shadow_autostart(live_home: Path,
                                                                                     tmp_path: Path) -> None:
    project = shadowing_project(tmp_path / "their-project")
    answer, _ = initialize_through([str(SCRIPT), "mcp"], project, minimal_env(live_home))
    assert answer.get("result", {}).get("serverInfo", {}).get("name") == "agentqueue", answer
    info = daemon.read_daemon_info(live_home)
    assert info is not None and alive(info["pid"])
    # The daemon runs from a fixed directory, not from wherever the client happened to be.
    assert Path(os.readlink(f"/proc/{info['pid']}/cwd")) == live_home.resolve()


def test_a_daemon_that_dies_at_start_is_reported_at_once_with_its_own_words(live_home: Path,
                                                                          tmp_path: Path) -> None:
    live_home.mkdir(parents=True)
    paths.db_path(live_home).write_bytes(b"this is not sqlite, it is a text file someone saved here\n" * 100)
    env = minimal_env(live_home, AGENTQUEUE_CONNECT_TIMEOUT="60")
    answer, elapsed = initialize_through([str(SCRIPT), "mcp"], tmp_path, env)
    message = answer["error"]["message"]
    assert "not a usable AgentQueue database" in message and ".broken" in message, message
    assert "Traceback" not in message
    assert elapsed < 30, f"the plugin waited {elapsed:.1f} s as if it had lost a start race"
    assert paths.db_path(live_home).read_bytes().startswith(b"this is not sqlite")  # never touched


def test_serve_on_a_corrupt_database_says_one_sentence_and_exits(live_home: Path) -> None:
    live_home.mkdir(parents=True)
    paths.db_path(live_home).write_bytes(b"garbage" * 1000)
    done = subprocess.run([str(SCRIPT), "serve", "--no-http"], env=minimal_env(live_home), capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == paths.EXIT_CANNOT_START
    assert "not a usable AgentQueue database" in done.stderr and "mv " in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")
@pytest.mark.real_cli
def test_claude_mcp_list_health_checks_leave_no_error_in_the_daemon_log(live_home: Path, tmp_path: Path) -> None:
    user_home = tmp_path / "user"
    user_home.mkdir()
    env = {**os.environ, "HOME": str(user_home), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    entry = {"type": "stdio", "command": str(SCRIPT), "args": ["mcp"],
             "env": {"AGENTQUEUE_HOME": str(live_home), "AGENTQUEUE_PORT": "0"}}
    subprocess.run([CLAUDE, "mcp", "add-json", "-s", "user", "agentqueue", json.dumps(entry)], env=env,
                   check=True, capture_output=True, timeout=60)
    for _ in range(3):  # each check connects, lists the tools and hangs up mid-answer
        listed = subprocess.run([CLAUDE, "mcp", "list"], cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=120)
        assert "✔ Connected" in listed.stdout, listed.stdout + listed.stderr
    log = (paths.logs_dir(live_home) / "agentqueue.log").read_text()
    assert " ERROR " not in log and "Traceback" not in log, log[-3000:]


def test_agentqueue_mcp_typed_in_a_terminal_explains_itself_and_ctrl_c_exits_cleanly(live_home: Path) -> None:
    with Terminal([str(SCRIPT), "mcp"], minimal_env(live_home), foreground=True) as term:
        term.read_until(b"Ctrl-C")
        assert b"agentqueue install claude-code" in term.seen, term.text
        term.process.send_signal(signal.SIGINT)  # what Ctrl-C sends to the foreground process
        assert term.process.wait(timeout=10) == 130
        term.drain()
    text = term.text
    assert "Traceback" not in text and "Fatal Python error" not in text, text


def test_the_default_agent_appears_on_the_first_start_that_finds_claude(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from agentqueue.services import Services

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("AGENTQUEUE_CLAUDE_BIN", raising=False)
    home = tmp_path / "aq"
    first = Services(home)
    assert "no `claude` CLI found" in (first.agents.bootstrap_default() or "")
    assert first.agents.list()[1] == 0
    first.close()
    claude = tmp_path / "bin" / "claude"  # the newcomer installs claude, then the daemon starts again
    claude.parent.mkdir()
    claude.write_text("#!/bin/sh\nexit 0\n")
    claude.chmod(0o755)
    monkeypatch.setenv("PATH", str(claude.parent))
    again = Services(home)
    assert "Registered agent 'claude'" in (again.agents.bootstrap_default() or "")
    with again.store.transaction() as db:  # the user removes it: it must stay removed
        db.execute("DELETE FROM agents")
    assert again.agents.bootstrap_default() is None and again.agents.list()[1] == 0
    again.close()
