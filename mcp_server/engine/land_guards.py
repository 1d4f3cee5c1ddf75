"""What a landing waits for a person for, besides protected paths (docs/design.md "What a landing waits for").

Everything a run writes is hostile, so three more things are looked at before its work lands, each cheaply and
from the daemon's own git (never anything the run says):
- **Check files** (`check_rules`): the files the checks declared on the default branch run or read (a script a
  check's command names, a Makefile for `make`, package.json for `npm`, conftest.py for `pytest`…) become
  protected paths for that landing: a branch that changes how it is judged waits for a person.
- **Dropped lines** (`dropped_lines`): a task the queue sent back with a conflict whose resolution removes lines
  that landed on the default branch since its branch left it waits for a person, who sees the files and counts.
- **Size** (`oversize`): a landing that adds a file over a set size, a binary over a smaller one, or too many
  files or bytes in all waits for a person; sizes come from `git diff --raw` and one `cat-file --batch-check`,
  no blob is read.

Each returns a part that is falsy when nothing holds; `Holds` joins them with the protected-path hold. None
raises: when git cannot answer, the part says so and the work waits (nothing unchecked lands).
"""

from __future__ import annotations

import posixpath
import re
import shlex
import subprocess
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..services.errors import ServiceError
from ..services.gitops import SAFE_GIT, Checkout
from ..services.repo_config import Check
from . import generated, protected
from .protected import SHOWN_FILES, Rule, shown_path

MIB = 1024 * 1024
CHECK = "a file the check `{command}` runs or reads: a branch that changes it decides whether it passes"
# Files a tool reads when a check runs it: changing them changes the check (anywhere: at any depth).
TOOL_FILES: dict[str, tuple[tuple[str, bool], ...]] = {
    "make": (("Makefile", False), ("makefile", False), ("GNUmakefile", False)),
    "just": (("justfile", False), (".justfile", False)),
    "npm": (("package.json", False),), "npx": (("package.json", False),), "yarn": (("package.json", False),),
    "pnpm": (("package.json", False),), "bun": (("package.json", False),),
    "pytest": (("conftest.py", True), ("pytest.ini", False), (".pytest.ini", False), ("pyproject.toml", False),
               ("tox.ini", False), ("setup.cfg", False)),
    "tox": (("tox.ini", False), ("pyproject.toml", False), ("setup.cfg", False)),
}
TOOL_FILES["gmake"] = TOOL_FILES["make"]
TOOL_FILES["py.test"] = TOOL_FILES["pytest"]
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh"})
_INTERPRETER = re.compile(r"(python|pypy|node|deno|ruby|perl|php|lua|Rscript|tclsh)[0-9.]*")
_WRAPPERS = frozenset({"!", "env", "exec", "command", "time", "nice", "nohup", "timeout", "xvfb-run"})
_RUNNERS = frozenset({"uv", "poetry", "pipenv", "pdm", "hatch", "rye"})  # `uv run pytest`: pytest is the program
_OPERATORS = frozenset("&|;()<>")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_MEANT = re.compile(r"\w")  # a line with a letter or digit: blank and brace-only lines are not counted as dropped
MAX_DIFF_BYTES = 32 * MIB  # a diff longer than this is not compared line by line: the work waits instead
MAX_WORDS = 2000  # simple commands of one check looked at (a declaration is at most 64 KiB anyway)


# -- L4: the files a check runs ------------------------------------------------------------------------------
def check_rules(checks: Sequence[Check], tree: Checkout, ref: str) -> list[Rule]:
    """Protected-path rules for the files `checks` (as the default branch `ref` declares them) run: the scripts their
    commands name (a program given by its path, `./ci.sh`; the script an interpreter runs, `sh ci.sh`, `python
    check.py`, `python -m tool`), when `ref` has a file there or has nothing there that looks like a file (a branch
    must not add it either), and what the tools they call read (TOOL_FILES: a Makefile for `make`, package.json for
    `npm`, conftest.py for `pytest`). The files a check only reads or tests (`grep x data.txt`, `pytest tests/`)
    are the work itself, not protected."""
    wanted: dict[str, tuple[str, bool]] = {}  # path -> (the command, anywhere)
    looks: dict[str, str] = {}  # script paths, checked against `ref` below
    for check in checks:
        for words in _commands(check.command)[:MAX_WORDS]:
            scripts, tools = _runs(words)
            for tool in tools:
                for path, anywhere in TOOL_FILES.get(tool, ()):
                    wanted.setdefault(path, (check.command, anywhere))
            for script in scripts:
                named = _as_path(script)
                if named is not None:
                    looks.setdefault(named, check.command)
    kinds = _kinds(tree, ref, list(looks))
    for path, command in looks.items():
        kind = kinds.get(path)
        if kind == "blob" or (kind is None and ("/" in path or "." in path)):
            wanted.setdefault(path, (command, False))
    return [Rule(path, CHECK.format(command=_short(command)), anywhere=anywhere)
            for path, (command, anywhere) in wanted.items()]


