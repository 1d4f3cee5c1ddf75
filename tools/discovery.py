"""The way to the tools a connection does not list yet: name the toolsets, enable some for this connection.

A client lists a lean default (toolsets.NAMED_TOOLSETS["default"]); this tool shows the other groups
and adds them to the connection's `enabled` option, then tells the client its tool list changed
(`notifications/tools/list_changed`: on the connection itself for handshake-era clients, on its
`subscriptions/listen` streams for 2026 clients). It widens only what is *listed*: what a connection
may call, `--read-only`, the person-only tools and the policy gate are untouched, and a run's
connection (or one a person fixed with `--toolsets`) is never offered it (selection.Selection.hides).
"""

from mcp.server.mcpserver import Context
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from ..services.errors import ServiceError
from ..server.toolsets import ALL, DISCOVERY_GROUP, NAMED_TOOLSETS, SUMMARIES, TOOLSETS, known
from .registry import SPECS, ClientState, client_state, tool


class Toolset(BaseModel):
    name: str
    summary: str
    tools: list[str]
    listed: bool  # every tool of it this connection may call is in its tool list


class ToolsetList(BaseModel):
    toolsets: list[Toolset]
    enabled: list[str]  # what this call added
    warning: str | None = None


def _members(name: str) -> list[str]:
    if name == ALL:
        return sorted(s.name for s in SPECS.values() if s.group != DISCOVERY_GROUP)
    if name in NAMED_TOOLSETS:
        return [t for t in NAMED_TOOLSETS[name] if t in SPECS and SPECS[t].group != DISCOVERY_GROUP]
    return sorted(s.name for s in SPECS.values() if s.group == name)


@tool(read_only=True, idempotent=True)
async def enable_toolsets(ctx: Context, toolsets: list[str] | None = None) -> ToolsetList:
    """Tool groups; name some (e.g. ["git"]) to add their tools here."""
    state = client_state(ctx)
    selection = state.selection
    if not selection.open:  # the middleware refuses first; this is the second lock on the same door
        raise ServiceError("This connection's toolsets are fixed; nothing was enabled.")
    wanted = list(dict.fromkeys(toolsets or []))
    unknown = [t for t in wanted if t not in known()]
    if unknown:
        raise ServiceError(f"Unknown toolset(s) {', '.join(unknown)[:200]}; choose from {', '.join(known())}. "
                           "Nothing was enabled.")
    # Listing everything already (`all`), nothing is added; what is listed already is not added twice.
    added = [] if selection.listing is None else [t for t in wanted if t not in selection.listing]
    warning = None
    if added:
        if not state.persistent:
            warning = ("This HTTP client has no session id, so nothing is remembered: the tools can still be "
                       "called by name, or start the server with --toolsets.")
            added = []
        else:
            state.options["enabled"] = [*state.options.get("enabled", []), *added]
            await _tell_client(ctx, state)
    selection = state.selection
    groups = [Toolset(name=name, summary=SUMMARIES.get(name, ""), tools=_members(name),
                      listed=all(selection.lists(SPECS[t].name, SPECS[t].group, SPECS[t].read_only)
                                 or selection.hides(SPECS[t].name, SPECS[t].group, SPECS[t].read_only)
                                 for t in _members(name)))
              for name in [*TOOLSETS, "default", ALL]]
    return ToolsetList(toolsets=groups, enabled=added, warning=warning)


async def _tell_client(ctx: Context, state: ClientState) -> None:
    """notifications/tools/list_changed to this connection only, in its protocol era."""
    if ctx.request_context.protocol_version in MODERN_PROTOCOL_VERSIONS:
        if state.tools_changed is not None:
            await state.tools_changed(state)  # the connection's own subscriptions/listen streams (app.py)
    else:
        await ctx.session.send_tool_list_changed()
