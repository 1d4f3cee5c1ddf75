"""A run's own git repository: written by the daemon before each run, read back after it as from a hostile remote.

A task's worktree is registered in its repository (`git worktree add`), but the folder git keeps for it there (its
HEAD, index, merge state) is the daemon's alone: the sandbox hides the repository's git folder and shows only its
objects, read-only. What the agent's own git uses is a repository of the run's, `<worktree>/.git`, written here
before every run from the daemon's state: HEAD on the task branch, the branch and the default branch as refs, the
index (with a merge in progress, its stages and MERGE_HEAD), and the repository's objects as an alternate. New
objects and refs land in that folder, inside the worktree.

After the run nothing in that folder is trusted: its branch's tip is read as a small regular file (never through a
link), and when it moved its commits are fetched by the repository itself, as from a remote (upload-pack serves an
untrusted repository safely; the objects are checked with fsck), and taken only when they descend from where the
run started. Everything else the run left is its files, which the daemon's own git commits (engine/workspaces.py).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import re
import shutil
import stat
import struct
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from ..services import gitops
from ..services.errors import ServiceError

log = logging.getLogger("agentqueue.workspaces")

_SHA = re.compile(rb"[0-9a-f]{40}|[0-9a-f]{64}")
REF_BYTES = 200  # a loose ref is an object id and a newline; anything longer is not one
PACKED_BYTES = 1 << 20  # the run's packed-refs: the daemon writes two lines; a run's own refs may add some
FETCH_RETRY_PAUSES = (0.0, 0.05, 0.1, 0.2, 0.4)  # a fetch that met another worktree's entry mid-write, tried again
# The daemon's merge state that the run's repository mirrors, so the agent's `git status` and `git commit` see
# (and conclude) the merge the merge queue left in progress.
MERGE_FILES = ("MERGE_HEAD", "MERGE_MSG", "MERGE_MODE")
# How the daemon's fetch of a run's commits reads them: every object checked, nothing of the run's repository run.
FETCH_CONFIG = {"fetch.fsckObjects": "true", "transfer.fsckObjects": "true", "protocol.file.allow": "always",
                "uploadpack.allowAnySHA1InWant": "true", "core.hooksPath": "/dev/null", "core.fsmonitor": "false",
                "submodule.recurse": "false", "core.alternateRefsCommand": "", "uploadpack.packObjectsHook": ""}


@dataclass(frozen=True)
class Place:
    """Where a task's worktree lives in its repository, as the daemon knows it (never read from the worktree)."""

    worktree: Path
    admin: Path  # <common>/worktrees/<name>: the worktree's HEAD, index and merge state
    common: Path  # the repository's git folder

    @property
    def objects(self) -> Path:
        return self.common / "objects"


def clear(entry: Path, aside: Path | None = None) -> Path | None:
    """Remove whatever a run left at `entry` (a file, a link, a folder of its own), never following a link. With
    `aside` (a free name on the same file system, outside the worktree), a folder is only renamed there, in one step,
    and returned for the caller to delete later (deleting many small files is slow on some file systems)."""
    try:
        info = os.lstat(entry)
    except FileNotFoundError:
        return None
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(entry)
        return None
    if aside is not None:
        os.replace(entry, aside)
        return aside
    shutil.rmtree(entry)  # fd-based on Linux: a link inside is removed, never followed
    return None


