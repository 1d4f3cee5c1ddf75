"""The engine: scheduler, workspaces, agent adapters, watchdog, orchestrator loop (no MCP imports)."""
