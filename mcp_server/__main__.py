"""`python -m mcp_server` is `agentqueue` (the plugin spawns the daemon this way)."""

from .cli import main

main()
