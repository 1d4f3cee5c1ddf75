"""MCP Tasks for the calls that wait: `wait_for_task` and `create_task(wait=true)` (issue 24, SEP-2663).

A client on the 2026-07-28 protocol that declares the extension `io.modelcontextprotocol/tasks` on its
`tools/call` gets a task handle (`resultType: "task"`) instead of the tool's answer at once. It then polls
`tasks/get`, answers the agent's permission questions with `tasks/update`, and may stop waiting with
`tasks/cancel`. Every other client (handshake-era, or 2026 without the extension, or a run of the engine)
gets the tool's own answer at once: the task's id and state. The SDK 2.3 implements no Tasks; this module
is all of it, plugged in through the SDK's extension API (`MCPServer(extensions=[...])`).

An MCP task here is a *wait* on an AgentQueue task, read afresh from the store on every `tasks/get`:
- DEFINED, READY, ASSIGNED, IN_PROGRESS, VERIFYING, PAUSED -> `working` (the statusMessage says which);
- WAITING_INPUT with pending permission requests -> `input_required`, one form elicitation per request,
  keyed by the request id (unique for the task's life, as the SEP asks); `tasks/update` answers it exactly as
  `answer_request` would (policy checked, audited), and the task goes back to `working`;
- COMPLETED, AWAITING_APPROVAL, BLOCKED, FAILED -> `completed`, whose result is the tool's own structured
  result (the task as it ended). A task that ended BLOCKED is still a completed *wait*: SEP-2663 keeps `failed`
  for JSON-RPC errors, which here is only a task deleted while waited on.
- `tasks/cancel` stops the wait, never the work: the AgentQueue task goes on (stop_task stops it).
Waits live in this process's memory for TTL_MS: a daemon restart forgets them (`tasks/get` then says so, and
`wait_for_task` starts a new one), as it also restarts the runs they watched.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver.server import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS, CallToolRequestParams, CallToolResult, ElicitRequest, ElicitRequestFormParams, RequestParams,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from ..services.errors import ConflictError, NotFoundError, ServiceError
from ..store.db import now_iso
from ..store.models import PermissionRequest, Task
from ..tools.state import ClientState, actor_of, state_for
from ..visible import visible
from .toolsets import is_run

EXTENSION_ID = "io.modelcontextprotocol/tasks"
TTL_MS = 24 * 3600 * 1000  # a wait outlives any run and the default request timeout; then it is forgotten
POLL_MS = 2000  # a tasks/get is one indexed read: every 2 s costs nothing and feels live
ENDED = frozenset({"COMPLETED", "AWAITING_APPROVAL", "BLOCKED", "FAILED"})
# The elicitation a permission request becomes: flat primitives, as elicitation schemas must be.
ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {"type": "string", "title": "Answer", "enum": ["allow", "deny"]},
        "message": {"type": "string", "title": "Note for the agent (with deny)"},
    },
    "required": ["decision"],
}


@dataclass
class Wait:
    """One MCP task: a client waiting on an AgentQueue task through one tool call."""

    id: str  # unguessable: whoever holds it may read the task and answer its questions (SEP-2663 security)
    task_id: str
    tool: str  # wait_for_task or create_task: the final result has that tool's output schema
    created_at: str
    started: float  # time.monotonic(), for the TTL
    cancelled_at: str | None = None


class Waits:
    """The open waits of this process, forgotten TTL_MS after they began."""

    def __init__(self) -> None:
        self._waits: dict[str, Wait] = {}

    def open(self, task_id: str, tool: str) -> Wait:
        self._forget_expired()
        wait = Wait(secrets.token_urlsafe(18), task_id, tool, now_iso(), time.monotonic())
        self._waits[wait.id] = wait
        return wait

    def get(self, wait_id: str) -> Wait:
        self._forget_expired()
        wait = self._waits.get(wait_id)
        if wait is None:
            raise MCPError(code=INVALID_PARAMS, message=(
                f"Task {wait_id[:100]!r} not found: no such MCP task, or it expired after {TTL_MS // 3_600_000} h "
                "or the AgentQueue daemon restarted. Call wait_for_task(task_id=...) again to wait on the AgentQueue "
                "task."))
        return wait

    def _forget_expired(self) -> None:
        now = time.monotonic()
        for key in [k for k, w in self._waits.items() if (now - w.started) * 1000 > TTL_MS]:
            del self._waits[key]


class TaskIdParams(RequestParams):
    task_id: str = Field(max_length=200)


class UpdateTaskParams(TaskIdParams):
    input_responses: dict[str, dict[str, Any]] = Field(default_factory=dict)


def wants_task(ctx: ServerRequestContext[Any, Any], name: str, arguments: dict[str, Any]) -> bool:
    """Whether this call is answered as an MCP task: a waiting call, from a person's client that declared Tasks on
    this 2026-07-28 request (a run of the engine never waits: it holds an agent slot, and must not answer questions)."""
    if name != "wait_for_task" and not (name == "create_task" and arguments.get("wait") is True):
        return False
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    if not (capabilities and capabilities.extensions and EXTENSION_ID in capabilities.extensions):
        return False
    return not is_run(state_for(ctx).options.get("actor"))


def can_answer(state: ClientState) -> bool:
    """Whether a connection may answer permission requests: a person's, allowed answer_request (not read-only)."""
    return not is_run(state.options.get("actor")) and state.hides("answer_request", "requests", False) is None


