"""Tool groups a connection can be limited to (`--toolsets`), and the connection options' shape.

Stdlib only: the plugin (`agentqueue mcp`) validates its flags with it before it relays anything.
A group is a module of `tools/`; the registry refuses a tool whose module is not listed here.
"""

from __future__ import annotations

from typing import Any

TOOLSETS: tuple[str, ...] = ("projects", "channels", "tasks", "repos", "agents", "system", "files", "git", "notes",
                             "hooks", "policy", "requests")
# The first line a plugin sends the daemon before the client's bytes: {"agentqueue": {options}}.
PREAMBLE_KEY = "agentqueue"


def parse_toolsets(text: str) -> list[str]:
    """`tasks,git` -> ["tasks", "git"]; an unknown or empty name raises ValueError naming the known ones."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in TOOLSETS]
    if unknown or not names:
        raise ValueError(f"unknown toolset(s) {', '.join(unknown) or '(none given)'}; "
                         f"choose from {', '.join(TOOLSETS)} (comma-separated)")
    return names


def connection_options(read_only: bool = False, toolsets: list[str] | None = None) -> dict[str, Any]:
    """The options dict a connection carries (the preamble's body): only what was asked for."""
    options: dict[str, Any] = {}
    if read_only:
        options["read_only"] = True
    if toolsets:
        options["toolsets"] = list(toolsets)
    return options
