"""Hook tools: schedules and event reactions that create tasks or run a model with AgentQueue's tools."""

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from ..engine.hook_runner import HookRunner
from ..store.models import Hook, HookRun

from .registry import Command, Name, Noted, ProjectId, Seconds, project_filter, project_for, services, tool

# The nested objects' field names, in their parameters' descriptions (the instructions say what they do).
Trigger = Annotated[dict[str, Any], Field(description='{"type":"cron","cron":"0 6 * * *"}, periodic+interval_seconds, '
                                                      'event+event_type(+filter)')]
Steps = Annotated[list[dict[str, Any]] | None, Field(
    description="{type: shell(command)|read_file(path)|http(url,headers)|db_query(query)|git_diff(repo_id), "
                "skip_llm_if_exit_zero|_empty|_status_ok}")]
TaskTemplate = Annotated[dict[str, Any] | None, Field(description="{title, description, priority, requires_approval}")]
LlmConfig = Annotated[dict[str, Any] | None, Field(description="{agent_type, model, max_turns, timeout_seconds}")]


class HookList(Noted):
    hooks: list[Hook]


class HookDeleted(BaseModel):
    deleted: str


class HookRuns(Noted):
    hook_id: str
    runs: list[HookRun]


class HookFired(BaseModel):
    hook_id: str
    run_id: str
    status: str


@tool()
def create_hook(
    ctx: Context,
    name: Name,
    trigger: Trigger,
    project_id: ProjectId = None,
    action: Literal["llm", "create_task"] = "llm",
    prompt_template: Annotated[Command | None,
                               Field(description="{{step_N[.field]}} {{event.x}} {{project_id}}")] = None,
    task_template: TaskTemplate = None,
    context_steps: Steps = None,
    cooldown_seconds: Seconds = 3600,
    llm_config: LlmConfig = None,
    enabled: bool = True,
) -> Hook:
    """On a schedule or event: gather context, then create a task or run a model."""
    return services(ctx).hooks.create(project_for(ctx, project_id), name, trigger, action, prompt_template,
                                      task_template, context_steps, cooldown_seconds, llm_config, enabled)


@tool(read_only=True)
def list_hooks(ctx: Context, project_id: ProjectId = None) -> HookList:
    """Hooks."""
    return HookList(hooks=services(ctx).hooks.list(project_filter(ctx, project_id)))


@tool()
def edit_hook(
    ctx: Context,
    hook_id: str,
    name: Name | None = None,
    trigger: dict[str, Any] | None = None,
    action: Literal["llm", "create_task"] | None = None,
    prompt_template: Command | None = None,
    task_template: dict[str, Any] | None = None,
    context_steps: list[dict[str, Any]] | None = None,
    cooldown_seconds: Seconds | None = None,
    llm_config: dict[str, Any] | None = None,
    enabled: bool | None = None,
) -> Hook:
    """Change any field of a hook."""
    return services(ctx).hooks.edit(hook_id, name=name, trigger=trigger, action=action,
                                    prompt_template=prompt_template, task_template=task_template,
                                    context_steps=context_steps, cooldown_seconds=cooldown_seconds,
                                    llm_config=llm_config, enabled=enabled)


@tool(destructive=True)
def delete_hook(ctx: Context, hook_id: str) -> HookDeleted:
    """Delete a hook and its run history."""
    return HookDeleted(deleted=services(ctx).hooks.delete(hook_id))


@tool(read_only=True)
def list_hook_runs(ctx: Context, hook_id: str, limit: Annotated[int, Field(ge=1, le=500)] = 10) -> HookRuns:
    """A hook's runs, newest first."""
    return HookRuns(hook_id=hook_id, runs=services(ctx).hooks.runs(hook_id, limit))


@tool()
async def fire_hook(ctx: Context, hook_id: str) -> HookFired:
    """Run a hook now (ignores cooldown); waits up to 10 s, else answers status=running."""
    svc = services(ctx)
    # Through the engine's running hook runner, so runs never overlap; with no engine here, in this process.
    runner = svc.engine_hooks.hook_runner or HookRunner(svc, svc.home, listen=False)
    run_id, status = await runner.fire(hook_id)
    return HookFired(hook_id=hook_id, run_id=run_id, status=status)