def task_status(task: Task, wait: Wait, answerable: bool) -> dict[str, Any]:
    """The MCP task (SEP-2663 `DetailedTask`) a wait on `task` is now, without a final result."""
    status, message, extra = "working", f"Task {task.id} is {task.status}.", {}
    pending = [r for r in task.pending_requests if r.status == "pending"]
    if wait.cancelled_at:  # terminal: a task that ends later does not turn it into completed
        status, message = "cancelled", (f"Stopped waiting; task {task.id} goes on ({task.status}). stop_task stops "
                                        "it; wait_for_task waits again.")
    elif task.status in ENDED:
        status, message = "completed", ended_message(task)
    elif task.status == "WAITING_INPUT" and pending and answerable:
        status = "input_required"
        message = f"Task {task.id} waits for a person: its agent asks to {visible(pending[0].action[:300])}."
        extra = {"inputRequests": {r.id: elicitation(task, r) for r in pending}}
    elif task.status == "DEFINED":
        message = f"Task {task.id} waits for its dependencies ({', '.join(task.depends_on)[:300]})."
    elif task.reason:
        message = f"Task {task.id} is {task.status}: {visible(task.reason[:300])}"
    return {"taskId": wait.id, "status": status, "statusMessage": message, "createdAt": wait.created_at,
            "lastUpdatedAt": max(task.updated_at, wait.cancelled_at or wait.created_at), "ttlMs": TTL_MS,
            "pollIntervalMs": POLL_MS, **extra}


def ended_message(task: Task) -> str:
    if task.status == "COMPLETED":
        return f"Task {task.id} completed."
    if task.status == "AWAITING_APPROVAL":
        return (f"Task {task.id} finished and awaits approval: approve_task lands it, request_changes sends it "
                "back.")
    return f"Task {task.id} ended {task.status}: {visible((task.reason or 'get_agent_error says why.')[:300])}" + (
        f" {visible(task.next_step[:300])}" if task.next_step else "")


def elicitation(task: Task, request: PermissionRequest) -> dict[str, Any]:
    """A permission request as the form elicitation the person answers in their own client. The action and its
    description are an agent's words: their control characters are shown escaped, never sent to a terminal client."""
    who = f"agent {request.agent_id}" if request.agent_id else "its agent"
    why = f" ({visible(request.description[:300].rstrip('.'))})" if request.description else ""
    action = visible(request.action[:500])
    text = f"Task {task.id} ({visible(task.title[:100])}): {who} asks to {action}{why}. Allow it?"
    params = ElicitRequestFormParams(message=text, requested_schema=ANSWER_SCHEMA)
    return ElicitRequest(params=params).model_dump(by_alias=True, mode="json", exclude_none=True)


def final_result(task: Task, tool: str) -> dict[str, Any]:
    """The tool call's own result once the wait is over: the tool's structured result, as the task ended."""
    data = task.model_dump(mode="json")
    if tool == "wait_for_task":
        data["message"] = ended_message(task)
    text = json.dumps(data, indent=2)
    return CallToolResult(content=[{"type": "text", "text": text}], structured_content=data).model_dump(
        by_alias=True, mode="json", exclude_none=True)