def expose(tree: gitops.Checkout, place: Place, branch: str | None, default: str,
           aside: Path | None = None) -> tuple[str, Path | None]:
    """Write the run's repository at `<worktree>/.git` from the daemon's state, replacing whatever is there;
    `branch` None: HEAD detached where the daemon's is (the merge queue's batch worktree). Returns HEAD's commit and
    the old repository's folder when it was moved to `aside` (see `clear`). Its refs are in `packed-refs`, so the
    repository is four folders and a few files: each folder made costs a millisecond on some file systems."""
    known = (trusted_ref(place.common, f"refs/heads/{branch}"), trusted_ref(place.common, f"refs/heads/{default}"))
    if branch and known[0] and known[1]:
        tip, base = known[0], known[1]
    else:
        tip, base = tree.rev_parse(f"refs/heads/{branch}^{{commit}}" if branch else "HEAD^{commit}",
                                   f"refs/heads/{default}^{{commit}}")
    dot_git = place.worktree / ".git"
    moved = clear(dot_git, aside)
    (dot_git / "objects" / "info").mkdir(parents=True)
    (dot_git / "refs").mkdir()
    (dot_git / "objects/info/alternates").write_text(f"{place.objects}\n", encoding="utf-8")
    sha256 = len(tip) == 64
    (dot_git / "config").write_text(
        "[core]\n\trepositoryformatversion = " + ("1" if sha256 else "0") + "\n\tfilemode = true\n\tbare = false\n"
        "\tlogallrefupdates = true\n" + ("[extensions]\n\tobjectformat = sha256\n" if sha256 else ""),
        encoding="utf-8")
    (dot_git / "HEAD").write_text(f"ref: refs/heads/{branch}\n" if branch else f"{tip}\n", encoding="utf-8")
    refs = sorted({f"refs/heads/{default}": base, **({f"refs/heads/{branch}": tip} if branch else {})}.items())
    (dot_git / "packed-refs").write_text("# pack-refs with: peeled fully-peeled sorted \n"
                                         + "".join(f"{sha} {name}\n" for name, sha in refs), encoding="utf-8")
    for name in ("index", *MERGE_FILES):
        with contextlib.suppress(FileNotFoundError):
            shutil.copyfile(place.admin / name, dot_git / name)
    with contextlib.suppress(FileNotFoundError):
        shutil.copyfile(place.common / "shallow", dot_git / "shallow")
    with contextlib.suppress(OSError):
        exclude = (place.common / "info/exclude").read_bytes()
        if any(line.strip() and not line.lstrip().startswith(b"#") for line in exclude.splitlines()):
            (dot_git / "info").mkdir()
            (dot_git / "info/exclude").write_bytes(exclude)  # the person's own ignore rules, when there are any
    return tip, moved


def trusted_ref(common: Path, ref: str) -> str | None:
    """A ref of the repository's own (never a run's: none can write there), read as git keeps it (loose, else in
    packed-refs), without a git process; None when it is kept some other way (then git is asked)."""
    try:
        data = (common / ref).read_bytes().strip()
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        data = b""
    except OSError:
        return None
    if data:
        return data.decode() if _SHA.fullmatch(data) else None
    try:
        packed = (common / "packed-refs").read_bytes()
    except OSError:
        return None
    wanted = b" " + ref.encode()
    for line in packed.splitlines():
        if line.endswith(wanted) and _SHA.fullmatch(line[:-len(wanted)]):
            return line[:-len(wanted)].decode()
    return None


def read_ref(worktree: Path, branch: str) -> str | None:
    """The run's branch tip as its repository holds it: its loose ref, else its line in `packed-refs` (where the
    daemon wrote it); each file opened through no link, a regular file, size-capped. None when it is anything else
    (missing, a FIFO, too big): then it is fetched to be sure."""
    loose = _read_small(worktree, [".git", "refs", "heads", *branch.split("/")], REF_BYTES)
    if loose is not None:
        found = loose.strip()
        return found.decode() if _SHA.fullmatch(found) else None
    packed = _read_small(worktree, [".git", "packed-refs"], PACKED_BYTES)
    wanted = f" refs/heads/{branch}".encode()
    for line in (packed or b"").splitlines():
        if line.endswith(wanted) and _SHA.fullmatch(line[:-len(wanted)]):
            return line[:-len(wanted)].decode()
    return None


