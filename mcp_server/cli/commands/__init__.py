"""The `agentqueue` commands, one module each: its parser (`register`) and its `run`, heavy imports inside."""
