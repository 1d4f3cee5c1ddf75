"""Lines out of a byte stream read in chunks: one splitter for an agent's stdout (engine/runner.py), the daemon's
socket sessions (daemon/unix_socket.py) and the plugin's relay (daemon/relay.py).

Stdlib only and imports nothing: the relay imports it on every launch of the plugin.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: the plugin imports this module
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


class LineSplitter:
    """Feed it chunks, get back the lines they complete, in order.

    Lines have no length limit unless `max_bytes` is given: then a line longer than that is dropped as it
    arrives, never held whole, and `on_drop` is told how many bytes it had once its newline is seen.
    `keepends`: the lines keep their b"\\n".
    """

    def __init__(self, max_bytes: int | None = None, on_drop: Callable[[int], None] | None = None,
                 keepends: bool = False) -> None:
        self._buffer = bytearray()
        self._max = max_bytes
        self._on_drop = on_drop
        self._end = 1 if keepends else 0
        self._cut = -1  # >= 0 while dropping the rest of an over-long line: how many bytes it had so far

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        """The lines `chunk` completes; iterate them before the next `feed` (a drop is reported in line order)."""
        self._buffer += chunk
        return self._lines()

    def _lines(self) -> Iterator[bytes]:
        buffer, start = self._buffer, 0
        try:
            while True:
                newline = buffer.find(b"\n", start)
                if self._cut >= 0:  # an over-long line: dropped as it arrives up to its newline
                    self._cut += (len(buffer) if newline < 0 else newline) - start
                    if newline < 0:
                        start = len(buffer)
                        return
                    start = newline + 1
                    dropped, self._cut = self._cut, -1
                    if self._on_drop is not None:
                        self._on_drop(dropped)
                    continue
                if newline < 0:
                    if self._max is not None and len(buffer) - start > self._max:
                        self._cut, start = len(buffer) - start, len(buffer)
                    return
                line = bytes(buffer[start:newline + self._end])
                start = newline + 1
                yield line
        finally:
            del buffer[:start]  # once per chunk, not once per line: a chunk of many short lines stays linear

    def rest(self) -> bytes:
        """What follows the last newline (a last line the stream ended without ending), taken out; nothing while
        an over-long line is being dropped."""
        rest = b"" if self._cut >= 0 else bytes(self._buffer)
        self._buffer.clear()
        return rest
