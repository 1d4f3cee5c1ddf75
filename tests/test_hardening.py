"""Issue 10's findings, each with the regression test that failed before its fix.

The standing classes (fuzzing, load) live in their own files; this one holds the single findings.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import anyio
import pytest

from agentqueue.board import data
from agentqueue.services.ids import TaskIds, new_task_id

from .conftest import fail, ok
from .slowdown import scaled

pytestmark = pytest.mark.anyio


async def test_a_catastrophic_regex_cannot_freeze_the_daemon(client, services, tmp_path):
    """`(a+)+$` over 40 `a`s and a `!` backtracked for hours in Python's `re`, under the daemon's lock."""
    workspace = tmp_path / "ws"
    services.projects.create("Demo", workspace=str(workspace))
    (workspace / "evil.txt").write_text("a" * 40 + "!\n" + "plain line\n")
    with anyio.fail_after(scaled(20)):  # a hang detector, not a speed target: the old engine needed ~2^40 steps
        async with anyio.create_task_group() as tg:
            found: dict = {}

            async def search() -> None:
                found.update(await ok(client, "search_files", pattern="(a+)+$", path=str(workspace)))
            tg.start_soon(search)
            # Other calls are answered meanwhile.
            assert (await ok(client, "list_projects"))["projects"][0]["id"] == "demo"
    assert found["results"] == [] and found["note"] is None
    # A real regex still works, and one RE2 cannot take (a backreference) is searched for literally, with a note.
    hits = await ok(client, "search_files", pattern=r"^pl\w+ line$", path=str(workspace))
    assert hits["results"] == ["evil.txt:2:plain line"]
    literal = await ok(client, "search_files", pattern=r"(a)\1", path=str(workspace))
    assert literal["results"] == [] and "backreferences" in literal["note"] and "literally" in literal["note"]


# -- notes: no lost appends, no way out through a link ------------------------------------------------

async def test_concurrent_appends_are_all_kept(services, tmp_path):
    services.projects.create("Demo", workspace=str(tmp_path / "ws"))

    def append(n: int) -> None:
        services.notes.append("demo", "Log", f"entry {n}")

    async with anyio.create_task_group() as tg:  # 8 writers at once, as 8 clients' worker threads
        for n in range(200):
            tg.start_soon(anyio.to_thread.run_sync, append, n)
    text = services.notes.read("demo", "Log")["content"]
    assert sorted(int(line.split()[1]) for line in text.splitlines() if line.startswith("entry")) == list(range(200))


async def test_notes_never_follow_a_link_out(client, services, tmp_path):
    workspace = tmp_path / "ws"
    services.projects.create("Demo", workspace=str(workspace))
    outside = tmp_path / "outside.md"
    outside.write_text("# Secret\n\nTOP SECRET\n")
    (workspace / "notes").mkdir(parents=True)
    (workspace / "notes" / "leak.md").symlink_to(outside)
    text = await fail(client, "append_note", title="leak", content="more", project_id="demo")
    assert "symbolic link" in text
    assert outside.read_text() == "# Secret\n\nTOP SECRET\n"
    assert "TOP SECRET" not in json.dumps(await ok(client, "list_notes", project_id="demo"))
    assert "No note 'leak'" in await fail(client, "read_note", title="leak", project_id="demo")
    # A notes folder that is itself a link is refused for every operation.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "x.md").write_text("# X\n\nelsewhere\n")
    for entry in (workspace / "notes").iterdir():
        entry.unlink()
    (workspace / "notes").rmdir()
    (workspace / "notes").symlink_to(elsewhere)
    for tool, args in (("list_notes", {}), ("read_note", {"title": "x"}),
                       ("write_note", {"title": "y", "content": "c"}),
                       ("append_note", {"title": "x", "content": "c"}), ("delete_note", {"title": "x"})):
        assert "symbolic link" in await fail(client, tool, project_id="demo", **args), tool
    assert sorted(p.name for p in elsewhere.iterdir()) == ["x.md"]


# -- races on names, and ids that outlive their task -----------------------------------------------

async def test_two_racing_add_repo_calls_one_wins_and_its_checkout_stays(services):
    services.projects.create("Demo")
    for round_ in range(6):
        name = f"dup{round_}"
        outcomes: list[object] = []

        def add(name: str = name, outcomes: list[object] = outcomes) -> None:
            try:
                outcomes.append(services.repos.add("demo", "init", name=name))
            except Exception as error:  # noqa: BLE001 (the test inspects what came back)
                outcomes.append(error)
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, add)
            tg.start_soon(anyio.to_thread.run_sync, add)
        errors = [o for o in outcomes if isinstance(o, Exception)]
        assert len(errors) == 1 and "already exists" in str(errors[0]), outcomes
        repo = services.repos.get(name)
        assert (Path(repo.checkout_path) / ".git").is_dir(), "the loser removed the winner's checkout"


async def test_a_taken_name_is_always_already_exists_never_an_internal_error(client, services):
    services.projects.create("Demo")
    hook = {"project_id": "demo", "trigger": {"type": "periodic", "interval_seconds": 3600},
            "action": "create_task", "task_template": {"title": "t", "description": "d"}}

    async def create(name: str) -> str:
        result = await client.call_tool("create_hook", {"name": name, **hook})
        return "ok" if not result.is_error else result.content[0].text
    for round_ in range(5):
        async with anyio.create_task_group() as tg:
            answers: list[str] = []
            for _ in range(4):
                tg.start_soon(_append, answers, create(f"h{round_}"))
        assert answers.count("ok") == 1 and all("already exists" in a for a in answers if a != "ok"), answers


async def _append(into: list[str], call) -> None:
    into.append(await call)


class _OldIdFirst(random.Random):
    """Draws the parts of `old` first, then random words: replays a collision with a deleted id."""

    def __init__(self, old: str) -> None:
        super().__init__(1)
        self.parts = old.split("-", 1)

    def choice(self, seq):  # type: ignore[override]
        return self.parts.pop(0) if self.parts else super().choice(seq)


def test_a_deleted_tasks_id_is_never_given_again(services):
    services.projects.create("Demo")
    first = services.tasks.create("demo", "Old", "the first task")
    services.tasks.delete(first.id)
    assert new_task_id(services.tasks.exists, _OldIdFirst(first.id)) == first.id  # what happened before
    fresh = new_task_id(services.tasks.was_used, _OldIdFirst(first.id))
    assert fresh != first.id and not services.tasks.was_used(fresh)


def test_task_ids_do_not_run_out_when_every_short_id_is_taken():
    """At a few hundred thousand tasks every word pair and two-digit suffix is used: ids get longer, not an error."""
    taken = lambda candidate: len(candidate.rsplit("-", 1)[-1]) <= 2 or not candidate.rsplit("-", 1)[-1].isdigit()
    fresh = new_task_id(taken)
    assert not taken(fresh) and fresh.count("-") == 2
    assert data.TASK_ID.fullmatch(fresh)  # the board's route still takes it


def test_task_ids_start_where_the_last_one_was_found():
    """A crowded store: once bare word pairs are all taken, the next id does not re-check twenty of them."""
    checked: list[str] = []

    def taken(candidate: str) -> bool:
        checked.append(candidate)
        return candidate.count("-") == 1  # every bare adjective-noun pair is used

    ids = TaskIds(taken)
    first = ids.new()
    assert first.count("-") == 2 and len(checked) == 21
    checked.clear()
    second = ids.new()
    assert second.count("-") == 2 and second != first and len(checked) == 1
    assert data.TASK_ID.fullmatch(second)


# -- two processes on one home -------------------------------------------------------------------------

WRITER = """
import sys
from pathlib import Path
from agentqueue.services import Services
svc = Services(Path(sys.argv[1]))
failed = 0
for n in range(150):
    try:
        svc.tasks.create("demo", f"{sys.argv[2]} {n}", "written by a second process")
    except Exception as error:
        failed += 1
        print(type(error).__name__, error, file=sys.stderr)
