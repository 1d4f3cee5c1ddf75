"""The real process model: `agentqueue mcp` plugins piping to one `agentqueue serve` daemon.

Spawns real processes on a temporary AGENTQUEUE_HOME and talks to them with the official client.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from agentqueue import daemon, paths

from .cli_helpers import HEAVY_FOR_A_LAUNCH
from .conftest import person_says_yes
from .processes import alive, own_children, wait_for
from .slowdown import scaled

pytestmark = [pytest.mark.daemon, pytest.mark.anyio, pytest.mark.integration]


def plugin_env(home: Path) -> dict[str, str]:
    return {**os.environ, "AGENTQUEUE_HOME": str(home), "AGENTQUEUE_PORT": "0"}


def plugin_params(home: Path) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"], env=plugin_env(home))


def raw_plugin_after_initialize(home: Path) -> subprocess.Popen:
    """A plugin process driven over raw pipes, its `initialize` answered by the daemon."""
    plugin = subprocess.Popen([sys.executable, "-m", "agentqueue", "mcp"], env=plugin_env(home),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    plugin.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}).encode()
        + b"\n")
    plugin.stdin.flush()
    answer = json.loads(plugin.stdout.readline())
    assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "agentqueue"
    return plugin


def daemon_pid(home: Path) -> int:
    info = daemon.read_daemon_info(home)
    assert info is not None, "the daemon wrote no daemon.json"
    return int(info["pid"])


async def call(client: Client, tool: str, args: dict) -> dict:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def test_two_connections_share_data_but_not_active_project(live_home: Path) -> None:
    async with Client(plugin_params(live_home), mode="legacy") as first:
        await call(first, "create_project", {"name": "Alpha"})
        await call(first, "set_active_project", {"project_id": "alpha"})
        async with Client(plugin_params(live_home)) as second:  # 2026-07-28 era on the same daemon
            await call(second, "create_project", {"name": "Beta"})
            await call(second, "set_active_project", {"project_id": "beta"})
            in_alpha = await call(first, "create_task", {"title": "A", "description": "task for alpha"})
            in_beta = await call(second, "create_task", {"title": "B", "description": "task for beta"})
            assert in_alpha["project_id"] == "alpha"
            assert in_beta["project_id"] == "beta"
            # Both connections see everything the daemon holds.
            for client in (first, second):
                projects = await call(client, "list_projects", {})
                assert {p["id"] for p in projects["projects"]} == {"alpha", "beta"}
                task = await call(client, "get_task", {"task_id": in_beta["id"]})
                assert task["title"] == "B"
    # Exactly one daemon served both plugins.
    assert daemon.lock_is_held(live_home)
    assert alive(daemon_pid(live_home))


async def test_killing_the_plugin_leaves_daemon_and_data(live_home: Path) -> None:
    async with Client(plugin_params(live_home), mode="legacy") as client:
        await call(client, "create_project", {"name": "Keep Me"})
        created = await call(client, "create_task", {"title": "survive", "description": "d",
                                                     "project_id": "keep-me"})
    pid = daemon_pid(live_home)
    plugin = raw_plugin_after_initialize(live_home)
    plugin.send_signal(signal.SIGKILL)  # mid-session, no goodbye
    plugin.wait(timeout=10)
    await anyio.sleep(0.3)
    assert alive(pid)
    async with Client(plugin_params(live_home)) as client:
        task = await call(client, "get_task", {"task_id": created["id"]})
        assert task["title"] == "survive"
    assert daemon_pid(live_home) == pid


def test_second_daemon_refuses_with_a_clear_message(live_home: Path) -> None:
    first = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--no-http"], env=plugin_env(live_home),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not paths.daemon_info_path(live_home).exists():
        assert time.monotonic() < deadline, "daemon did not start"
        assert first.poll() is None, "daemon exited"
        time.sleep(0.05)
    second = subprocess.run([sys.executable, "-m", "agentqueue", "serve", "--no-http"], env=plugin_env(live_home),
                            capture_output=True, text=True, timeout=60)
    assert second.returncode == paths.EXIT_ALREADY_RUNNING
    assert "already running" in second.stderr and "agentqueue stop" in second.stderr
    stop = subprocess.run([sys.executable, "-m", "agentqueue", "stop"], env=plugin_env(live_home),
                          capture_output=True, text=True, timeout=60)
    assert stop.returncode == 0, stop.stdout
    assert first.wait(timeout=15) == 0
    assert not daemon.lock_is_held(live_home)
    assert not paths.socket_path(live_home).exists()
    assert not paths.daemon_info_path(live_home).exists()


async def test_http_requires_the_token_and_serves_both_eras(live_home: Path) -> None:
    async with Client(plugin_params(live_home)) as client:  # starts the daemon
        await call(client, "create_project", {"name": "Web"})
    info = daemon.read_daemon_info(live_home)
    url = info["http_url"]
    token = paths.token_path(live_home).read_text().strip()
    assert oct(paths.token_path(live_home).stat().st_mode & 0o777) == "0o600"
    async with httpx2.AsyncClient() as http:
        health = await http.get(url.removesuffix("/mcp") + "/health")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        denied = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert denied.status_code == 401
        wrong = await http.post(url, json={}, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        wrong_case = await http.post(url, json={}, headers={"Authorization": f"bearer {token.upper()}"})
        assert wrong_case.status_code == 401  # the scheme is case-insensitive, the token is not
    for scheme in ("bearer", "BEARER"):  # RFC 7235: any case of the scheme is the same scheme
        transport = streamable_http_client(url, http_client=httpx2.AsyncClient(
            headers={"Authorization": f"{scheme} {token}"}))
        async with Client(transport, mode="legacy") as client:
            assert (await call(client, "list_projects", {}))["projects"][0]["id"] == "web"
    async with httpx2.AsyncClient() as http:
        rebinding = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                    headers={"Authorization": f"Bearer {token}", "Host": "evil.example:80",
                                             "Content-Type": "application/json",
                                             "Accept": "application/json, text/event-stream"})
        assert rebinding.status_code in (400, 403, 421)
    for mode in ("legacy", "auto"):
        transport = streamable_http_client(url, http_client=httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {token}"}))
        async with Client(transport, mode=mode) as client:
            projects = await call(client, "list_projects", {})
            assert [p["id"] for p in projects["projects"]] == ["web"]


async def test_sigterm_stops_the_daemon_cleanly(live_home: Path) -> None:
    async with Client(plugin_params(live_home)) as client:
        await call(client, "create_project", {"name": "Stop"})
    pid = daemon_pid(live_home)
    os.kill(pid, signal.SIGTERM)
    with anyio.fail_after(scaled(15)):
        while alive(pid) and daemon.lock_is_held(live_home):
            await anyio.sleep(0.05)
    assert not paths.socket_path(live_home).exists()
    # The next plugin starts a fresh daemon that has the data.
    async with Client(plugin_params(live_home)) as client:
        projects = await call(client, "list_projects", {})
        assert [p["id"] for p in projects["projects"]] == ["stop"]
    assert daemon_pid(live_home) != pid


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_restart_daemon_reexecutes_and_the_client_session_survives(live_home: Path, mode: str) -> None:
    async with Client(plugin_params(live_home), mode=mode, elicitation_callback=person_says_yes) as client:
        await call(client, "create_project", {"name": "Survivor"})
        before = daemon.read_daemon_info(live_home)
        assert (await call(client, "restart_daemon", {}))["status"] == "restarting"
        with anyio.fail_after(scaled(30)):
            while True:  # exec keeps the pid; a new daemon.json says it started again
                info = daemon.read_daemon_info(live_home)
                if info and info["started_at"] != before["started_at"] and paths.socket_path(live_home).exists() \
                        and not paths.restart_marker(live_home).exists():
                    break
                await anyio.sleep(0.1)
        assert info["pid"] == before["pid"]
        # The same client, same session: the plugin reconnected and replayed the handshake.
        with anyio.fail_after(scaled(30)):
            projects = await call(client, "list_projects", {})
        assert [p["id"] for p in projects["projects"]] == ["survivor"]
        events = await call(client, "get_recent_events", {"event_type": "daemon.restarting"})
        assert len(events["events"]) == 1


# Put first on a daemon's PYTHONPATH: its first start waits AQ_TEST_DELAY_SECONDS (a slow machine's start), once.
DELAYED_START = """
import os, time
once = os.environ.get("AQ_TEST_DELAY_ONCE", "")
if once and b"serve" in open("/proc/self/cmdline", "rb").read().split(b"\\0") and os.path.exists(once):
    os.unlink(once)
    time.sleep(float(os.environ["AQ_TEST_DELAY_SECONDS"]))
