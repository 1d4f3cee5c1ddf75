"""How much slower than a quiet 2-core machine this one runs: every deadline a test waits under is multiplied by it.

`AGENTQUEUE_TEST_SLOWDOWN` sets it (a float, >= 1). Unset, `tests/conftest.py` sets it once for the whole run (the
xdist workers inherit it) from the load the machine carries when pytest starts: the 1-minute load average per core,
at least 1 and at most 8. A deadline only bounds a wait on an event, a state or a file: it costs nothing when the
event comes, and a bigger one only makes a real hang take longer to report.
"""

from __future__ import annotations

import os

ENV = "AGENTQUEUE_TEST_SLOWDOWN"
MOST = 8.0


def measured() -> float:
    """The factor this machine's load asks for now."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return 1.0
    return round(min(MOST, max(1.0, load / (os.cpu_count() or 1))), 2)


def factor() -> float:
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return measured()
    try:
        value = float(raw)
    except ValueError:
        raise SystemExit(f"{ENV}={raw!r} is not a number; set it to a factor such as 2, or unset it") from None
    return max(1.0, value)


SLOWDOWN = factor()


def scaled(seconds: float) -> float:
    """`seconds` on a quiet machine, on this one."""
    return seconds * SLOWDOWN
