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
from pydantic import BaseModel, Field, model_serializer

from ..services import limits, result_size
from ..services.errors import ServiceError, os_limit_error
from ..server.toolsets import DISCOVERY_GROUP, TOOLSETS
from .gate import ApprovalParam, refuse_oversized_ids, refuse_surrogates, settle, strings_in
from .state import ClientState, client_state, project_filter, project_for, services, state_for

__all__ = ["Agents", "ClientState", "Command", "Hours", "Limit", "Name", "Noted", "Offset", "PathText", "Priority",
           "ProjectId",
           "Retries", "SPECS", "Seconds", "TOOLS", "TaskId", "Tokens", "ToolSpec", "Weight", "client_state",
           "project_filter", "project_for", "services", "state_for", "tool"]

log = logging.getLogger("agentqueue.tools")

# Parameter types shared by the tool modules. What they share is said once, in the server's instructions
# (prompts/instructions.md: an omitted project_id is the active project, task ids look like swift-falcon),
# not in each of the ~30 schemas that take them: the model reads every token of the tool list.
ProjectId = str | None
TaskId = str
Limit = Annotated[int, Field(ge=1, le=500)]
# Bounds without descriptions (they cost tokens): every number fits SQLite and datetime, every string exec().
Offset = Annotated[int, Field(ge=0, le=limits.MAX_COUNT)]
Priority = Annotated[int, Field(ge=-limits.MAX_COUNT, le=limits.MAX_COUNT)]
Retries = Annotated[int, Field(ge=0, le=limits.MAX_RETRIES)]
Agents = Annotated[int, Field(ge=1, le=limits.MAX_AGENTS)]
Tokens = Annotated[int, Field(ge=0, le=limits.MAX_TOKENS)]
Weight = Annotated[float, Field(gt=0, le=limits.MAX_WEIGHT)]
Seconds = Annotated[int, Field(ge=0, le=limits.MAX_COUNT)]
Hours = Annotated[float, Field(gt=0, le=limits.MAX_HOURS)]
Name = Annotated[str, Field(max_length=limits.MAX_NAME)]
PathText = Annotated[str, Field(max_length=limits.MAX_PATH)]
Command = Annotated[str, Field(max_length=limits.MAX_COMMAND)]
Label = Annotated[str, Field(max_length=64)]

class Noted(BaseModel):
    """A result that may be cut to size: `note`, absent unless set, says what was cut and how to get the rest."""

    note: str | None = None

    @model_serializer(mode="wrap")
    def _without_empty_note(self, handler: Any) -> Any:
        data = handler(self)
        if isinstance(data, dict) and data.get("note") is None:
            data.pop("note", None)
        return data


# The hidden parameter every tool gets: filled by the policy gate, never in the input schema.
APPROVAL = "policy_approval"


@dataclass
class ToolSpec:
    fn: Callable[..., Any]
    annotations: ToolAnnotations
    name: str
    group: str  # the tools/ module: what --toolsets selects
    read_only: bool
    meta: dict[str, Any] | None = None  # the tool's `_meta` in tools/list (e.g. its MCP Apps page)


TOOLS: list[ToolSpec] = []
SPECS: dict[str, ToolSpec] = {}


def _internal(name: str, error: BaseException) -> str:
    return (f"Internal error in {name} ({type(error).__name__}: {error}); an unfinished change was rolled back. "
            "This is a bug in AgentQueue: the traceback is in $AGENTQUEUE_HOME/logs.")


def _culprit(error: BaseException, kwargs: dict[str, Any]) -> str:
    """The argument that most likely hit the limit: the one with a NUL, the longest text, the biggest number."""
    if isinstance(error, OverflowError):
        sizes = {k: max((abs(v) for v in _numbers(a)), default=-1) for k, a in kwargs.items()}
    elif isinstance(error, ValueError):
        sizes = {k: int(any("\0" in s for s in strings_in(a))) for k, a in kwargs.items()}
    else:
        sizes = {k: max((len(s) for s in strings_in(a)), default=-1) for k, a in kwargs.items()}
    best = max(sizes, key=lambda k: sizes[k], default=None)
    return best if best is not None and sizes[best] > 0 else "an argument"


def _numbers(value: Any) -> list[float]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [value]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in _numbers(v)]
    return []


# Indented JSON text plus the structure, with non-ASCII counted 6: within 8 times the compact UTF-8 size
# for results nested a few levels deep, as ours are.
SURE_FACTOR = 8


def _with_approval(wrapper: Callable[..., Any], fn: Callable[..., Any]) -> None:
    """Give `wrapper` fn's signature plus the keyword-only approval parameter the gate resolves."""
    signature = inspect.signature(fn)
    extra = inspect.Parameter(APPROVAL, inspect.Parameter.KEYWORD_ONLY, annotation=ApprovalParam)
    wrapper.__signature__ = signature.replace(parameters=[*signature.parameters.values(), extra])  # type: ignore[attr-defined]
    wrapper.__annotations__ = {**inspect.get_annotations(fn, eval_str=True), APPROVAL: ApprovalParam}


