"""Shared fixtures: a fresh AGENTQUEUE_HOME per test, the server built on it, clients in the current protocol era
(in both eras for the tests marked `both_eras`), and the cost markers that follow from fixtures."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

# Bytecode is cached even under PYTHONDONTWRITEBYTECODE=1 (set in many containers): without it every xdist worker
# rewrote the test modules' 3,000 asserts and compiled the package again, ~5 s of CPU each (design.md "Tests").
sys.dont_write_bytecode = False

import pytest
from mcp import Client
from mcp.types import ElicitRequestParams, ElicitResult

from agentqueue import daemon, paths
from agentqueue.server.app import BuiltServer, build
from agentqueue.services import Services

from . import cost_markers, slowdown
from .pg import PgServer, pg_binary
from .slowdown import scaled

# One factor for the whole run: the xdist workers, started after this, inherit it (tests/slowdown.py).
os.environ[slowdown.ENV] = str(slowdown.SLOWDOWN)


def pytest_report_header() -> str:
    return f"deadlines x{slowdown.SLOWDOWN} ({slowdown.ENV}; tests/slowdown.py)"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _check_each_schema_once() -> None:
    """The official client checks a tool's output schema against the JSON Schema metaschema on its first call of the
    tool in each session, ~15 ms a tool; the suite opens hundreds of sessions on the same schemas. A schema that
    passed once is not checked again in this process (one that fails still raises every time); results are still
    validated against it on every call."""
    from jsonschema.validators import Draft202012Validator

    check = Draft202012Validator.check_schema.__func__  # type: ignore[attr-defined]
    passed: set[str] = set()

    def check_schema(cls: Any, schema: Any, *args: Any, **kwargs: Any) -> None:
        if args or kwargs:  # a format checker of the caller's own: not the client's check, left as it is
            return check(cls, schema, *args, **kwargs)
        key = json.dumps(schema, sort_keys=True, default=repr)
        if key not in passed:
            check(cls, schema)
            passed.add(key)

    Draft202012Validator.check_schema = classmethod(check_schema)  # type: ignore[method-assign, assignment]


_check_each_schema_once()


# The loopback model mocks exist to feed the real agent CLIs: a test that uses one runs claude, codex or gemini.
MODEL_MOCKS = {"mock_api", "codex_api", "claude_env", "api"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Markers that follow from fixtures (pyproject lists them all; the rest are set in the test modules):
    `pg` on a test that runs on PostgreSQL (a `postgres` parameter, the `pg_server` fixture, or
    AGENTQUEUE_TEST_BACKEND=postgres for every test that uses `home`), `real_cli` on one fed by a model mock."""
    everywhere = os.environ.get("AGENTQUEUE_TEST_BACKEND") == "postgres"
    for item in items:
        params = getattr(item, "callspec", None)
        fixtures = set(getattr(item, "fixturenames", ()))
        if ((params is not None and "postgres" in params.params.values()) or "pg_server" in fixtures
                or (everywhere and "home" in fixtures)):
            item.add_marker(pytest.mark.pg)
        if fixtures & MODEL_MOCKS:
            item.add_marker(pytest.mark.real_cli)


def _daemons_under(root: Path) -> list[int]:
    """Pids of `agentqueue serve` processes whose AGENTQUEUE_HOME lies under `root`."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            if b"agentqueue" not in b" ".join(cmdline) or b"serve" not in cmdline:
                continue
            env = dict(item.split(b"=", 1) for item in (proc / "environ").read_bytes().split(b"\0") if b"=" in item)
        except OSError:
            continue
        home = env.get(b"AGENTQUEUE_HOME", b"").decode()
        if home and Path(home).is_relative_to(root):
            found.append(int(proc.name))
    return found


@pytest.fixture(autouse=True)
def no_daemon_left_behind(tmp_path: Path):
    """A test that starts a daemon must stop it: an orphan would keep serving a deleted home."""
    yield
    deadline = time.monotonic() + scaled(10)  # a stopped daemon releases its lock a moment before it exits
    while (orphans := _daemons_under(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in orphans:
        os.kill(pid, signal.SIGKILL)
    assert not orphans, f"daemon(s) {orphans} outlived the test"


@pytest.fixture(autouse=True)
def markers_tell_the_truth(request: pytest.FixtureRequest, tmp_path: Path):
    """With AGENTQUEUE_CHECK_MARKERS set, a test that starts a daemon, an agent CLI or Chromium must say so."""
    yield from cost_markers.check(request.node, tmp_path)


@pytest.fixture
def store_backend() -> str:
    """The store `home` uses. A module runs its tests on both backends by overriding this fixture with
    params=["sqlite", "postgres"]; PostgreSQL is then a fresh database on the session's real server.
    AGENTQUEUE_TEST_BACKEND=postgres runs every test that uses `home` on PostgreSQL."""
    return os.environ.get("AGENTQUEUE_TEST_BACKEND", "sqlite")


def on_both_backends() -> Any:
    """`store_backend = on_both_backends()` in a module runs its tests on SQLite and on PostgreSQL."""
    @pytest.fixture(params=["sqlite", "postgres"])
    def store_backend(request: pytest.FixtureRequest) -> str:
        return request.param
    return store_backend


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    if pg_binary("initdb") is None:
        pytest.skip("PostgreSQL server binaries not installed (.ci/run installs Debian's postgresql)")
    server = PgServer()
    yield server
    server.stop()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store_backend: str, request: pytest.FixtureRequest) -> Path:
    root = tmp_path / "aq-home"
    monkeypatch.setenv("AGENTQUEUE_HOME", str(root))
    if store_backend == "postgres":
        monkeypatch.setenv("AGENTQUEUE_DATABASE_URL", request.getfixturevalue("pg_server").database())
    else:
        monkeypatch.delenv("AGENTQUEUE_DATABASE_URL", raising=False)
    return root


@pytest.fixture
def agent_clis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The agent CLIs where the daemon looks: the real npm ones (.ci/run installs them), else stand-ins.

    For tests that register claude-code/codex/gemini agents without running them; create_agent
    refuses a CLI that isn't there.
    """
    from .third_party import npm_bin

    found = {}
    for name, variable in (("claude", "AGENTQUEUE_CLAUDE_BIN"), ("codex", "AGENTQUEUE_CODEX_BIN"),
                           ("gemini", "AGENTQUEUE_GEMINI_BIN")):
        path = npm_bin(name)
        if path is None:
            stand_in = tmp_path / "clis" / name
            stand_in.parent.mkdir(exist_ok=True)
            stand_in.write_text("#!/bin/sh\necho 'stand-in CLI for tests' >&2\nexit 1\n")
            stand_in.chmod(0o755)
            path = str(stand_in)
        monkeypatch.setenv(variable, path)
        found[name] = path
    return found