class Tasks(Extension):
    """The Tasks extension: waiting tool calls become MCP tasks; tasks/get, tasks/update, tasks/cancel serve them."""

    identifier = EXTENSION_ID

    def __init__(self) -> None:
        self.waits = Waits()

    def methods(self) -> list[MethodBinding]:
        versions = frozenset(MODERN_PROTOCOL_VERSIONS)
        return [MethodBinding("tasks/get", TaskIdParams, self.get, versions),
                MethodBinding("tasks/update", UpdateTaskParams, self.update, versions),
                MethodBinding("tasks/cancel", TaskIdParams, self.cancel, versions)]

    async def intercept_tool_call(self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any],
                                  call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)  # the tool runs as always: arguments checked, policy gate, audit
        if not wants_task(ctx, params.name, params.arguments or {}):
            return result
        # A refusal, a question of the policy gate (an InputRequiredResult the client retries), anything but the
        # task's state: passed on as it is.
        if not isinstance(result, CallToolResult) or result.is_error or not isinstance(result.structured_content,
                                                                                        dict):
            return result
        wait = self.waits.open(str(result.structured_content["id"]), params.name)
        state = state_for(ctx)
        detailed = await anyio.to_thread.run_sync(self._detailed, state, wait)
        seed = {k: v for k, v in detailed.items() if k not in ("inputRequests", "result", "error")}
        return {"resultType": "task", **seed}

    def _detailed(self, state: ClientState, wait: Wait) -> dict[str, Any]:
        try:
            task = state.services.tasks.get(wait.task_id)
        except NotFoundError:
            return {"taskId": wait.id, "status": "failed", "createdAt": wait.created_at, "lastUpdatedAt": now_iso(),
                    "ttlMs": TTL_MS, "statusMessage": f"Task {wait.task_id} was deleted while waited on.",
                    "error": {"code": INVALID_PARAMS, "message": f"Task '{wait.task_id}' was deleted; nothing to wait "
                                                                 "for. list_tasks shows task ids."}}
        detailed = task_status(task, wait, can_answer(state))
        if detailed["status"] == "completed":
            detailed["result"] = final_result(task, wait.tool)
        return detailed

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        require_client_extension(ctx, EXTENSION_ID)
        wait = self.waits.get(params.task_id)
        return await anyio.to_thread.run_sync(self._detailed, state_for(ctx), wait)

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        """Stop waiting: the AgentQueue task goes on (cancelling a client's wait must not lose a person's work)."""
        require_client_extension(ctx, EXTENSION_ID)
        wait = self.waits.get(params.task_id)
        detailed = await anyio.to_thread.run_sync(self._detailed, state_for(ctx), wait)
        if detailed["status"] in ("working", "input_required") and wait.cancelled_at is None:
            wait.cancelled_at = now_iso()
        return {}

    async def update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> dict[str, Any]:
        """The person's answers to the agent's questions, each given exactly as answer_request would give it."""
        require_client_extension(ctx, EXTENSION_ID)
        wait = self.waits.get(params.task_id)
        state = state_for(ctx)
        if not can_answer(state):
            raise MCPError(code=INVALID_PARAMS, message=(
                "This connection may not answer permission requests (it is read-only, limited by --toolsets, or "
                "an agent's). Nothing was answered; a person answers from a client allowed answer_request."))
        answers = [(key, answer_of(key, response)) for key, response in params.input_responses.items()]
        for key, (decision, message) in answers:
            if decision is not None:
                await anyio.to_thread.run_sync(self._answer, ctx, state, wait, key, decision, message)
        return {}

    def _answer(self, ctx: ServerRequestContext[Any, Any], state: ClientState, wait: Wait, request_id: str,
                decision: str, message: str | None) -> None:
        svc = state.services
        try:
            request = svc.requests.get(request_id)
        except NotFoundError:
            return  # a key never issued: ignored, as the SEP says
        if request.task_id != wait.task_id or request.status != "pending":
            return  # another task's request, or one answered already: ignored too
        arguments = {"request_id": request_id, "decision": decision}
        verdict = svc.call_policy.decide("answer_request", arguments, state.active_project, False)
        actor = actor_of(ctx, state)
        if verdict.decision == "deny":
            svc.audit.record(actor=actor, action=verdict.action, decision="deny", decided_by=verdict.decided_by,
                             outcome="refused", project_id=request.project_id, task_id=request.task_id,
                             arguments=arguments)
            raise MCPError(code=INVALID_PARAMS, message=verdict.verdict.refusal(verdict.step.what)
                           + " Nothing was answered.")
        # The answer is the person's own, given in their client's form: a policy `ask` is that very question.
        try:
            svc.requests.answer(request_id, decision, False, message, by="person (MCP task)")
        except ConflictError:
            return  # answered meanwhile (the board, another client): the first answer stands
        except ServiceError as error:
            raise MCPError(code=INVALID_PARAMS, message=str(error)) from None
        svc.audit.record(actor=actor, action=verdict.action,
                         decision="allow" if verdict.decision == "allow" else "ask→accept",
                         decided_by=verdict.decided_by if verdict.decision == "allow" else
                         f"person, in an MCP task's elicitation; asked by {verdict.decided_by}",
                         project_id=request.project_id, task_id=request.task_id, arguments=arguments)


def answer_of(key: str, response: dict[str, Any]) -> tuple[str | None, str | None]:
    """(decision, message) from one elicitation response: accept carries the form, decline is a deny, cancel leaves
    the question open."""
    action = response.get("action")
    if action == "decline":
        return "deny", None
    if action != "accept":
        return None, None
    content = response.get("content") if isinstance(response.get("content"), dict) else {}
    decision, message = content.get("decision"), content.get("message")
    if decision not in ("allow", "deny"):
        raise MCPError(code=INVALID_PARAMS, message=(
            f"inputResponses[{key[:100]!r}]: decision must be allow or deny (got {str(decision)[:50]!r}). Nothing was "
            "answered."))
    return decision, message if isinstance(message, str) and message.strip() else None
