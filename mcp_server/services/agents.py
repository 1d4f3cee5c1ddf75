"""Agents: registered workers (a CLI kind, an optional model, capabilities, a permanent repo)."""

from __future__ import annotations

import builtins
import json
import os
import shlex
import shutil
from typing import Any

from ..settings import CLI_FOR_AGENT, CLI_KEYS, Settings
from ..settings import LABEL
from ..store.db import Store, now_iso
from ..store.models import Agent
from .errors import ConflictError, InvalidInputError, NotFoundError, unique
from .failures import RELOADED
from .ids import slugify
from .limits import MAX_COMMAND, quoted
from .routing import check_instructions, covers
from .task_states import CLAIMED, in_clause

AGENT_TYPES = ("claude-code", "codex", "gemini", "command", "acp")
# The types whose `command` is what runs: a program (command), or an ACP agent's (a preset name, acp_presets.py).
COMMAND_TYPES = ("command", "acp")
INSTALL_HINTS = {"claude-code": "npm install -g @anthropic-ai/claude-code", "codex": "npm install -g @openai/codex",
                 "gemini": "npm install -g @google/gemini-cli"}


def _acp_presets() -> Any:
    """The ACP preset table (engine/adapters/acp_presets.py), imported when an ACP agent is named: the engine's
    adapters are no part of what a CLI read or a tool call loads."""
    from ..engine.adapters import acp_presets  # noqa: PLC0415

    return acp_presets


def find_cli(agent_type: str, settings: Settings) -> str | None:
    """The executable for an agent type: config.toml [cli] or its AGENTQUEUE_*_BIN variable, else the search path."""
    return settings.find(CLI_FOR_AGENT[agent_type])


def missing_cli_message(agent_type: str) -> str:
    key = CLI_FOR_AGENT[agent_type]
    env_name = CLI_KEYS[key][0]
    return (f"The {key} CLI (for agent_type {agent_type}) is not installed where the daemon looks: not in config.toml "
            f"[cli], {env_name} or the daemon's PATH. Install it ({INSTALL_HINTS[agent_type]}), then set "
            f"`{key} = \"/path/to/{key}\"` under [cli] in $AGENTQUEUE_HOME/config.toml (or run `agentqueue install "
            f"<client>` in a terminal that finds it) {RELOADED}.")


def missing_preset_message(command: str, preset: Any) -> str:
    key = preset.cli or preset.argv[0]
    return (f"The ACP preset {command.strip()!r} runs {key}, which is not installed where the daemon looks: not in "
            f"config.toml [cli], {CLI_KEYS[key][0]} or the daemon's PATH. Install it ({preset.install}), then set "
            f"`\"{key}\" = \"/path/to/{key}\"` under [cli] in $AGENTQUEUE_HOME/config.toml {RELOADED}.")


