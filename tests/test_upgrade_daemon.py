"""An upgrade as a person does it (issue 34), with real processes: a daemon of an older commit of this repository
runs with tasks waiting and a client connected, the installed code is replaced under it (as `pip install -U`
replaces the files of an install), and the new terminal must then

- never migrate the store that the still-running old daemon holds (every command that reads the store, doctor,
  `mcp --standalone`);
- say "the daemon runs older code than the one installed; run `agentqueue restart-daemon`" in status and doctor, and
  never claim a wall the old daemon lacks (the old code has no sandbox: doctor said "every run is contained");
- `agentqueue restart-daemon`: the old daemon re-executes itself from the installed code, which keeps a copy of the
  store at its old schema, logs the migration and migrates it; the connected client keeps its session and every row
  is still there.

The old code is `git archive` of OLD_COMMIT (schema 11, no sandbox: the three-week-old main issue 34 started from);
an install is a folder on PYTHONPATH whose `agentqueue` link points at the code of one version or the other. A
daemon that refuses a store newer than its code is here too.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mcp import Client, StdioServerParameters

from agentqueue import daemon, paths
from agentqueue.store.sqlite import SCHEMA_VERSION, SqliteStore

from .cli_helpers import cli_env, start_daemon, stop_daemon, wait_until
from .conftest import person_says_yes
from .git_fixtures import make_repo
from .slowdown import scaled

pytestmark = [pytest.mark.daemon, pytest.mark.integration, pytest.mark.anyio]

OLD_COMMIT = "ae636c3"  # schema 11, version 0.1.0, no sandbox, restart_daemon and the plugin's reconnect already there
OLD_SCHEMA = 11
ROOT = Path(__file__).resolve().parents[1]


def _old_commit_available() -> bool:
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        return False
    return subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{OLD_COMMIT}^{{commit}}"],
                          capture_output=True).returncode == 0


def old_code(dest: Path) -> Path:
    """The `agentqueue` package as OLD_COMMIT laid it out when installed (mcp_server/, with tools/ and prompts/)."""
    src = dest.parent / "old-src"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", OLD_COMMIT, "mcp_server", "tools", "prompts"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    (src / "mcp_server").rename(dest)
    (src / "tools").rename(dest / "tools")
    (src / "prompts").rename(dest / "prompts")
    return dest


def this_code(dest: Path) -> Path:
    """The `agentqueue` package of this checkout, as an install lays it out (links to its files)."""
    dest.mkdir()
    for entry in (ROOT / "mcp_server").iterdir():
        if entry.name != "__pycache__":
            (dest / entry.name).symlink_to(entry)
    (dest / "tools").symlink_to(ROOT / "tools")
    (dest / "prompts").symlink_to(ROOT / "prompts")
    return dest


@dataclass
class Install:
    """A folder on PYTHONPATH holding `agentqueue`, a link switched from one version's code to another's."""

    site: Path

    def use(self, code: Path) -> None:
        link = self.site / "agentqueue"
        fresh = self.site / ".agentqueue.next"
        fresh.symlink_to(code)
        os.replace(fresh, link)  # as an upgrade replaces the installed files, while the daemon runs


@pytest.fixture
def upgrade(tmp_path: Path) -> Iterator[tuple[Install, dict[str, str], Path, Path]]:
    if not _old_commit_available():
        pytest.skip(f"needs this repository's history (commit {OLD_COMMIT}): a clone, not an sdist")
    install = Install(tmp_path / "site")
    install.site.mkdir()
    old, new = old_code(tmp_path / "old-agentqueue"), this_code(tmp_path / "new-agentqueue")
    home = tmp_path / "aq"
    env = cli_env(home, tmp_path / "user", PYTHONPATH=str(install.site), AGENTQUEUE_PORT="0")
    yield install, env, old, new
    daemon.stop(home, timeout=30)


def terminal(env: dict[str, str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The installed `agentqueue` (whatever the install's link points at now), as a person types it."""
    return subprocess.run([sys.executable, "-P", "-m", "agentqueue", *args], env=env, capture_output=True, text=True,
                          timeout=scaled(120), stdin=subprocess.DEVNULL, cwd=cwd)


def schema_of(path: Path) -> int:
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def counts(path: Path) -> dict[str, int]:
    """Rows per table: what must survive the upgrade."""
    conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
                                             "'sqlite_%' AND name NOT IN ('task_counts', 'daemon_lease', 'daemons')")]
        return {t: int(conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]) for t in tables}
    finally:
        conn.close()


