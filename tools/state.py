"""What one client connection carries: its services, active project, and options (read-only, toolsets…)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mcp.server import ServerRequestContext
from mcp.server.mcpserver import Context
from mcp_types import CLIENT_INFO_META_KEY

from ..services import Services
from ..services.errors import ServiceError
from ..server.selection import Selection, effective
from ..server.toolsets import known

log = logging.getLogger("agentqueue.tools")


def clean_options(options: Any) -> dict[str, Any]:
    """A connection's options as given (a preamble, flags), with `read_only` and `toolsets` made safe to use.

    Other keys pass through untouched (the engine gives task agents e.g. a task id); unknown
    toolset names are dropped with a warning, so a typo narrows rather than widens the selection.
    """
    if not isinstance(options, dict):
        return {}
    cleaned = dict(options)
    cleaned["read_only"] = options.get("read_only") is True
    toolsets = options.get("toolsets")
    if toolsets is not None:
        names = [t for t in toolsets if isinstance(t, str)] if isinstance(toolsets, list) else []
        unknown = sorted(set(names) - set(known()))
        if unknown:
            log.warning("ignoring unknown toolset(s) %s; known: %s", ", ".join(unknown), ", ".join(known()))
        cleaned["toolsets"] = [t for t in names if t in known()]
    enabled = options.get("enabled")
    if enabled is not None:
        cleaned["enabled"] = [t for t in enabled if isinstance(t, str) and t in known()] if isinstance(enabled, list) \
            else []
    return cleaned


@dataclass
class ClientState:
    """What one client connection remembers between calls (its active project) and is limited to."""

    services: Services
    active_project: str | None = None
    restored: bool = False  # whether the client's remembered active project was looked up (restore_active_project)
    # HTTP serves many sessions from one lifespan: each Mcp-Session-Id gets its own state.
    sessions: dict[str, ClientState] = field(default_factory=dict)
    # False when the transport gives no stable identity (sessionless HTTP): nothing is remembered.
    persistent: bool = True
    # Set by app.py: awaited after every tool call so resource subscribers hear of changes at once.
    after_call: Callable[[], Any] | None = None
    # Set by app.py: tells this connection's 2026 listen streams that its tool list changed (enable_toolsets).
    tools_changed: Callable[[ClientState], Any] | None = None
    # Given to build_server by the daemon: told (tool, outcome, seconds) after every tool call, for GET /metrics.
    on_tool_call: Callable[[str, str, float], None] | None = None
    # The connection's options: read_only, toolsets (from flags or a plugin's preamble), who it is when the
    # daemon found it to be one of its runs (actor agent:<id>/hook:<id>, a task agent's task_id), and the
    # toolsets its model enabled since it opened (`enabled`, written only by enable_toolsets).
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.options = clean_options(self.options)

    @property
    def selection(self) -> Selection:
        """What this connection may call and lists: its options, and the daemon's [mcp] toolsets."""
        return effective(self.options, self.services.settings.toolsets)

    def hides(self, name: str, group: str, read_only: bool) -> str | None:
        """Why this connection may not call a tool (None when it may)."""
        why = self.selection.hides(name, group, read_only)
        actor = self.options.get("actor")
        return f"{why} ({actor})" if why and why.startswith("it is a person's") else why

    def lists(self, name: str, group: str, read_only: bool) -> bool:
        """Whether this connection's tools/list shows a tool."""
        return self.selection.lists(name, group, read_only)

    def child(self, persistent: bool = True) -> ClientState:
        return ClientState(services=self.services, persistent=persistent, after_call=self.after_call,
                           tools_changed=self.tools_changed, on_tool_call=self.on_tool_call,
                           options=dict(self.options))


def state_for(request_context: ServerRequestContext[Any, Any]) -> ClientState:
    """The state of the connection (or HTTP session) a request came in on."""
    base: ClientState = request_context.lifespan_context
    headers = getattr(request_context.request, "headers", None)
    if headers is None:
        return base  # stdio, the daemon's socket, in-memory: the lifespan is per connection
    session_id = headers.get("mcp-session-id")
    if not session_id:
        return base.child(persistent=False)
    if session_id not in base.sessions:
        base.sessions[session_id] = base.child()
    return base.sessions[session_id]


