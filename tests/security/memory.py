"""The daemon's memory while an attack runs: the engine runs in the test's own process, so its RSS is ours."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

MiB = 1024 * 1024


def rss() -> int:
    """This process's resident set now, in bytes (/proc/self/status VmRSS)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


class Peak:
    def __init__(self) -> None:
        self.start = rss()
        self.top = self.start

    @property
    def grew(self) -> int:
        return self.top - self.start


@contextmanager
def rss_peak() -> Iterator[Peak]:
    """Samples this process's RSS every 10 ms from a thread (it sees a read that blocks the event loop) while the
    block runs; `.grew` is the peak over the start."""
    peak = Peak()
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            peak.top = max(peak.top, rss())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        done.set()
        thread.join()
        peak.top = max(peak.top, rss())
