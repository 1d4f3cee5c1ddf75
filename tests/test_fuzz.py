"""Property-based fuzzing of every tool's arguments, generated from the input schema the live server lists.

Each tool gets a fixed, derandomized batch of calls: values shaped by its schema (bounds, enums, the
seeded ids), plus wrong types, huge and non-finite numbers, and hostile strings (NUL, lone surrogates,
`..`, `-` prefixes, over the filesystem's and exec()'s limits). A call passes when it succeeds or is
refused with a message, and is never an internal error. After each tool's batch the database passes
`PRAGMA integrity_check` and the queue's invariants hold.

Safety: the client has no elicitation callback, so every tool the policy asks about (run_command,
pushes, edit_policy, delete_project, restart_daemon) is refused instead of acting. HOME and
AGENTQUEUE_HOME are in tmp, path-like arguments are drawn only from paths under tmp (never free
text: the tests may run as root), git may use the file protocol only, and hook steps are drawn from
harmless ones.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp.types import Tool

from agentqueue.server.app import build_server
from agentqueue.services import Services
from agentqueue.store.models import TaskStatusName

from .test_mcp_system import EXPECTED_TOOLS

from .conftest import EVERY_TOOL, on_both_backends

EXAMPLES = 50  # per tool; the whole file stays well under 90 s on two cores
SLOW = {"fire_hook": 6, "add_repo": 15}  # tools that start processes or wait
BIG = 2**63

# Strings an attacker or a careless client sends: NUL, lone surrogates, traversal, option injection,
# shell and template syntax, bidi controls, and lengths past the limits of names, paths and exec().
WEIRD_STRINGS = [
    "", " ", "\n", "\0", "a\0b", "\ud83d", "x\udfff", "..", "../..", "../../etc/passwd", "-", "-rf", "--help",
    "--upload-pack=touch pwned", "-oProxyCommand=touch pwned", "$(id)", "`id`", "'; DROP TABLE tasks; --",
    "{{step_0}}", "{{event.title}}", "%s%n", "\u202egnp.exe", "é" * 200, "x" * 300, "y" * 5000,
    "z" * 200_000, "HEAD", "@{-1}", "a..b", "refs/heads/x.lock", "task.*", "*", "[", "(a+)+$", "#",
]
JUNK = [None, True, False, 0, -1, BIG, -BIG, 2**31, 10**400, 1.5, -0.0, math.inf, -math.inf, math.nan, [], {},
        ["a", 1], {"a": {"b": []}}, "7"]
PATH_NAMES = {"path", "workspace", "working_dir", "specs_path", "url"}
STATUSES = set(get_args(TaskStatusName))

store_backend = on_both_backends()  # the store's suite: every test here runs on SQLite and on PostgreSQL



@dataclass
class World:
    tmp: Path
    services: Services
    portal: BlockingPortal
    client: Client
    tools: list[Tool]
    ids: dict[str, list[str]] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture
def world(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    """A home in tmp with a project, a repo, tasks in several states, an agent and a hook; the client."""
    user = tmp_path / "user"
    user.mkdir()
    monkeypatch.setenv("HOME", str(user))  # `~` and git's global config stay in tmp
    monkeypatch.setenv("GIT_ALLOW_PROTOCOL", "file")  # no clone or push may reach the network
    monkeypatch.setenv("GIT_TERMINAL_PROMPT", "0")
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for variable in ("AGENTQUEUE_CLAUDE_BIN", "AGENTQUEUE_CODEX_BIN", "AGENTQUEUE_GEMINI_BIN"):
        monkeypatch.setenv(variable, "/bin/false")  # an llm hook fired by the fuzzer runs nothing
    source = tmp_path / "source-repo"  # what clone may copy (file protocol)
    source.mkdir()
    _git(source, "init", "-q", "-b", "main")
    (source / "README.md").write_text("hello\n")
    _git(source, "add", "-A")
    _git(source, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "file.txt").write_text("a\nb\n")

    services = Services(home)
    services.projects.create("Alpha", workspace=str(workspace))
    services.projects.create("Beta")
    repo = services.repos.add("alpha", "init", name="code")
    ready = services.tasks.create("alpha", "ready", "d").id
    waiting = services.tasks.create("alpha", "waiting", "d", depends_on=[ready]).id
    running = services.tasks.create("alpha", "running", "d").id
    services.tasks.set_status(running, "IN_PROGRESS")
    blocked = services.tasks.create("alpha", "blocked", "d").id
    services.tasks.set_status(blocked, "BLOCKED")
    services.agents.create("Worker")
    hook = services.hooks.create("alpha", "Make work", {"type": "periodic", "interval_seconds": 3600},
                                 "create_task", task_template={"title": "t", "description": "d"})
    try:
        with start_blocking_portal("asyncio") as portal:
            client_cm = Client(build_server(services, EVERY_TOOL))  # no elicitation
            with portal.wrap_async_context_manager(client_cm) as client:
                tools = portal.call(client.list_tools).tools
                tasks = [ready, waiting, running, blocked]
                yield World(
                    tmp=tmp_path, services=services, portal=portal, client=client, tools=tools,
                    ids={"project_id": ["alpha", "beta"], "task_id": tasks, "repo_id": [repo.id],
                         "hook_id": [hook.id], "request_id": ["req-00000000"], "name": ["Alpha", "Worker", "code"],
                         "branch": ["main", "feature/x"], "depends_on": tasks},
                    paths=[str(workspace), str(workspace / "file.txt"), str(workspace / "new" / "dir"),
                           f"{workspace}/../ws", str(tmp_path / ("d" * 300)), f"{workspace}/a\0b",
                           str(tmp_path / ("é" * 200)), repo.checkout_path, str(source), f"file://{source}",
                           "rel/dir", "file.txt", "..", "-rf", "--upload-pack=touch pwned", "", " ",
                           "ext::sh -c touch% pwned", f"{workspace}/\ud83d"],
                )
    finally:
        services.close()


# -- strategies ------------------------------------------------------------------------------------
def _weird() -> st.SearchStrategy[Any]:
    return st.one_of(st.sampled_from(WEIRD_STRINGS), st.text(max_size=30))


def _known(name: str, world: World) -> list[str]:
    if name in world.ids:
        return world.ids[name]
    if "branch" in name or name in ("base", "into"):
        return world.ids["branch"]
    if name.endswith("_id"):
        return [v for values in world.ids.values() for v in values][:12]
    return []


def _json_value(depth: int = 2) -> st.SearchStrategy[Any]:
    leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), _weird())
    if depth == 0:
        return leaf
    inner = _json_value(depth - 1)
    # No key may be "command": a fuzzed llm_config or step must never name a program to run.
    keys = st.one_of(st.sampled_from(["type", "title", "description", "priority", "url", "path", "x"]),
                     st.text(max_size=8)).filter(lambda k: k != "command")
    return st.one_of(leaf, st.lists(inner, max_size=3), st.dictionaries(keys, inner, max_size=3))


SAFE_STEPS = [{"type": "shell", "command": "echo hi"}, {"type": "shell", "command": "printf %s {{event.title}}"},
              {"type": "read_file", "path": "file.txt"}, {"type": "read_file", "path": "../../../etc/passwd"},
              {"type": "http", "url": "http://127.0.0.1:9/"}, {"type": "git_diff"},
              {"type": "db_query", "query": "tasks_by_status"}, {"type": "shell", "timeout": BIG, "command": "true"}]
SAFE_TRIGGERS = [{"type": "periodic", "interval_seconds": 3600}, {"type": "periodic", "interval_seconds": BIG},
                 {"type": "periodic", "interval_seconds": math.inf}, {"type": "cron", "cron": "0 6 * * *"},
                 {"type": "cron", "cron": "99 * * * *"}, {"type": "event", "event_type": "task.completed"},
                 {"type": "event", "event_type": ""}, {"type": "nope"}]


def _special(name: str, world: World) -> st.SearchStrategy[Any] | None:
    """Parameters whose fuzzed values must stay harmless: paths, hook steps, configs."""
    if name in PATH_NAMES:
        return st.sampled_from(world.paths)
    if name == "context_steps":
        return st.lists(st.one_of(st.sampled_from(SAFE_STEPS), _json_value(1)), max_size=3)
    if name == "trigger":
        return st.one_of(st.sampled_from(SAFE_TRIGGERS), _json_value(1))
    if name in ("llm_config", "task_template"):
        template = st.fixed_dictionaries({"title": _weird(), "description": _weird()},
                                          optional={"priority": st.one_of(st.integers(), st.sampled_from(JUNK))})
        return st.one_of(template, _json_value(1))
    return None


def _from_schema(schema: dict[str, Any], name: str, world: World) -> st.SearchStrategy[Any]:
    """A value the schema allows (often one of the seeded ids), or near its edges."""
    if "anyOf" in schema:
        return st.one_of(*(_from_schema(s, name, world) for s in schema["anyOf"]))
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "const" in schema:
        return st.just(schema["const"])
    kind = schema.get("type")
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind in ("integer", "number"):
        low, high = schema.get("minimum"), schema.get("maximum")
        if schema.get("exclusiveMinimum") is not None:
            low = schema["exclusiveMinimum"] + (1 if kind == "integer" else 1e-9)
        edges = [v for v in (low, high) if v is not None]
        numbers = st.integers(min_value=low, max_value=high) if kind == "integer" else \
            st.floats(min_value=low, max_value=high, allow_nan=False)
        return st.one_of(numbers, st.sampled_from(edges)) if edges else numbers
    if kind == "string":
        known = _known(name, world)
        text = st.text(max_size=min(schema.get("maxLength", 60), 60))
        plain = st.sampled_from(["Fix the login page", "notes", "feature-1", "Nightly run", "#ops", "C-123"])
        return st.one_of(st.sampled_from(known), st.sampled_from(known), plain, text) if known else \
            st.one_of(plain, text)
    if kind == "array":
        item = _from_schema(schema.get("items", {}), name, world)
        return st.lists(item, max_size=4)
    if kind == "object":
        return _json_value(1)
    return _json_value(1)


def _hostile(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Out of range, the wrong type, or a string no OS call can take."""
    edges = []
    for part in schema.get("anyOf", [schema]):
        for key in ("maximum", "minimum"):
            if key in part:
                edges += [part[key] + 1, part[key] - 1, part[key] * 10**6 + 1]
    return st.one_of(st.sampled_from(JUNK + edges), st.sampled_from(WEIRD_STRINGS))