class Agents:
    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    def _model(self, row: dict[str, Any]) -> Agent:
        return Agent(**{**row, "capabilities": json.loads(row["capabilities"] or "[]")})

    def get(self, agent_id: str) -> Agent:
        row = self.store.one("SELECT * FROM agents WHERE id = ?", (agent_id,))
        if row is None:
            raise NotFoundError(f"Agent '{agent_id}' not found. list_agents shows agent ids.")
        return self._model(row)

    def list(self, limit: int = 50, offset: int = 0) -> tuple[list[Agent], int]:
        total = int(self.store.scalar("SELECT count(*) FROM agents"))
        rows = self.store.all("SELECT * FROM agents ORDER BY created_at, id LIMIT ? OFFSET ?", (limit, offset))
        return [self._model(r) for r in rows], total

    def create(
        self,
        name: str,
        agent_type: str = "claude-code",
        repo_id: str | None = None,
        model: str | None = None,
        capabilities: builtins.list[str] | None = None,
        command: str | None = None,
        label: str | None = None,
    ) -> Agent:
        if not name.strip():
            raise InvalidInputError("Agent name is empty. Give a name such as 'claude-1'.")
        agent_id = slugify(name, what="agent name")
        if agent_type not in AGENT_TYPES:
            raise InvalidInputError(f"Unknown agent_type {agent_type!r}. Use one of: {', '.join(AGENT_TYPES)}.")
        if agent_type == "command" and not (command and command.strip()):
            raise InvalidInputError(
                "agent_type 'command' needs `command`: the executable to run (the prompt arrives on stdin)."
            )
        if agent_type == "acp" and not (command and command.strip()):
            names = ", ".join(_acp_presets().PRESETS)
            raise InvalidInputError(f"agent_type 'acp' needs `command`: a preset name ({names}) or the command that "
                                    "starts an ACP agent on stdio.")
        if agent_type not in COMMAND_TYPES and command:
            raise InvalidInputError(f"`command` is only for agent_type 'command' or 'acp'; a {agent_type} agent runs "
                                    "its CLI.")
        if repo_id is not None and self.store.scalar("SELECT 1 FROM repos WHERE id = ?", (repo_id,)) is None:
            raise NotFoundError(f"Repo '{repo_id}' not found. list_repos shows repo ids.")
        caps = [c.strip() for c in capabilities or [] if c.strip()]
        label = _label(label)
        if self.store.scalar("SELECT 1 FROM agents WHERE id = ?", (agent_id,)):
            raise ConflictError(f"An agent with id '{agent_id}' already exists. Choose another name.")
        self.require_runnable(agent_type, command)
        stamp = now_iso()
        taken = f"An agent with id '{agent_id}' already exists. Choose another name."
        with unique(taken), self.store.transaction() as db:
            db["agents"].insert({
                "id": agent_id, "name": name.strip(), "agent_type": agent_type, "state": "IDLE",
                "repo_id": repo_id, "model": model, "capabilities": json.dumps(caps),
                "command": command.strip() if command else None, "created_at": stamp, "updated_at": stamp,
                "label": label,
            })
            self.store.add_event("agent.created", agent_id=agent_id,
                                 payload={"name": name.strip(), "agent_type": agent_type})
        return self.get(agent_id)

    def edit(
        self,
        agent_id: str,
        model: str | None = None,
        command: str | None = None,
        repo_id: str | None = None,
        capabilities: builtins.list[str] | None = None,
        label: str | None = None,
        instructions: str | None = None,
    ) -> Agent:
        """Change what an agent runs; None leaves a field alone, "" clears model, repo_id, label or instructions (its
        standing instructions, added to every prompt it runs). A run in progress keeps what it started with: the
        change applies from its next task."""
        agent = self.get(agent_id)
        changes: dict[str, Any] = {}
        if model is not None:
            changes["model"] = model.strip() or None
        if command is not None:
            if agent.agent_type not in COMMAND_TYPES:
                raise InvalidInputError(f"`command` is only for agent_type 'command' or 'acp'; '{agent_id}' is a "
                                        f"{agent.agent_type} agent and runs its CLI.")
            if not command.strip():
                raise InvalidInputError(f"command is empty; a {agent.agent_type} agent needs the executable to run.")
            self.require_runnable(agent.agent_type, command)
            changes["command"] = command.strip()
        if repo_id is not None:
            if repo_id and self.store.scalar("SELECT 1 FROM repos WHERE id = ?", (repo_id,)) is None:
                raise NotFoundError(f"Repo '{repo_id}' not found. list_repos shows repo ids (\"\" unbinds the agent).")
            changes["repo_id"] = repo_id or None
        if capabilities is not None:
            changes["capabilities"] = json.dumps([c.strip() for c in capabilities if c.strip()])
        if label is not None:
            changes["label"] = _label(label)
        if instructions is not None:
            changes["instructions"] = check_instructions(instructions, "instructions")
        if not changes:
            raise InvalidInputError("Nothing to change: give model, command, repo_id, capabilities, label or "
                                    "instructions.")
        with self.store.transaction() as db:
            db["agents"].update(agent_id, {**changes, "updated_at": now_iso()})
            self.store.add_event("agent.updated", agent_id=agent_id, payload={"changed": sorted(changes)})
        return self.get(agent_id)

    def set_paused(self, agent_id: str, paused: bool) -> Agent:
        """A paused agent takes no new task; a task it is running finishes. Idempotent."""
        agent = self.get(agent_id)
        if agent.paused != paused:
            with self.store.transaction() as db:
                db["agents"].update(agent_id, {"paused": int(paused), "updated_at": now_iso()})
                self.store.add_event("agent.paused" if paused else "agent.resumed", agent_id=agent_id)
        return self.get(agent_id)

    def delete(self, agent_id: str) -> None:
        """Remove an idle agent. Its history (results, ledger, events, tasks' assigned_agent) keeps the id as text."""
        self.get(agent_id)
        with self.store.transaction() as db:
            # Checked inside the transaction: a claim takes the same lock, so no run can start in between.
            row = self.store.one("SELECT state, current_task FROM agents WHERE id = ?", (agent_id,)) or {}
            claimed, params = in_clause(CLAIMED)
            running = self.store.scalar(f"SELECT id FROM tasks WHERE assigned_agent = ? AND {claimed} LIMIT 1",
                                        (agent_id, *params))
            task = row.get("current_task") or running
            if task or row.get("state") != "IDLE":
                raise ConflictError(f"Agent '{agent_id}' is running task {task or '(starting)'}. stop_task it first "
                                    "(or pause_agent and wait for the run to end), then delete_agent.")
            db.execute("DELETE FROM agents WHERE id = ?", (agent_id,))
            self.store.set_setting("agents_bootstrapped", "1")  # deleting the last agent sticks across restarts
            self.store.add_event("agent.deleted", agent_id=agent_id)

    def require_runnable(self, agent_type: str, command: str | None) -> None:
        """An agent whose program can't be found would fail every task it takes: refuse it now."""
        preset = _acp_presets().preset_of(command) if agent_type == "acp" else None
        if preset is not None and preset.cli is not None:  # a known ACP agent: its program, found as the CLIs are
            if self.settings.find(preset.cli) is None:
                runs_as = CLI_KEYS[preset.cli][1]
                raise InvalidInputError(missing_cli_message(runs_as) if runs_as else missing_preset_message(
                    command or "", preset))
            return
        if preset is not None:  # a known ACP agent AgentQueue has no CLI key for: its program, on the PATH
            command = shlex.join(preset.argv)
        if agent_type not in COMMAND_TYPES:
            if find_cli(agent_type, self.settings) is None:
                raise InvalidInputError(missing_cli_message(agent_type))
            return
        if len(command or "") > MAX_COMMAND:  # also bounds the policy's reading of it, which the gate does first
            raise InvalidInputError(f"command is {len(command or ''):,} characters long; a command agent's command "
                                    f"is at most {MAX_COMMAND:,}. Put a long script in a file and give its path.")
        try:
            program = shlex.split(command or "")[0]
        except (ValueError, IndexError):
            raise InvalidInputError(f"command {quoted(command or '')} cannot be parsed as a command line (check its "
                                    "quotes).") from None
        if os.sep in program and not os.path.isabs(program):
            return  # relative to the task's worktree (e.g. ./scripts/agent.sh): only a run can tell
        found = program if os.path.isabs(program) else shutil.which(program, path=self.settings.search_path())
        if not found or not os.path.isfile(found) or not os.access(found, os.X_OK):
            install = f" Install it ({preset.install}) or give" if preset is not None and preset.install else " Give"
            raise InvalidInputError(
                f"command's program {quoted(program)} is not an executable the daemon can find (absolute path, "
                f"or on its PATH plus config.toml [env] path).{install} its absolute path.")

    def bootstrap_default(self) -> str | None:
        """A home with no agents gets a claude-code agent as soon as a start finds the `claude` CLI.

        Once an agent exists (registered here or by the user) a setting remembers it, so deleting
        that agent later sticks. Until then every start looks again: a newcomer who installs
        `claude` after the first start still gets the agent.
        """
        if self.store.get_setting("agents_bootstrapped"):
            return None
        message = None
        if not self.store.scalar("SELECT count(*) FROM agents"):
            cli = find_cli("claude-code", self.settings)
            if not cli:
                return ("No agents registered and no `claude` CLI found; create_agent registers one "
                        "(claude-code, codex, gemini or command), or install claude and restart the daemon.")
            self.create("claude", "claude-code")
            message = f"Registered agent 'claude' (claude-code, {cli}) because none existed."
        with self.store.transaction():
            self.store.set_setting("agents_bootstrapped", "1")
        return message

    def can_run(self, agent: Agent, task_agent_type: str | None, task_repo_id: str | None,
                task_capabilities: str | None = None) -> bool:
        """As the scheduler's can_run (engine/scheduler.py), for get_status' warnings; capabilities as stored."""
        if task_agent_type and agent.agent_type != task_agent_type:
            return False
        if not covers(agent.capabilities, task_capabilities):
            return False
        return not (agent.repo_id and task_repo_id and agent.repo_id != task_repo_id)