def _commands(command: str, depth: int = 0) -> list[list[str]]:
    """The simple commands of a shell command line, each as its words (split at `&&`, `;`, `|`…); the command line
    a shell is given with `-c` is split too, a few levels deep."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote: the shell would refuse it; its words are still looked at
        tokens = command.split()
    commands: list[list[str]] = [[]]
    for token in tokens:
        if token and set(token) <= _OPERATORS:
            commands.append([])
        else:
            commands[-1].append(token)
    found = []
    for words in filter(None, commands):
        found.append(words)
        at = _program_at(words)
        if depth < 3 and at < len(words) and posixpath.basename(words[at]) in _SHELLS:
            flag = next((i for i in range(at + 1, len(words)) if _inline(words[i])), None)
            if flag is not None and flag + 1 < len(words):
                found.extend(_commands(words[flag + 1], depth + 1))
    return found


def _program_at(words: list[str]) -> int:
    """Where the program of a simple command is: past `NAME=value` words and wrappers (`env`, `timeout 60`,
    `uv run`…), which run the words after them."""
    at = 0
    while at < len(words):
        word, name = words[at], posixpath.basename(words[at])
        if _ASSIGNMENT.match(word) or (at and words[at - 1] in ("env", "nice") and word.startswith("-")):
            at += 1
        elif name in _WRAPPERS:
            at += 2 if name == "timeout" else 1  # timeout's duration
        elif name in _RUNNERS and at + 1 < len(words) and words[at + 1] == "run":
            at += 2
        else:
            return at
    return at


def _runs(words: list[str]) -> tuple[list[str], list[str]]:
    """(the scripts a simple command runs from the repository, the tools it calls) as its words say."""
    at = _program_at(words)
    if at >= len(words):
        return [], []
    program = words[at]
    name = posixpath.basename(program)
    scripts = [program] if "/" in program else []  # ./ci.sh, scripts/test: run by their path
    tools = [name]
    args = words[at + 1:]
    if name in ("make", "gmake"):
        scripts += [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("-f", "--file", "--makefile")]
    if name in _SHELLS or _INTERPRETER.fullmatch(name):
        for i, arg in enumerate(args):
            if arg == "-c" or (name in _SHELLS and _inline(arg)):
                break  # inline code (a shell's is split by _commands)
            if arg == "-m" and i + 1 < len(args):
                module = args[i + 1]
                tools.append(module)  # python -m pytest
                if re.fullmatch(r"[\w.]+", module):
                    # pkg/tool.py or pkg/tool/__main__.py in the worktree come first (the current folder leads
                    # sys.path): a branch that adds `pytest.py` would replace pytest itself.
                    path = module.replace(".", "/")
                    scripts += [f"{path}.py", f"{path}/__main__.py"]
                break
            if not arg.startswith("-"):
                scripts.append(arg)  # sh ci.sh, python check.py, node test.js
                break
    return scripts, tools


def _as_path(word: str) -> str | None:
    """`word` as a path relative to the repository's root when it may name a file there, else None."""
    if not word or word.startswith(("-", "/", "~")) or "$" in word or "://" in word or "\n" in word:
        return None
    if _ASSIGNMENT.match(word) or any(c in word for c in "*?[`"):
        return None
    path = posixpath.normpath(word)
    if path in (".", "..") or path.startswith("../"):
        return None
    return path


