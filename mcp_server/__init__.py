"""AgentQueue: an MCP server that runs a queue of AI coding-agent tasks across projects.

Kept import-free: the stdio plugin imports this package and must start in milliseconds.
"""

__version__ = "0.1.0"
