"""`agentqueue chat`: the REAL `claude` CLI driven as a terminal front end, against the loopback model mock
and a real daemon. The interactive chat runs on a pseudo-terminal (tests/processes.Terminal)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest

from .cli_helpers import AGENT_COMMAND, LiveDaemon, signals, cli_env, run_cli, start_daemon, stop_daemon, wait_until
from .mock_anthropic import USAGE, MockAnthropic
from .processes import Terminal
from .test_engine_claude import CLAUDE, mock_api  # noqa: F401  (mock_api: fixture)
from .slowdown import scaled

pytestmark = [pytest.mark.daemon, pytest.mark.real_cli, pytest.mark.integration,
              pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def serve(tmp_path: Path, *serve_args: str) -> LiveDaemon:
    env = cli_env(tmp_path / "aq", tmp_path / "user", AGENTQUEUE_CLAUDE_BIN=str(CLAUDE), CLAUDE_CODE_MAX_RETRIES="0")
    live = start_daemon(env, *serve_args)
    live.call("create_project", name="Demo")
    live.call("add_repo", source="init", project_id="demo", name="app")
    return live


@pytest.fixture
def live(tmp_path: Path, mock_api: MockAnthropic) -> Iterator[LiveDaemon]:  # noqa: F811
    daemon = serve(tmp_path, "--port", "0")
    yield daemon
    stop_daemon(daemon)


class Chat(Terminal):
    """`agentqueue chat` on a pseudo-terminal; `screen` is what a person sees, without the colours."""

    def __init__(self, live: LiveDaemon, *args: str, cwd: Path | None = None) -> None:
        super().__init__([sys.executable, "-m", "agentqueue", "chat", *args], live.env, foreground=True, cwd=cwd)

    @property
    def screen(self) -> str:
        return ANSI.sub("", self.text)

    def wait(self, needle: str, count: int = 1, timeout: float = 90) -> str:
        deadline = time.monotonic() + scaled(timeout)
        while self.screen.count(needle) < count and time.monotonic() < deadline:
            self.read_until(b"\0never\0", timeout=0.2)
        assert self.screen.count(needle) >= count, f"{needle!r} x{count} not seen; screen:\n{self.screen[-3000:]}"
        return self.screen

    def say(self, text: str) -> None:
        self.type(text.encode() + b"\r")

    def ctrl_c(self) -> None:
        """What a terminal does on Ctrl-C: SIGINT to its foreground process group (claude has its own)."""
        os.killpg(self.process.pid, signal.SIGINT)

    def leave(self) -> int:
        self.type(b"\x04")  # Ctrl-D at the prompt
        return self.process.wait(timeout=30)


def footer(turn_requests: int) -> str:
    """The footer of a turn that took `turn_requests` model requests (the mock reports USAGE each time)."""
    n = turn_requests
    return (f"{USAGE['input_tokens'] * n} in · {USAGE['output_tokens'] * n} out · "
            f"{USAGE['cache_read_input_tokens'] * n} cache read · "
            f"{USAGE['cache_creation_input_tokens'] * n} cache write tokens")


def chat_json(live: LiveDaemon, *args: str) -> dict:
    done = run_cli(live.env, "chat", *args, "--json", timeout=120)
    assert done.stdout, done.stderr
    return json.loads(done.stdout)


FOOTER = " tokens · $"  # a turn's footer: "… in · … out … tokens · $0.0012 · 1.3 s"


def test_two_turns_create_tasks_through_our_mcp_server(live: LiveDaemon, mock_api: MockAnthropic) -> None:  # noqa: F811
    one_turn = chat_json(live, "-p", "SCENARIO:chat_create TITLE[Priced alone]")  # what such a turn costs
    assert one_turn["tokens"] == {"input": 200, "output": 84, "cache_read": 50, "cache_write": 100}
    with Chat(live, "--project", "demo") as chat:
        chat.wait("you › ")
        chat.say("SCENARIO:chat_create TITLE[Write the login page]")
        screen = chat.wait(FOOTER)  # the turn's own footer (a queue line above the prompt never says it)
        chat.say("And SCENARIO:chat_create TITLE[Test the login page]")
        screen = chat.wait(FOOTER, 2)
        assert chat.leave() == 0
    tasks = live.call("list_tasks", project_id="demo", include_completed=True)["tasks"]  # an agent may be done
    titles = {t["title"] for t in tasks}
    assert {"Write the login page", "Test the login page"} <= titles, screen[-3000:]
    # Tool calls folded to one line each, results summarised, a footer per turn: two requests a turn.
    assert screen.count("⚙ create_task  project_id=demo  title=") == 2
    assert re.search(r"↳ id=[a-z]+-[a-z]+ status=\w+ title=Write the login page", screen), screen
    assert "Created: " in screen
    assert screen.count(footer(2)) == 2, screen
    # Cost: this turn's share of claude's cumulative total, the same as a lone turn of the same size.
    assert screen.count(f"· ${one_turn['cost_usd']:.6f} ·") == 2, (one_turn, screen)


def test_ctrl_c_interrupts_the_turn_and_the_session_goes_on(live: LiveDaemon, mock_api: MockAnthropic) -> None:  # noqa: F811
    with Chat(live) as chat:
        chat.wait("you › ")
        chat.ctrl_c()  # at an empty prompt: how to leave
        chat.wait("To leave: Ctrl-D or /exit")
        chat.say("SCENARIO:stall think for ever")
        wait_until(lambda: mock_api.messages_for("stall"), 60, "the model request")
        chat.ctrl_c()
        chat.wait("── interrupted")
        assert chat.process.poll() is None
        chat.say("Are you still there?")
        screen = chat.wait("Done: the task is finished.")
        chat.wait(FOOTER, 2)
        # The same conversation: the model is sent the interrupted message along with the new one.
        last = json.dumps(mock_api.requests[-1]["messages"])
        assert "think for ever" in last and "Are you still there?" in last
        assert chat.leave() == 0
    assert "Traceback" not in screen


def test_resume_continues_the_last_conversation_and_p_prints_for_scripts(live: LiveDaemon,
                                                                        mock_api: MockAnthropic) -> None:  # noqa: F811
    first = chat_json(live, "-p", "SCENARIO:plain remember BANANA")
    assert first["text"] == "Done: the task is finished." and not first["is_error"] and first["session_id"]
    assert first["tokens"]["output"] == USAGE["output_tokens"] and first["cost_usd"] > 0
    saved = live.home / "chat_session.json"
    assert saved.stat().st_mode & 0o777 == 0o600
    resumed = chat_json(live, "--resume", "-p", "what did I ask you to remember?")
    assert resumed["session_id"] == first["session_id"]
    sent = json.dumps(mock_api.requests[-1]["messages"])
    assert "remember BANANA" in sent and "what did I ask you to remember?" in sent
    plain = run_cli(live.env, "chat", "--resume", "-p", "once more", timeout=120)
    assert plain.returncode == 0 and plain.stdout == "Done: the task is finished.\n", plain.stderr
    # Interactive --resume: the next message goes to the same conversation.
    with Chat(live, "--resume") as chat:
        chat.wait("you › ")
        chat.say("and now?")
        chat.wait(FOOTER)
        assert chat.leave() == 0
    assert "remember BANANA" in json.dumps(mock_api.requests[-1]["messages"])


def test_a_missing_claude_an_auth_error_and_a_rate_limit_each_say_what_to_do(
        live: LiveDaemon, mock_api: MockAnthropic) -> None:  # noqa: F811
    nowhere = {k: v for k, v in live.env.items() if k != "AGENTQUEUE_CLAUDE_BIN"}
    bare = live.home / "bin"  # a PATH with git and no claude
    bare.mkdir()
    (bare / "git").symlink_to(shutil.which("git"))
    missing = run_cli({**nowhere, "PATH": str(bare)}, "chat", "-p", "hi")
    assert missing.returncode == 1 and "Claude Code CLI was not found" in missing.stderr, missing.stderr
    assert "npm install -g @anthropic-ai/claude-code" in missing.stderr and "Traceback" not in missing.stderr
    wrong = run_cli({**live.env, "AGENTQUEUE_CLAUDE_BIN": str(live.home / "no-claude")}, "chat", "-p", "hi")
    assert wrong.returncode == 1 and "no-claude" in wrong.stderr and "npm install" in wrong.stderr
    auth = run_cli(live.env, "chat", "-p", "SCENARIO:auth hi", timeout=120)
    assert auth.returncode == 1 and "Invalid API key" in auth.stderr and "log in" in auth.stderr, auth.stderr
    limited = chat_json(live, "-p", "SCENARIO:rate_limit hi")
    assert limited["is_error"] and limited["error_kind"] == "rate_limit" and "429" in limited["error"]
    assert "Wait a minute" in limited["error"]
    # In the interactive chat the error is shown and the conversation stays open.
    with Chat(live) as chat:
        chat.wait("you › ")
        chat.say("SCENARIO:rate_limit again")
        screen = chat.wait("Wait a minute")
        chat.wait("you › ", 2)
        assert chat.process.poll() is None and "Traceback" not in screen
        assert chat.leave() == 0


def test_an_agents_permission_request_is_answered_inline(tmp_path: Path, mock_api: MockAnthropic) -> None:  # noqa: F811
    live = serve(tmp_path, "--no-http")  # no HTTP: the chat polls the daemon's events over its socket
    try:
        live.call("create_agent", name="asker", agent_type="claude-code")
        with Chat(live) as chat:
            chat.wait("you › ")
            task = live.call("create_task", project_id="demo", title="Ask first", max_retries=0,
                             description="SCENARIO:run_cmd CMD[touch ASKED_MARKER]")
            screen = chat.wait("asks: Bash(touch ASKED_MARKER)", timeout=120)
            assert f"{task['id']} asks" in screen and "/allow req-" in screen
            chat.say("/allow")
            chat.wait(f"✔ {task['id']} completed: Ask first", timeout=120)
            assert chat.leave() == 0
        allowed = live.call("list_requests", status="allowed")["requests"]
        assert [(r["task_id"], r["decided_by"]) for r in allowed] == [(task["id"], "person")]
    finally:
        stop_daemon(live)


def test_a_task_finishing_while_the_chat_idles_prints_its_line(live: LiveDaemon) -> None:
    live.call("create_agent", name="worker", agent_type="command", command=AGENT_COMMAND)
    go = signals(live.home.parent) / "go"
    with Chat(live) as chat:
        chat.wait("you › ")
        task = live.call("create_task", project_id="demo", title="Quick one", agent_type="command",
                         description=f"WAITFOR {go}\nSAY done")
        live.wait_status(task["id"], "IN_PROGRESS")
        go.write_text("")
        chat.wait(f"✔ {task['id']} completed: Quick one", timeout=60)
        shown = time.time()
        event = live.call("get_recent_events", task_id=task["id"], event_type="task.completed")["events"][0]
        committed = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
        delay = shown - committed
        print(f"task.completed -> chat line: {delay:.3f} s")
        assert delay < 5, delay  # generous under a loaded machine; docs/benchmarks.md has the measured figure
        assert chat.leave() == 0


def test_claude_asks_before_its_own_tools_and_the_person_answers_yes_or_no(live: LiveDaemon, tmp_path: Path) -> None:
    """A tool outside AgentQueue's (Bash) is put to the person; yes runs it, no refuses it and the model is told."""
    workdir = tmp_path / "here"
    workdir.mkdir()
    with Chat(live, cwd=workdir) as chat:
        chat.wait("you › ")
        chat.say("SCENARIO:run_cmd CMD[touch YES_MARKER]")
        chat.wait("claude wants to use Bash")
        chat.type(b"y\r")
        chat.wait("Tool said:")
        assert (workdir / "YES_MARKER").exists()
        chat.wait("you › ", 2)  # the turn is over and the prompt is back, as a person sees before Ctrl-D
        assert chat.leave() == 0
    with Chat(live, cwd=workdir) as chat:  # a new conversation
        chat.wait("you › ")
        chat.say("SCENARIO:run_cmd CMD[touch NO_MARKER]")
        chat.wait("claude wants to use Bash")
        chat.type(b"n\r")
        screen = chat.wait("Tool said:")
        assert not (workdir / "NO_MARKER").exists()
        assert "Tool said: (Bash completed" not in screen  # the model was told it was refused
        chat.wait("you › ", 2)  # as above: Ctrl-D once the prompt is back, not mid-turn
        assert chat.leave() == 0
