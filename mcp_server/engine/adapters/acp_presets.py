"""The ACP agents AgentQueue knows by name: `create_agent(agent_type="acp", command="gemini")` runs the preset's
command; any other command is run as written (an ACP agent on stdio).

A preset is the argv that starts the agent in ACP mode, with its program first (found like the agent CLIs,
settings.find_cli, when it names one of them). Add a row for each agent of the ACP registry whose command is known.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from . import codex_rollout
from .claude_code import ASKED_TOOLS


@dataclass(frozen=True)
class AcpPreset:
    argv: tuple[str, ...]  # the program, then its arguments for ACP mode on stdio
    cli: str | None = None  # settings.find_cli's key for the program, when it is one AgentQueue already finds
    install: str = ""  # how a person gets it, for the error when it is missing
    # The CLI whose home state (~/.claude, ~/.codex, ~/.gemini: writable) and default model endpoints the OS sandbox
    # gives it, as for that agent type (sandbox/rules.py CLI_STATE, DEFAULT_ENDPOINTS).
    kind: str | None = None
    # Arguments per permission preset (readonly/standard/autonomous) added after argv.
    modes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    model_flag: str | None = None  # how it takes a model (a task's or the agent's), when it does
    # The argument after model_flag: {model} is the name, {toml} the name as a TOML string (for `-c model=…`).
    model_arg: str = "{model}"
    session_meta: dict[str, Any] = field(default_factory=dict)  # `_meta` of its session/new, when it reads one
    # The ACP session mode set right after session/new (session/set_mode), when its own default would decide calls
    # itself; the run fails if the agent refuses it, rather than run with the agent deciding.
    session_mode: str | None = None
    # The session config option that picks the model (session/set_config_option), for an agent with no model flag.
    model_config: str | None = None
    # Where the session's tokens are when its PromptResponse carries none: (model, tokens) for a session id.
    # (session id, the run's environment) -> (model, tokens): read in a worker thread after the run (acp.py).
    session_usage: Callable[[str, Mapping[str, str] | None], tuple[str | None, dict[str, int]] | None] | None = None
    # Whether the client offers fs/read_text_file. Gemini 0.61.0 rejects a failed client read with the bare JSON-RPC
    # error object, which its "file not found" check cannot recognise, so its write_file of a new file fails: it
    # reads for itself (inside the sandbox; outside its workspace it refuses), and writes through the client.
    client_reads: bool = True
    # Names it reports usage under that are not a model (adapters/acp.py AcpSession.aliases): gemini-cli 0.61.0 names
    # the routed model on a turn's first model call only, and the rest under its configured model, `auto` by default.
    model_aliases: tuple[str, ...] = ()


PRESETS: dict[str, AcpPreset] = {
    # Gemini CLI 0.61.0: `--acp` (`--experimental-acp` is its deprecated name). `--skip-trust`: a worktree is a
    # folder it has never seen, and an untrusted folder would load no settings. Under readonly it starts in plan
    # mode (read-only tools only); the policy decides every call either way.
    "gemini": AcpPreset(("gemini", "--acp", "--skip-trust"), cli="gemini", install="npm install -g @google/gemini-cli",
                        kind="gemini", modes={"readonly": ("--approval-mode", "plan")}, model_flag="-m",
                        client_reads=False,
                        model_aliases=("auto", "auto-gemini-3", "auto-gemini-2.5", "pro", "flash", "flash-lite")),
    # Claude Code's ACP adapter (@agentclientprotocol/claude-agent-acp 0.101.0, Claude Code 2.1.318 inside; the
    # model API from ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY as for `claude`). Its default mode is "auto" (Claude's
    # classifier approves calls itself, asking nobody): "default" ("Manual") sends every call that is not a read
    # to session/request_permission. allowDangerouslySkipPermissions false: the adapter offers bypass to root when
    # IS_SANDBOX is set, and Claude Code then refuses to start as root. `ask` rules for every tool (its settings
    # flag, as the claude-code agent type passes them) outrank `allow` rules in the person's or the repo's
    # settings, which would skip the request and the policy. A model (the task's or the agent's) is
    # its "model" config option: an alias ("sonnet") or a model id; one it does not offer fails the run.
    "claude-code": AcpPreset(("claude-agent-acp",), cli="claude-agent-acp",
                             install="npm install -g @agentclientprotocol/claude-agent-acp", kind="claude-code",
                             session_meta={"claudeCode": {"options": {
                                 "allowDangerouslySkipPermissions": False,
                                 "settings": {"permissions": {"ask": ASKED_TOOLS}}}}},
                             session_mode="default", model_config="model"),
    # Codex's ACP adapter (@zed-industries/codex-acp 0.16.0: Codex's engine in one binary, configured like `codex`
    # from CODEX_HOME/config.toml or OPENAI_API_KEY). approval_policy "untrusted" asks (session/request_permission)
    # before every command that is not a known read; its own sandbox cannot start inside AgentQueue's (as for
    # `codex exec`, adapters/codex.py), which holds the walls, so its sandbox_mode is danger-full-access. Its
    # PromptResponse has no usage: the tokens are read from the session's rollout file (codex_rollout.py).
    "codex": AcpPreset(("codex-acp", "-c", 'approval_policy="untrusted"', "-c", 'sandbox_mode="danger-full-access"'),
                       cli="codex-acp", install="npm install -g @zed-industries/codex-acp", kind="codex",
                       model_flag="-c", model_arg="model={toml}", session_usage=codex_rollout.run_usage),
}


def preset_of(command: str | None) -> AcpPreset | None:
    """The preset a command names (exactly its name, e.g. "gemini"), or None for a command run as written."""
    return PRESETS.get((command or "").strip())


def sandbox_kind(agent_type: str, command: str | None) -> str:
    """The agent type whose sandbox rules a run gets: an ACP preset's CLI (its state and endpoints), else its own."""
    known = preset_of(command) if agent_type == "acp" else None
    return known.kind if known is not None and known.kind else agent_type


def argv_of(command: str, preset: str = "standard", binary: str | None = None, model: str | None = None) -> list[str]:
    """The argv an ACP agent's command starts: a preset's (its program replaced by `binary` when found, the model
    passed when it takes one), else the command split as a shell would (no shell runs it)."""
    known = preset_of(command)
    if known is None:
        return shlex.split(command)
    argv = [binary or known.argv[0], *known.argv[1:], *known.modes.get(preset, ())]
    if not (model and known.model_flag):
        return argv
    return [*argv, known.model_flag, known.model_arg.format(model=model, toml=json.dumps(model))]
