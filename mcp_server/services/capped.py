"""Run a command and keep only the first bytes of its output: memory stays bounded whatever it prints.

`communicate()` buffers everything before any cap applies (300 MB of output cost the daemon ~860 MiB);
here two threads read the pipes as the command writes, keep up to a limit and count the rest.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO

CHUNK = 65536


@dataclass
class Captured:
    """What was kept of one stream, and how many bytes it had in all."""

    kept: bytes = b""
    total: int = 0

    def text(self) -> str:
        body = self.kept.decode("utf-8", errors="replace")
        dropped = self.total - len(self.kept)
        return body + (f"\n[output truncated: {dropped:,} more bytes]" if dropped > 0 else "")


def _drain(stream: IO[bytes], limit: int, into: Captured) -> None:
    kept = bytearray()
    while chunk := stream.read1(CHUNK) if hasattr(stream, "read1") else stream.read(CHUNK):
        into.total += len(chunk)
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]
    into.kept = bytes(kept)


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the group, give it 2 s, then SIGKILL whatever of it is left (children included)."""
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=2)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def run_capped(argv: list[str], cwd: Path, timeout: float, stdout_limit: int,
               stderr_limit: int, env: dict[str, str] | None = None) -> tuple[int | None, Captured, Captured]:
    """(returncode or None when it timed out, stdout, stderr); on timeout the whole process group is killed."""
    process = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, start_new_session=True, env=env)
    out, err = Captured(), Captured()
    readers = [threading.Thread(target=_drain, args=(process.stdout, stdout_limit, out), daemon=True),
               threading.Thread(target=_drain, args=(process.stderr, stderr_limit, err), daemon=True)]
    for reader in readers:
        reader.start()
    try:
        process.wait(timeout=timeout)
        code: int | None = process.returncode
    except subprocess.TimeoutExpired:
        kill_group(process)
        process.wait()
        code = None
    for reader in readers:
        reader.join(timeout=5)  # a child that left the group may hold the pipe: never wait on it for long
    for stream in (process.stdout, process.stderr):
        try:
            stream.close()  # type: ignore[union-attr]
        except OSError:
            pass
    return code, out, err