# What grows by itself (a tool call is audited, an event recorded, a setting noted): compared as "no fewer".
GROWING = {"events", "audit_log", "settings"}


def kept(rows: dict[str, int], like: dict[str, int] | None = None) -> dict[str, int]:
    """The counts of the person's data: every table but those that grow by themselves (only `like`'s tables)."""
    return {t: rows[t] for t in (like or rows) if t not in GROWING}


async def call(client: Client, tool: str, args: dict) -> dict:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def test_an_upgrade_under_a_running_older_daemon(upgrade, tmp_path: Path) -> None:
    install, env, old, new = upgrade
    home = Path(env["AGENTQUEUE_HOME"])
    store = paths.db_path(home)
    install.use(old)
    serve = subprocess.Popen([sys.executable, "-P", "-m", "agentqueue", "serve", "--no-http"], env=env, cwd=tmp_path,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: serve.poll() is not None or (daemon.read_daemon_info(home) and paths.socket_path(home).exists()),
               60, "the old daemon to start")
    assert serve.poll() is None, "the old daemon exited"
    # The plugin waits out the restart for as long as a slow machine takes (then it would start a daemon itself).
    plugin = StdioServerParameters(command=sys.executable, args=["-P", "-m", "agentqueue", "mcp"],
                                   env={**env, "AGENTQUEUE_CONNECT_TIMEOUT": str(scaled(120))}, cwd=str(tmp_path))
    async with Client(plugin, mode="legacy", elicitation_callback=person_says_yes) as client:
        # The old daemon's queue, paused so that nothing runs (its runs would be unsandboxed): tasks waiting.
        await call(client, "orchestrator_control", {"action": "pause"})
        await call(client, "create_project", {"name": "Legacy"})
        repo = make_repo(tmp_path / "r")
        await call(client, "add_repo", {"source": "link", "project_id": "legacy", "path": str(repo), "name": "app"})
        await call(client, "create_agent", {"name": "worker", "agent_type": "command", "command": "true"})
        first = await call(client, "create_task", {"title": "First", "description": "d", "project_id": "legacy"})
        second = await call(client, "create_task", {"title": "Second", "description": "d", "project_id": "legacy",
                                                    "depends_on": [first["id"]]})
        await call(client, "write_note", {"title": "Plan", "content": "keep me", "project_id": "legacy"})
        await call(client, "create_hook", {"name": "Nightly", "project_id": "legacy", "action": "create_task",
                                           "trigger": {"type": "cron", "cron": "0 6 * * *"},
                                           "task_template": {"title": "t", "description": "d"}})
        await call(client, "set_project_channel", {"project_id": "legacy", "channel_id": "c1", "channel_name": "x"})
        before = counts(store)
        assert schema_of(store) == OLD_SCHEMA and before["tasks"] == 2

        install.use(new)  # the upgrade: the old daemon keeps running its old code

        # No terminal command migrates the store under it, and each says what to do.
        for args in (["status"], ["status", "--json"], ["tasks"], ["show", first["id"]], ["logs", first["id"]],
                     ["projects"], ["usage"], ["diff", first["id"]], ["doctor", "--json"], ["mcp", "--standalone"]):
            done = terminal(env, *args, cwd=tmp_path)
            assert "Traceback" not in done.stderr, (args, done.stderr)
            assert schema_of(store) == OLD_SCHEMA, f"agentqueue {' '.join(args)} migrated the old daemon's store"
            assert not list(home.glob("agentqueue.schema-*.db")), args
            said = " ".join((done.stdout + done.stderr).split())
            if args[0] not in ("status", "doctor"):
                assert done.returncode != 0 and "run `agentqueue restart-daemon`" in said, (args, said)
        status = json.loads(terminal(env, "status", "--json", cwd=tmp_path).stdout)
        older = "The daemon runs older code than the one installed; run `agentqueue restart-daemon`"
        assert any(w.startswith(older) for w in status["warnings"]), status["warnings"]
        assert status["daemon"]["code"]["relation"] == "older" and status["daemon"]["code"]["version"] == "0.1.0"
        assert status["store"] == {"schema": OLD_SCHEMA, "installed_schema": SCHEMA_VERSION, "migrated": False}
        assert status["tasks"]["by_status"]["READY"] == 1 and status["tasks"]["by_status"]["DEFINED"] == 1
        doctor = json.loads(terminal(env, "doctor", "--json", cwd=tmp_path).stdout)
        checks = {c["name"]: c for c in doctor["checks"]}
        assert checks["daemon version"]["detail"].startswith(older[0].lower() + older[1:])
        # The old daemon has no sandbox: nothing may say its runs are contained.
        assert checks["sandbox"]["level"] == "fail" and "every run" not in checks["sandbox"]["detail"]
        assert checks["walls"]["level"] == "fail" and "sandbox" in checks["walls"]["detail"]
        assert "restart-daemon" in checks["walls"]["fix"]

        # The terminal form of restart_daemon: the old daemon re-executes into the installed code.
        done = terminal(env, "restart-daemon", "--yes", cwd=tmp_path)
        said = " ".join(done.stdout.split())
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"migrated from schema {OLD_SCHEMA} to {SCHEMA_VERSION}" in said and "(it ran 0.1.0)" in said, said
        info = daemon.read_daemon_info(home)
        assert info["pid"] == serve.pid and info["schema"] == SCHEMA_VERSION and "sandbox" in info["walls"]

        # The same client, the same session, every row.
        projects = await call(client, "list_projects", {})
        assert [p["id"] for p in projects["projects"]] == ["legacy"]
        assert (await call(client, "get_task", {"task_id": second["id"]}))["depends_on"] == [first["id"]]
        after = counts(store)
        assert kept(after, before) == kept(before) and all(after[t] >= n for t, n in before.items())

    assert schema_of(store) == SCHEMA_VERSION
    [copy] = home.glob(f"agentqueue.schema-{OLD_SCHEMA}.*.db")
    assert schema_of(copy) == OLD_SCHEMA and kept(counts(copy)) == kept(before)
    log = (home / "logs" / "agentqueue.log").read_text()
    assert f"migrating from schema version {OLD_SCHEMA} to {SCHEMA_VERSION}" in log and copy.name in log
    doctor = json.loads(terminal(env, "doctor", "--json", cwd=tmp_path).stdout)
    checks = {c["name"]: c for c in doctor["checks"]}
    assert "daemon version" not in checks and "walls" not in checks
    assert "reports no sandbox" not in checks["sandbox"]["detail"]


