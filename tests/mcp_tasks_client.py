"""A client side of MCP Tasks (SEP-2663) for the official Python client, which has none.

It uses the client's public extension API (SEP-2133): `Client(extensions=[TasksClient(...)])` declares
`io.modelcontextprotocol/tasks` on every 2026-07-28 request, and a `ResultClaim` on `tools/call` takes a
`resultType: "task"` answer. Its resolver polls `tasks/get` and sends `tasks/update` through
`ClientSession.send_request`, the client's lowest public request API, then hands `call_tool` the final
`CallToolResult`. Every state it saw, and the questions it answered, are kept for the tests to check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

import anyio
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.types import CallToolResult
from mcp_types import Request, RequestParams, Result
from pydantic import ConfigDict

from .slowdown import scaled

EXTENSION_ID = "io.modelcontextprotocol/tasks"


class CreatedTask(Result):
    """A `CreateTaskResult`: the task handle a tools/call answered with."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: str


class DetailedTask(Result):
    """A `tasks/get` answer: the task, with its questions, final result or error inlined."""

    model_config = ConfigDict(extra="allow")
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


class TaskParams(RequestParams):
    task_id: str


class UpdateParams(TaskParams):
    input_responses: dict[str, Any]


class GetTask(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams
    name_param = "taskId"  # SEP-2663: tasks/* carry the task id in Mcp-Name over HTTP


class UpdateTask(Request[UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateParams
    name_param = "taskId"


class CancelTask(Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams
    name_param = "taskId"


# The person at the client: given one input request (an elicitation/create), returns its response.
Answerer = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


async def get_task(session: Any, task_id: str) -> DetailedTask:
    return await session.send_request(GetTask(params=TaskParams(task_id=task_id)), DetailedTask)


async def update_task(session: Any, task_id: str, responses: dict[str, Any]) -> Result:
    return await session.send_request(UpdateTask(params=UpdateParams(task_id=task_id, input_responses=responses)),
                                      Result)


async def cancel_task(session: Any, task_id: str) -> Result:
    return await session.send_request(CancelTask(params=TaskParams(task_id=task_id)), Result)


class TasksClient(ClientExtension):
    identifier = EXTENSION_ID

    def __init__(self, answer: Answerer | None = None, poll_seconds: float = 0.05,
                 on_created: Callable[[CreatedTask, Any], Awaitable[None]] | None = None) -> None:
        self.answer = answer
        self.poll_seconds = poll_seconds  # faster than the server's pollIntervalMs: tests watch every state
        self.on_created = on_created
        self.created: list[CreatedTask] = []
        self.statuses: list[str] = []  # each status seen, consecutive repeats folded
        self.asked: list[tuple[str, dict[str, Any]]] = []  # (key, input request) answered
        self.last: DetailedTask | None = None

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self.resolve)]

    def _saw(self, status: str) -> None:
        if not self.statuses or self.statuses[-1] != status:
            self.statuses.append(status)

    async def resolve(self, created: CreatedTask, ctx: ClaimContext) -> CallToolResult:
        self.created.append(created)
        self._saw(created.status)
        if self.on_created is not None:
            await self.on_created(created, ctx.session)
        answered: set[str] = set()
        with anyio.fail_after(scaled(120)):
            while True:
                task = self.last = await get_task(ctx.session, created.task_id)
                self._saw(task.status)
                if task.status == "completed":
                    assert task.result is not None
                    return CallToolResult.model_validate(task.result)
                if task.status in ("failed", "cancelled"):
                    return CallToolResult(content=[{"type": "text", "text": f"{task.status}: {task.status_message}"}],
                                          is_error=True)
                if task.status == "input_required" and self.answer is not None:
                    fresh = {k: r for k, r in (task.input_requests or {}).items() if k not in answered}
                    if fresh:
                        responses = {}
                        for key, request in fresh.items():
                            self.asked.append((key, request))
                            responses[key] = await self.answer(request)
                        await update_task(ctx.session, created.task_id, responses)
                        answered |= set(fresh)
                        continue
                await anyio.sleep(self.poll_seconds)
