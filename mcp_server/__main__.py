"""`python -m agentqueue` is the `agentqueue` command (the plugin spawns the daemon this way)."""

from .cli import main

main()