def _inline(arg: str) -> bool:
    """Whether a shell's option word gives it a command line to run: `-c`, or `-c` among short flags (`-lc`)."""
    return arg.startswith("-") and not arg.startswith("--") and "c" in arg[1:]


def _kinds(tree: Checkout, ref: str, paths: list[str]) -> dict[str, str]:
    """path -> "blob", "tree" or another object type on `ref`; missing paths are left out (one batch-check)."""
    if not paths:
        return {}
    lines = _batch_check(tree, [f"{ref}:{p}" for p in paths])
    return {p: line.split()[1] for p, line in zip(paths, lines, strict=True) if not line.endswith(" missing")}


def _short(command: str) -> str:
    text = " ".join(command.split())
    return shown_path(text if len(text) <= 80 else text[:79] + "…")


# -- L5: a resolution that drops what landed ----------------------------------------------------------------
@dataclass
class Dropped:
    """Lines that landed on the default branch since the task's branch left it, which its landing removes."""

    default: str
    files: dict[str, int] = field(default_factory=dict)
    error: str | None = None
    tag: str = "conflict"

    def __bool__(self) -> bool:
        return bool(self.files) or self.error is not None

    def reason(self) -> str:
        if self.error is not None:
            return (f"Its conflict resolution could not be compared with what landed on '{self.default}' "
                    f"({self.error}), so it waits for a person.")
        total = sum(self.files.values())
        shown = [f"{shown_path(path)} ({count} line{'s' if count != 1 else ''})"
                 for path, count in sorted(self.files.items())[:SHOWN_FILES]]
        more = len(self.files) - SHOWN_FILES
        listed = ", ".join(shown) + (f" and {more} more file(s)" if more > 0 else "")
        return (f"Its conflict resolution drops {total} line{'s' if total != 1 else ''} that landed on "
                f"'{self.default}' since its branch left it: {listed}. A resolution keeps what both sides meant, "
                "so a person decides whether the landed work may be undone.")


def dropped_lines(tree: Checkout, default: str, base: str, head: str, forks: Iterable[str]) -> Dropped:
    """What landing `head` (onto `base`, the default branch's tip) removes of the lines the default branch added
    since `forks` (where the branch stood apart from it when the queue sent it back with a conflict; the oldest
    is used): per file, lines matched by content, blank and punctuation-only ones left out."""
    dropped = Dropped(default)
    known = [f for f in forks if f]
    if not known:
        return dropped
    try:
        fork = _oldest(tree, known)
        landed = _diff_lines(tree, "+", fork, base)
        if not landed:
            return dropped
        removed = _diff_lines(tree, "-", f"{base}...{head}")
    except (ServiceError, OSError) as error:
        dropped.error = str(error)
        return dropped
    for path, lines in removed.items():
        count = sum((lines & landed.get(path, Counter())).values())
        if count:
            dropped.files[path] = count
    return dropped


def _oldest(tree: Checkout, forks: list[str]) -> str:
    """The fork that every other one descends from (the first send-back's), else the first listed."""
    if len(forks) == 1:
        return forks[0]
    return tree.run("merge-base", "--octopus", *forks)


def _diff_lines(tree: Checkout, sign: str, *revisions: str) -> dict[str, Counter[str]]:
    """path -> the lines (stripped) a `git diff -U0` of `revisions` adds (`sign` "+") or removes ("-")."""
    out = _bounded(tree, "diff", "-U0", "--no-color", "--no-renames", "--no-ext-diff", "--no-textconv",
                   *revisions, "--")
    found: dict[str, Counter[str]] = {}
    old = new = ""
    for raw in out.decode("utf-8", "surrogateescape").split("\n"):
        if raw.startswith("--- "):
            old = raw[6:] if raw.startswith("--- a/") else ""
        elif raw.startswith("+++ "):
            new = raw[6:] if raw.startswith("+++ b/") else ""
        elif raw.startswith(sign) and not raw.startswith(sign * 3 + " ") and _MEANT.search(raw):
            path = new or old
            found.setdefault(path, Counter())[raw[1:].strip()] += 1
    return found


