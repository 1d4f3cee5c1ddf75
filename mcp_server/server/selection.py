"""A connection's effective tool selection: what it may call and what its tools/list shows.

Apart from toolsets.py because the plugin imports that module, and this one needs `typing` at run time.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .toolsets import ALL, DEFAULT, DISCOVERY, PERSON_ONLY, is_run, offers


class Selection(NamedTuple):
    """A connection's effective tool selection; hashable, so a cache of tools/list can key on it.
    (A NamedTuple, not a dataclass: the plugin imports this module, and dataclasses pulls in inspect.)

    `ceiling`/`listing` are toolset names, None meaning every tool. Policy rules filter the list too,
    but they change without the connection, so they are not part of this.
    """

    read_only: bool
    run: bool  # an engine run's connection: never offered the person-only tools nor enable_toolsets
    open: bool  # may enable more toolsets (enable_toolsets is listed)
    ceiling: tuple[str, ...] | None  # what it may call
    listing: tuple[str, ...] | None  # what tools/list shows

    def hides(self, name: str, group: str, read_only: bool) -> str | None:
        """Why this connection may not call a tool (None when it may)."""
        if self.run and name in PERSON_ONLY:
            return "it is a person's decision, and this connection comes from a run"
        if self.read_only and not read_only:
            return "this connection is read-only (--read-only)"
        if name == DISCOVERY and not self.open:
            return ("this connection's toolsets are fixed when it opens" if self.run else
                    f"this connection is limited to the toolsets {', '.join(self.ceiling or ())} (--toolsets)")
        if self.ceiling is not None and not offers(list(self.ceiling), name, group):
            return f"this connection is limited to the toolsets {', '.join(self.ceiling) or '(none)'} (--toolsets)"
        return None

    def lists(self, name: str, group: str, read_only: bool) -> bool:
        """Whether tools/list shows the tool: callable, and in the listed toolsets."""
        if self.hides(name, group, read_only) is not None:
            return False
        return self.listing is None or name == DISCOVERY or offers(list(self.listing), name, group)


def effective(options: dict[str, Any], configured: list[str] | tuple[str, ...] = (DEFAULT,)) -> Selection:
    """A connection's selection from its options (read_only, toolsets, actor, enabled) and [mcp] toolsets."""
    toolsets, run = options.get("toolsets"), is_run(options.get("actor"))
    is_open = not run and (toolsets is None or DEFAULT in toolsets or ALL in toolsets)
    if not is_open:  # fixed: a run's, or a person's own choice of toolsets; what it names is all it gets
        fixed = None if toolsets is None or ALL in toolsets else tuple(toolsets)
        return Selection(bool(options.get("read_only")), run, False, fixed, fixed)
    base = list(configured) if toolsets is None else list(toolsets)
    listing = tuple(dict.fromkeys([*base, *options.get("enabled", ())]))
    return Selection(bool(options.get("read_only")), False, True, None, None if ALL in listing else listing)