@pytest.fixture
def live_home(tmp_path: Path) -> Iterator[Path]:
    """A home for a real daemon (started by a plugin or `serve`); stopped after the test."""
    root = tmp_path / "home"
    yield root
    daemon.stop(root, timeout=15)


@pytest.fixture(scope="session")
def empty_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The SQLite file Services makes in a new home (every migration run, no rows), made once per process."""
    home = tmp_path_factory.mktemp("empty-database") / "home"
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.delenv("AGENTQUEUE_DATABASE_URL", raising=False)
        Services(home).close()
    return paths.db_path(home)


@pytest.fixture
def services(home: Path, store_backend: str, request: pytest.FixtureRequest) -> Services:
    if store_backend == "sqlite" and not paths.db_path(home).exists():
        # A copy of it: running the twelve migrations on an empty file cost every test ~15 ms of CPU.
        shutil.copy2(request.getfixturevalue("empty_database"), paths.db_path(paths.private_dir(home)))
    svc = Services(home)
    yield svc
    svc.close()


# The tests' clients list every tool, as `agentqueue mcp --toolsets all` does: most of them drive tools outside
# the default list a client gets without the flag (tests/test_toolsets.py covers that list and enable_toolsets).
EVERY_TOOL = {"toolsets": ["all"]}


@pytest.fixture
def built(services: Services) -> BuiltServer:
    """The server and its notifier, for a test that runs an engine beside it (as the daemon does)."""
    return build(services, EVERY_TOOL)


@pytest.fixture
def server(built: BuiltServer):
    return built.mcp


ERAS = ("legacy", "modern")  # 2025-11-25 handshake, and 2026-07-28 sessionless (the current era)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test marked `both_eras` (it is about the protocol) runs in both eras; any other test that connects
    runs once, in the current era. A test that parametrizes `era` itself keeps its own list."""
    if "era" not in metafunc.fixturenames or metafunc.definition.get_closest_marker("both_eras") is None:
        return
    if any("era" in _argnames(mark) for mark in metafunc.definition.iter_markers("parametrize")):
        return
    metafunc.parametrize("era", ERAS, indirect=True)


def _argnames(mark: pytest.Mark) -> list[str]:
    names = mark.args[0] if mark.args else mark.kwargs.get("argnames", "")
    return [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)


@pytest.fixture
def era(request: pytest.FixtureRequest) -> str:
    """The protocol era a test's clients speak: "modern" unless the test is marked `both_eras`."""
    return getattr(request, "param", "modern")


async def person_says_yes(context: Any, params: ElicitRequestParams) -> ElicitResult:
    """The person at the client: every question the policy asks (e.g. before a push) is accepted."""
    return ElicitResult(action="accept", content={"approve": True})


@pytest.fixture
async def client(server, era: str) -> AsyncIterator[Client]:
    """The official client as a person uses it: it supports elicitation, and the person answers yes."""
    async with Client(server, mode="legacy" if era == "legacy" else "auto",
                      elicitation_callback=person_says_yes) as c:
        yield c


def db_snapshot(services: Services) -> str:
    """Every row of every table, for asserting that a refused call changed nothing.

    The audit log is left out: it records every call, a refused one too (tests/test_audit.py checks it).
    """
    store = services.store
    if store.backend == "postgres":
        tables = sorted(t for t in store.db.table_names() if t != "audit_log")
        return "\n".join(f"{t}: {row}" for t in tables for row in sorted(map(repr, store.all(f'SELECT * FROM "{t}"'))))
    conn = sqlite3.connect(store.path)
    try:
        return "\n".join(line for line in conn.iterdump() if not line.startswith('INSERT INTO "audit_log"'))
    finally:
        conn.close()


async def ok(client: Client, tool: str, **args) -> dict:
    """Call a tool that must succeed; returns its structured result."""
    result = await client.call_tool(tool, args)
    text = result.content[0].text if result.content else ""
    assert not result.is_error, f"{tool}({args}) failed: {text}"
    assert isinstance(result.structured_content, dict), f"{tool} returned no structured content"
    return result.structured_content


async def fail(client: Client, tool: str, **args) -> str:
    """Call a tool that must be refused with a tool error; returns the error text."""
    result = await client.call_tool(tool, args)
    assert result.is_error, f"{tool}({args}) unexpectedly succeeded: {result.structured_content}"
    return result.content[0].text
