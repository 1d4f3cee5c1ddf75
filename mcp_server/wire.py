"""What the plugin answers itself: lines a client sends that are not one valid JSON-RPC message.

The SDK's stdio transport drops these without a JSON-RPC error (a line with a lone UTF-16 surrogate,
as JavaScript emits for a cut emoji, gets no answer at all, so the client waits forever). Stdlib only.

It reads JSON with the C scanner the `json` package itself uses (`_json.make_scanner`), so a launch of the
plugin never imports `json` (its four modules are ~1 ms of a ~25 ms start); anything that scanner refuses
is read again by `json.loads`, which raises the error the refusal quotes. Writing JSON is rare here (error
answers, a reconnect) and imports `json` then.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: the plugin imports this module
if TYPE_CHECKING:
    from typing import Any

PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602
_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


class _Context:
    """What `_json.make_scanner` reads from a decoder: json.JSONDecoder's defaults."""

    strict = True
    object_hook = object_pairs_hook = None
    parse_float, parse_int, parse_constant = float, int, _CONSTANTS.__getitem__


try:
    from _json import make_scanner
except ImportError:  # an interpreter without json's C accelerator: `loads` is json.loads
    _scan = None
else:
    _scan = make_scanner(_Context())
_SPACE = " \t\n\r"


def loads(data: bytes | str) -> Any:
    """`json.loads(data)`, the same value, without importing `json` unless `data` is not one JSON text."""
    try:
        if _scan is None:
            raise ValueError
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        start = len(text) - len(text.lstrip(_SPACE))
        value, end = _scan(text, start)
        if len(text.rstrip(_SPACE)) == end and not text.startswith("\ufeff"):
            return value
    except (StopIteration, ValueError, RecursionError):
        pass
    import json  # not one JSON text (or bytes in UTF-16/32): json says what is wrong, or reads it

    return json.loads(data)


def dumps(value: Any, **options: Any) -> str:
    import json  # error answers and reconnects only: see the module's docstring

    return json.dumps(value, **options)


def _error(message_id: Any, code: int, message: str) -> bytes:
    return dumps({"jsonrpc": "2.0", "id": message_id, "error": {"code": code, "message": message}}).encode() + b"\n"


def refusal(line: bytes) -> tuple[bool, bytes | None]:
    """(forward?, answer): a valid message is forwarded; anything else is answered here (or dropped when it
    is a notification or a response, which nobody waits for)."""
    if not line.strip():
        return False, None
    try:
        message = loads(line.decode("utf-8"))
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
        dumps(message, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
