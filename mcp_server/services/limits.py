"""Bounds on what a caller may pass: inside what SQLite (64-bit integers), dates, the filesystem and exec() take.

The tool schemas declare them (tools/registry.py); the services check the ones other paths reach too.
"""

import unicodedata

from .errors import InvalidInputError

MAX_COUNT = 1_000_000_000  # offsets, priorities (±), seconds: far beyond use, far below 2**63
MAX_RETRIES = 100
MAX_AGENTS = 1000  # max_concurrent_agents
MAX_TOKENS = 10**15  # budget_limit
MAX_WEIGHT = 1_000_000.0  # credit_weight
MAX_HOURS = 24 * 366 * 100  # since_hours: a century, inside datetime's range
MAX_NAME = 255  # names, titles, branches: one path component or ref name
MAX_PATH = 4096  # paths and URLs (PATH_MAX)
MAX_COMMAND = 100_000  # a command or message passed as one argument: under the kernel's 128 KiB


def check_range(parameter: str, value: int | float, low: int | float, high: int | float) -> None:
    """Refuse a number outside [low, high], naming the parameter."""
    if not low <= value <= high:
        raise InvalidInputError(f"{parameter} must be between {low} and {high} (got {value}).")


def check_path(parameter: str, value: str | None) -> None:
    """Refuse a path or URL the OS cannot take (a NUL byte, a name over 255 bytes, over 4096 in all)."""
    if not value:
        return
    if "\0" in value:
        raise InvalidInputError(f"{parameter} contains a NUL byte (\\0). Remove it.")
    encoded = value.encode("utf-8", "surrogatepass")
    if len(encoded) > MAX_PATH or any(len(part) > MAX_NAME for part in encoded.split(b"/")):
        raise InvalidInputError(f"{parameter} is too long for the filesystem ({MAX_NAME} bytes per name, "
                                f"{MAX_PATH} in all). Use a shorter one.")


def check_argument(parameter: str, value: str | None) -> None:
    """Refuse text passed to a program as one argument that exec() cannot take (a NUL byte, over 128 KiB)."""
    if not value:
        return
    if "\0" in value:
        raise InvalidInputError(f"{parameter} contains a NUL byte (\\0). Remove it.")
    if len(value.encode("utf-8", "surrogatepass")) >= 128 * 1024:
        raise InvalidInputError(f"{parameter} is too long to pass to a program (the OS allows 128 KiB per "
                                "argument). Shorten it, or put it in a file.")


def is_file_name(name: str) -> bool:
    """Whether the filesystem can hold a file of this name (no NUL or '/', at most 255 bytes)."""
    return "\0" not in name and "/" not in name and len(name.encode("utf-8", "surrogatepass")) <= MAX_NAME


def check_title(title: str) -> None:
    """A task's title (already stripped) is one line of plain text of at most MAX_NAME characters: every
    surface that shows it (board, terminal, chat, branch names) gets the same bounded, inert text."""
    if len(title) > MAX_NAME:
        raise InvalidInputError(f"Task title is {len(title)} characters; the limit is {MAX_NAME}. Shorten it and put "
                                "the detail in the description.")
    bad = next((c for c in title if unicodedata.category(c) in ("Cc", "Zl", "Zp")), None)
    if bad is not None:
        raise InvalidInputError(f"Task title contains a control character (U+{ord(bad):04X}); a title is one line of "
                                "plain text. Remove it (the description may hold several lines).")


def quoted(text: str, limit: int = 200) -> str:
    """`text` quoted for a message, cut to `limit` characters: a refusal never echoes a megabyte back."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}… ({len(text):,} characters)"
