"""MCP tool adapters, one module per group; importing a module registers its tools in `registry.TOOLS`."""

from . import agents, channels, files, git, hooks, notes, projects, repos, requests, system, tasks  # noqa: F401  (registration by import)
from .registry import TOOLS, ClientState

__all__ = ["TOOLS", "ClientState"]