"""


async def test_a_2026_client_keeps_its_era_across_a_restart_after_a_slow_first_start(
        live_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon's first start outlasts the client's `server/discover` probe (10 s in the SDK; 1 s here, with a
    4 s start): the client then sends `initialize`, is refused (the connection is the 2026 era's already), and
    probes again. After restart_daemon, the plugin must not replay that `initialize` on the new connection, which
    would make it a handshake-era connection that refuses every request of the client's."""
    import mcp.client.session

    monkeypatch.setattr(mcp.client.session, "DISCOVER_TIMEOUT_SECONDS", 1.0)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(DELAYED_START)
    once = tmp_path / "delay-once"
    once.touch()
    env = {**plugin_env(live_home), "PYTHONPATH": str(site), "AQ_TEST_DELAY_ONCE": str(once),
           "AQ_TEST_DELAY_SECONDS": "4"}
    params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"], env=env)
    async with Client(params, mode="auto", elicitation_callback=person_says_yes) as client:
        assert not once.exists(), "the daemon's start was not delayed"
        assert client.session._discover_result is not None, "the client did not settle on the 2026 era"
        await call(client, "create_project", {"name": "Slow"})
        before = daemon.read_daemon_info(live_home)
        assert (await call(client, "restart_daemon", {}))["status"] == "restarting"
        await wait_for(lambda: (info := daemon.read_daemon_info(live_home)) is not None
                       and info["started_at"] != before["started_at"] and paths.socket_path(live_home).exists()
                       and not paths.restart_marker(live_home).exists(), 60, "the restarted daemon")
        with anyio.fail_after(scaled(60)):
            projects = await call(client, "list_projects", {})
        assert [p["id"] for p in projects["projects"]] == ["slow"]


