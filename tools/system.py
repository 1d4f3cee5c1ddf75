"""System tools: the queue at a glance, the event log, the token ledger, the orchestrator switch."""

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field, model_serializer

from ..apps import BOARD_URI, tool_meta
from ..store.models import Event

from .registry import Hours, Noted, ProjectId, project_filter, services, tool


class TaskOverview(BaseModel):
    total: int
    by_status: dict[str, int]
    in_progress: list[dict[str, Any]]
    ready: list[dict[str, Any]]


class Status(Noted):
    projects: int
    agents: list[dict[str, Any]]
    tasks: TaskOverview
    orchestrator: dict[str, Any]
    warnings: list[str]
    daemons: list[dict[str, Any]] | None = None  # team mode: the daemons sharing the queue
    # Per repo: what is landing, what waits, what was sent back to its agent and why (design.md "Merge queue").
    merge_queue: list[dict[str, Any]] = Field(default_factory=list)
    # Agent kinds parked for the whole queue: {agent_type, reason, until, message, fix, since, account}.
    parked: list[dict[str, Any]] = Field(default_factory=list)


class EventList(Noted):
    events: list[Event]


class UsageTotals(BaseModel):
    input: int
    output: int
    cache_read: int
    cache_write: int
    total: int
    cost_usd: float
    # Present only when not 0: runs counted up to where they were cut short (killed, stopped, timed out), and runs
    # of a model of unknown price (their tokens count, their cost is not in cost_usd).
    partial_runs: int | None = None
    unpriced_runs: int | None = None

    @model_serializer(mode="wrap")
    def _without_absent_marks(self, handler: Any) -> Any:
        data = handler(self)
        for key in ("partial_runs", "unpriced_runs"):
            if isinstance(data, dict) and not data.get(key):
                data.pop(key, None)
        return data


class TokenUsage(Noted):
    total: UsageTotals
    breakdown: list[dict[str, Any]]


class OrchestratorState(BaseModel):
    state: Literal["running", "paused"]
    running_tasks: int
    unparked: list[str] | None = None  # resume only: the agent kinds it unparked (a failed login, a usage limit)

    @model_serializer(mode="wrap")
    def _unparked_on_resume(self, handler: Any) -> Any:
        data = handler(self)
        if isinstance(data, dict) and data.get("unparked") is None:
            data.pop("unparked", None)
        return data


@tool(read_only=True, meta=tool_meta(BOARD_URI))
def get_status(ctx: Context) -> Status:
    """The queue at a glance: tasks, agents, warnings."""
    return Status(**services(ctx).system.status())


@tool(read_only=True)
def get_recent_events(
    ctx: Context,
    limit: Annotated[int, Field(ge=1, le=500)] = 10,
    project_id: ProjectId = None,
    task_id: str | None = None,
    event_type: Annotated[str | None, Field(description="e.g. task.completed or task.*")] = None,
) -> EventList:
    """Recent events, newest first."""
    return EventList(events=services(ctx).events.recent(limit, project_filter(ctx, project_id), task_id,
                                                        event_type))


@tool(read_only=True)
def get_token_usage(
    ctx: Context,
    project_id: ProjectId = None,
    task_id: str | None = None,
    since_hours: Hours | None = None,
) -> TokenUsage:
    """Tokens and cost: total, broken down by project, task or agent."""
    svc = services(ctx)
    scope = project_filter(ctx, project_id) if not task_id else project_id
    if scope:
        svc.projects.get(scope)
    if task_id:
        svc.tasks.get(task_id)
    return TokenUsage(**svc.usage.summary(scope, task_id, since_hours))


@tool()
def orchestrator_control(ctx: Context, action: Literal["pause", "resume", "status"]) -> OrchestratorState:
    """Pause or resume starting task runs (running ones finish), or read the state."""
    system = services(ctx).system
    state = system.orchestrator_state() if action == "status" else system.set_orchestrator(
        "paused" if action == "pause" else "running")
    unparked = [row["agent_type"] for row in system.unpark()] if action == "resume" else None
    return OrchestratorState(state=state, running_tasks=system.running_tasks(), unparked=unparked)


class NotifierResult(BaseModel):
    url: str  # secrets masked
    ok: bool
    error: str | None = None


class NotifyTest(BaseModel):
    results: list[NotifierResult]


@tool()
def notify_test(ctx: Context) -> NotifyTest:
    """Send a test notification to every [notify] URL in config.toml; each one's result."""
    return NotifyTest(results=[NotifierResult(**r) for r in services(ctx).system.notify_test()])


class Restarting(BaseModel):
    status: Literal["restarting"]


@tool(destructive=True)
async def restart_daemon(ctx: Context) -> Restarting:  # async: the daemon's restart hook starts a task on its loop
    """Restart the daemon: running agents stop, their tasks are requeued."""
    services(ctx).system.request_restart()
    return Restarting(status="restarting")
