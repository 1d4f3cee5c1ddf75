"""Tool groups a connection can be limited to (`--toolsets`), and the options a connection carries.

Stdlib only: the plugin (`agentqueue mcp`) validates its flags with it before it relays anything.
A group is a module of `tools/`; the registry refuses a tool whose module is not listed here. A
named set picks tools across modules: `agent` is what a task's own agent gets, `default` what a
person's client lists when it names none (a first session), `all` every tool.

Two selections per connection, computed by `selection.effective` from its options alone:
- what it may *call* (`ceiling`): its `--toolsets` when they are fixed, else every tool;
- what it *lists* (`listing`): a connection that named no toolsets, or named `default`/`all`, is
  open: it lists [mcp] toolsets (default: `default`) plus what its model enabled since
  (`options["enabled"]`, written by `enable_toolsets`). A run's connection is never open.
`--read-only` and the person-only tools apply on top of both.

Who a connection is never comes from the connection itself: a preamble may only narrow what it is
offered (`read_only`, `toolsets`). The daemon learns from the socket's peer (SO_PEERCRED) whether the
caller runs inside one of its engine's runs, and only then names it `agent:<id>`/`hook:<id>`
(`process:<pid>` for another process the daemon started).
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: the plugin imports this module
if TYPE_CHECKING:
    from typing import Any

TOOLSETS: tuple[str, ...] = ("projects", "channels", "tasks", "repos", "agents", "system", "files", "git", "notes",
                             "hooks", "policy", "requests")
# Sets of tools by name: an agent working on a task may queue follow-ups and keep notes, nothing more.
# The tool that lists the other toolsets and enables them for its connection (tools/discovery.py).
DISCOVERY = "enable_toolsets"
DISCOVERY_GROUP = "discovery"  # its module: no toolset of its own; `default` and `all` carry it
DEFAULT, ALL = "default", "all"
NAMED_TOOLSETS: dict[str, tuple[str, ...]] = {
    "agent": ("create_task", "get_task", "list_tasks", "get_status", "list_notes", "read_note", "write_note",
              "append_note", "write_memory"),
    # A first session: projects, tasks, status, repos, approvals, and the way to the rest.
    DEFAULT: ("list_projects", "create_project", "set_active_project", "get_status", "list_tasks", "create_task",
              "get_task", "wait_for_task", "stop_task", "restart_task", "get_task_result", "get_agent_error",
              "get_task_diff", "approve_task", "request_changes", "add_repo", "list_repos", "list_requests",
              "answer_request", DISCOVERY),
    ALL: (),  # every tool (see offers)
}
# One line each, for enable_toolsets' answer and the reference.
SUMMARIES: dict[str, str] = {
    "projects": "create, edit, pause, resume, delete projects; the active project",
    "channels": "link chat channels to projects",
    "tasks": "every task tool: also edit, skip, delete, chain health, forced status",
    "repos": "register, list and edit git repos",
    "agents": "register, edit, pause and delete the agents that run tasks",
    "system": "status, events, token usage, pause the orchestrator, restart the daemon",
    "files": "read, search and run commands in workspaces",
    "git": "status, log, diff, branch, commit, push, merge, PRs",
    "notes": "project notes and MEMORY.md: write, read, append, compare with specs",
    "hooks": "scheduled and event hooks that queue tasks or run a model",
    "policy": "the permission policy and the audit log",
    "requests": "agents' permission requests",
    "agent": "what a task's own agent gets",
    DEFAULT: "a first session: projects, tasks, status, repos, approvals",
    ALL: "every tool",
}
# The first line a plugin sends the daemon before the client's bytes: {"agentqueue": {options}}.
PREAMBLE_KEY = "agentqueue"
# What a preamble may carry; anything else is dropped (a connection can narrow itself, never widen or name itself).
OPTION_KEYS = ("read_only", "toolsets")
# A person's decisions: no run (an agent's, a hook's model) and no other process the daemon started is ever
# offered these, whatever its toolsets or preset.
PERSON_ONLY: tuple[str, ...] = ("answer_request", "edit_policy", "approve_task", "request_changes", "set_task_status",
                                "restart_daemon")
RUN_ACTORS = ("agent:", "hook:", "process:")


def known() -> list[str]:
    return [*TOOLSETS, *NAMED_TOOLSETS]


def parse_toolsets(text: str) -> list[str]:
    """`tasks,git` -> ["tasks", "git"]; an unknown or empty name raises ValueError naming the known ones."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in known()]
    if unknown or not names:
        raise ValueError(f"unknown toolset(s) {', '.join(unknown)[:200] or '(none given)'}; "
                         f"choose from {', '.join(known())} (comma-separated)")
    return names


def offers(toolsets: list[str], name: str, group: str) -> bool:
    """Whether a selection of toolsets includes the tool `name` of module `group`."""
    return ALL in toolsets or group in toolsets or any(name in NAMED_TOOLSETS.get(t, ()) for t in toolsets)


def connection_options(read_only: bool = False, toolsets: list[str] | None = None, task_id: str | None = None,
                       actor: str | None = None) -> dict[str, Any]:
    """The options dict a connection carries (the preamble's body): only what was asked for."""
    options: dict[str, Any] = {}
    if read_only:
        options["read_only"] = True
    if toolsets:
        options["toolsets"] = list(toolsets)
    if task_id:
        options["task_id"] = task_id
    if actor:
        options["actor"] = actor
    return options


def client_options(read_only: bool = False, toolsets: list[str] | None = None) -> dict[str, Any]:
    """`agentqueue mcp`'s options: its flags only. Who the client is, the daemon finds out itself."""
    return connection_options(read_only, toolsets)


def socket_options(preamble: dict[str, Any] | None, run: tuple[str, str | None] | None) -> dict[str, Any]:
    """A socket connection's options: its preamble's narrowing, and the identity of the run it comes from.

    `run` is (actor, task_id) when the peer process belongs to one of the engine's runs: a task's agent
    then gets the `agent` toolset whatever its preamble asked for. Anyone else is a person's client.
    """
    options = {k: v for k, v in (preamble or {}).items() if k in OPTION_KEYS}
    if run is None:
        return options
    actor, task_id = run
    options["actor"] = actor
    if actor.startswith("agent:"):
        options["toolsets"] = ["agent"]
        if task_id:
            options["task_id"] = task_id
    return options


def is_run(actor: Any) -> bool:
    """Whether an actor is one of the engine's runs (an agent's or a hook's model) or another process the daemon
    started, not a person's client."""
    return isinstance(actor, str) and actor.startswith(RUN_ACTORS)


def encode_preamble(options: dict[str, Any]) -> bytes:
    import json  # only a launch with flags sends a preamble: the plugin reads JSON without this package

    return json.dumps({PREAMBLE_KEY: options}).encode() + b"\n"


def decode_preamble(line: bytes | str) -> dict[str, Any] | None:
    """The options of a preamble line, or None when the line is not one (it is then the client's own)."""
    import json

    try:
        message = json.loads(line)
    except ValueError:
        return None
    if not isinstance(message, dict) or set(message) != {PREAMBLE_KEY} or not isinstance(message[PREAMBLE_KEY], dict):
        return None
    return {k: v for k, v in message[PREAMBLE_KEY].items() if k in OPTION_KEYS}
