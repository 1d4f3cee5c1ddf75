"""Request middleware: rewrites argument-validation errors into messages a model can act on."""

from __future__ import annotations

import re
from typing import Any

_VALIDATION = re.compile(r"^Error executing tool (?P<tool>[\w-]+): \d+ validation errors? for \w+\n(?P<body>.*)$", re.S)


def describe_validation_error(text: str) -> str | None:
    """`Error executing tool x: 2 validation errors for xArguments …` -> one readable sentence."""
    match = _VALIDATION.match(text)
    if not match:
        return None
    problems, field = [], None
    for line in match["body"].splitlines():
        if not line.strip() or line.strip().startswith("For further information"):
            continue
        if not line.startswith(" "):
            field = line.strip()
        else:
            message = re.sub(r"\s*\[type=.*$", "", line.strip())
            problems.append(f"{field}: {message}" if field else message)
    details = "; ".join(problems) or match["body"].strip()
    return (f"Invalid arguments for {match['tool']}: {details}. Nothing was changed; "
            "fix those arguments (the tool's inputSchema lists them) and call again.")


async def readable_tool_errors(ctx: Any, call_next: Any) -> Any:
    result = await call_next(ctx)
    if ctx.method == "tools/call" and isinstance(result, dict) and result.get("isError"):
        for block in result.get("content") or []:
            if block.get("type") == "text":
                block["text"] = describe_validation_error(block["text"]) or block["text"]
    return result