svc.close()
print(failed)
"""


def test_two_processes_write_one_home_without_lock_errors(services, home):
    """A daemon and a standalone server on one home: before BEGIN IMMEDIATE a quarter of writes failed."""
    import subprocess
    import sys

    services.projects.create("Demo")
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(home), name], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for name in ("one", "two", "three")]
    results = [w.communicate(timeout=120) for w in writers]
    assert [out.strip() for out, _ in results] == ["0", "0", "0"], [err[-500:] for _, err in results]
    assert services.store.scalar("SELECT count(*) FROM tasks") == 450


# -- private files, a private socket folder, the bearer scheme ----------------------------------------------

def test_the_home_and_what_it_holds_are_private(tmp_path):
    import stat

    from agentqueue import logs, paths
    from agentqueue.services import Services

    home = tmp_path / "aq"
    svc = Services(home)
    try:
        logs.configure(home, "modes")
        svc.projects.create("Demo")
        mode = lambda p: stat.S_IMODE(p.stat().st_mode)  # noqa: E731
        assert mode(home) == 0o700 and mode(paths.logs_dir(home)) == 0o700
        assert mode(paths.db_path(home)) == 0o600 and mode(paths.logs_dir(home) / "modes.log") == 0o600
        wal = paths.db_path(home).with_name(paths.db_path(home).name + "-wal")
        assert not wal.exists() or mode(wal) == 0o600
    finally:
        svc.close()
    home.chmod(0o755)  # a home made by an older version is tightened at the next start
    Services(home).close()
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


def test_a_long_home_puts_its_socket_in_a_private_folder_and_refuses_a_planted_one(tmp_path, monkeypatch):
    from agentqueue import paths

    long_home = tmp_path / ("x" * 120)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir(mode=0o700)
    sock = paths.socket_path(long_home)
    assert sock.parent == tmp_path / "run" / "agentqueue" and (sock.parent.stat().st_mode & 0o077) == 0
    # Another user's (here: an open) folder at that place is refused, not used.
    planted = tmp_path / "run" / "agentqueue"
    planted.chmod(0o777)
    with pytest.raises(paths.UnsafeRuntimeDir, match="not a private folder"):
        paths.socket_path(long_home)


# -- output is capped as it streams, not after it was all held -------------------------------------------

PEAK_MIB = """
def peak_mib():
    # VmHWM: this process image's peak resident memory (ru_maxrss would include the forking parent's)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