def arguments_for(tool: Tool, world: World) -> st.SearchStrategy[dict[str, Any]]:
    """Half the calls well-shaped; the rest with one hostile argument, or one required argument missing."""
    properties: dict[str, Any] = tool.input_schema.get("properties", {})
    required = set(tool.input_schema.get("required", []))
    valid, hostile = {}, {}
    for name, schema in properties.items():
        special = _special(name, world)
        valid[name] = special if special is not None else _from_schema(schema, name, world)
        hostile[name] = st.sampled_from(JUNK) if name in PATH_NAMES else _hostile(schema)

    def shaped(bad: str | None = None, missing: str | None = None) -> st.SearchStrategy[dict[str, Any]]:
        pick = {n: hostile[n] if n == bad else valid[n] for n in properties if n != missing}
        return st.fixed_dictionaries({n: v for n, v in pick.items() if n in required or n == bad},
                                     optional={n: v for n, v in pick.items() if n not in required and n != bad})

    if not properties:
        return st.one_of(st.just({}), st.just({"unexpected": "x"}))
    names = sorted(properties)
    one_bad = st.sampled_from(names).flatmap(lambda bad: shaped(bad=bad))
    missing = st.sampled_from(sorted(required) or names).flatmap(lambda gone: shaped(missing=gone))
    extra = shaped().map(lambda args: {**args, "unexpected": "x"})
    return st.one_of(shaped(), shaped(), one_bad, one_bad, missing, extra)


