"""Builds the MCPServer: tools from tools/, resources, prompts, per-connection state, notifications."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any

from mcp.server import MCPServer, NotificationOptions
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver.tools import Tool
from mcp.server.subscriptions import ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS
from pydantic import Field

from .. import __version__, prompts, tools
from . import mcp_tasks, resources
from ..apps import page as app_pages
from .middleware import readable_tool_errors, selection_and_audit
from .toolsets import NAMED_TOOLSETS
from ..engine.agent_mcp import TAKES_MCP_CONFIG
from ..engine.prompting import fenced
from ..services import Services
from ..services.errors import NotFoundError


# Bounds at or past this are guards (ids, offsets, token counts, lengths), not limits a model plans around.
GUARD_BOUND = 1000


def compact_schema(schema: Any) -> Any:
    """Trim what a model does not need from an input schema; the model reads every token of it.

    Only the advertised schema changes: arguments are still validated by the tool's pydantic model,
    whose refusal names the limit, so everything dropped here is still enforced. Dropped: titles,
    `null` variants and null/false/0/empty defaults of optionals, `maxLength`, bounds that are guards
    (>= GUARD_BOUND) or obvious (minimum 0 or 1), and `additionalProperties: true` (the default).
    """
    if isinstance(schema, list):
        return [compact_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("properties", "$defs") and isinstance(value, dict):
            # Keys here are parameter names (a parameter may be called `title`), not schema keywords.
            out[key] = {name: _numeric_default(name, compact_schema(sub)) for name, sub in value.items()}
        elif _redundant(key, value):
            continue
        else:
            out[key] = compact_schema(value)
    variants = out.get("anyOf")
    if isinstance(variants, list):
        non_null = [v for v in variants if v != {"type": "null"}]
        if len(non_null) == 1:
            del out["anyOf"]
            out = {**non_null[0], **out}
        elif len(non_null) < len(variants):
            out["anyOf"] = non_null
    return out


# Numeric defaults a model needs to choose a value: a scale (priority: lower runs first) or a time limit.
# Other numeric defaults (limit 50, as the instructions say once; retries, weights, page sizes) are
# what the server does when the model says nothing, which is all the model needs to know.
TELLING_DEFAULTS = ("priority", "timeout")


def _numeric_default(name: str, schema: Any) -> Any:
    if isinstance(schema, dict) and name not in TELLING_DEFAULTS and isinstance(schema.get("default"), (int, float)) \
            and not isinstance(schema.get("default"), bool):
        return {k: v for k, v in schema.items() if k != "default"}
    return schema


def _redundant(key: str, value: Any) -> bool:
    if key in ("title", "maxLength"):
        return True
    if key == "default":
        return value is None or value is False or value in (0, "", [], {}) and not isinstance(value, float)
    if key in ("minimum", "exclusiveMinimum"):
        return value in (0, 1) or abs(value) >= GUARD_BOUND
    if key == "maximum":
        return abs(value) >= GUARD_BOUND
    return key == "additionalProperties" and value is True


def flat_output_schema(schema: Any, defs: dict[str, Any] | None = None, seen: tuple[str, ...] = ()) -> Any:
    """An output schema a client checks fast: `$ref`s written in place, titles and defaults (which validation
    ignores) dropped, and `anyOf` of bare types as one `type` list. The official client validates every
    structured result against it; a list of 50 tasks checked through `$ref`s and `anyOf`s cost it ~2 ms more,
    and the flat form is a third smaller in tools/list. A recursive `$ref` is left as it is (with its `$defs`)."""
    if defs is None and isinstance(schema, dict):
        defs = schema.get("$defs", {})
        flat = flat_output_schema({k: v for k, v in schema.items() if k != "$defs"}, defs)
        return {**flat, "$defs": defs} if "$ref" in json.dumps(flat) else flat
    if isinstance(schema, list):
        return [flat_output_schema(item, defs, seen) for item in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/") and len(schema) == 1 and defs:
        name = ref.rsplit("/", 1)[1]
        if name in defs and name not in seen:
            return flat_output_schema(defs[name], defs, (*seen, name))
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties" and isinstance(value, dict):  # keys here are result keys, not schema keywords
            out[key] = {name: flat_output_schema(sub, defs, seen) for name, sub in value.items()}
        elif key not in ("title", "default"):
            out[key] = flat_output_schema(value, defs, seen)
    variants = out.get("anyOf")
    if isinstance(variants, list) and all(isinstance(v, dict) and set(v) == {"type"} and isinstance(v["type"], str)
                                          for v in variants):
        del out["anyOf"]
        out["type"] = [v["type"] for v in variants]
    return out


# Pages of rows checked row by row: the result key of the rows, and the row keys that keep their type.
LIGHT_ROWS: dict[str, tuple[str, tuple[str, ...]]] = {"list_tasks": ("tasks", ("status", "priority"))}


def light_rows(schema: dict[str, Any], key: str, typed: tuple[str, ...]) -> dict[str, Any]:
    """`schema` with each row of `key` checked by its keys: all of them `required`, only `typed` with a type.

    The official client checks a result against its output schema with jsonschema, which costs ~4 µs per
    property it descends into: a 50-row `list_tasks` page is 400 of them, ~2 ms on every call (as much as
    the store at 100,000 tasks). Requiring every key still checks that the contract's keys are all there;
    the status (an enum) and priority (an integer) are the values a client sorts and branches on.
    """
    rows = schema["properties"][key]["items"]
    names = list(rows["properties"])
    light = {"type": "object", "required": names,
             "properties": {name: rows["properties"][name] for name in typed}}
    return {**schema, "properties": {**schema["properties"], key: {**schema["properties"][key], "items": light}}}


@functools.cache
def sdk_tools() -> tuple[Tool, ...]:
    """Every tool as the SDK serves it (its arguments' pydantic model, compacted input and flat output schemas),
    built once per process: building them is 0.1-0.3 s of CPU, and a Tool holds nothing of the server that lists it."""
    built = tuple(Tool.from_function(spec.fn, annotations=spec.annotations, meta=spec.meta) for spec in tools.TOOLS)
    for tool in built:
        tool.parameters = compact_schema(tool.parameters)
        if tool.fn_metadata.output_schema is not None:
            tool.fn_metadata.output_schema = flat_output_schema(tool.fn_metadata.output_schema)
        if tool.name in LIGHT_ROWS:
            tool.fn_metadata.output_schema = light_rows(tool.fn_metadata.output_schema, *LIGHT_ROWS[tool.name])
    return built


def agent_routing(agent: Any) -> str:
    """Which tasks an agent takes (the scheduler's can_run, in words)."""
    parts = [f"tasks of repo {agent.repo_id} only" if agent.repo_id else "tasks of any repo",
             f"tasks asking for agent_type {agent.agent_type} or none"]
    parts.append("tasks whose capabilities are among " + ", ".join(agent.capabilities) if agent.capabilities
                 else "no task that asks for capabilities")
    parts.append(f"model {agent.model} unless a task names its own" if agent.model
                 else "the CLI's default model unless a task names one")
    if agent.label:
        parts.append(f"only on daemons labelled {agent.label}")
    if agent.paused:
        parts.append("paused: takes no new task")
    return "; ".join(parts) + "."


def agent_tools(agent_type: str) -> str:
    """The AgentQueue tools a task's agent is offered (the `agent` toolset), or why it has none."""
    if agent_type not in TAKES_MCP_CONFIG:
        return f"none (a {agent_type} run gets no MCP server); it reports through its summary"
    return ", ".join(NAMED_TOOLSETS["agent"])


def _register_prompts(mcp: MCPServer, services: Services) -> None:
    def dumps(value: Any) -> str:
        return json.dumps(value, default=lambda m: m.model_dump(mode="json"), indent=1)

    def found(fn: Any, *args: Any) -> Any:
        # A prompt's own exceptions reach the client only as "Error rendering prompt X" (legacy) or
        # "Internal server error" (2026); an MCPError passes through with its message.
        try:
            return fn(*args)
        except NotFoundError as error:
            raise MCPError(code=INVALID_PARAMS, message=str(error)) from None

    @mcp.prompt(description="How to run the queue: dispatcher mandate, self-contained task descriptions")
    def dispatcher() -> str:
        return prompts.load("dispatcher")

    @mcp.prompt(description="Think out loud about a project and keep conclusions in its notes")
    def notes_mode(project_id: Annotated[str, Field(description="project id")] = "the active project") -> str:
        return prompts.load("notes_mode").format(project_id=project_id)

    @mcp.prompt(description="Turn a plan into self-contained, dependency-ordered tasks")
    def plan_to_tasks(plan: Annotated[str, Field(description="the plan text")],
                      project_id: str = "the active project") -> str:
        return prompts.load("plan_to_tasks").format(plan=plan, project_id=project_id)

    @mcp.prompt(description="Review a task's work and recommend approve, redo or follow-ups")
    def review_task(task_id: Annotated[str, Field(description="task id")]) -> str:
        task = found(services.tasks.get, task_id)
        _, result = services.tasks.results(task_id)
        return prompts.load("review_task").format(task_id=task_id, task=dumps(task), result=dumps(result))

    @mcp.prompt(description="Summarise a project's state: in flight, blocked, next steps")
    def project_overview(project_id: Annotated[str, Field(description="project id")]) -> str:
        project = found(services.projects.get, project_id)
        open_tasks, _, _ = services.tasks.list(project_id, None, False, 100, 0)
        return prompts.load("project_overview").format(
            project_id=project_id, project=dumps(project), tasks=dumps(open_tasks),
            chains=dumps(services.tasks.stuck_chains(project_id)))

    @mcp.prompt(description="An agent's profile, what it can do, recent work and memory")
    def agent_context(agent_id: Annotated[str, Field(description="agent id")]) -> str:
        agent = found(services.agents.get, agent_id)
        recent = services.store.all(
            "SELECT r.task_id, t.title, r.status, r.summary, r.created_at FROM task_results r "
            "LEFT JOIN tasks t ON t.id = r.task_id WHERE r.agent_id = ? ORDER BY r.id DESC LIMIT 10", (agent_id,))
        projects = list(dict.fromkeys(
            r["project_id"] for r in services.store.all(
                "SELECT t.project_id FROM task_results r JOIN tasks t ON t.id = r.task_id WHERE r.agent_id = ? "
                "ORDER BY r.id DESC LIMIT 20", (agent_id,))))[:2]
        # Memory and standing instructions are data: fenced, so nothing in them starts a section of this prompt.
        memory = "\n\n".join(f"### {p}\n\n{fenced(services.memory.context(p, cap=3000))}" for p in projects
                              if services.memory.context(p, cap=3000)) or "(no project memory yet)"
        preset = services.policies.effective(projects[0] if projects else None).preset
        return prompts.load("agent_context").format(
            agent_id=agent_id, agent=dumps(agent), recent=dumps(recent), agent_type=agent.agent_type, memory=memory,
            routing=agent_routing(agent), tools=agent_tools(agent.agent_type), preset=preset.name,
            preset_summary=preset.summary, instructions="\n\n" + fenced(agent.instructions) if agent.instructions
            else "(none)")

    @mcp.prompt(description="Summarise a conversation keeping ids, names, decisions and open questions")
    def summarize_conversation(transcript: Annotated[str, Field(description="the conversation")]) -> str:
        return prompts.load("summarize_conversation").format(transcript=transcript)


# A socket connection's own options (its plugin's preamble), set by the daemon around the connection's
# lifespan; when unset (stdio, HTTP, in-memory) the server-wide options given to build_server apply.
CONNECTION_OPTIONS: ContextVar[dict[str, Any] | None] = ContextVar("agentqueue_connection_options", default=None)


@dataclass(frozen=True)
class BuiltServer:
    """The MCPServer and its notifier, through which a process with an engine publishes the changes made outside
    tool calls (task status, a growing task log) to subscribed clients."""

    mcp: MCPServer
    notifier: resources.Notifier


def build_server(services: Services, connection_options: dict[str, Any] | None = None,
                 on_tool_call: Callable[[str, str, float], None] | None = None) -> MCPServer:
    """The MCPServer alone, for a process without an engine (tool calls flush their own changes)."""
    return build(services, connection_options, on_tool_call).mcp


def build(services: Services, connection_options: dict[str, Any] | None = None,
          on_tool_call: Callable[[str, str, float], None] | None = None) -> BuiltServer:
    """One MCPServer per process; every connection gets its own `ClientState` from the lifespan.

    `connection_options` (read_only, toolsets) limit every connection that brings none of its own: the
    standalone server's stdio and, in the daemon, every HTTP session. `on_tool_call` is told (tool, outcome,
    seconds) after every tool call (the daemon's GET /metrics histogram).
    """
    bus = resources.ConnectionBus()
    notifier = resources.Notifier(bus)
    services.store.on_commit(notifier.on_commit)
    services.audit.on_record(lambda: notifier.mark(resources.AUDIT))

    @asynccontextmanager
    async def lifespan(_: MCPServer) -> AsyncIterator[tools.ClientState]:
        # Runs once per stdio/socket connection (and once for all HTTP sessions).
        own = CONNECTION_OPTIONS.get()
        yield tools.ClientState(services=services, after_call=notifier.flush, on_tool_call=on_tool_call,
                                tools_changed=lambda state: bus.publish_to(state, ToolsListChanged()),
                                options=dict(own if own is not None else connection_options or {}))

    mcp = MCPServer(
        "agentqueue", title="AgentQueue", version=__version__, instructions=prompts.load("instructions"),
        tools=list(sdk_tools()), lifespan=lifespan, subscriptions=bus, warn_on_duplicate_tools=False,
        middleware=[selection_and_audit, readable_tool_errors],
        # MCP Apps (io.modelcontextprotocol/ui: the ui:// pages) and MCP Tasks (the calls that wait, SEP-2663).
        extensions=[app_pages.extension(), mcp_tasks.Tasks()],
    )
    resources.register(mcp, services, notifier)
    _register_prompts(mcp, services)

    # Handshake-era clients only learn of list changes if listChanged is advertised (reference §2).
    lowlevel = mcp._lowlevel_server
    options = NotificationOptions(prompts_changed=True, resources_changed=True, tools_changed=True)
    lowlevel.create_initialization_options = (  # type: ignore[method-assign]
        lambda notification_options=None, *a, **k: Server.create_initialization_options(
            lowlevel, notification_options or options, *a, **k))
    return BuiltServer(mcp, notifier)