async def test_a_restart_slower_than_the_plugins_connect_timeout_is_waited_for_not_raced(
        live_home: Path, tmp_path: Path) -> None:
    """A busy machine re-executes the daemon in more than AGENTQUEUE_CONNECT_TIMEOUT (2 s here; the restart takes
    6 s): the plugin keeps waiting for the restarting process, which still lives, instead of starting a second
    daemon that would race it for the home's lock."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(DELAYED_START)
    once = tmp_path / "delay-once"
    env = {**plugin_env(live_home), "PYTHONPATH": str(site), "AQ_TEST_DELAY_ONCE": str(once),
           "AQ_TEST_DELAY_SECONDS": "6"}
    serve = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--no-http"], env=env,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        await wait_for(lambda: serve.poll() is not None or paths.socket_path(live_home).exists(), 60, "the daemon")
        assert serve.poll() is None, "the daemon exited at start"
        params = StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"],
                                       env={**env, "AGENTQUEUE_CONNECT_TIMEOUT": "2"})
        async with Client(params, elicitation_callback=person_says_yes) as client:
            await call(client, "create_project", {"name": "Patient"})
            before = daemon.read_daemon_info(live_home)
            once.touch()  # the re-executed daemon's start is the slow one
            assert (await call(client, "restart_daemon", {}))["status"] == "restarting"
            await wait_for(lambda: not once.exists(), 60, "the restart to begin (its delayed start took the file)")
            with anyio.fail_after(scaled(90)):
                projects = await call(client, "list_projects", {})  # through the plugin's reconnect
            assert [p["id"] for p in projects["projects"]] == ["patient"]
        after = daemon.read_daemon_info(live_home)
        assert after["pid"] == before["pid"] == serve.pid and after["started_at"] != before["started_at"]
        log = (live_home / "logs" / "plugin.log").read_text()
        assert "starting one" not in log, log  # no second daemon was started while the first one restarted
    finally:
        daemon.stop(live_home, timeout=scaled(15))
        serve.wait(timeout=scaled(15))


async def test_a_plugin_that_notices_the_restart_late_still_reconnects(live_home: Path) -> None:
    """The plugin may see its connection drop only after the new daemon is up and the marker gone."""
    async with Client(plugin_params(live_home), elicitation_callback=person_says_yes) as client:
        await call(client, "create_project", {"name": "Late"})
        [plugin] = own_children("agentqueue", "mcp")
        before = daemon.read_daemon_info(live_home)
        assert (await call(client, "restart_daemon", {}))["status"] == "restarting"
        os.kill(plugin, signal.SIGSTOP)  # the plugin is descheduled through the whole restart
        try:
            await wait_for(lambda: (info := daemon.read_daemon_info(live_home)) is not None
                           and info["started_at"] != before["started_at"]
                           and not paths.restart_marker(live_home).exists(), 30, "the restarted daemon")
        finally:
            os.kill(plugin, signal.SIGCONT)
        with anyio.fail_after(scaled(30)):
            projects = await call(client, "list_projects", {})
        assert [p["id"] for p in projects["projects"]] == ["late"]


async def test_after_agentqueue_stop_the_plugin_exits_instead_of_restarting(live_home: Path) -> None:
    plugin = raw_plugin_after_initialize(live_home)
    stopped, message = daemon.stop(live_home)
    assert stopped, message
    assert plugin.wait(timeout=15) == 0
    assert not daemon.lock_is_held(live_home)


def test_a_daemon_starts_while_status_probes_its_lock(live_home: Path) -> None:
    """`agentqueue status --watch` probes the lock every second; a daemon starting then must not give up."""
    import threading

    stop_probing = threading.Event()

    def probe() -> None:
        while not stop_probing.is_set():
            daemon.lock_is_held(live_home)

    live_home.mkdir(parents=True)
    probers = [threading.Thread(target=probe, daemon=True) for _ in range(2)]
    for thread in probers:
        thread.start()
    try:
        for _ in range(3):
            server = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--no-http"],
                                      env=plugin_env(live_home), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            deadline = time.monotonic() + scaled(30)
            while not paths.daemon_info_path(live_home).exists():
                assert server.poll() is None, f"the daemon gave up: {server.stderr.read().decode()}"
                assert time.monotonic() < deadline, "daemon did not start"
                time.sleep(0.02)
            stopped, message = daemon.stop(live_home)
            assert stopped, message
            assert server.wait(timeout=15) == 0
    finally:
        stop_probing.set()


def imported(stderr: str) -> set[str]:
    """The modules a `python -X importtime` run loaded, from its stderr."""
    return {line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")} \
        - {"package"}  # the header line's last column


def test_a_client_launch_against_a_running_daemon_loads_nothing_heavy(live_home: Path) -> None:
    """A whole session (initialize, tools/list, a tool call) through a real plugin: what it imported, beyond
    what the bare interpreter loads at start, holds none of the modules a launch has no use for."""
    raw_plugin_after_initialize(live_home).communicate(timeout=30)  # starts the daemon: a later launch finds it
    bare = subprocess.run([sys.executable, "-X", "importtime", "-c", "pass"], capture_output=True, text=True,
                          timeout=60)
    messages = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                    "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "get_status", "arguments": {}}}]
    plugin = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "agentqueue", "mcp", "--read-only"],
                              env=plugin_env(live_home), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    answers: dict[int, dict] = {}
    for message in messages:
        plugin.stdin.write(json.dumps(message) + "\n")
        plugin.stdin.flush()
        if "id" in message:  # one request at a time, as a client waits for the handshake
            while message["id"] not in answers:
                answer = json.loads(plugin.stdout.readline())
                answers[answer["id"]] = answer
    out, err = plugin.communicate(timeout=30)
    assert plugin.returncode == 0, err
    listed = {t["name"] for t in answers[2]["result"]["tools"]}
    assert "get_status" in listed and "create_task" not in listed  # --read-only reached the daemon
    assert not answers[3]["result"].get("isError"), answers[3]
    loaded = imported(err) - imported(bare.stderr)
    assert "agentqueue.daemon.relay" in loaded, err[-2000:]
    assert not {m for n in loaded for m in (n, n.split(".")[0])} & HEAVY_FOR_A_LAUNCH, sorted(loaded)


def plugin_in(home: Path, cwd: Path) -> StdioServerParameters:
    """The plugin as a client launches it from a folder (Claude Code: the project the person opened)."""
    return StdioServerParameters(command=sys.executable, args=["-m", "agentqueue", "mcp"], env=plugin_env(home),
                                 cwd=str(cwd))


async def test_a_clients_folder_resolves_relative_paths_and_keeps_its_active_project(live_home: Path,
                                                                                     tmp_path: Path) -> None:
    """Issue 23: `add_repo path="."` means the folder the person's client runs in (it was refused, and the data
    folder is no answer); and a client's next connection from the same folder starts with the active project it
    set, while another folder or another client does not."""
    from mcp_types import Implementation

    from .git_fixtures import make_repo

    app, elsewhere = make_repo(tmp_path / "code" / "app"), tmp_path / "elsewhere"
    elsewhere.mkdir()
    live_home.mkdir()
    (live_home / "config.toml").write_text(f'[files]\nroots = ["{tmp_path}"]\n')  # the folders it may use
    cursor, desktop = Implementation(name="cursor", version="1"), Implementation(name="claude-desktop", version="1")
    async with Client(plugin_in(live_home, app), client_info=cursor) as client:
        await call(client, "create_project", {"name": "App"})
        repo = await call(client, "add_repo", {"project_id": "app", "source": "link", "path": "."})
        assert Path(repo["checkout_path"]) == app.resolve() or repo["checkout_path"] == str(app)
        sub = await client.call_tool("create_project", {"name": "Docs", "workspace": "../../notes"})
        assert not sub.is_error and sub.structured_content["workspace"] == str(tmp_path / "notes")
        await call(client, "set_active_project", {"project_id": "app"})
    async with Client(plugin_in(live_home, app), client_info=cursor) as again:  # the same client, same folder
        task = await call(again, "create_task", {"title": "T", "description": "runs in app"})
        assert task["project_id"] == "app"
    for where, who in ((elsewhere, cursor), (app, desktop)):  # another folder; another client
        async with Client(plugin_in(live_home, where), client_info=who) as other:
            refused = await other.call_tool("create_task", {"title": "T", "description": "which project?"})
            assert refused.is_error and "No project_id given" in refused.content[0].text
    async with Client(plugin_in(live_home, app), client_info=cursor) as cleared:  # clearing is remembered too
        await call(cleared, "set_active_project", {})
    async with Client(plugin_in(live_home, app), client_info=cursor) as after:
        refused = await after.call_tool("create_task", {"title": "T", "description": "which project?"})
        assert refused.is_error and "No project_id given" in refused.content[0].text
