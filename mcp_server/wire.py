"""What the plugin answers itself: lines a client sends that are not one valid JSON-RPC message.

The SDK's stdio transport drops these without a JSON-RPC error (a line with a lone UTF-16 surrogate,
as JavaScript emits for a cut emoji, gets no answer at all, so the client waits forever). Stdlib only.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: the plugin imports this module
if TYPE_CHECKING:
    from typing import Any

PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602


def _error(message_id: Any, code: int, message: str) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": message_id, "error": {"code": code, "message": message}}).encode() + b"\n"


def refusal(line: bytes) -> tuple[bool, bytes | None]:
    """(forward?, answer): a valid message is forwarded; anything else is answered here (or dropped when it
    is a notification or a response, which nobody waits for)."""
    if not line.strip():
        return False, None
    try:
        message = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError:
        return False, _error(None, PARSE_ERROR, "Parse error: the line is not valid UTF-8.")
    except ValueError as error:
        return False, _error(None, PARSE_ERROR, f"Parse error: not JSON ({error}). Send one JSON-RPC message per line.")
    if isinstance(message, list):
        return False, _error(None, INVALID_REQUEST, "Invalid request: JSON-RPC batches are not part of MCP (removed "
                                                    "in 2025-06-18); send one message per line.")
    if not isinstance(message, dict):
        return False, _error(None, INVALID_REQUEST, "Invalid request: a message must be a JSON object.")
    if b"\\u" in line and _has_lone_surrogate(message):
        if "method" in message and "id" in message:
            return False, _error(message["id"], INVALID_PARAMS, "Invalid params: a string holds a lone UTF-16 "
                                 "surrogate (a cut emoji?); send valid Unicode text.")
        return False, None
    return True, None


def _has_lone_surrogate(message: dict[str, Any]) -> bool:
    try:
        json.dumps(message, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
