"""Request middleware: the connection's tool selection, the audit log, and readable validation errors.

- `tools/list` shows what the connection's selection lists (toolsets.effective: `--read-only`,
  `--toolsets`, a plugin's preamble, [mcp] toolsets and what enable_toolsets added) less what the
  policy denies outright. A `tools/call` is refused only past what the connection may call (a tool
  merely not listed yet still runs: scripts call tools by name). Resources follow the tools that
  read the same data: a connection that may call none of them neither lists, reads nor subscribes.
- Every `tools/call` is written to the audit log after it ends, in its own transaction: what the
  policy gate decided (noted in the call's `CallRecord`), how it ended, how long it took.
- Argument-validation errors are rewritten into one sentence a model can act on.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from typing import Any

import anyio
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, TextContent

from .resources import LISTENER, readers_of
from ..services.limits import MAX_NAME
from ..services.policy_rules import PolicyError
from ..store.base import StoreBusy
from ..tools.gate import CURRENT_CALL, CallRecord
from ..tools.registry import SPECS, TOOLS
from ..tools.state import actor_of, remembered_key, restore_active_project, state_for

log = logging.getLogger("agentqueue.middleware")
_VALIDATION = re.compile(r"^Error executing tool (?P<tool>[\w-]+): \d+ validation errors? for \w+\n(?P<body>.*)$", re.S)


def describe_validation_error(text: str) -> str | None:
    """`Error executing tool x: 2 validation errors for xArguments …` -> one readable sentence."""
    match = _VALIDATION.match(text)
    if not match:
        return None
    problems, field = [], None
    for line in match["body"].splitlines():
        if not line.strip() or line.strip().startswith("For further information"):
            continue
        if not line.startswith(" "):
            field = line.strip()
        else:
            message = re.sub(r"\s*\[type=.*$", "", line.strip())
            problems.append(f"{field}: {message}" if field else message)
    details = "; ".join(problems) or match["body"].strip()
    return (f"Invalid arguments for {match['tool']}: {details}. Nothing was changed; "
            "fix those arguments (the tool's inputSchema lists them) and call again.")


async def readable_tool_errors(ctx: Any, call_next: Any) -> Any:
    result = await call_next(ctx)
    if ctx.method == "tools/call" and isinstance(result, dict) and result.get("isError"):
        for block in result.get("content") or []:
            if block.get("type") == "text":
                block["text"] = describe_validation_error(block["text"]) or block["text"]
    return result


def _text_of(result: dict[str, Any]) -> str:
    return " ".join(b.get("text", "") for b in result.get("content") or [] if isinstance(b, dict)).strip()


def resource_hidden(state: Any, uri: str) -> str | None:
    """Why this connection is not offered a resource: it is offered none of the tools that read the same data."""
    selection = state.selection
    if not selection.read_only and selection.ceiling is None:
        return None
    reasons = [state.hides(spec.name, spec.group, spec.read_only) for name in readers_of(uri)
               if (spec := SPECS.get(name)) is not None]
    if reasons and None in reasons:
        return None
    if reasons:
        return reasons[0]
    return "this connection is limited (--toolsets, --read-only) to the resources of its tools"


_LISTED = {"resources/list": ("resources", "uri"), "resources/templates/list": ("resourceTemplates", "uriTemplate")}


async def _resources(ctx: Any, call_next: Any) -> Any:
    """resources/*: what the connection's selection hides is left out of lists and refused to read or subscribe."""
    state = state_for(ctx)
    params = ctx.params if isinstance(ctx.params, dict) else {}
    if ctx.method in _LISTED:
        result = await call_next(ctx)
        key, field = _LISTED[ctx.method]
        if isinstance(result, dict) and isinstance(result.get(key), list):
            result[key] = [r for r in result[key] if not resource_hidden(state, str(r.get(field, "")))]
        return result
    if ctx.method in ("resources/read", "resources/subscribe"):
        uri = str(params.get("uri") or "")
        if hidden := resource_hidden(state, uri):
            raise MCPError(code=INVALID_PARAMS, message=f"{uri[:300]} is not available here: {hidden}. Connect without "
                                                        "that restriction to read it.")
        return await call_next(ctx)
    # subscriptions/listen (2026): the hidden URIs are dropped from what the stream will carry.
    notifications = params.get("notifications")
    wanted = notifications.get("resourceSubscriptions") if isinstance(notifications, dict) else None
    if isinstance(wanted, list):
        kept = [u for u in wanted if isinstance(u, str) and not resource_hidden(state, u)]
        ctx = dataclasses.replace(ctx, params={**params, "notifications": {**notifications,
                                                                          "resourceSubscriptions": kept}})
    token = LISTENER.set(state)  # the stream is this connection's: enable_toolsets tells it alone
    try:
        return await call_next(ctx)
    finally:
        LISTENER.reset(token)


class ToolLists:
    """`tools/list` answers as sent, by (protocol version, the tool names offered, read_only), the most recent few.

    A connection's answer depends only on that key: every MCPServer of this process lists the same tools
    (`app.sdk_tools`, built once), and the era decides the rest of the wire form. So the SDK builds,
    validates and shapes each selection's list for the wire once per process, not on every connection
    (only the JSON text is encoded per answer); a connection whose selection changes simply has a new
    key. The SDK copies a result before shaping it for the wire, so an answer kept here is never
    written into.
    """

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self.hits = 0  # answers sent from here (tests check the cache serves; the count costs nothing)
        self._answers: dict[tuple[Any, ...], dict[str, Any]] = {}

    def get(self, key: tuple[Any, ...]) -> dict[str, Any] | None:
        answer = self._answers.pop(key, None)
        if answer is not None:
            self._answers[key] = answer  # most recently used last
            self.hits += 1
        return answer

    def put(self, key: tuple[Any, ...], answer: dict[str, Any]) -> None:
        self._answers[key] = answer
        while len(self._answers) > self.size:
            del self._answers[next(iter(self._answers))]


TOOL_LISTS = ToolLists()


def _past_handshake(ctx: Any) -> bool:
    """Whether the SDK would serve this request: a handshake-era connection before `initialize` is refused
    by the SDK (below this middleware), so such a request must not be answered from the cache."""
    connection = getattr(ctx.session, "_connection", None)  # private, as reference/mcp_sdk.md §2 notes
    return bool(getattr(connection, "initialize_accepted", False))


async def _tools_list(ctx: Any, call_next: Any) -> Any:
    """tools/list: what this connection's selection hides and the policy denies outright is left out."""
    state = state_for(ctx)
    try:
        # On the loop, not a worker thread: it is a stat of policy.toml (read again only when it changed) and
        # ~0.4 ms of Python the GIL would make the loop wait for anyway, while the hop to a thread and back
        # cost every client launch 1-2 ms on a busy machine.
        policy = state.services.policies.effective(state.active_project)
    except PolicyError as error:  # a broken policy.toml: every call says so; the list stays whole
        log.warning("tools/list not filtered by the policy: %s", error)
        policy = None
    selection = state.selection  # worked out once per request, not once per tool
    offered = frozenset(spec.name for spec in TOOLS
                        if selection.lists(spec.name, spec.group, spec.read_only)
                        and not (policy is not None and policy.denies_outright(spec.name, spec.read_only)))
    key = (ctx.protocol_version, offered, bool(state.options.get("read_only")))
    if _past_handshake(ctx) and (answer := TOOL_LISTS.get(key)) is not None:
        return dict(answer)
    result = await call_next(ctx)
    if isinstance(result, dict) and isinstance(result.get("tools"), list):
        result["tools"] = [t for t in result["tools"] if t.get("name") in offered or t.get("name") not in SPECS]
        TOOL_LISTS.put(key, result)
        return dict(result)
    return result


async def selection_and_audit(ctx: Any, call_next: Any) -> Any:
    if ctx.method.startswith("resources/") or ctx.method == "subscriptions/listen":
        return await _resources(ctx, call_next)
    if ctx.method == "tools/list":
        return await _tools_list(ctx, call_next)
    if ctx.method != "tools/call" or ctx.request_id is None:
        return await call_next(ctx)
    params = ctx.params or {}
    name = str(params.get("name") or "")
    arguments = params.get("arguments") if isinstance(params.get("arguments"), dict) else {}
    state = state_for(ctx)
    record = CallRecord(name, dict(arguments))
    started = time.monotonic()
    spec = SPECS.get(name)
    hidden = spec and state.hides(spec.name, spec.group, spec.read_only)
    token = CURRENT_CALL.set(record)
    result: Any = None
    try:
        if hidden:
            record.decision, record.decided_by, record.refused = "deny", f"connection: {hidden}", True
            text = (f"{name} is not available here: {hidden}. Nothing was changed. It is left out of this connection's "
                    "tool list; connect without that restriction to use it.")
            result = CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
        else:
            if not state.restored:  # once per connection: its client's active project in this folder
                state.restored = True
                key = remembered_key(ctx, state) if state.active_project is None else None
                if key is not None:  # a person's plugin connection only: no thread hop for HTTP, agents, tests
                    await anyio.to_thread.run_sync(restore_active_project, state, key)
            result = await call_next(ctx)
    except Exception as error:  # a protocol error (unknown tool, bad request): recorded, then passed on
        await _write(ctx, state, record, "error", str(error), started)
        raise
    finally:
        CURRENT_CALL.reset(token)
    wire = result.model_dump(by_alias=True, exclude_none=True) if isinstance(result, CallToolResult) else result
    if isinstance(wire, dict) and wire.get("resultType") == "input_required":
        return result  # a question is out (2026 era): the retry that carries the answer is the call recorded
    failed = isinstance(wire, dict) and bool(wire.get("isError"))
    outcome = ("refused" if record.refused else "error") if failed else "ok"
    await _write(ctx, state, record, outcome, _text_of(wire) if failed else None, started)
    return result


def _record_later(audit: Any, row: dict[str, Any]) -> None:
    try:
        audit.record(**row)
    except Exception:  # the daemon is closing, or the store is gone: say so in the log, not on the client
        log.exception("could not write a deferred audit row for %s", row.get("action"))


async def _write(ctx: Any, state: Any, record: CallRecord, outcome: str, message: str | None, started: float) -> None:
    """The call's audit row, in its own transaction after the call (never inside the call's)."""
    audit = state.services.audit
    seconds = time.monotonic() - started
    if state.on_tool_call is not None:  # the daemon's GET /metrics histogram
        state.on_tool_call(record.name, outcome, seconds)
    task_id = record.task_id or (record.arguments.get("task_id") if isinstance(record.arguments.get("task_id"), str)
                                 else None) or state.options.get("task_id")
    project_id = record.project_id or (record.arguments.get("project_id") if isinstance(
        record.arguments.get("project_id"), str) else None) or state.active_project
    # An id no id can be (a refused 100 kB one) is kept in the arguments, cut; never as a column PostgreSQL indexes.
    task_id, project_id = (i if i is None or len(i) <= MAX_NAME else None for i in (task_id, project_id))
    row = dict(actor=actor_of(ctx, state), action=record.action or f"tool:{record.name}", decision=record.decision,
               decided_by=record.decided_by, outcome=outcome, message=message, project_id=project_id,
               task_id=task_id, arguments=record.arguments,
               duration_ms=int(seconds * 1000))
    try:
        await anyio.to_thread.run_sync(lambda: audit.record(**row, wait=False))
    except StoreBusy:
        # Another writer holds the store (a call waiting on a lock): the answer does not wait for its audit row,
        # which follows as soon as the store is free.
        threading.Thread(target=_record_later, args=(audit, row), name="agentqueue-audit", daemon=True).start()
    if state.after_call is not None:
        await state.after_call()  # agentqueue://audit subscribers hear of the row at once
