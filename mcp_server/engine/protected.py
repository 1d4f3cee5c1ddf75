"""Protected paths: files that act on later runs or on the person, so a task never lands them unreviewed.

Two uses, one list (RULES):
- **Landing** (`landing_hold`): a task whose diff changes a protected path waits in AWAITING_APPROVAL
  (a PR where the repo has a remote and gh works) with a reason naming the files, even when it did
  not ask for approval. `approve_task` lands it as any other approved task.
- **Later runs** (`planted_settings`): a run that starts from an existing task branch (a retry, a
  request_changes rerun, a takeover) must not be configured by what an earlier, unmerged run wrote.
  For the rules that configure a run (`runs=True`: agent CLI settings and git hooks), every path
  whose content in the worktree differs from the default branch is returned with the default's
  content, for the sandbox to mount over it; the claude adapter also stops reading project settings.

Paths are compared case-insensitively (macOS and Windows file systems are), git lists them with
`-z` (no quoting) and without rename detection (a renamed file is a deletion and an addition, both
listed), and a committed symlink is followed when it leads to another place inside the repository,
so `.claude -> conf/claude` makes `conf/claude/**` protected too.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..services.errors import ServiceError
from ..services.gitops import SAFE_GIT, Checkout, check_ref_name

AGENT = "agent CLI settings, hooks, commands or MCP servers, which later agent runs load"
GIT_HOOKS = "git hooks, which git runs on commit and merge (AgentQueue's own commits too)"
CI = "CI configuration, which runs with the repository's secrets"
DEV_ENV = "editor or shell settings that run commands when a person opens the folder"
INSTRUCTIONS = "standing instructions that every later agent reads"
WORKTREE_SETUP = "AgentQueue's worktree setup, copied files and checks, which act on every later task"


@dataclass(frozen=True)
class Rule:
    """A protected file or folder (a folder covers everything under it, and the name itself as a file or link)."""

    path: str  # relative to the repository root, '/'-separated
    why: str
    anywhere: bool = False  # also at any depth (tools read it in subfolders: direnv, nested .claude, VS Code)
    runs: bool = False  # configures an agent run or the git commands in it: masked for reruns (planted_settings)

    @property
    def parts(self) -> tuple[str, ...]:
        return _parts(self.path)


# The one list. Decisions (docs/design.md "Protected paths"):
# - instruction files are protected for landing but not masked in reruns: they steer the model, which stays
#   under the policy and the sandbox, and masking them would hide a task's own edit from its rerun;
# - CI and editor files do not configure an agent run, so reruns see the task's own work on them;
# - `.git/hooks` cannot be carried by a branch (git refuses `.git` in a path); what an agent writes into the
#   shared `.git` at run time is the sandbox's to stop. The repository's own `core.hooksPath`, when it points
#   inside the worktree, is added to these rules for that repository (see `_hooks_path`).
RULES: tuple[Rule, ...] = (
    Rule(".claude", AGENT, anywhere=True, runs=True),
    Rule(".mcp.json", AGENT, anywhere=True, runs=True),
    Rule(".codex", AGENT, anywhere=True, runs=True),
    Rule(".gemini", AGENT, anywhere=True, runs=True),
    Rule(".agents/skills", AGENT, anywhere=True, runs=True),  # skills of Codex and the open agent-skills standard
    Rule(".cursor", AGENT, anywhere=True),
    Rule(".githooks", GIT_HOOKS, runs=True),
    Rule(".husky", GIT_HOOKS, runs=True),
    Rule(".pre-commit-config.yaml", GIT_HOOKS, runs=True),
    Rule(".lefthook", GIT_HOOKS, runs=True),
    Rule("lefthook.yml", GIT_HOOKS, runs=True),
    Rule(".lefthook.yml", GIT_HOOKS, runs=True),
    Rule("lefthook-local.yml", GIT_HOOKS, runs=True),
    Rule(".github/workflows", CI),
    Rule(".github/actions", CI),
    Rule(".gitlab-ci.yml", CI),
    Rule(".gitlab/ci", CI),
    Rule(".circleci", CI),
    Rule(".travis.yml", CI),
    Rule("azure-pipelines.yml", CI),
    Rule(".azure-pipelines", CI),
    Rule("Jenkinsfile", CI),
    Rule(".buildkite", CI),
    Rule("bitbucket-pipelines.yml", CI),
    Rule(".drone.yml", CI),
    Rule(".woodpecker", CI),
    Rule(".woodpecker.yml", CI),
    Rule(".forgejo/workflows", CI),
    Rule(".gitea/workflows", CI),
    Rule("appveyor.yml", CI),
    Rule(".appveyor.yml", CI),
    Rule(".envrc", DEV_ENV, anywhere=True),
    Rule(".vscode/tasks.json", DEV_ENV, anywhere=True),
    Rule(".vscode/settings.json", DEV_ENV, anywhere=True),
    Rule(".vscode/launch.json", DEV_ENV, anywhere=True),
    Rule(".vscode/mcp.json", DEV_ENV, anywhere=True),
    Rule(".devcontainer", DEV_ENV),
    Rule(".devcontainer.json", DEV_ENV),
    Rule("CLAUDE.md", INSTRUCTIONS, anywhere=True),
    Rule("CLAUDE.local.md", INSTRUCTIONS, anywhere=True),
    Rule("AGENTS.md", INSTRUCTIONS, anywhere=True),
    Rule("GEMINI.md", INSTRUCTIONS, anywhere=True),
    Rule(".agentqueue.toml", WORKTREE_SETUP),
    Rule(".worktreeinclude", WORKTREE_SETUP),
)

SHOWN_FILES = 10  # files named in a task's reason; the rest are counted
ALIAS_ROUNDS = 4  # symlinks to symlinks: enough for real repos, bounded for hostile ones
_CONTENT_MODES = ("100644", "100755", "120000")  # files and symlinks; 160000 is a submodule
MAX_COMPARED_BYTES = 4 * 1024 * 1024  # a bigger planted file differs from the default by definition (not read)


def shown_path(path: str) -> str:
    """A file name as text for a reason or a log line: control characters escaped, at most 200 characters."""
    text = path if path.isprintable() else path.encode("unicode_escape", "backslashreplace").decode("ascii")
    return text if len(text) <= 200 else text[:199] + "…"


def _parts(path: str) -> tuple[str, ...]:
    return tuple(p.casefold() for p in path.replace("\\", "/").split("/") if p not in ("", "."))


def rule_for(path: str, rules: Sequence[Rule] = RULES) -> Rule | None:
    """The first rule that protects `path` (a path relative to the repository root), if any."""
    parts = _parts(path)
    for rule in rules:
        want = rule.parts
        starts = range(len(parts) - len(want) + 1) if rule.anywhere else range(1 if len(parts) >= len(want) else 0)
        if any(parts[i:i + len(want)] == want for i in starts):
            return rule
    return None


def protected_changes(files: Iterable[str], rules: Sequence[Rule] = RULES) -> list[str]:
    """The files of `files` (paths a landing would change) that a rule protects, sorted."""
    return sorted({f for f in files if rule_for(f, rules) is not None})


# -- landing -----------------------------------------------------------------------------------------
@dataclass
class Hold:
    """Why a task waits for a person before it lands: the protected files it changes (or why they are unknown)."""

    files: list[str]
    rules: Sequence[Rule] = field(default=RULES, repr=False)
    error: str | None = None  # git could not list the changes: held, because nothing was checked

    def __bool__(self) -> bool:
        return bool(self.files) or self.error is not None

    def reason(self) -> str:
        if self.error is not None:
            return (f"Its changes could not be checked for protected paths ({self.error}), so it waits for a person "
                    "before it lands.")
        shown = [f"{shown_path(f)} ({self._why(f)})" for f in self.files[:SHOWN_FILES]]
        more = len(self.files) - SHOWN_FILES
        listed = "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
        return (f"It changes protected paths: {listed}. These act on later agent runs or on the people who open the "
                "repository, so AgentQueue never lands them without a person's approval.")

    def next_step(self, task_id: str, pr_url: str | None) -> str:
        if pr_url:  # the forge merges it; the engine sees the merge and completes the task
            return (f"Review its pull request {pr_url} and merge it there (the task then completes), or "
                    f"request_changes {task_id} to send it back.")
        return (f"Review the diff (get_task_diff {task_id}), then approve_task {task_id} to land it, or "
                f"request_changes {task_id} to send it back.")

    def _why(self, path: str) -> str:
        rule = rule_for(path, self.rules)
        return rule.why if rule else "protected"


def landing_rules(worktree: Tree, hooks: Callable[[], str] | None = None) -> list[Rule]:
    """The rules a landing from `worktree` is checked against (RULES, the repository's hooks folder, committed
    aliases); read apart from `landing_hold` so a caller can read them beside other reads of the finished run.
    `hooks`: gives the hooks folder as `git rev-parse --git-path hooks` printed it in `worktree`, when the caller
    asks git for it in another command (called after this listing ran); None: core.hooksPath is read here."""
    return _rules_for(_checkout(worktree), RULES, untracked=False, hooks_folder=hooks)


def landing_hold(worktree: Tree, default_ref: str, branch: str, changes: Iterable[str] | None = None,
                 rules: Sequence[Rule] | None = None, also: Sequence[Rule] = ()) -> Hold:
    """The protected files that landing `branch` on `default_ref` would change (falsy when there are none).
    `changes`: those paths (both sides of a rename), and `rules`: landing_rules(worktree), when the caller read
    them already (after the branch's last commit); `also`: rules of this landing's own (the files its checks run).

    Never raises: when git cannot list the changes the hold says so, and the task waits for a person."""
    try:
        rules = [*(rules if rules is not None else landing_rules(worktree)), *also]
        if changes is None:
            changes = landing_changes(worktree, default_ref, branch)
        return Hold(protected_changes(changes, rules), rules)
    except (ServiceError, OSError) as error:
        return Hold([], error=str(error))


def landing_changes(worktree: Tree, default_ref: str, branch: str) -> list[str]:
    """Every path the task branch changes since it left the default branch (both sides of a rename)."""
    base, head = check_ref_name(default_ref), check_ref_name(branch)
    out = _git(_checkout(worktree), "diff", "--name-only", "-z", "--no-renames", "--no-ext-diff", "--no-textconv",
               f"{base}...{head}", "--")
    return [p for p in out.decode("utf-8", "surrogateescape").split("\0") if p]


# -- later runs --------------------------------------------------------------------------------------
def planted_settings(workspace_path: Tree, default_ref: str) -> dict[str, bytes | None]:
    """Run-configuring paths whose content in the worktree (committed, uncommitted, untracked or ignored)
    differs from the default branch, each with the default branch's content.

    None means the default branch has no such file (or has a symlink there): the run must see nothing at that
    path. A symlink in the worktree counts by its target text, and a path that the worktree reaches through a
    symlinked folder differs by definition. Keys are '/'-separated paths relative to the worktree."""
    tree = _checkout(workspace_path)
    root = tree.path
    ref = check_ref_name(default_ref)
    rules = _rules_for(tree, [r for r in RULES if r.runs], untracked=True)
    default = _default_entries(tree, ref, rules)
    blobs = _blobs(tree, [sha for mode, sha in default.values() if mode in _CONTENT_MODES])
    planted: dict[str, bytes | None] = {}
    # git lists no FIFO or device: the rules' own paths are looked at directly too.
    direct = {r.path for r in rules if os.path.lexists(root / r.path) and (
        os.path.islink(root / r.path) or not os.path.isdir(root / r.path))}
    for path in sorted(_listed(tree, rules, untracked=True) | set(default) | direct):
        if rule_for(path, rules) is None:  # the pathspecs are a first cut; the rules decide
            continue
        mode, sha = default.get(path, ("", ""))
        theirs: tuple[str, bytes | None] | None = None
        if mode in _CONTENT_MODES:
            theirs = ("link" if mode == "120000" else "file", blobs.get(sha))
        elif mode:
            theirs = ("other", None)  # a submodule: nothing the worktree can match
        if _worktree_entry(root, path) != theirs:
            # The run sees the default's file, or nothing where the default has none (or has a link there).
            planted[path] = theirs[1] if theirs is not None and theirs[0] == "file" else None
    return planted


def planted_note(planted: dict[str, bytes | None], agent_type: str) -> str:
    """The task log's line about a run that starts with planted settings (what is done about them)."""
    names = ", ".join(shown_path(p) for p in list(planted)[:SHOWN_FILES]) + (f" and {len(planted) - SHOWN_FILES} more"
                                                       if len(planted) > SHOWN_FILES else "")
    what = ("Claude Code runs with --setting-sources user: the project's settings, hooks and CLAUDE.md are not "
            "loaded" if agent_type == "claude-code" else "only the sandbox keeps the agent from loading them")
    return (f"[protected] run-configuring files differ from the default branch (an unmerged earlier run wrote "
            f"them): {names}; {what}.")


# -- git and the file system ----------------------------------------------------------------------------
Tree = Path | Checkout  # a worktree as the daemon's git sees it (Workspaces.tree), or a plain checkout's path


def _checkout(where: Tree) -> Checkout:
    return where if isinstance(where, Checkout) else Checkout(where, known=True)


def _git(tree: Checkout, *args: str, safe: bool = True) -> bytes:
    """git's output; `safe=False` only to read the repository's own setting that SAFE_GIT would override."""
    return _output(_start(tree, *args, safe=safe), tree.path, args[0])


def _start(tree: Checkout, *args: str, safe: bool = True) -> subprocess.Popen[bytes]:
    """A git command started, to be read by `_output` (so two reads can run at once)."""
    return tree.popen(*args, safe=safe)


def _output(process: subprocess.Popen[bytes], cwd: Path, command: str) -> bytes:
    out, err = process.communicate()
    if process.returncode != 0:
        raise ServiceError(f"git {command} failed in {cwd}: {err.decode('utf-8', 'replace').strip()}")
    return out


def _listed(root: Checkout, rules: Sequence[Rule], untracked: bool) -> set[str]:
    """The protected paths git knows in the worktree: its index, and with `untracked` the files it does not track.

    Every rule's path at the root is listed with ignored files too (an ignored `.claude/settings.local.json` is
    still loaded); the deeper copies of `anywhere` rules skip ignored folders, so a run's start never walks
    node_modules."""
    listing = ["ls-files", "-z", "--cached"] + (["--others"] if untracked else [])
    at_root = [f":(literal,icase){rule.path}" for rule in rules]  # a literal path covers everything under it
    deeper = [spec for rule in rules if rule.anywhere  # '*/**/': one folder or more; no rule holds a glob
              for spec in (f":(glob,icase)*/**/{rule.path}", f":(glob,icase)*/**/{rule.path}/**")]
    if not untracked:  # the index only: one listing for both kinds (ignored files are not in it anyway)
        out = _git(root, *listing, "--", *at_root, *deeper)
    else:
        out = _git(root, *listing, "--", *at_root)
    if deeper and untracked:
        out += b"\0" + _git(root, *listing, "--exclude-standard", "--", *deeper)
    return {p for p in out.decode("utf-8", "surrogateescape").split("\0") if p}


def _default_entries(root: Checkout, ref: str, rules: Sequence[Rule]) -> dict[str, tuple[str, str]]:
    """path -> (mode, object sha) of the protected paths on the default branch (ls-tree takes no pathspec magic,
    so the whole tree is listed and the rules filter it)."""
    out = _git(root, "ls-tree", "-r", "-z", "--full-tree", ref)
    entries = {}
    for record in out.decode("utf-8", "surrogateescape").split("\0"):
        if record:
            meta, path = record.split("\t", 1)
            mode, _kind, sha = meta.split()
            if rule_for(path, rules) is not None:
                entries[path] = (mode, sha)
    return entries


def _blobs(root: Checkout, shas: list[str]) -> dict[str, bytes]:
    """The content of blobs, read in one `git cat-file --batch`."""
    if not shas:
        return {}
    done = subprocess.run(["git", *SAFE_GIT, "cat-file", "--batch"], cwd=root.path, env=root.environ(),
                          input="".join(f"{s}\n" for s in shas).encode(), capture_output=True)
    if done.returncode != 0:
        raise ServiceError(f"git cat-file failed in {root.path}: {done.stderr.decode('utf-8', 'replace').strip()}")
    out, blobs, at = done.stdout, {}, 0
    while at < len(out):
        header_end = out.index(b"\n", at)
        header = out[at:header_end].split()
        if len(header) < 3:  # "<sha> missing"
            at = header_end + 1
            continue
        size = int(header[2])
        blobs[header[0].decode()] = out[header_end + 1:header_end + 1 + size]
        at = header_end + 1 + size + 1
    return blobs


def _worktree_entry(root: Path, rel: str) -> tuple[str, bytes | None] | None:
    """What the worktree holds at `rel`, without following symlinks: ("file", bytes), ("link", target),
    ("other", None) for a folder, a FIFO, a path through a symlink or a file too big to compare; None if absent."""
    current = root
    parts = rel.split("/")
    for depth, part in enumerate(parts):
        current = current / part
        try:
            info = os.lstat(current)
        except (FileNotFoundError, NotADirectoryError):
            return None
        last = depth == len(parts) - 1
        if stat.S_ISLNK(info.st_mode):
            return ("link", os.fsencode(os.readlink(current))) if last else ("other", None)
        if not last and not stat.S_ISDIR(info.st_mode):
            return None
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_COMPARED_BYTES:
        return ("other", None)  # never open a FIFO or a device: the read could hang or never end
    fd = os.open(current, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as handle:
        return ("file", handle.read(MAX_COMPARED_BYTES + 1))


def _rules_for(tree: Checkout, base: Sequence[Rule], untracked: bool,
               hooks_folder: Callable[[], str] | None = None) -> list[Rule]:
    """`base`, the repository's own hooks folder (core.hooksPath inside it), and where protected symlinks lead
    (committed ones, and with `untracked` those not committed too). `hooks_folder`: see landing_rules."""
    rules = list(base)
    # core.hooksPath is read while the first listing runs (two processes at once), or by the caller's command; a
    # hooks folder it names is then listed on its own and added to that listing (pathspecs are a union, so this is
    # the listing of all the rules).
    runs = any(r.runs for r in base)
    root = tree.path
    reading = _start(tree, "config", "--get", "core.hooksPath", safe=False) if runs and not hooks_folder else None
    try:
        listed = _listed(tree, rules, untracked)
    finally:
        hooks = _hooks_path(root, reading) if reading is not None else None  # read (and reaped) either way
    if runs and hooks_folder:
        hooks = _inside(root, hooks_folder())
    if hooks:
        rules.append(Rule(hooks, GIT_HOOKS, runs=True))
        listed |= _listed(tree, rules[-1:], untracked)
    real_root = Path(os.path.realpath(root))
    for round_ in range(ALIAS_ROUNDS):
        found = []
        known = {r.parts for r in rules}
        for path in listed if round_ == 0 else _listed(tree, rules, untracked):
            link = root / path
            if not link.is_symlink() or (rule := rule_for(path, rules)) is None:
                continue
            target = Path(os.path.realpath(link))  # never raises: a symlink loop resolves to some path
            if not target.is_relative_to(real_root) or Path(os.path.realpath(link.parent)).is_relative_to(target):
                continue  # outside the repository (the link itself is what counts), or an ancestor (everything)
            alias = target.relative_to(real_root).as_posix()
            if _parts(alias) and _parts(alias)[0] != ".git" and _parts(alias) not in known:
                found.append(Rule(alias, rule.why, runs=rule.runs))
                known.add(_parts(alias))
        if not found:
            break
        rules += found
    return rules


def _hooks_path(root: Path, reading: subprocess.Popen[bytes]) -> str | None:
    """core.hooksPath (`reading`: its `git config --get`, started) when it names a folder inside the worktree
    (git resolves a relative one from its root)."""
    try:
        value = _output(reading, root, "config").decode("utf-8", "surrogateescape").strip()
    except ServiceError:
        return None  # unset
    if not value or value.startswith("~"):
        return None
    return _inside(root, value)


def _inside(root: Path, value: str) -> str | None:
    """A hooks folder (absolute, or relative to the worktree's root as git resolves it) as a path relative to
    `root`, when it is inside it and not the root itself."""
    if not value:
        return None
    path = Path(value) if os.path.isabs(value) else root / value
    try:
        rel = Path(os.path.normpath(path)).relative_to(os.path.normpath(root))
    except ValueError:
        return None  # outside the repository: no branch can carry it
    return rel.as_posix() if rel.parts else None
