"""Channel tools: link chat channels (any front end's ids) to projects and look them up."""

from typing import Annotated

from mcp.server.mcpserver import Context
from pydantic import BaseModel, Field

from ..store.models import Channel

from .registry import services, tool


class ChannelLinked(BaseModel):
    project_id: str
    channel_id: str
    previous_project_id: str | None = None


class ControlChannel(BaseModel):
    project_id: str
    channel_id: str
    channel_name: str


class ProjectChannels(BaseModel):
    project_id: str
    channels: list[Channel]


class ChannelProject(BaseModel):
    channel_id: str
    project_id: str | None
    project_name: str | None


@tool(idempotent=True)
def set_project_channel(ctx: Context, project_id: str, channel_id: str,
                              channel_name: str | None = None) -> ChannelLinked:
    """Link a chat channel id to a project (re-links it if another project had it)."""
    previous = services(ctx).channels.link(project_id, channel_id, channel_name)
    return ChannelLinked(project_id=project_id, channel_id=channel_id.strip(), previous_project_id=previous)


@tool(idempotent=True)
def set_control_interface(ctx: Context, project_id: str,
                                channel_name: Annotated[str, Field(description="e.g. #ops")]) -> ControlChannel:
    """Make a channel, by name, the project's control channel."""
    channel = services(ctx).channels.set_control(project_id, channel_name)
    return ControlChannel(project_id=project_id, channel_id=channel.channel_id,
                          channel_name=channel.channel_name or channel_name)


@tool(read_only=True)
def get_project_channels(ctx: Context, project_id: str) -> ProjectChannels:
    """The channels linked to a project, control channel first."""
    return ProjectChannels(project_id=project_id, channels=services(ctx).channels.for_project(project_id))


@tool(read_only=True)
def get_project_for_channel(ctx: Context, channel_id: str) -> ChannelProject:
    """Which project a channel belongs to (null if none)."""
    project_id, name = services(ctx).channels.project_for(channel_id)
    return ChannelProject(channel_id=channel_id.strip(), project_id=project_id, project_name=name)
