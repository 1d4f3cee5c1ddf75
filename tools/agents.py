"""Agent tools: register the workers that run tasks and see what they are doing."""

from typing import Annotated

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from ..store.models import Agent, AgentType

from .registry import Command, Limit, Name, Offset, services, tool


class AgentList(BaseModel):
    agents: list[Agent]
    total: int


@tool(read_only=True)
async def list_agents(ctx: Context, limit: Limit = 50, offset: Offset = 0) -> AgentList:
    """List registered agents with their state and current task."""
    agents, total = services(ctx).agents.list(limit, offset)
    return AgentList(agents=agents, total=total)


@tool()
async def create_agent(
    ctx: Context,
    name: Name,
    agent_type: AgentType = "claude-code",
    repo_id: Annotated[str | None, Field(description="a permanent repo")] = None,
    model: str | None = None,
    capabilities: list[str] | None = None,
    command: Annotated[Command | None, Field(description="executable, for agent_type=command")] = None,
) -> Agent:
    """Register an agent that runs tasks with a coding CLI (or any command)."""
    return services(ctx).agents.create(name, agent_type, repo_id, model, capabilities, command)
