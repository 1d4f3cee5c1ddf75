"""JSON with comments and trailing commas (JSONC), as VS Code and Cursor allow in their MCP configs."""

from __future__ import annotations

import json
from typing import Any


def strip(text: str) -> tuple[str, bool]:
    """Plain JSON text, and whether anything (a comment, a trailing comma) had to be dropped."""
    out: list[str] = []
    dropped = False
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            dropped = True
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ValueError("a /* comment is never closed")
            i = end + 2
            dropped = True
        else:
            if char in "}]":
                k = len(out) - 1
                while k >= 0 and out[k].isspace():
                    k -= 1
                if k >= 0 and out[k] == ",":
                    del out[k]
                    dropped = True
            out.append(char)
            i += 1
    return "".join(out), dropped


def loads(text: str) -> tuple[Any, bool]:
    """The parsed value, and whether writing it back as JSON loses comments or trailing commas."""
    plain, dropped = strip(text)
    return json.loads(plain), dropped
