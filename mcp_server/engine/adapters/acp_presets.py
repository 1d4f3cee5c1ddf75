"""The ACP agents AgentQueue knows by name: `create_agent(agent_type="acp", command="gemini")` runs the preset's
command; any other command is run as written (an ACP agent on stdio).

A preset is the argv that starts the agent in ACP mode, with its program first (found like the agent CLIs,
settings.find_cli, when it names one of them). Add a row for each agent of the ACP registry whose command is known.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field


@dataclass(frozen=True)
class AcpPreset:
    argv: tuple[str, ...]  # the program, then its arguments for ACP mode on stdio
    cli: str | None = None  # settings.find_cli's key for the program, when it is one AgentQueue already finds
    install: str = ""  # how a person gets it, for the error when it is missing
    # Arguments per permission preset (readonly/standard/autonomous) added after argv.
    modes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    model_flag: str | None = None  # how it takes a model (a task's or the agent's), when it does
    # Whether the client offers fs/read_text_file. Gemini 0.61.0 rejects a failed client read with the bare JSON-RPC
    # error object, which its "file not found" check cannot recognise, so its write_file of a new file fails: it
    # reads for itself (inside the sandbox; outside its workspace it refuses), and writes through the client.
    client_reads: bool = True


PRESETS: dict[str, AcpPreset] = {
    # Gemini CLI 0.61.0: `--acp` (`--experimental-acp` is its deprecated name). `--skip-trust`: a worktree is a
    # folder it has never seen, and an untrusted folder would load no settings. Under readonly it starts in plan
    # mode (read-only tools only); the policy decides every call either way.
    "gemini": AcpPreset(("gemini", "--acp", "--skip-trust"), cli="gemini", install="npm install -g @google/gemini-cli",
                        modes={"readonly": ("--approval-mode", "plan")}, model_flag="-m", client_reads=False),
}


def preset_of(command: str | None) -> AcpPreset | None:
    """The preset a command names (exactly its name, e.g. "gemini"), or None for a command run as written."""
    return PRESETS.get((command or "").strip())


def argv_of(command: str, preset: str = "standard", binary: str | None = None, model: str | None = None) -> list[str]:
    """The argv an ACP agent's command starts: a preset's (its program replaced by `binary` when found, the model
    passed when it takes one), else the command split as a shell would (no shell runs it)."""
    known = preset_of(command)
    if known is None:
        return shlex.split(command)
    argv = [binary or known.argv[0], *known.argv[1:], *known.modes.get(preset, ())]
    return argv + [known.model_flag, model] if model and known.model_flag else argv
