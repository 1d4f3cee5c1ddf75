"""Task tools: create and edit tasks, move them through the state machine, read their results."""

from typing import Annotated, Any

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field, WithJsonSchema

from ..apps import BOARD_URI, TASK_URI, tool_meta
from ..services import limits, result_size
from ..services.errors import InvalidInputError
from ..services.feedback import MAX_COMMENT
from ..services.task_states import NEEDS_PERSON
from ..store.models import AgentType, Task, TaskRef, TaskResult, TaskStatusName, TaskSummary

from .registry import (
    Limit, Name, Noted, Offset, PathText, Priority, ProjectId, Retries, TaskId, client_state, project_filter,
    project_for, services, tool,
)


# The default tool list is a token budget (tests/test_toolsets.py): a parameter that takes one value or a list is
# advertised as one type list (pydantic still validates the items), and best of N is described once, in the server's
# instructions.
Candidates = Annotated[int | list[str] | None, WithJsonSchema({"type": ["integer", "array"]})]
Statuses = Annotated[str | list[str] | None, WithJsonSchema({"type": ["string", "array"]})]  # one, or a list
RepoId = Annotated[str | None, Field(description="default: the default or only repo")]
Names = Annotated[list[str] | None, WithJsonSchema({"type": "array"})]  # capability names, as create_agent takes them


class TaskList(Noted):
    tasks: list[TaskSummary]
    total: int
    hidden_completed: int


class TaskStatusChange(BaseModel):
    task_id: str
    status: TaskStatusName
    previous_status: TaskStatusName | None = None
    killed: bool | None = Field(None, description="an agent process was running and was killed")


class TaskDeleted(BaseModel):
    deleted: str
    unblocked: list[TaskRef] = Field(default_factory=list)


class TaskSkipped(BaseModel):
    skipped: str
    unblocked: list[TaskRef]


class TaskResultInfo(BaseModel):
    task_id: str
    attempts: int
    result: TaskResult | None
    message: str | None = None


class TaskDiff(Noted):
    task_id: str
    branch: str | None
    base: str | None
    diff: str
    files_changed: list[str]
    total_chars: int = 0
    truncated: bool = False


class StuckChain(BaseModel):
    blocked_task: TaskRef
    reason: str | None = None
    next_step: str | None = None
    stuck_downstream: list[TaskRef]
    stuck_count: int


class ChainHealth(Noted):
    task_id: str | None = None
    status: TaskStatusName | None = None
    reason: str | None = None
    next_step: str | None = None
    stuck_downstream: list[TaskRef] | None = None
    stuck_count: int | None = None
    project_id: str | None = None
    stuck_chains: list[StuckChain] | None = None
    total_stuck_chains: int | None = None
    message: str | None = None


class StatusOverride(BaseModel):
    task_id: str
    old_status: TaskStatusName
    new_status: TaskStatusName


class AgentError(BaseModel):
    task_id: str
    status: TaskStatusName
    retries: str
    error_type: str | None
    error_message: str | None
    suggested_fix: str | None
    agent_summary: str | None
    message: str | None = None


@tool(read_only=True, meta=tool_meta(BOARD_URI))
def list_tasks(
    ctx: Context,
    project_id: ProjectId = None,
    status: Statuses = None,
    include_completed: bool = False,
    limit: Limit = 50,
    offset: Offset = 0,
) -> TaskList:
    """Tasks by priority; COMPLETED hidden unless include_completed."""
    tasks, total, hidden = services(ctx).tasks.list(project_filter(ctx, project_id), status, include_completed,
                                                    limit, offset)
    return TaskList(tasks=tasks, total=total, hidden_completed=hidden)