# -- checks --------------------------------------------------------------------------------------
def call(world: World, tool: str, args: dict[str, Any]) -> None:
    """One call: success, or a refusal that explains itself. Never an internal error."""
    try:
        result = world.portal.call(world.client.call_tool, tool, args)
    except MCPError as error:  # a protocol-level refusal must still say what was wrong
        message = error.error.message or ""
        assert error.error.code != -32603 and len(message) >= 10, f"{tool}({_show(args)}): {error.error}"
        return
    text = " ".join(getattr(block, "text", "") for block in result.content)
    assert "internal error" not in text.lower() and "this is a bug" not in text.lower(), \
        f"{tool}({_show(args)}) -> {text[:600]}"
    if result.is_error:
        detail = text.removeprefix(f"Error executing tool {tool}").lstrip(":").strip()
        assert len(detail) >= 10, f"{tool}({_show(args)}) refused without a message: {text!r}"


def _show(args: dict[str, Any]) -> str:
    return json.dumps(args, default=repr)[:400]


def check_invariants(world: World, after: str) -> None:
    """The database is sound and the queue consistent after a batch of fuzzed calls."""
    store = world.services.store
    if store.backend == "sqlite":
        assert store.all("PRAGMA integrity_check") == [{"integrity_check": "ok"}], after
    bad = [r for r in store.all("SELECT id, status FROM tasks") if r["status"] not in STATUSES]
    assert not bad, f"after {after}: tasks with unknown statuses {bad}"
    orphans = store.all("SELECT id, assigned_agent FROM tasks WHERE assigned_agent IS NOT NULL AND "
                        "assigned_agent NOT IN (SELECT id FROM agents)")
    assert not orphans, f"after {after}: tasks owned by missing agents {orphans}"
    edges: dict[str, set[str]] = {}
    for row in store.all("SELECT task_id, depends_on FROM task_dependencies"):
        edges.setdefault(row["task_id"], set()).add(row["depends_on"])
    assert not _cycle(edges), f"after {after}: a dependency cycle {_cycle(edges)}"
    kept = {tuple(r.values()) for r in store.all("SELECT project_id, status, n FROM task_counts WHERE n != 0")}
    actual = {tuple(r.values()) for r in store.all(
        "SELECT project_id, status, count(*) AS n FROM tasks GROUP BY project_id, status")}
    assert kept == actual, f"after {after}: task_counts {kept} disagree with the tasks {actual}"