def surely_fits(result: Any) -> bool:
    """A result far under the budget, by its compact JSON (pydantic-core, fast): the full measure below
    counts indentation and escapes, which at most multiply the compact size by SURE_FACTOR for our models."""
    if not isinstance(result, BaseModel):
        return True
    return len(result.model_dump_json()) * SURE_FACTOR <= result_size.MAX_RESULT_CHARS


def fit(fn: Callable[..., Any], result: Any, kwargs: dict[str, Any], rest: str | None = None) -> Any:
    """The net under every result: one over result_size.MAX_RESULT_CHARS loses list items or text ends until
    it fits, and its `note` (or `message`) says what was cut and how to ask for the rest."""
    if not isinstance(result, BaseModel):
        return result
    data = result.model_dump(mode="json")
    if result_size.result_cost(data) <= result_size.MAX_RESULT_CHARS:
        return result
    field = next((f for f in ("note", "message") if f in type(result).model_fields), None)
    if field:
        data[field] = None  # room for the note, measured below
    cuts = result_size.shrink(data, result_size.MAX_RESULT_CHARS - (600 if field else 0))
    if field:
        said = result.model_dump().get(field)
        data[field] = ((said + " ") if said else "") + (
            f"Cut to stay under {result_size.MAX_RESULT_CHARS:,} characters: "
            f"{'; '.join(c.phrase for c in cuts)[:300]}. {_rest_hint(fn, kwargs, cuts, rest)}")
    if "truncated" in type(result).model_fields:
        data["truncated"] = True
    return type(result).model_validate(data)


def _rest_hint(fn: Callable[..., Any], kwargs: dict[str, Any], cuts: list[result_size.Cut], rest: str | None) -> str:
    if rest:
        try:
            return rest.format(**kwargs)
        except (KeyError, IndexError):
            return rest
    params = inspect.signature(fn).parameters
    rows = next((c for c in cuts if c.items), None)
    if rows and "offset" in params:
        return f"Call {fn.__name__} with offset={(kwargs.get('offset') or 0) + rows.kept} for the next part."
    if rows and "limit" in params:
        return f"Call {fn.__name__} with limit={rows.kept} or narrower filters."
    return "Narrower calls get the rest: one item, filters, or a list tool's limit and offset."


def tool(*, read_only: bool = False, destructive: bool = False, idempotent: bool = False,
         meta: dict[str, Any] | None = None, rest: str | None = None) -> Callable:
    """Register a tool behind the policy gate: sync (the rule: it runs in a worker thread, so a store that waits
    on a lock holds up only its own call), or async only when it awaits something on the event loop.

    `rest` says where the whole of a result cut to size is (formatted with the call's arguments).
    ServiceErrors become tool errors; a question the person declined refuses the call before it runs.
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        group = fn.__module__.rsplit(".", 1)[-1]
        if group not in TOOLSETS and group != DISCOVERY_GROUP:
            raise RuntimeError(f"tool module {group!r} is not in toolsets.TOOLSETS; add it there")

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            settle(kwargs.pop(APPROVAL, None))  # raises when a person declined
            refuse_surrogates(kwargs)
            refuse_oversized_ids(kwargs)
            ctx = next((v for v in kwargs.values() if isinstance(v, Context)), None)
            try:
                if inspect.iscoroutinefunction(fn):
                    result = await fn(*args, **kwargs)
                else:  # the store, git, subprocesses, disk walks: off the event loop, so no client waits on another's
                    result = await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))
                if surely_fits(result):  # nearly every call: one fast compact dump, on the event loop
                    return result
                # Measuring and cutting a big result takes a while too.
                return await anyio.to_thread.run_sync(functools.partial(fit, fn, result, kwargs, rest))
            except ServiceError as error:
                raise ToolError(str(error)) from None
            except ToolError:
                raise
            except (OSError, ValueError, OverflowError) as error:
                # An OS limit a service did not name the parameter of is still the caller's value.
                if (refused := os_limit_error(error, _culprit(error, kwargs))) is None:
                    log.exception("tool %s failed", fn.__name__)
                    raise ToolError(_internal(fn.__name__, error)) from None
                log.warning("tool %s: %s", fn.__name__, refused)
                raise ToolError(str(refused)) from None
            except Exception as error:
                log.exception("tool %s failed", fn.__name__)
                raise ToolError(_internal(fn.__name__, error)) from None
            finally:
                if ctx is not None:
                    after = client_state(ctx).after_call
                    if after is not None:
                        await after()

        _with_approval(wrapper, fn)
        spec = ToolSpec(wrapper, ToolAnnotations(
            read_only_hint=read_only, destructive_hint=destructive, idempotent_hint=idempotent or read_only,
            open_world_hint=False), fn.__name__, group, read_only, meta)
        TOOLS.append(spec)
        SPECS[spec.name] = spec
        return wrapper

    return decorate
