"""How a tool module declares tools: the `tool` decorator, error translation, the caller's state."""

import functools
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from ..services import Services
from ..services.errors import ServiceError

log = logging.getLogger("agentqueue.tools")


@dataclass
class ClientState:
    """What one client connection remembers between calls (its active project)."""

    services: Services
    active_project: str | None = None
    # HTTP serves many sessions from one lifespan: each Mcp-Session-Id gets its own state.
    sessions: dict[str, "ClientState"] = field(default_factory=dict)
    # False when the transport gives no stable identity (sessionless HTTP): nothing is remembered.
    persistent: bool = True
    # Set by app.py: awaited after every tool call so resource subscribers hear of changes at once.
    after_call: Callable[[], Any] | None = None


def client_state(ctx: Context) -> ClientState:
    base: ClientState = ctx.request_context.lifespan_context
    request = ctx.request_context.request
    headers = getattr(request, "headers", None)
    if headers is None:
        return base  # stdio, the daemon's socket, in-memory: the lifespan is per connection
    session_id = headers.get("mcp-session-id")
    if not session_id:
        return ClientState(services=base.services, persistent=False, after_call=base.after_call)
    return base.sessions.setdefault(session_id, ClientState(services=base.services, after_call=base.after_call))


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


# Parameter types shared by the tool modules; descriptions stay short because the model reads them.
ProjectId = Annotated[str | None, Field(description="default: active project")]
TaskId = Annotated[str, Field(description="e.g. swift-falcon")]
Limit = Annotated[int, Field(ge=1, le=500)]
Offset = Annotated[int, Field(ge=0)]


@dataclass
class ToolSpec:
    fn: Callable[..., Any]
    annotations: ToolAnnotations


TOOLS: list[ToolSpec] = []


def tool(*, read_only: bool = False, destructive: bool = False, idempotent: bool = False) -> Callable:
    """Register a tool (async, or sync to run in a worker thread); ServiceErrors become tool errors."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            ctx = next((v for v in kwargs.values() if isinstance(v, Context)), None)
            try:
                if inspect.iscoroutinefunction(fn):
                    return await fn(*args, **kwargs)
                # Sync tools do slow work (git, subprocesses, disk walks): off the event loop.
                return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
            except ServiceError as error:
                raise ToolError(str(error)) from None
            except ToolError:
                raise
            except Exception as error:
                log.exception("tool %s failed", fn.__name__)
                raise ToolError(
                    f"Internal error in {fn.__name__} ({type(error).__name__}: {error}); an unfinished change "
                    "was rolled back. This is a bug in AgentQueue: the traceback is in $AGENTQUEUE_HOME/logs."
                ) from None
            finally:
                if ctx is not None:
                    after = client_state(ctx).after_call
                    if after is not None:
                        await after()

        TOOLS.append(ToolSpec(wrapper, ToolAnnotations(
            read_only_hint=read_only, destructive_hint=destructive, idempotent_hint=idempotent or read_only,
            open_world_hint=False)))
        return wrapper

    return decorate