@tool()
def create_task(
    ctx: Context,
    title: str,
    description: str,  # "self-contained": the instructions say so, at length
    project_id: ProjectId = None,
    priority: Priority = 100,  # lower runs first: said once, in the instructions
    repo_id: RepoId = None,
    requires_approval: bool = False,
    depends_on: list[str] = [],  # noqa: B006 (pydantic copies it)
    max_retries: Retries = 3,
    agent_type: AgentType | None = None,
    candidates: Candidates = None,
    capabilities: Names = None,  # routing: what they and model mean is said once, in the instructions
    model: Name | None = None,
    wait: bool = False,  # what it does is said by wait_for_task, in the same list
) -> Task:
    """Queue a task for an agent."""
    del wait  # server/mcp_tasks.py reads it: the call becomes an MCP Task on a client that can wait
    svc, parent = services(ctx), client_state(ctx).options.get("task_id")
    # A task's own agent queues follow-ups of its task, one level deeper, up to [engine] max_task_depth.
    depth = int(svc.settings.engine["max_task_depth"]) if parent else None
    if parent and not project_id and not client_state(ctx).active_project:
        project_id = svc.tasks.get(parent).project_id  # an agent's follow-up stays in its task's project
    return svc.tasks.create(project_for(ctx, project_id), title, description, priority, repo_id, requires_approval,
                            depends_on, max_retries, agent_type, parent_task_id=parent, max_depth=depth,
                            candidates=candidates, capabilities=capabilities, model=model)


class TaskWait(Task):
    message: str | None = None


# What a client that cannot wait is told (server/mcp_tasks.py makes the call an MCP Task on one that can).
NOT_WAITED = ("Not waited: this client does not use MCP Tasks (protocol 2026-07-28 with "
              "io.modelcontextprotocol/tasks), so this is the task's state now. get_task shows it later; "
              "answer_request answers its pending_requests.")


@tool(read_only=True)
def wait_for_task(ctx: Context, task_id: TaskId, project_id: ProjectId = None) -> TaskWait:
    """Wait for a task to end (an MCP Task); else get its state."""
    return TaskWait(**dict(task_of(ctx, task_id, project_id)), message=NOT_WAITED)


def task_of(ctx: Context, task_id: str, project_id: str | None) -> Task:
    """The task, refused when an explicit project_id is not its project (a wait on the wrong one would never end)."""
    task = services(ctx).tasks.get(task_id)
    if project_id and task.project_id != project_id:
        services(ctx).projects.get(project_id)  # an unknown project is named as such
        raise InvalidInputError(f"Task '{task_id}' belongs to project '{task.project_id}', not '{project_id}'. Nothing "
                           f"was changed; pass project_id='{task.project_id}' or omit it.")
    return task


@tool(read_only=True, meta=tool_meta(TASK_URI))
def get_task(ctx: Context, task_id: TaskId) -> Task:
    """A task: dependencies, dependents, branch, PR."""
    return services(ctx).tasks.get(task_id)


@tool()
def edit_task(
    ctx: Context,
    task_id: TaskId,
    title: str | None = None,
    description: str | None = None,
    priority: Priority | None = None,
    depends_on: Annotated[list[str] | None, Field(description="replaces the list")] = None,
    requires_approval: bool | None = None,
    repo_id: str | None = None,
) -> Task:
    """Change a task (not while it runs); fields omitted stay."""
    return services(ctx).tasks.edit(task_id, title, description, priority, depends_on, requires_approval, repo_id)


@tool(destructive=True)
def stop_task(ctx: Context, task_id: TaskId) -> TaskStatusChange:
    """Stop a task: kill its agent if running and mark it BLOCKED."""
    previous, killed = services(ctx).tasks.stop(task_id)
    return TaskStatusChange(task_id=task_id, status="BLOCKED", previous_status=previous, killed=killed)


@tool()
def restart_task(ctx: Context, task_id: TaskId) -> TaskStatusChange:
    """Requeue a task, retries reset (not while it runs)."""
    previous, status = services(ctx).tasks.restart(task_id)
    return TaskStatusChange(task_id=task_id, previous_status=previous, status=status)


@tool(destructive=True)
def delete_task(ctx: Context, task_id: TaskId) -> TaskDeleted:
    """Delete a task and its results (stop_task it first if running)."""
    unblocked = services(ctx).tasks.delete(task_id)
    return TaskDeleted(deleted=task_id, unblocked=unblocked)


@tool()
def approve_task(ctx: Context, task_id: TaskId) -> Task:
    """Approve a task AWAITING_APPROVAL: it completes."""
    return services(ctx).tasks.approve(task_id)


