"""Routing and standing instructions: what a task asks of the agent that runs it, and text added to every prompt.

A task's `capabilities` are names an agent must all have (`create_agent capabilities=[...]`); they are stored as
",a,b," (sorted, comma-wrapped) so one portable SQL expression decides whether an agent covers them: removing each of
the agent's names (`,name,` -> `,`) leaves "," exactly when every one was the agent's. A task's `model` overrides
its agent's for that task (the CLI's `--model`/`-m`; a command agent gets it as $AGENTQUEUE_MODEL).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .errors import InvalidInputError

MAX_CAPABILITIES = 16
CAPABILITY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@\[\]-]{0,127}")  # a model id or alias: one CLI argument
MAX_INSTRUCTIONS = 4000  # characters of standing instructions per project or agent (they go into every prompt)


def stored_capabilities(capabilities: Iterable[str] | None) -> str | None:
    """A task's capabilities as stored (",a,b,"), or None for none; a bad name is refused with what a name is."""
    names = sorted({c.strip() for c in capabilities or [] if c.strip()})
    for name in names:
        if not CAPABILITY.fullmatch(name):
            raise InvalidInputError(f"capability {name[:70]!r} is not a capability name: letters, digits and . _ + - "
                                    "(up to 64), as given to create_agent capabilities=[...].")
    if len(names) > MAX_CAPABILITIES:
        raise InvalidInputError(f"{len(names)} capabilities given; a task asks for at most {MAX_CAPABILITIES}.")
    return f",{','.join(names)}," if names else None


def capability_list(stored: str | None) -> list[str]:
    return [name for name in (stored or "").split(",") if name]


def covers(agent_capabilities: Iterable[str], stored: str | None) -> bool:
    """Whether an agent has every capability a task asks for."""
    return set(capability_list(stored)) <= set(agent_capabilities)


def covers_sql(agent_capabilities: Iterable[str], column: str = "capabilities") -> tuple[str, list[str]]:
    """SQL true for the tasks whose capabilities the agent has all of (the module's docstring says how)."""
    names = [c for c in dict.fromkeys(agent_capabilities) if c]
    expression = column
    for _ in names:
        expression = f"REPLACE({expression}, ?, ',')"
    if not names:
        return f"{column} IS NULL", []
    return f"({column} IS NULL OR {expression} = ',')", [f",{name}," for name in names]


def check_model(model: str | None) -> str | None:
    """A task's model override (None: the agent's own)."""
    if model is None or not model.strip():
        return None
    if not MODEL.fullmatch(model.strip()):
        raise InvalidInputError(f"model {model[:70]!r} is not a model name (e.g. 'sonnet', 'claude-sonnet-4-5', "
                                "'gpt-5-codex'): letters, digits and . _ : / @ - only.")
    return model.strip()


def check_instructions(text: str, what: str) -> str | None:
    """Standing instructions as stored: "" clears them; over MAX_INSTRUCTIONS is refused (they cost every run)."""
    text = text.strip()
    if "\0" in text:
        raise InvalidInputError(f"{what} contain a NUL character; give plain text.")
    if len(text) > MAX_INSTRUCTIONS:
        raise InvalidInputError(f"{what} are {len(text):,} characters; the limit is {MAX_INSTRUCTIONS:,} (they go into "
                                "every prompt). Keep the standing rules short and put the rest in a note.")
    return text or None
