"""Agent adapters: for each agent type, how to start a run and how to read its output."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import acp, claude_code, codex, command, gemini
from .base import AgentConfig, Parser, RunSpec

BUILDERS: dict[str, Callable[[AgentConfig, str, str, dict[str, Any] | None], RunSpec]] = {
    "claude-code": claude_code.build, "codex": codex.build, "gemini": gemini.build, "command": command.build,
    "acp": acp.build,
}
# An ACP run's parser is its session, made by its builder with the prompt (RunSpec.parser), which the engine uses
# first: acp has no entry, and gemini's is its headless stream-json parser (gemini.build_headless).
PARSERS: dict[str, Callable[[], Parser]] = {
    "claude-code": claude_code.ClaudeCodeParser, "codex": codex.CodexParser, "gemini": gemini.GeminiParser,
    "command": command.CommandParser,
}
