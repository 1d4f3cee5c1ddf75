"""MCP Apps (SEP-1865): the board rendered inside the chat client (design.md "The board inside the chat").

Tools point at a `ui://` page with `tool_meta(uri)`; `page.extension()` serves the pages and makes the
server declare `io.modelcontextprotocol/ui`. Kept import-light: tools/ imports it at registration.
"""

from typing import Any

BOARD_URI = "ui://agentqueue/board"
TASK_URI = "ui://agentqueue/task"

# The key hosts read before `_meta.ui` existed; ext-apps' own registerAppTool still writes both.
LEGACY_RESOURCE_URI_KEY = "ui/resourceUri"


def tool_meta(resource_uri: str) -> dict[str, Any]:
    """A tool's `_meta` naming the page a host renders its results in."""
    return {"ui": {"resourceUri": resource_uri}, LEGACY_RESOURCE_URI_KEY: resource_uri}