def _cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """A cycle in the graph, as a path, or None (iterative DFS: the graph may be long)."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    for start in edges:
        if state.get(start):
            continue
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(edges.get(start, ())))]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
            elif state.get(child) == 1:
                return [n for n, _ in stack] + [child]
            elif not state.get(child):
                state[child] = 1
                stack.append((child, iter(edges.get(child, ()))))
    return None


def test_the_cycle_check_finds_cycles():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b", "c"}, "b": {"c"}}) is None


@pytest.mark.slow  # about a minute per backend: a batch of calls for every tool
def test_fuzz_every_tool(world: World):
    names = {t.name for t in world.tools}
    assert EXPECTED_TOOLS <= names, f"the server lists no {EXPECTED_TOOLS - names}"
    started = time.monotonic()
    # Deletions last, so the other tools meet the seeded project, tasks and hook.
    for tool in sorted(world.tools, key=lambda t: (t.name.startswith("delete_"), t.name)):

        @settings(max_examples=SLOW.get(tool.name, EXAMPLES), deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large,
                                         HealthCheck.large_base_example])
        @given(args=arguments_for(tool, world))
        def fuzz(args: dict[str, Any]) -> None:
            call(world, tool.name, args)  # noqa: B023  fuzz() runs to the end inside this iteration

        # Omitted project_ids reach the seeded project (the fuzzer may have cleared it).
        world.portal.call(world.client.call_tool, "set_active_project", {"project_id": "alpha"})
        fuzz()
        check_invariants(world, f"fuzzing {tool.name}")
    # Its cost is reported, not asserted: wall time on shared cores says nothing about the code.
    print(f"fuzzing took {time.monotonic() - started:.0f} s")
