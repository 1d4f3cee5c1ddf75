"""`agentqueue chat` leaves on Ctrl-D (EOF) at once after a permission question was answered (issue 22): on a
pseudo-terminal and on piped stdin, with the REAL `claude` CLI on the loopback model mock and a real daemon."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cli_helpers import LiveDaemon, stop_daemon
from .mock_anthropic import MockAnthropic
from .test_chat import Chat, serve
from .test_engine_claude import CLAUDE, mock_api  # noqa: F401  (mock_api: fixture)

pytestmark = [pytest.mark.daemon, pytest.mark.real_cli, pytest.mark.integration,
              pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")]


@pytest.fixture
def live(tmp_path: Path, mock_api: MockAnthropic) -> Iterator[LiveDaemon]:  # noqa: F811
    daemon = serve(tmp_path, "--port", "0")
    yield daemon
    stop_daemon(daemon)


def test_ctrl_d_typed_while_the_reply_after_a_permission_answer_streams_exits(live: LiveDaemon,
                                                                              tmp_path: Path) -> None:
    """The person answers claude's question and presses Ctrl-D before the reply is over: the chat leaves once
    the reply ends (it used to sit at its next prompt: the terminal turned that Ctrl-D into a NUL byte)."""
    workdir = tmp_path / "here"
    workdir.mkdir()
    with Chat(live, cwd=workdir) as chat:
        chat.wait("you › ")
        chat.say("SCENARIO:run_cmd CMD[touch YES_MARKER]")
        chat.wait("claude wants to use Bash")
        chat.type(b"y\r")
        chat.wait("Allow? [y]es / [n]o / [a]lways: y")  # the answer was read; the reply goes on
        chat.type(b"\x04")
        started = time.monotonic()
        try:
            status = chat.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            status = None
        took = time.monotonic() - started
        chat.drain()
        print(f"exit after Ctrl-D: {took:.2f} s")
        assert status == 0, (status, chat.screen[-2000:])
        assert "Tool said: (Bash completed" in chat.screen and "Traceback" not in chat.screen
    assert (workdir / "YES_MARKER").exists()
    assert took < 15, took  # the reply's last model round trip, then claude's exit: seconds, not a hang


def test_ctrl_d_at_claudes_question_says_no_and_leaves_after_the_reply(live: LiveDaemon, tmp_path: Path) -> None:
    workdir = tmp_path / "here"
    workdir.mkdir()
    with Chat(live, cwd=workdir) as chat:
        chat.wait("you › ")
        chat.say("SCENARIO:run_cmd CMD[touch NO_MARKER]")
        chat.wait("claude wants to use Bash")
        chat.type(b"\x04")
        status = chat.process.wait(timeout=30)
        chat.drain()
        assert status == 0 and "Ctrl-D: no. The chat ends when this reply is over." in chat.screen, chat.screen
        assert "Tool said:" in chat.screen and "Tool said: (Bash completed" not in chat.screen
    assert not (workdir / "NO_MARKER").exists()


def test_piped_stdin_answer_then_eof_exits_at_once(live: LiveDaemon, tmp_path: Path) -> None:
    workdir = tmp_path / "here"
    workdir.mkdir()
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "agentqueue", "chat"], env=live.env, cwd=workdir,
                          input="SCENARIO:run_cmd CMD[touch PIPED_MARKER]\ny\n", capture_output=True, text=True,
                          timeout=120)
    took = time.monotonic() - started
    print(f"piped chat: {took:.2f} s")
    assert (workdir / "PIPED_MARKER").exists(), done.stdout + done.stderr
    assert done.returncode == 0 and "Tool said:" in done.stdout, done.stdout + done.stderr