class ChangesRequested(BaseModel):
    task_id: str
    previous_status: TaskStatusName
    status: TaskStatusName
    branch: str | None
    branch_restarted: bool = Field(description="merged already: rerun starts it from the default branch")
    comments: int
    message: str


@tool()
def request_changes(
    ctx: Context,
    task_id: TaskId,
    comment: Annotated[str, Field(max_length=MAX_COMMENT)],
    file: Annotated[str | None, Field(max_length=limits.MAX_PATH)] = None,
    line: Annotated[int | None, Field(ge=1, le=limits.MAX_COUNT)] = None,
) -> ChangesRequested:
    """Send a task back with a comment: it reruns on its branch."""
    done = services(ctx).feedback.request_changes(task_id, comment, file, line, author="mcp")
    return ChangesRequested(**vars(done))


@tool()
def skip_task(ctx: Context, task_id: TaskId) -> TaskSkipped:
    """Mark a BLOCKED or FAILED task COMPLETED so its dependents can run."""
    return TaskSkipped(skipped=task_id, unblocked=services(ctx).tasks.skip(task_id))


@tool(read_only=True, rest="The whole agent output: resource agentqueue://tasks/{task_id}/log (paged: ?offset=<byte>).")
def get_task_result(ctx: Context, task_id: TaskId) -> TaskResultInfo:
    """The latest run's result: summary, files, tokens, cost, error."""
    attempts, result = services(ctx).tasks.results(task_id)
    message = None if result else "No result recorded yet: no agent has run this task."
    return TaskResultInfo(task_id=task_id, attempts=attempts, result=result, message=message)


@tool(read_only=True)
def get_task_diff(ctx: Context, task_id: TaskId,
                  path: PathText | None = None,
                  offset: Offset = 0) -> TaskDiff:
    """A task branch's diff against its base, paged."""
    svc = services(ctx)
    found = svc.vcs.task_diff(svc.tasks.get(task_id), path)
    part = result_size.page(found["diff"], offset)
    note = None
    if part.next_offset is not None or part.offset:
        note = (f"The diff{f' of {path}' if path else ''} is {part.total:,} characters; {part.span()} are shown."
                + (f" Call get_task_diff with offset={part.next_offset} for the next part"
                   + ("." if path else ", or path=<one of files_changed> for one file.")
                   if part.next_offset is not None else ""))
    return TaskDiff(**{**found, "diff": part.text}, total_chars=part.total, truncated=part.next_offset is not None,
                    note=note)


@tool(read_only=True)
def get_chain_health(ctx: Context, task_id: str | None = None, project_id: ProjectId = None) -> ChainHealth:
    """What a BLOCKED task holds up, or a project's stuck chains."""
    tasks = services(ctx).tasks
    if task_id:
        task = tasks.get(task_id)
        if task.status not in NEEDS_PERSON:
            return ChainHealth(task_id=task_id, status=task.status, stuck_downstream=[], stuck_count=0,
                               message=f"Task is {task.status}, not blocked: no stuck chain.")
        stuck = tasks.stuck_downstream(task_id)
        return ChainHealth(task_id=task_id, status=task.status, reason=task.reason, next_step=task.next_step,
                           stuck_downstream=stuck, stuck_count=len(stuck))
    scope = project_filter(ctx, project_id)
    if scope:
        services(ctx).projects.get(scope)
    chains: list[dict[str, Any]] = tasks.stuck_chains(scope)
    return ChainHealth(project_id=scope, stuck_chains=[StuckChain(**c) for c in chains],
                       total_stuck_chains=len(chains))


@tool()
def set_task_status(ctx: Context, task_id: TaskId, status: TaskStatusName) -> StatusOverride:
    """Force a status past the state machine (recorded). Use sparingly."""
    old, new = services(ctx).tasks.set_status(task_id, status)
    return StatusOverride(task_id=task_id, old_status=old, new_status=new)


@tool(read_only=True, rest="The whole agent output: resource agentqueue://tasks/{task_id}/log (paged: ?offset=<byte>).")
def get_agent_error(ctx: Context, task_id: TaskId) -> AgentError:
    """Why a task failed, or is blocked or paused, with a fix."""
    return AgentError(**services(ctx).tasks.agent_error(task_id))
