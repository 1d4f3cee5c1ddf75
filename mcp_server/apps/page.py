"""The `ui://agentqueue/*` pages: one self-contained HTML document per view, and the Apps extension serving them.

Hosts render the page in a sandboxed iframe that may reach no network, so the vendored ext-apps bundle
and our own script and styles are inlined when the resource is read; nothing is fetched at run time.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from importlib import resources
from typing import Literal

from mcp.server.apps import APP_MIME_TYPE, Apps
from mcp.server.mcpserver.resources import FunctionResource

from . import BOARD_URI, TASK_URI

EXT_APPS_VERSION = "2.0.4"  # @modelcontextprotocol/ext-apps, vendor/ext-apps-app-with-deps.js
View = Literal["board", "task"]

# The bundle is an ES module ending in one `export{local as Name,…};`: we publish those names on a global.
_EXPORTS = re.compile(r"export\s*\{([^{}]*)\}\s*;?\s*$")


def module_as_global(code: str, name: str) -> str:
    """Turn a bundled ES module's final export list into `globalThis[name] = {...}` so a page can inline it."""
    found = _EXPORTS.search(code)
    if found is None:
        raise ValueError(f"{name}: no trailing export list to rewrite; was the vendored bundle replaced?")
    pairs = []
    for item in found[1].split(","):
        local, _, exported = (part.strip() for part in item.strip().partition(" as "))
        pairs.append(f"{exported or local}:{local}")
    return f"{code[:found.start()]}globalThis[{name!r}]={{{','.join(pairs)}}};\n"


def _text(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


@functools.cache
def _bundle() -> str:
    code = module_as_global(_text("vendor/ext-apps-app-with-deps.js"), "McpExtApps")
    if "</script" in code.lower():  # would end the inline <script> early
        raise ValueError("the vendored ext-apps bundle contains '</script' and cannot be inlined")
    return code


def render(view: View) -> str:
    """The whole page for `view`: our template with the ext-apps bundle inlined before our script."""
    return _text("board.html").replace("__VIEW__", view).replace("/*__EXT_APPS__*/", _bundle(), 1)


def _reader(view: View) -> Callable[[], str]:
    def read() -> str:
        return render(view)
    return read


def extension() -> Apps:
    """The MCP Apps extension: declares `io.modelcontextprotocol/ui` and serves the two pages."""
    apps = Apps()
    for uri, view, description in (
            (BOARD_URI, "board", "The queue as an interactive board: projects, tasks by status, approvals"),
            (TASK_URI, "task", "One task: description, status, result, pending requests")):
        apps.add_resource(FunctionResource.from_function(
            _reader(view), uri=uri, name=f"agentqueue-{view}", title=f"AgentQueue {view}",
            description=description, mime_type=APP_MIME_TYPE, meta={"ui": {"prefersBorder": True}}))
    return apps