def client_state(ctx: Context) -> ClientState:
    return state_for(ctx.request_context)


def client_name(request_context: ServerRequestContext[Any, Any]) -> str | None:
    """The client's own name (its clientInfo), if it gave one."""
    params = request_context.session.client_params
    name = params.client_info.name if params is not None else None
    if not name and isinstance(request_context.meta, dict):  # a 2026 request may carry it in _meta
        info = request_context.meta.get(CLIENT_INFO_META_KEY)
        name = info.get("name") if isinstance(info, dict) else None
    return name or None


def actor_of(request_context: ServerRequestContext[Any, Any], state: ClientState) -> str:
    """Who is calling, for the audit log: the run the daemon found the connection to come from, else
    `client:<clientInfo name>` (`http:<name>` over HTTP, where the bearer token is the credential)."""
    if isinstance(state.options.get("actor"), str):
        return state.options["actor"]
    name = client_name(request_context)
    via_http = getattr(request_context.request, "headers", None) is not None
    return f"{'http' if via_http else 'client'}:{name or 'unknown'}"


def caller_path(ctx: Context, path: str | None) -> str | None:
    """`path` with a relative one resolved against the folder the person's client runs in (the daemon read it from
    the kernel); left as given where that folder is unknown (HTTP, an agent), for the service to refuse."""
    return resolved_against(client_state(ctx).options.get("cwd"), path)


def resolved_against(cwd: Any, path: str | None) -> str | None:
    if not path or not isinstance(path, str) or not path.strip() or os.path.isabs(os.path.expanduser(path.strip())):
        return path
    return os.path.normpath(os.path.join(cwd, path.strip())) if isinstance(cwd, str) and os.path.isabs(cwd) else path


# The folder arguments resolved against the caller's folder, by tool: the policy gate must judge the folder the
# tool will use, never the daemon's own working directory.
CALLER_PATHS = {"add_repo": "path", "create_project": "workspace"}


def with_caller_paths(name: str, arguments: dict[str, Any], state: ClientState) -> dict[str, Any]:
    key = CALLER_PATHS.get(name)
    if key is None or not isinstance(arguments.get(key), str):
        return arguments
    return {**arguments, key: resolved_against(state.options.get("cwd"), arguments[key])}


# The settings key of a client's remembered active project: one per client name and folder (issue 23).
ACTIVE_KEY = "active_project:{name}:{cwd}"


def remembered_key(request_context: ServerRequestContext[Any, Any], state: ClientState) -> str | None:
    """Where this connection's active project is kept between its client's connections: a person's client with a
    name and a folder only (an agent's, or one without, keeps it for the connection)."""
    cwd, name = state.options.get("cwd"), client_name(request_context)
    if not state.persistent or state.options.get("actor") or not isinstance(cwd, str) or not name:
        return None
    return ACTIVE_KEY.format(name=name[:200], cwd=cwd[:4096])


def restore_active_project(state: ClientState, key: str) -> None:
    """The active project kept under `key` (remembered_key), if it still exists: run in a worker thread, it reads
    the store."""
    project = state.services.store.get_setting(key)
    if project and state.services.store.scalar("SELECT 1 FROM projects WHERE id = ?", (project,)):
        state.active_project = project


def services(ctx: Context) -> Services:
    return client_state(ctx).services


def project_for(ctx: Context, project_id: str | None) -> str:
    """An explicit project_id wins; else the connection's active project; else a clear error."""
    if project_id:
        return project_id
    active = client_state(ctx).active_project
    if active:
        return active
    raise ServiceError(
        "No project_id given and no active project for this connection. Pass project_id, "
        "or call set_active_project (list_projects shows ids)."
    )


def project_filter(ctx: Context, project_id: str | None) -> str | None:
    """For read filters: an explicit project, else the active one, else None (every project)."""
    return project_id or client_state(ctx).active_project