def test_a_daemon_refuses_a_store_newer_than_its_code(tmp_path: Path) -> None:
    home = tmp_path / "aq"
    store = paths.db_path(paths.private_dir(home))
    SqliteStore(store, migrate_to=SCHEMA_VERSION - 1).close()
    SqliteStore(store).close()  # an upgrade, which kept the store at the older schema beside it
    [copy] = home.glob(f"agentqueue.schema-{SCHEMA_VERSION - 1}.*.db")
    conn = sqlite3.connect(store)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")  # then a newer AgentQueue ran on it
    conn.close()
    env = cli_env(home, tmp_path / "user", AGENTQUEUE_PORT="0")
    done = subprocess.run([sys.executable, "-m", "agentqueue", "serve", "--no-http"], env=env, capture_output=True,
                          text=True, timeout=scaled(120), stdin=subprocess.DEVNULL)
    assert done.returncode == paths.EXIT_CANNOT_START, done.stderr
    said = " ".join(done.stderr.split())
    assert f"has schema version {SCHEMA_VERSION + 1}, newer than this AgentQueue" in said and "Traceback" not in said
    assert "nothing was changed" in said and "pip install -U agentqueue" in said
    assert f"agentqueue restore {copy}" in said, said  # the way back to this version's data
    assert schema_of(store) == SCHEMA_VERSION + 1 and not daemon.lock_is_held(home)
    # Taking it: the copy goes back in place (the newer store kept aside), and the daemon starts on it.
    restored = subprocess.run([sys.executable, "-m", "agentqueue", "restore", str(copy), "--yes"], env=env,
                              capture_output=True, text=True, timeout=scaled(120), stdin=subprocess.DEVNULL)
    assert restored.returncode == 0, restored.stderr
    [aside] = home.glob("agentqueue.before-restore.*.db")
    assert schema_of(aside) == SCHEMA_VERSION + 1 and schema_of(store) == SCHEMA_VERSION - 1
    live = start_daemon(env)
    try:
        assert daemon.read_daemon_info(home)["schema"] == SCHEMA_VERSION
    finally:
        stop_daemon(live)