"""

MEASURE = PEAK_MIB + """
import sys
from pathlib import Path
from agentqueue.services import Services
svc = Services(Path(sys.argv[1]))
done = svc.files.run(sys.argv[2], Path(sys.argv[3]), 120)
print(len(done.stdout), peak_mib())
"""

AGENT_LINE = PEAK_MIB + """
import sys
from pathlib import Path
import anyio
from agentqueue.engine.adapters.base import RunSpec
from agentqueue.engine.adapters.command import CommandParser
from agentqueue.engine.runner import RunHandle, run_agent
from agentqueue.engine.watchdog import WatchdogLimits

async def main():
    spec = RunSpec(argv=["sh", "-c", "head -c 100000000 /dev/zero | tr '\\\\0' x; echo; echo after"], stdin=None)
    result = await run_agent(spec, Path(sys.argv[1]), CommandParser(), RunHandle(), Path(sys.argv[1]) / "task.log",
                             WatchdogLimits(stall_seconds=60, timeout_seconds=120), None)
    print(result.status, peak_mib())
anyio.run(main)
"""


def test_a_command_that_prints_300_mb_costs_the_daemon_no_more_than_a_small_buffer(home, tmp_path):
    """Before: `communicate()` held all of it (300 MB of output added ~860 MiB); now the cap applies as it reads."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", MEASURE, str(home), "head -c 300000000 /dev/zero", str(tmp_path)],
                          capture_output=True, text=True, timeout=180)
    kept, peak = map(int, done.stdout.split())
    assert kept < 50_100 and peak < 200, (kept, peak, done.stderr[-500:])


