"""The one line splitter the runner, the daemon's socket sessions and the plugin's relay share.

The callers' own tests drive it end to end (an agent's megabyte lines, socket sessions, a relay that reconnects);
these pin the chunk-boundary cases each of them relies on, with real byte streams cut at every offset.
"""

from __future__ import annotations

import subprocess
import sys

from agentqueue.line_splitter import LineSplitter

STREAM = b'{"a": 1}\n\n{"b": "x\xc3\xa9"}\nlast without newline'


def split(stream: bytes, size: int, **options: object) -> tuple[list[bytes], bytes]:
    splitter = LineSplitter(**options)  # type: ignore[arg-type]
    lines = [line for start in range(0, len(stream), size) for line in splitter.feed(stream[start:start + size])]
    return lines, splitter.rest()


def test_lines_are_the_same_whatever_the_chunks_and_the_last_unfinished_line_is_the_rest() -> None:
    for size in range(1, len(STREAM) + 1):
        assert split(STREAM, size) == ([b'{"a": 1}', b"", b'{"b": "x\xc3\xa9"}'], b"last without newline")
        assert split(STREAM, size, keepends=True) == ([b'{"a": 1}\n', b"\n", b'{"b": "x\xc3\xa9"}\n'],
                                                      b"last without newline")


def test_without_a_limit_a_line_of_megabytes_comes_out_whole() -> None:
    big = b"x" * 5_000_000
    assert split(big + b"\nnext\n", 65536) == ([big, b"next"], b"")


def test_a_line_over_the_limit_is_dropped_as_it_arrives_and_reported_in_line_order() -> None:
    seen: list[object] = []
    splitter = LineSplitter(10, on_drop=lambda size: seen.append(("dropped", size)))
    stream = b"short\n" + b"y" * 25 + b"\nafter\nexactly10b\n" + b"z" * 30
    for start in range(0, len(stream), 4):
        seen.extend(splitter.feed(stream[start:start + 4]))
    assert seen == [b"short", ("dropped", 25), b"after", b"exactly10b"]
    assert splitter.rest() == b""  # the unfinished over-long line is dropped too
    assert list(splitter.feed(b"\nfresh\n")) == [b"fresh"]  # its newline came: the stream goes on
    assert seen[-1] == ("dropped", 30)


def test_the_splitter_imports_nothing_so_the_plugin_launch_stays_light() -> None:
    # `__future__` is a compiler directive's module (the relay imports it too), not a dependency.
    code = ("import sys; before = set(sys.modules); import agentqueue.line_splitter; "
            "print(sorted(m for m in set(sys.modules) - before "
            "if not m.startswith('agentqueue') and m != '__future__'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