def _read_small(root: Path, parts: list[str], limit: int) -> bytes | None:
    """A file under `root`, opened one component at a time with O_NOFOLLOW | O_NONBLOCK: its bytes when it is a
    regular file of at most `limit` bytes, else None."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fds: list[int] = []
    try:
        fds.append(os.open(root, os.O_RDONLY | os.O_DIRECTORY))
        for part in parts[:-1]:
            fds.append(os.open(part, flags | os.O_DIRECTORY, dir_fd=fds[-1]))
        fds.append(os.open(parts[-1], flags, dir_fd=fds[-1]))
        if not stat.S_ISREG(os.fstat(fds[-1]).st_mode):
            return None
        data = os.read(fds[-1], limit + 1)
    except OSError as error:
        if error.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR, errno.ENXIO, errno.EACCES):
            log.info("could not read %s in %s: %s", "/".join(parts), root, error)
        return None
    finally:
        for opened in reversed(fds):
            os.close(opened)
    return data if len(data) <= limit else None


def collect(tree: gitops.Checkout, main: gitops.Checkout, place: Place, branch: str, ours: str,
            retry_lock: contextlib.AbstractContextManager[object]) -> str | None:
    """Take the run's commits on its branch into the daemon's branch, which is at `ours`: fetched from the run's
    repository by object id with every object checked, and only as a fast-forward (git refuses anything else).
    Returns the new tip, or None when nothing was taken (no commit, or a rewritten branch: its files are then
    committed as leftovers)."""
    ref = f"refs/heads/{gitops.check_ref_name(branch)}"
    theirs = read_ref(place.worktree, branch)
    if theirs == ours:
        return None  # the usual case for a run that did not commit: one small read, no git
    try:
        if not stat.S_ISDIR(os.lstat(place.worktree / ".git").st_mode):
            return None  # a link or a `gitdir:` file would have git fetch from a repository the run chose
    except FileNotFoundError:
        return None
    parents = _unpacked(main, place.worktree) if theirs is not None else None
    if theirs is not None and parents is not None:
        if not _descends(theirs, ours, parents):
            try:  # a merge of commits the repository had already: git walks those
                main.run("merge-base", "--is-ancestor", "--end-of-options", ours, theirs)
            except ServiceError:
                log.info("took no commits from the run in %s (%s does not descend from %s)", place.worktree,
                         theirs[:12], ours[:12])
                return None
        return _followed(tree, theirs)
    # The config reaches the upload-pack that git starts on the run's repository too, where it outranks that
    # repository's own; not forced, so git itself refuses a tip that does not descend from the daemon's.
    config = {"GIT_CONFIG_COUNT": str(len(FETCH_CONFIG))}
    for at, (key, value) in enumerate(FETCH_CONFIG.items()):
        config |= {f"GIT_CONFIG_KEY_{at}": key, f"GIT_CONFIG_VALUE_{at}": value}
    wanted = theirs or ref  # a ref the run packed (or anything odd) is asked for by name
    argv = ("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--no-recurse-submodules", "--update-head-ok",
            "--end-of-options", str(place.worktree / ".git"), f"{wanted}:{ref}")
    for attempt, pause in enumerate(FETCH_RETRY_PAUSES):
        try:
            with retry_lock if attempt else contextlib.nullcontext():
                time.sleep(pause)
                main.run(*argv, env=config)
            break
        except ServiceError as error:
            # git reads every worktree's HEAD: one another task's add or removal is writing fails it for a moment.
            if "worktrees/" in str(error) and attempt + 1 < len(FETCH_RETRY_PAUSES):
                continue
            log.info("took no commits from the run in %s (not a fast-forward of %s, or unreadable: %s)",
                     place.worktree, ours[:12], error)
            return None
    tip = theirs or tree.run("rev-parse", "--verify", ref)
    return _followed(tree, tip) if tip != ours else None


def _followed(tree: gitops.Checkout, tip: str) -> str:
    """The daemon's branch and index at the run's tip `tip` in one `git reset` (mixed: the files stay as the run
    left them, what the index knew of each unchanged one is kept, and a merge left in progress for the run is over);
    the run is over and nothing else writes a task's branch meanwhile. Returns `tip`."""
    tree.run("reset", "--quiet", tip, "--")
    return tip


def _descends(tip: str, ours: str, parents: dict[str, list[str]]) -> bool:
    """Whether `ours` is an ancestor of `tip` through the run's own new commits alone (`parents`: theirs)."""
    seen, todo = set(), [tip]
    while todo:
        sha = todo.pop()
        if sha == ours:
            return True
        if sha not in seen and sha in parents:
            seen.add(sha)
            todo += parents[sha]
    return False


