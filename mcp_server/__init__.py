"""AgentQueue: an MCP server that runs a queue of AI coding-agent tasks across projects.

Kept import-free: the stdio plugin imports this package and must start in milliseconds. `__version__` is
computed on first use (version.py: the package metadata's release, and the commit in a checkout).
"""


def __getattr__(name: str) -> str:
    if name == "__version__":
        from .version import version

        return version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
