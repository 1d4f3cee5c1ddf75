"""MCP tool adapters, one module per group; importing a module registers its tools in `registry.TOOLS`."""

from . import agents, channels, files, git, hooks, notes, policy, projects, repos, requests, system, tasks  # noqa: F401  (registration by import)
from . import discovery  # noqa: F401  (last: it lists the others)
from .registry import SPECS, TOOLS, ClientState

__all__ = ["SPECS", "TOOLS", "ClientState"]
