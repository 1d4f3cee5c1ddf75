"""Agent tools: register the workers that run tasks and see what they are doing."""

from typing import Annotated

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from ..store.models import Agent, AgentType

from .registry import Command, Label, Limit, Name, Noted, Offset, services, tool


class AgentList(Noted):
    agents: list[Agent]
    total: int


@tool(read_only=True)
def list_agents(ctx: Context, limit: Limit = 50, offset: Offset = 0) -> AgentList:
    """List registered agents with their state and current task."""
    agents, total = services(ctx).agents.list(limit, offset)
    return AgentList(agents=agents, total=total)


@tool()
def create_agent(
    ctx: Context,
    name: Name,
    agent_type: AgentType = "claude-code",
    repo_id: Annotated[str | None, Field(description="runs only its tasks")] = None,
    model: str | None = None,
    capabilities: list[str] | None = None,
    command: Annotated[Command | None, Field(description="for agent_type=command or acp (e.g. gemini)")] = None,
    label: Annotated[Label | None, Field(description="run only on daemons with it")] = None,
) -> Agent:
    """Register an agent that runs tasks with a coding CLI or a command."""
    return services(ctx).agents.create(name, agent_type, repo_id, model, capabilities, command, label)


AgentId = str  # ids are slugs of names, e.g. claude-1 (the instructions say so once)


class AgentDeleted(BaseModel):
    deleted: str


@tool()
def edit_agent(
    ctx: Context,
    agent_id: AgentId,
    model: str | None = None,
    command: Command | None = None,
    repo_id: str | None = None,
    capabilities: list[str] | None = None,
    label: Label | None = None,
    instructions: Annotated[str | None, Field(description="added to every prompt it runs")] = None,
) -> Agent:
    """Change an agent from its next task; "" clears a field."""
    return services(ctx).agents.edit(agent_id, model, command, repo_id, capabilities, label, instructions)


@tool(idempotent=True)
def pause_agent(ctx: Context, agent_id: AgentId) -> Agent:
    """Pause an agent: it takes no new task; a running one finishes."""
    return services(ctx).agents.set_paused(agent_id, True)


@tool(idempotent=True)
def resume_agent(ctx: Context, agent_id: AgentId) -> Agent:
    """Let a paused agent take tasks again."""
    return services(ctx).agents.set_paused(agent_id, False)


@tool(destructive=True)
def delete_agent(ctx: Context, agent_id: AgentId) -> AgentDeleted:
    """Delete an agent (stop_task its task first if running); its history stays."""
    services(ctx).agents.delete(agent_id)
    return AgentDeleted(deleted=agent_id)