_PACK_TYPES = {b"commit": 1, b"tree": 2, b"blob": 3, b"tag": 4}
LOOSE_OBJECTS = 10_000  # more loose objects than this in a run's repository: fetched instead (git packs them)
LOOSE_BYTES = 64 << 20  # nor more than this, inflated (a landing over 50 MiB waits for a person anyway)


def _unpacked(main: gitops.Checkout, worktree: Path) -> dict[str, list[str]] | None:
    """The run's new objects (every loose object its repository holds: it started with none) written into the
    repository by `git unpack-objects --strict`, which checks each as fsck does (links, `.git` in a tree, …): the
    cheap way, a few milliseconds against a fetch's several processes. Each file is read through no link and its
    content must hash to its name. Returns the new commits' parents; None when the objects are anything else (a
    pack, too many, a link): then they are fetched."""
    found = _loose_objects(worktree)
    if found is None:
        return None
    entries, parents = found
    pack = b"PACK" + struct.pack(">II", 2, len(entries)) + b"".join(entries)
    try:
        main.run_bytes("unpack-objects", "--strict", "-q", stdin=pack + hashlib.sha1(pack).digest())
    except ServiceError as error:
        log.info("the run's objects in %s were refused (%s): fetched instead", worktree, error)
        return None
    return parents


def _loose_objects(worktree: Path) -> tuple[list[bytes], dict[str, list[str]]] | None:
    """Each loose object of the run's repository as a pack entry (its header, its content deflated), checked
    against its name; None when the repository holds anything but loose objects there, or too much."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    entries: list[bytes] = []
    parents: dict[str, list[str]] = {}
    total = 0
    fds: list[int] = []
    try:
        fds.append(os.open(worktree, os.O_RDONLY | os.O_DIRECTORY))
        for part in (".git", "objects"):
            fds.append(os.open(part, flags | os.O_DIRECTORY, dir_fd=fds[-1]))
        objects = fds[-1]
        for fan in os.listdir(objects):
            if fan in ("info", "pack"):
                if fan == "pack" and os.listdir(_opened(fds, fan, objects, flags)):
                    return None  # the run packed objects (git gc): a fetch reads those
                continue
            if not re.fullmatch(r"[0-9a-f]{2}", fan):
                return None
            folder = _opened(fds, fan, objects, flags)
            for name in os.listdir(folder):
                if not re.fullmatch(r"[0-9a-f]{38}", name) or len(entries) >= LOOSE_OBJECTS:
                    return None
                fd = os.open(name, flags, dir_fd=folder)
                fds.append(fd)
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode) or info.st_size > LOOSE_BYTES - total:
                    return None  # never more than the budget in the daemon's memory: git streams a fetch
                with os.fdopen(os.dup(fd), "rb") as handle:
                    raw = zlib.decompressobj().decompress(handle.read(info.st_size), LOOSE_BYTES - total + 1)
                total += len(raw)
                if total > LOOSE_BYTES or hashlib.sha1(raw).hexdigest() != fan + name:
                    return None
                head, _, body = raw.partition(b"\0")
                kind, _, size = head.partition(b" ")
                if kind not in _PACK_TYPES or not size.isdigit() or int(size) != len(body):
                    return None
                entries.append(_pack_header(_PACK_TYPES[kind], len(body)) + zlib.compress(body, 1))
                if kind == b"commit":  # its parents, from its header (git checks the format as it unpacks)
                    header = body.split(b"\n\n", 1)[0].split(b"\n")
                    parents[fan + name] = [line[7:].decode("ascii", "replace") for line in header
                                           if line.startswith(b"parent ")]
    except (OSError, zlib.error):
        return None
    finally:
        for opened in reversed(fds):
            os.close(opened)
    return entries, parents


def _opened(fds: list[int], name: str, parent: int, flags: int) -> int:
    fds.append(os.open(name, flags | os.O_DIRECTORY, dir_fd=parent))
    return fds[-1]


def _pack_header(kind: int, size: int) -> bytes:
    """A pack entry's header: its type and size, 4 bits then 7 at a time (git's pack format)."""
    byte, size = (kind << 4) | (size & 15), size >> 4
    out = bytearray()
    while size:
        out.append(byte | 0x80)
        byte, size = size & 0x7F, size >> 7
    out.append(byte)
    return bytes(out)