def _bounded(tree: Checkout, *args: str) -> bytes:
    """git's output, read up to MAX_DIFF_BYTES (the process is killed past it: a ServiceError says so)."""
    process = tree.popen(*args)
    assert process.stdout is not None and process.stderr is not None
    out = process.stdout.read(MAX_DIFF_BYTES + 1)
    if len(out) > MAX_DIFF_BYTES:
        process.kill()
        process.communicate()
        raise ServiceError(f"its diff is over {MAX_DIFF_BYTES // MIB} MiB")
    _, err = process.communicate()
    if process.returncode != 0:
        raise ServiceError(f"git {args[0]} failed in {tree.path}: {err.decode('utf-8', 'replace').strip()}")
    return out


# -- L6: size ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LandLimits:
    """What a landing may add before it waits for a person ([engine] land_max_* in config.toml)."""

    file_bytes: int = 10 * MIB
    binary_bytes: int = 1 * MIB
    total_bytes: int = 50 * MIB
    files: int = 2000

    @classmethod
    def from_engine(cls, engine: dict[str, Any]) -> LandLimits:
        return cls(file_bytes=int(engine.get("land_max_file", cls.file_bytes)),
                   binary_bytes=int(engine.get("land_max_binary", cls.binary_bytes)),
                   total_bytes=int(engine.get("land_max_total", cls.total_bytes)),
                   files=int(engine.get("land_max_files", cls.files)))


@dataclass
class Oversize:
    """Why a landing is too large to land unseen: files over the limits, and the totals."""

    limits: LandLimits
    big: list[tuple[str, int]] = field(default_factory=list)  # over limits.file_bytes
    binaries: list[tuple[str, int]] = field(default_factory=list)  # binary, over limits.binary_bytes
    files: int = 0
    total: int = 0
    error: str | None = None
    tag: str = "size"

    def __bool__(self) -> bool:
        return bool(self.big or self.binaries) or self.files > self.limits.files or \
            self.total > self.limits.total_bytes or self.error is not None

    def reason(self) -> str:
        if self.error is not None:
            return f"Its size could not be measured ({self.error}), so it waits for a person before it lands."
        said = [f"{shown_path(p)} is {_size(n)} (a file may add {_size(self.limits.file_bytes)})"
                for p, n in self.big[:SHOWN_FILES]]
        said += [f"{shown_path(p)} is a binary of {_size(n)} (a binary may add {_size(self.limits.binary_bytes)})"
                 for p, n in self.binaries[:SHOWN_FILES]]
        more = len(self.big) + len(self.binaries) - len(said)
        if more > 0:
            said.append(f"and {more} more such file(s)")
        if self.files > self.limits.files:
            said.append(f"it changes {self.files:,} files (at most {self.limits.files:,} land unseen)")
        if self.total > self.limits.total_bytes:
            said.append(f"it adds {_size(self.total)} in all (at most {_size(self.limits.total_bytes)} land unseen)")
        return (f"It is large: {'; '.join(said)}. Review what it adds before it lands; the limits are [engine] "
                "land_max_file, land_max_binary, land_max_total and land_max_files in config.toml.")


def oversize(tree: Checkout, base: str, head: str, limits: LandLimits,
             listed: Sequence[dict[str, str]] | None = None) -> Oversize:
    """What landing `head` onto `base` adds (`base...head`), measured against `limits`: the new blobs from `git diff
    --raw` (`listed`: Workspaces.changes read it already), their sizes from one `cat-file --batch-check`, and
    `--numstat` only for the files over the binary limit (is it a binary?). No blob is read."""
    found = Oversize(limits)
    try:
        entries = listed if listed is not None else tree.branch_changes(base, head)[0]
        found.files = len(entries)
        # The blob each path has after the landing, when it is new: added, changed, or renamed with changes.
        new = {e["path"]: e["sha"] for e in entries
               if e.get("status", "") in ("A", "M", "T", "R", "C") and e.get("sha", "").strip("0")
               and e.get("mode") != "160000" and e.get("old") != e.get("sha")}
        sizes = _sizes(tree, sorted(set(new.values())))
        over_binary: list[str] = []
        for path, sha in new.items():
            if sha not in sizes:
                raise ServiceError(f"git has no object {sha} for {shown_path(path)}")
            size = sizes[sha]
            found.total += size
            if size > limits.file_bytes:
                found.big.append((path, size))
            elif size > limits.binary_bytes:
                over_binary.append(path)
        for path in _binaries(tree, base, head, over_binary):
            found.binaries.append((path, sizes[new[path]]))
    except (ServiceError, OSError, ValueError, KeyError) as error:
        found.error = str(error)
    found.big.sort(key=lambda item: -item[1])
    found.binaries.sort(key=lambda item: -item[1])
    return found