# -- the one writer of an agent's run state (state, current_task, pid) --------------------------------------------
def occupy_agent(store: Store, agent_id: str, task_id: str) -> None:
    """The agent is BUSY on `task_id`: written by a claim, in the claim's transaction."""
    store.db.execute("UPDATE agents SET state = 'BUSY', current_task = ?, updated_at = ? WHERE id = ?",
                     (task_id, now_iso(), agent_id))


def record_pid(store: Store, agent_id: str, pid: int | None) -> None:
    """The process the agent's run started (recovery kills a leftover one by it)."""
    store.db.execute("UPDATE agents SET pid = ? WHERE id = ?", (pid, agent_id))


def release_agents(store: Store, *, agent_id: str | None = None, task_id: str | None = None,
                   project_id: str | None = None) -> None:
    """Agents back to IDLE with no task and no pid: one agent, the agent on a task, those on a project's tasks, or
    (no argument, at start, when nothing of this home runs any more) every agent still marked busy."""
    params: tuple[str, ...]
    if agent_id is not None:
        where, params = "id = ?", (agent_id,)
    elif task_id is not None:
        where, params = "current_task = ?", (task_id,)
    elif project_id is not None:
        where, params = "current_task IN (SELECT id FROM tasks WHERE project_id = ?)", (project_id,)
    else:
        where, params = "state != 'IDLE' OR pid IS NOT NULL", ()
    store.db.execute(f"UPDATE agents SET state = 'IDLE', current_task = NULL, pid = NULL, updated_at = ? WHERE {where}",
                     (now_iso(), *params))


def _label(label: str | None) -> str | None:
    """An agent's label: only daemons with that label ([team] labels) run it; empty means any daemon."""
    if not label or not label.strip():
        return None
    if not LABEL.match(label.strip()):
        raise InvalidInputError(f"label {label!r} is not a label: use up to 64 letters, digits and \"_.:-\", "
                                "e.g. \"gpu\", and give the daemons that may run this agent the same label "
                                "([team] labels).")
    return label.strip()
