"""Any executable: the prompt on stdin, its output as text, its exit code decides."""

from __future__ import annotations

import shlex
from typing import Any

from .base import AgentConfig, AgentEvent, RunResult, RunSpec


def build(config: AgentConfig, prompt: str, context: str, mcp_config: dict[str, Any] | None) -> RunSpec:
    full = f"{context}\n\n{prompt}" if context else prompt
    # A command has no --model flag of ours to take: the model a task or agent names reaches it in the environment.
    env = {"AGENTQUEUE_MODEL": config.model} if config.model else {}
    return RunSpec(argv=shlex.split(config.command or ""), stdin=full.encode(), env=env)


SUMMARY_LINES = 20
SUMMARY_LINE_CHARS = 4000  # a long line is kept for the summary by its end: 200 lines of 1 MiB held 200 MiB


class CommandParser:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def feed(self, line: str) -> list[AgentEvent]:
        text = line.rstrip("\n")
        self.lines.append(text[-SUMMARY_LINE_CHARS:])
        del self.lines[:-SUMMARY_LINES]
        return [AgentEvent("text", text)]

    def finish(self, exit_code: int | None) -> RunResult:
        summary = "\n".join(self.lines)
        if exit_code == 0:
            return RunResult("completed", summary=summary)
        return RunResult("failed", summary=summary, error_type="crashed",
                         error_message=f"command exited with status {exit_code}")