def _sizes(tree: Checkout, shas: list[str]) -> dict[str, int]:
    """sha -> size of each object, in one `git cat-file --batch-check` (nothing is read but the headers)."""
    sizes: dict[str, int] = {}
    for line in _batch_check(tree, shas, "%(objectname) %(objectsize)"):
        sha, _, size = line.partition(" ")
        if size.isdigit():  # "<sha> missing" has none
            sizes[sha] = int(size)
    return sizes


def _binaries(tree: Checkout, base: str, head: str, paths: list[str]) -> list[str]:
    """Those of `paths` that git takes for binaries in `base...head` (numstat's `-  -`), in one command."""
    if not paths:
        return []
    spec = [f":(literal){p}" for p in paths] if len(paths) <= 200 else []  # else every file: the same answer
    out = tree.run_bytes("diff", "--numstat", "-z", "--no-renames", "--no-ext-diff", f"{base}...{head}", "--", *spec)
    wanted = set(paths)
    binary = []
    for record in out.split(b"\0"):
        added, _, rest = record.partition(b"\t")
        removed, _, path = rest.partition(b"\t")
        name = path.decode("utf-8", "surrogateescape")
        if added == b"-" and removed == b"-" and name in wanted:
            binary.append(name)
    return binary


def _batch_check(tree: Checkout, names: list[str], fmt: str = "%(objectname) %(objecttype) %(objectsize)") -> list[str]:
    """One line per name from `git cat-file --batch-check` ("<name> missing" when absent)."""
    names = [n for n in names if "\n" not in n]
    if not names:
        return []
    done = subprocess.run(["git", *SAFE_GIT, "cat-file", f"--batch-check={fmt}"], cwd=tree.path,
                          env=tree.environ(), input="".join(f"{n}\n" for n in names).encode("utf-8",
                                                                                             "surrogateescape"),
                          capture_output=True)
    if done.returncode != 0:
        raise ServiceError(f"git cat-file failed in {tree.path}: {done.stderr.decode('utf-8', 'replace').strip()}")
    return done.stdout.decode("utf-8", "surrogateescape").splitlines()


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1024 ** 3), ("MiB", MIB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


# -- generated folders (issue 35) -------------------------------------------------------------------------------
def generated_added(tree: Checkout, base: str, head: str,
                    listed: Sequence[dict[str, str]] | None = None) -> generated.Generated:
    """The generated folders (a `.venv`, `node_modules`, `dist`…) that landing `head` onto `base` adds and `base`
    does not have (engine/generated.py), from the diff `listed` (else read) and one `cat-file --batch-check`."""
    try:
        entries = listed if listed is not None else tree.branch_changes(base, head)[0]
    except (ServiceError, OSError) as error:
        return generated.Generated(error=str(error))

    def on_base(folders: list[str]) -> set[str]:
        lines = _batch_check(tree, [f"{base}:{folder}" for folder in folders], "%(objecttype)")
        return {folder for folder, line in zip(folders, lines, strict=True) if line == "tree"}
    return generated.generated_folders([e["path"] for e in entries if e.get("status") in ("A", "R", "C")], on_base)


# -- all together ----------------------------------------------------------------------------------------------
@dataclass
class Holds:
    """Every reason a landing waits for a person (falsy: none): the protected paths first, then the others."""

    parts: list[protected.Hold | Dropped | Oversize | generated.Generated] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any(self.parts)

    def reason(self) -> str:
        return " ".join(part.reason() for part in self.parts if part)

    def lines(self) -> list[tuple[str, str]]:
        """(tag, reason) of each part that holds, for the task's log."""
        return [(getattr(part, "tag", "protected"), part.reason()) for part in self.parts if part]

    def next_step(self, task_id: str, pr_url: str | None) -> str:
        return protected.Hold([]).next_step(task_id, pr_url)
