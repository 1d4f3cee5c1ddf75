"""Which AgentQueue runs here: the release its package metadata names, and the commit when it runs from a checkout.

`version()` is `0.2.0` for an installed package and `0.2.0+g1a2b3c4d5e6f` (PEP 440's local part) for a git
checkout installed in editable mode, whose metadata keeps the release it was installed at while the code moves on
with every commit. Stdlib only, no subprocess and cached per process: `--version`, `status`, `doctor`, the daemon
(daemon.json, /health, the board's footer) and the MCP handshake ask for it; the plugin a client launches never
does. The metadata is read from the package's `.dist-info/METADATA` found on sys.path, as importlib.metadata finds
it, without importing importlib.metadata (email, zipfile, csv: 20-70 ms on a busy machine, a quarter of a terminal
read); importlib.metadata itself is the fallback for any other kind of install. The commit is read from the
checkout's `.git` files (HEAD, the ref it names, packed-refs): a checkout with uncommitted edits shows the commit
they sit on.
"""

from __future__ import annotations

import os
import sys

DISTRIBUTION = "agentqueue"
UNKNOWN = "0+unknown"  # neither metadata nor an install: code run from a copy of the source tree

_version: str | None = None


def version() -> str:
    """This process's AgentQueue version, computed once."""
    global _version
    if _version is None:
        commit = checkout_commit(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        _version = release() + (f"+g{commit[:12]}" if commit else "")
    return _version


def release() -> str:
    """The Version of the package's metadata."""
    for entry in sys.path:
        found = _metadata_version(entry or ".")
        if found:
            return found
    try:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as metadata_version
    except ImportError:  # pragma: no cover - the standard library always has it
        return UNKNOWN
    try:
        return metadata_version(DISTRIBUTION)
    except PackageNotFoundError:
        return UNKNOWN


def release_tuple(text: str) -> tuple[int, ...]:
    """`0.2.0+g1a2b…` -> (0, 2, 0): the numeric release, to tell an older version from a newer one."""
    numbers = []
    for part in text.split("+", 1)[0].split("."):
        digits = ""
        for char in part:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        numbers.append(int(digits))
    return tuple(numbers)


def _metadata_version(folder: str) -> str | None:
    try:
        names = os.listdir(folder)
    except OSError:  # a zip on sys.path, a folder that went away
        return None
    for name in names:
        if not name.endswith(".dist-info"):
            continue
        project = name[: -len(".dist-info")].rsplit("-", 1)[0]
        if project.lower().replace("-", "_").replace(".", "_") != DISTRIBUTION:
            continue
        try:
            with open(os.path.join(folder, name, "METADATA"), encoding="utf-8") as metadata:
                for line in metadata:
                    if not line.strip():
                        break  # the headers end at the first blank line
                    if line.startswith("Version:"):
                        return line.partition(":")[2].strip() or None
        except OSError:
            continue
    return None


def checkout_commit(root: str) -> str | None:
    """The commit checked out in `root` when it is a git checkout of AgentQueue (its pyproject.toml beside the
    package, and `.git`: a folder, or a worktree's `gitdir:` file), else None. Read from git's files, never by
    running git."""
    if not os.path.isfile(os.path.join(root, "pyproject.toml")):
        return None
    dot_git = os.path.join(root, ".git")
    try:
        if os.path.isfile(dot_git):
            gitdir = _read(dot_git).removeprefix("gitdir:").strip()
            gitdir = os.path.normpath(os.path.join(root, gitdir))
        elif os.path.isdir(dot_git):
            gitdir = dot_git
        else:
            return None
        head = _read(os.path.join(gitdir, "HEAD"))
        if not head.startswith("ref:"):
            return head if _is_sha(head) else None
        ref = head.removeprefix("ref:").strip()
        common = gitdir
        if os.path.isfile(os.path.join(gitdir, "commondir")):
            common = os.path.normpath(os.path.join(gitdir, _read(os.path.join(gitdir, "commondir"))))
        for base in dict.fromkeys((gitdir, common)):
            path = os.path.join(base, ref)
            if os.path.isfile(path):
                sha = _read(path)
                return sha if _is_sha(sha) else None
        packed = os.path.join(common, "packed-refs")
        if os.path.isfile(packed):
            with open(packed, encoding="utf-8") as refs:
                for line in refs:
                    sha, _, name = line.strip().partition(" ")
                    if name == ref and _is_sha(sha):
                        return sha
    except (OSError, UnicodeDecodeError):
        return None
    return None  # a branch with no commit yet


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read().strip()


def _is_sha(text: str) -> bool:
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)
