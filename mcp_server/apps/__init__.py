"""MCP Apps (SEP-1865): the board rendered inside the chat client (issue 11)."""
