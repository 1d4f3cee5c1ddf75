"""What every agent adapter produces: one normalized event stream and one final result."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

# "usage": a model response has ended and its usage is complete in the stream (Claude's message_delta).
# "send": a line the CLI's own protocol needs written to its stdin now (`text`; Codex's JSON-RPC handshake).
EventKind = Literal["text", "tool_call", "tool_result", "system", "error", "control", "done", "usage", "send"]

TOKEN_KEYS = ("input", "output", "cache_read", "cache_write", "total")


@dataclass
class AgentEvent:
    kind: EventKind
    text: str = ""
    tool: str | None = None
    args: Any = None
    data: dict[str, Any] | None = None  # a control request from the CLI (kind "control")


@dataclass
class RunSpec:
    """How to start one run: argv, the bytes for stdin (None = closed), extra environment."""

    argv: list[str]
    stdin: bytes | None
    env: dict[str, str] = field(default_factory=dict)
    # stdin stays open for a two-way JSON channel (Claude Code's stream-json): permission answers and
    # messages go in while the run goes on; it is closed once the CLI reports its result.
    interactive: bool = False
    shown: list[str] | None = None  # what the task log names as the command (the CLI, not its sandbox)
    # A parser made with the run, when it must know the run (an ACP session holds the prompt it sends); else the
    # engine makes its agent type's PARSERS entry.
    parser: Any = None


@dataclass
class RunResult:
    """status: completed | failed. error_type (when failed) is a key of services.failures.FAILURE_KINDS."""

    status: Literal["completed", "failed"]
    summary: str = ""
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_KEYS, 0))
    cost_usd: float | None = 0.0  # None: it used tokens of a model whose price is unknown
    error_type: str | None = None
    error_message: str | None = None
    # The run ended without the CLI's final accounting (killed, stopped, timed out, or died): tokens and cost are
    # what its stream showed it had used up to then.
    partial: bool = False
    resets_at: float | None = None  # a limit's reset time (epoch seconds), when the CLI said it (adapters/limits.py)


@dataclass
class AgentConfig:
    """The parts of a registered agent an adapter needs."""

    agent_type: str
    binary: str | None = None
    model: str | None = None
    command: str | None = None
    max_turns: int = 50
    preset: str = "standard"  # the permission preset that applies to this run
    deny_rules: list[str] = field(default_factory=list)  # agent deny rules the CLI can enforce itself
    sandboxed: bool = False  # inside AgentQueue's OS sandbox: a CLI's own sandbox would nest (and cannot start)
    # False when the worktree holds run-configuring files an unmerged earlier run planted (engine/protected.py):
    # the CLI then loads no project or local settings (for Claude Code, `--setting-sources user`).
    project_settings: bool = True


def tokens(input_: int | None = 0, output: int | None = 0, cache_read: int | None = 0, cache_write: int | None = 0,
           total: int | None = None) -> dict[str, int]:
    values = {"input": max(int(input_ or 0), 0), "output": max(int(output or 0), 0),
              "cache_read": max(int(cache_read or 0), 0), "cache_write": max(int(cache_write or 0), 0)}
    values["total"] = int(total) if total is not None else sum(values.values())
    return values


def classify_message(text: str) -> str | None:
    """Best-effort failure kind from an error text (for CLIs that give no structured code)."""
    lowered = text.lower()
    if any(k in lowered for k in ("401", "403", "unauthorized", "authentication", "not logged in", "api key")):
        return "auth"
    if any(k in lowered for k in ("insufficient_quota", "quota", "billing", "credit balance")):
        return "quota"
    if any(k in lowered for k in ("429", "rate limit", "rate_limit", "too many requests", "overloaded", "529")):
        return "rate_limit"
    if "prompt is too long" in lowered or "context length" in lowered or "context window" in lowered:
        return "prompt_too_long"
    if "max turns" in lowered or "maximum number of turns" in lowered or "turn limit" in lowered:
        return "max_turns"
    return None


class Parser(Protocol):
    """Stateful parser of one run's stdout; `feed` per line, `finish` once at exit. A parser that recognises a
    failed login or a usage limit sets `account_error` (adapters/limits.py) at that line: the runner stops the run
    there, before the CLI's own retries. A parser of a two-way protocol may have its own `encode_answer` /
    `encode_message`, which the runner then uses instead of the channel's (Claude Code's stream-json)."""

    def feed(self, line: str) -> list[AgentEvent]: ...

    def finish(self, exit_code: int | None) -> RunResult: ...


def load_json(line: str) -> dict[str, Any] | None:
    line = line.strip()
    if not line.startswith("{"):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
