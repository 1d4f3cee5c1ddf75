"""How big one tool or resource result may get, and how a big one is paged or cut (design.md "Result size").

Claude Code refuses MCP results over 25,000 tokens. A token is about 4 characters of English, fewer for
JSON-escaped code and non-ASCII, so sizes here count a non-ASCII character as 6 (its `\\uXXXX` escape).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

# A whole tools/call result, its text and its structured content together (the text repeats the structure):
# 80,000 counted characters is ~20,000 tokens of English, leaving 5,000 for escapes and denser text.
MAX_RESULT_CHARS = 80_000
# One page of text (a diff, a file, a log, a note) in a result: it appears twice (text and structure),
# and the rest of the result must fit beside it.
PAGE_CHARS = 30_000
# A resource's text is sent once.
RESOURCE_CHARS = 60_000


def cost(text: str) -> int:
    """Counted characters of text as sent: a non-ASCII character counts 6."""
    return len(text) + 5 * (len(text) - len(text.encode("ascii", "ignore")))


def escaped_cost(text: str) -> int:
    """Counted characters of text inside a JSON string (quotes, backslashes, control characters escaped)."""
    return len(json.dumps(text, ensure_ascii=True)) - 2


def cut(text: str, budget: int) -> str:
    """The longest prefix of text whose escaped cost is within budget."""
    if len(text) <= budget // 6 or escaped_cost(text) <= budget:
        return text
    prefix = text[:budget]
    while prefix and (size := escaped_cost(prefix)) > budget:
        prefix = prefix[: max(0, min(len(prefix) - 1, int(len(prefix) * budget / size) - 16))]
    return prefix


@dataclass
class Page:
    """A slice of a text: `text` starts at `offset`; `next_offset` is None when it reaches the end."""

    text: str
    offset: int
    next_offset: int | None
    total: int

    def span(self, unit: str = "characters") -> str:
        return f"{unit} {self.offset:,}–{self.offset + len(self.text):,} of {self.total:,}"


def page(text: str, offset: int = 0, budget: int = PAGE_CHARS) -> Page:
    """The part of text from offset (characters) that fits budget."""
    offset = min(max(offset, 0), len(text))
    chunk = cut(text[offset: offset + budget], budget)
    end = offset + len(chunk)
    return Page(chunk, offset, end if end < len(text) else None, len(text))


# -- the net under every result ------------------------------------------------------------------------

def result_cost(data: Any) -> int:
    """Counted characters of a tools/call result built from data: indented JSON text plus the structure."""
    return cost(json.dumps(data, indent=2, ensure_ascii=False)) + len(json.dumps(data, ensure_ascii=True))


def _parts(data: Any, path: str = "") -> list[tuple[int, str, Any, Any]]:
    """(cost, path, container, key) of every list (of 2+ items) and string anywhere in data."""
    found: list[tuple[int, str, Any, Any]] = []
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        where = (f"{path}.{key}" if isinstance(data, dict) else f"{path}[{key}]").lstrip(".")
        if isinstance(value, str):
            found.append((escaped_cost(value), where, data, key))
        elif isinstance(value, (dict, list)):
            found += _parts(value, where)
            if isinstance(value, list) and len(value) > 1:
                found.append((len(json.dumps(value, ensure_ascii=True)), where, data, key))
    return found


@dataclass
class Cut:
    """One cut shrink made: `kept` of `total` items (a list) or characters (a string) at `where`."""

    where: str
    kept: int
    total: int
    items: bool

    @property
    def phrase(self) -> str:
        unit = "" if self.items else " characters"
        return f"{self.where or 'the list'} shows the first {self.kept:,} of {self.total:,}{unit}"


def shrink(data: Any, budget: int = MAX_RESULT_CHARS, measure: Any = result_cost) -> list[Cut]:
    """Cut data in place until measure(data) fits budget: the biggest list loses its last items, or the
    biggest string its end, until it fits. Returns the cuts."""
    cuts: list[Cut] = []
    while (size := measure(data)) > budget:
        parts = sorted(_parts(data), key=lambda part: part[0], reverse=True)
        if not parts or parts[0][0] < 200:
            break  # nothing left worth cutting
        biggest, where, container, key = parts[0]
        second = parts[1][0] if len(parts) > 1 else 0
        # Level the biggest down to the next one (or by what is over, if less): big parts share the cut.
        # The text and the structure both hold each part, so a part's cost counts about twice.
        target = max(biggest - (size - budget) // 2 - 200, min(int(second * 0.9), biggest - 1), 0)
        value = container[key]
        if isinstance(value, list):
            full, low, high = list(value), 1, len(value) - 1
            while low < high:  # the most items within target
                middle = (low + high + 1) // 2
                low, high = (middle, high) if len(json.dumps(full[:middle], ensure_ascii=True)) <= target \
                    else (low, middle - 1)
            container[key] = full[:low]
            total = next((c.total for c in cuts if c.where == where), len(full))
            cuts = [c for c in cuts if c.where != where] + [Cut(where, low, total, True)]
        else:
            before = next((c for c in cuts if c.where == where), None)
            text = value[: value.rindex(" [… ")] if before else value  # cut before: cut its text again
            original = before.total if before else len(value)
            kept = cut(text, target)
            if len(kept) >= len(text):
                break
            container[key] = kept + f" [… {original - len(kept):,} more characters cut]"
            cuts = [c for c in cuts if c.where != where] + [Cut(where, len(kept), original, False)]
    return cuts
