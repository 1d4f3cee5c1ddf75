"""How a tool module declares tools: the `tool` decorator, the policy gate on every call, error translation."""

import functools
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from ..services.errors import ServiceError
from ..toolsets import TOOLSETS
from .gate import ApprovalParam, settle
from .state import ClientState, client_state, project_filter, project_for, services, state_for

__all__ = ["ClientState", "Limit", "Offset", "ProjectId", "SPECS", "TOOLS", "TaskId", "ToolSpec", "client_state",
           "project_filter", "project_for", "services", "state_for", "tool"]

log = logging.getLogger("agentqueue.tools")

# Parameter types shared by the tool modules; descriptions stay short because the model reads them.
ProjectId = Annotated[str | None, Field(description="default: active project")]
TaskId = Annotated[str, Field(description="e.g. swift-falcon")]
Limit = Annotated[int, Field(ge=1, le=500)]
Offset = Annotated[int, Field(ge=0)]

# The hidden parameter every tool gets: filled by the policy gate, never in the input schema.
APPROVAL = "policy_approval"


@dataclass
class ToolSpec:
    fn: Callable[..., Any]
    annotations: ToolAnnotations
    name: str
    group: str  # the tools/ module: what --toolsets selects
    read_only: bool


TOOLS: list[ToolSpec] = []
SPECS: dict[str, ToolSpec] = {}


def _with_approval(wrapper: Callable[..., Any], fn: Callable[..., Any]) -> None:
    """Give `wrapper` fn's signature plus the keyword-only approval parameter the gate resolves."""
    signature = inspect.signature(fn)
    extra = inspect.Parameter(APPROVAL, inspect.Parameter.KEYWORD_ONLY, annotation=ApprovalParam)
    wrapper.__signature__ = signature.replace(parameters=[*signature.parameters.values(), extra])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {**inspect.get_annotations(fn, eval_str=True), APPROVAL: ApprovalParam}


def tool(*, read_only: bool = False, destructive: bool = False, idempotent: bool = False) -> Callable:
    """Register a tool (async, or sync to run in a worker thread) behind the policy gate.

    ServiceErrors become tool errors; a question the person declined refuses the call before it runs.
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        group = fn.__module__.rsplit(".", 1)[-1]
        if group not in TOOLSETS:
            raise RuntimeError(f"tool module {group!r} is not in toolsets.TOOLSETS; add it there")

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            settle(kwargs.pop(APPROVAL, None))  # raises when a person declined
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

        _with_approval(wrapper, fn)
        spec = ToolSpec(wrapper, ToolAnnotations(
            read_only_hint=read_only, destructive_hint=destructive, idempotent_hint=idempotent or read_only,
            open_world_hint=False), fn.__name__, group, read_only)
        TOOLS.append(spec)
        SPECS[spec.name] = spec
        return wrapper

    return decorate