def test_a_100_mb_agent_line_is_dropped_as_it_streams(tmp_path):
    """The engine's reader held a whole line before looking at it: one 100 MB line cost ~380 MiB."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", AGENT_LINE, str(tmp_path)], capture_output=True, text=True,
                          timeout=180)
    status, peak = done.stdout.split()
    text = (tmp_path / "task.log").read_text()
    assert status == "completed" and "was dropped" in text and "after" in text, (done.stderr[-500:], text[-300:])
    assert int(peak) < 150, f"the reader peaked at {peak} MiB"


# -- hook templates are data for the shell, never code -------------------------------------------------

async def test_rendered_values_reach_a_shell_step_quoted(services, tmp_path):
    from agentqueue.engine.hook_runner import HookRunner

    workspace = tmp_path / "ws"
    services.projects.create("Web", workspace=str(workspace))
    marker_step, marker_event = tmp_path / "M1", tmp_path / "M2"
    hook = services.hooks.create(
        "web", "echoes", {"type": "periodic", "interval_seconds": 3600}, action="create_task",
        task_template={"title": "t", "description": "{{step_1}} / {{step_2}}"},
        context_steps=[
            {"type": "shell", "command": f"printf '%s' '$(touch {marker_step})'"},  # a hostile step output
            {"type": "shell", "command": "echo {{step_0}}"},
            {"type": "shell", "command": "echo {{event.title}}"},
        ])
    runner = HookRunner(services, services.home, listen=False)
    run_id = await anyio.to_thread.run_sync(runner.begin, hook, "event", None)
    status = await runner.execute(hook, run_id, {"title": f"$(touch {marker_event})", "payload": {}})
    assert status == "completed"
    assert not marker_step.exists() and not marker_event.exists()
    row = services.hooks.run_detail(run_id)
    assert f"$(touch {marker_step})" in json.dumps(row)  # the value arrived as text


# -- a bind beyond loopback needs a Host allow-list --------------------------------------------------------

@pytest.mark.daemon
async def test_serving_beyond_loopback_needs_an_allow_list_and_keeps_the_host_check(tmp_path):
    import os
    import subprocess
    import sys

    import httpx2

    from agentqueue import daemon, paths

    from .processes import wait_for

    home = tmp_path / "aq"
    env = {**os.environ, "AGENTQUEUE_HOME": str(home)}
    refused = subprocess.run([sys.executable, "-m", "agentqueue", "serve", "--host", "0.0.0.0", "--port", "0"],
                             env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "--allow-host" in refused.stderr and "allowed_hosts" in refused.stderr
    server = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--host", "0.0.0.0", "--port", "0",
                               "--allow-host", "box.lan"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        await wait_for(lambda: (daemon.read_daemon_info(home) or {}).get("http_url"), 30, "the daemon")
        port = daemon.read_daemon_info(home)["http_url"].rsplit(":", 1)[1].split("/")[0]
        token = paths.token_path(home).read_text().strip()
        ping = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
        async with httpx2.AsyncClient() as http:
            url = f"http://127.0.0.1:{port}/mcp"
            evil = await http.post(url, json=ping, headers={**headers, "Host": f"evil.example:{port}"})
            assert evil.status_code in (400, 403, 421), evil.status_code
            named = await http.post(url, json=ping, headers={**headers, "Host": f"box.lan:{port}"})
            assert named.status_code == 200 and "agentqueue" in named.text, (named.status_code, named.text[:200])
        assert "beyond this machine" in (paths.logs_dir(home) / "agentqueue.log").read_text()
    finally:
        daemon.stop(home, timeout=15)
        if server.poll() is None:
            server.kill()


# -- lines that are not one JSON-RPC message get a JSON-RPC error, from the plugin ---------------------------

@pytest.mark.daemon
def test_the_plugin_answers_what_the_sdk_would_leave_unanswered(tmp_path):
    import os
    import subprocess
    import sys

    from agentqueue import daemon

    home = tmp_path / "aq"
    plugin = subprocess.Popen([sys.executable, "-m", "agentqueue", "mcp"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              env={**os.environ, "AGENTQUEUE_HOME": str(home), "AGENTQUEUE_PORT": "0"})
    try:
        def ask(raw: bytes) -> dict:
            plugin.stdin.write(raw + b"\n")
            plugin.stdin.flush()
            return json.loads(plugin.stdout.readline())

        init = ask(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}}).encode())
        assert init["result"]["serverInfo"]["name"] == "agentqueue"
        plugin.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        assert ask(b"this is not json")["error"]["code"] == -32700
        assert ask(b'[{"jsonrpc": "2.0", "id": 2, "method": "ping"}]')["error"]["code"] == -32600
        cut_emoji = b'{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "create_project", ' \
                    b'"arguments": {"name": "x\\ud83d"}}}'
        answer = ask(cut_emoji)
        assert answer["id"] == 3 and answer["error"]["code"] == -32602 and "surrogate" in answer["error"]["message"]
        # The session goes on: a valid call right after is answered by the daemon.
        listed = ask(b'{"jsonrpc": "2.0", "id": 4, "method": "tools/list"}')
        assert listed["id"] == 4 and listed["result"]["tools"]
    finally:
        plugin.stdin.close()
        plugin.wait(timeout=15)
        daemon.stop(home, timeout=15)


# -- event hooks: every event runs, waits, or is recorded as skipped ----------------------------------------

def _emit(services, title: str) -> None:
    with services.store.transaction():
        services.store.add_event("task.completed", project_id="web", payload={"title": title})


async def _run_hooks_until(runner, condition, timeout: float) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(runner.run_forever)
        with anyio.fail_after(scaled(timeout)):
            while not condition():
                await anyio.sleep(0.1)
        tg.cancel_scope.cancel()


@pytest.mark.slow
async def test_events_during_a_run_wait_for_it_and_none_is_dropped(services, tmp_path):
    from agentqueue.engine.hook_runner import HookRunner

    services.projects.create("Web", workspace=str(tmp_path / "ws"))
    _emit(services, "before the hook existed")  # must not fire the hook created after it
    runner = HookRunner(services, services.home)
    hook = services.hooks.create("web", "slow", {"type": "event", "event_type": "task.completed"},
                                 action="create_task", cooldown_seconds=0,
                                 task_template={"title": "after {{event.title}}", "description": "d"},
                                 context_steps=[{"type": "shell", "command": "sleep 2"}])

    async def emit_four() -> None:
        for n in range(4):
            await anyio.to_thread.run_sync(_emit, services, f"e{n}")
            await anyio.sleep(0.4)
    async with anyio.create_task_group() as tg:
        tg.start_soon(emit_four)
        tg.start_soon(_run_hooks_until, runner,
                      lambda: len([r for r in services.hooks.runs(hook.id, 50) if r.status == "completed"]) >= 4, 40)
    runs = services.hooks.runs(hook.id, 50)
    assert sorted(r.status for r in runs) == ["completed"] * 4, [(r.status, r.skipped_reason) for r in runs]
    titles = sorted(t.title for t in services.tasks.list("web")[0])
    assert titles == [f"after e{n}" for n in range(4)]


async def test_events_inside_the_cooldown_are_recorded_as_skipped(services, tmp_path):
    from agentqueue.engine.hook_runner import HookRunner

    services.projects.create("Web", workspace=str(tmp_path / "ws"))
    runner = HookRunner(services, services.home)
    hook = services.hooks.create("web", "cool", {"type": "event", "event_type": "task.completed"},
                                 action="create_task", cooldown_seconds=3600,
                                 task_template={"title": "t {{event.title}}", "description": "d"})
    for n in range(3):
        _emit(services, f"e{n}")  # three in one tick
    await _run_hooks_until(runner, lambda: len(services.hooks.runs(hook.id, 50)) >= 3, 20)
    runs = services.hooks.runs(hook.id, 50)
    assert sorted(r.status for r in runs) == ["completed", "skipped", "skipped"]
    assert all("cooldown" in r.skipped_reason for r in runs if r.status == "skipped")


def test_an_unknown_step_flag_is_refused(services):
    from agentqueue.services.errors import InvalidInputError

    services.projects.create("Web")
    with pytest.raises(InvalidInputError, match="skip_if_ok"):
        services.hooks.create("web", "typo", {"type": "event", "event_type": "task.completed"}, action="create_task",
                              task_template={"title": "t", "description": "d"},
                              context_steps=[{"type": "shell", "command": "true", "skip_if_ok": True}])


# -- the jail holds against the caller: workspaces and linked repos outside the allowed roots ask ------------

@pytest.mark.both_eras
async def test_a_workspace_outside_the_roots_asks_and_the_home_is_never_one(server, services, home, tmp_path, era):
    from mcp import Client

    from agentqueue.settings import load

    code = tmp_path / "code"
    code.mkdir()
    (home / "config.toml").write_text(f'[files]\nroots = ["{code}"]\n')
    services.settings = load(home)  # what the next daemon start reads
    mode = "legacy" if era == "legacy" else "auto"
    async with Client(server, mode=mode) as cannot_ask:
        await ok(cannot_ask, "create_project", name="Inside", workspace=str(code / "inside"))
        text = await fail(cannot_ask, "create_project", name="Root", workspace="/")
        assert "outside the folders it may use" in text and "cannot ask" in text
        assert "outside_roots" in await fail(cannot_ask, "add_repo", project_id="inside", source="link",
                                             path=str(tmp_path))
    asked: list[str] = []

    async def person(context, params):
        from mcp.types import ElicitResult

        asked.append(params.message)
        return ElicitResult(action="accept", content={"approve": True})
    async with Client(server, mode=mode, elicitation_callback=person) as client:
        elsewhere = tmp_path / "elsewhere"
        await ok(client, "create_project", name="Elsewhere", workspace=str(elsewhere))
        assert len(asked) == 1 and str(elsewhere) in asked[0]
        # The home holds the database and the token: refused, whoever says yes.
        text = await fail(client, "create_project", name="Home", workspace=str(home))
        assert "never a workspace" in text
    assert sorted(p.id for p in services.projects.list()[0]) == ["elsewhere", "inside"]


# -- one policy governs every path that executes something ------------------------------------------------

async def test_the_run_command_deny_governs_command_agents_and_llm_hook_commands(client, services, tmp_path,
                                                                                 monkeypatch):
    from agentqueue.engine.hook_runner import HookRunner

    from .test_hooks import make_engine, run_engine_until

    services.projects.create("Web", workspace=str(tmp_path / "ws"))
    marker = tmp_path / "MARKER"
    sneaky = f"sh -c 'touch {marker}'"
    services.agents.create("sneaky", "command", command=sneaky)  # both defined before the deny
    hook = services.hooks.create("web", "model", {"type": "periodic", "interval_seconds": 3600}, action="llm",
                                 prompt_template="hi", llm_config={"agent_type": "command", "command": sneaky})
    monkeypatch.setenv("AGENTQUEUE_RUN_COMMAND", "deny")
    # Defining them now is refused...
    assert "denied" in await fail(client, "create_agent", name="again", agent_type="command", command=sneaky)
    assert "denied" in await fail(client, "create_hook", project_id="web", name="model2", action="llm",
                                  trigger={"type": "periodic", "interval_seconds": 3600}, prompt_template="hi",
                                  llm_config={"agent_type": "command", "command": sneaky})
    # ...and what was defined before is stopped when it would run.
    task = services.tasks.create("web", "Run it", "anything")
    engine = make_engine(services)
    await run_engine_until(engine, lambda: services.tasks.get(task.id).status == "BLOCKED", 20, "the task to block")
    assert "denied" in (services.tasks.get(task.id).reason or "") + json.dumps(services.tasks.results(task.id)[1],
                                                                                 default=str)
    run_id, status = await HookRunner(services, services.home, listen=False).fire(hook.id)
    assert status == "failed" and "denied" in json.dumps(services.hooks.run_detail(run_id))
    assert not marker.exists()


async def test_by_default_the_users_home_is_a_root_but_not_its_hidden_folders(server, services, tmp_path, monkeypatch):
    from mcp import Client

    user = tmp_path / "user"
    (user / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(user))
    async with Client(server) as cannot_ask:
        await ok(cannot_ask, "create_project", name="Code", workspace=str(user / "code" / "app"))
        text = await fail(cannot_ask, "create_project", name="Keys", workspace=str(user / ".ssh"))
        assert "outside_roots" in text and ".ssh" in text
