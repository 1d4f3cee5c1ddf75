"""What an ACP tool call amounts to under AgentQueue's policy: the Claude Code tool name and input it is decided as.

ACP describes a call by `kind`, `title`, `rawInput` (optional; Gemini CLI 0.61.0 sends none) and `locations`:

| ACP kind                 | decided as            | from                                                      |
|--------------------------|-----------------------|-----------------------------------------------------------|
| execute                  | `Bash(command)`       | rawInput.command (a list is joined), else the title       |
| edit, delete, move       | `Edit(path)`          | the first location, else rawInput path/file_path          |
| read                     | `Read(path)`          | the first location, else rawInput path/file_path          |
| search                   | `Grep(path)`          | the first location, else the worktree                     |
| fetch                    | `WebFetch(domain:h)`  | rawInput.url, else the title when it is a URL             |
| other (an MCP tool)      | `mcp__<server>`       | Gemini's toolCallId `mcp_<server>_<tool>…`, Claude's `_meta` (*) |
| anything else            | `Acp(title)`          | no preset allows it: standard asks a person               |

(*) AgentQueue's own server is `mcp__agentqueue`, which standard allows: its daemon decides each call again.
Codex's list `/bin/bash -lc S` is the command S (`/bin/sh -c S` stays itself: dash is not bash). A command's
verdict walks every simple command in it (`a & b; c` needs each part allowed), as for Claude.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from .adapters.acp import as_dict

# Gemini CLI names an MCP tool's call `mcp_<server>_<tool>__…` (its registry's `mcp_` prefix).
_MCP_CALL = re.compile(r"^mcp_(?P<server>[A-Za-z0-9-]+?)_")
# Claude Code's ACP adapter names an MCP tool `mcp__<server>__<tool>` in the call's `_meta.claudeCode.toolName`.
_CLAUDE_MCP_TOOL = re.compile(r"^mcp__(?P<server>[A-Za-z0-9_-]+?)__")
_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}\Z")
# Only bash's string is the command as the policy reads it: `sh -c S` (dash) is judged as itself, and the shell
# parser then asks about what dash would read otherwise than bash.
_SHELLS = re.compile(r"^(/usr)?(/bin/)?bash$")


def _path(call: dict[str, Any]) -> str | None:
    for location in call.get("locations") or []:
        if isinstance(location, dict) and location.get("path"):
            return str(location["path"])
    raw = as_dict(call.get("rawInput"))
    for key in ("file_path", "path", "absolute_path", "filePath"):
        if raw.get(key):
            return str(raw[key])
    return None


def _command(call: dict[str, Any]) -> str:
    raw = as_dict(call.get("rawInput"))
    command = raw.get("command") or raw.get("cmd")
    if isinstance(command, list):
        # Codex ACP sends the argv it runs, `/bin/bash -lc <string>`: the string is the command (the shell policy
        # would unwrap it the same way; the person is asked about what the model wrote).
        if len(command) == 3 and _SHELLS.match(str(command[0])) and command[1] in ("-c", "-lc"):
            return str(command[2])
        return shlex.join(str(c) for c in command)
    return str(command or call.get("title") or "")


def _claude_mcp_server(call: dict[str, Any]) -> str | None:
    """The MCP server of a call Claude Code's ACP adapter asks about: `_meta.claudeCode.mcpServer.name`, else the
    server in its `toolName` (`mcp__<server>__<tool>`)."""
    claude = as_dict(as_dict(call.get("_meta")).get("claudeCode"))
    name = as_dict(claude.get("mcpServer")).get("name")
    if not isinstance(name, str):
        tool = _CLAUDE_MCP_TOOL.match(str(claude.get("toolName") or ""))
        name = tool.group("server") if tool else None
    return name if isinstance(name, str) and _SERVER_NAME.match(name) else None


def tool_call_input(call: dict[str, Any], root: Path) -> tuple[str, dict[str, Any]]:
    """(Claude Code tool name, its input) for an ACP tool call; see the table above."""
    kind = str(call.get("kind") or "other")
    if kind == "execute":
        return "Bash", {"command": _command(call)}
    if kind in ("edit", "delete", "move"):
        return "Edit", {"file_path": _path(call)}
    if kind == "read":
        return "Read", {"file_path": _path(call)}
    if kind == "search":
        return "Grep", {"path": _path(call) or str(root)}
    if kind == "fetch":
        raw = as_dict(call.get("rawInput"))
        return "WebFetch", {"url": str(raw.get("url") or call.get("title") or "")}
    found = _MCP_CALL.match(str(call.get("toolCallId") or ""))
    if found:
        return f"mcp__{found.group('server')}", {}
    server = _claude_mcp_server(call)
    if server:
        return f"mcp__{server}", {}
    return f"Acp({str(call.get('title') or kind)[:200]})", {}
