"""`agentqueue install --skill`: the skill that teaches an agent `agentqueue task …` (agent_skill.md), added to a
repository or to the person's own skills, for Claude Code (`.claude/skills`) and for Codex and the other CLIs of
the open agent-skills standard (`.agents/skills`).

A person's choice only: inside an engine run the command refuses, and the walls hold whatever it says (the
sandbox shows the person's skill folders read-only; `.claude/` and `.agents/skills` in a repository are protected
paths, so a run's change to them waits for a person's approval and never configures a rerun).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

from .output import CliError

NAME = "agentqueue"
SOURCE = Path(__file__).with_name("agent_skill.md")
# Where each kind of CLI looks, under a repository or the person's home.
FOLDERS = ((".claude/skills", "Claude Code"), (".agents/skills", "Codex and other agent-skills CLIs"))


def targets(repo: str | None, user: bool) -> tuple[Path, list[tuple[Path, str]]]:
    """(the root, [(SKILL.md path, which CLIs read it)]); the root is the repo's top (default: the current folder's
    git repository) or the person's home."""
    if user:
        root = Path.home()
    else:
        root = _repo_root(Path(repo) if repo else Path.cwd(), given=repo is not None)
    return root, [(root / folder / NAME / "SKILL.md", who) for folder, who in FOLDERS]


def _repo_root(path: Path, given: bool) -> Path:
    if not path.is_dir():
        raise CliError(f"{path} is not a folder. Pass --repo with a repository's folder, or --user.")
    done = subprocess.run(["git", "-C", str(path), "rev-parse", "--show-toplevel"], capture_output=True, text=True,
                          timeout=30)
    if done.returncode == 0 and done.stdout.strip():
        return Path(done.stdout.strip())
    if given:
        return path.resolve()  # a folder that is not (yet) a git repository: the person named it
    raise CliError(f"{path} is not inside a git repository. Pass --repo PATH for a repository, or --user for "
                   "your own skills (~/.claude/skills, ~/.agents/skills).")


def install(repo: str | None, user: bool, dry_run: bool = False, remove: bool = False) -> str:
    """Add (or with `remove` take out) the skill; returns what it did, a line per file, and the next step."""
    if os.environ.get("AGENTQUEUE_TASK_ID"):
        raise CliError("this is an AgentQueue run: skills are installed by a person, from their own terminal.")
    root, files = targets(repo, user)
    if not user:  # a repository's own links are its author's, not the person's: never written through
        for path, _ in files:
            _refuse_links(root, path)
    text = SOURCE.read_text(encoding="utf-8")
    lines = []
    for path, who in files:
        lines.append(_remove(path, who, dry_run) if remove else _write(path, who, text, dry_run))
    if not remove and not user and not dry_run:
        lines.append(f"Commit them in {root}: task worktrees are made from the default branch. A change an agent "
                     "makes to them waits for your approval (they are protected paths).")
    return "\n".join(lines)


def _refuse_links(root: Path, path: Path) -> None:
    """A committed `.claude/skills -> ~/.ssh` (or a linked SKILL.md) would send the write outside the repository."""
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            raise CliError(f"{current} is a symbolic link (to {os.readlink(current)}): AgentQueue never writes a "
                           "skill through a link a repository carries. Nothing was changed. Remove the link, or "
                           "install with --user.")


def _write(path: Path, who: str, text: str, dry_run: bool) -> str:
    try:
        before = path.read_text(encoding="utf-8") if path.is_file() else None
    except OSError:
        before = None
    if before == text:
        return f"Unchanged: {path} ({who})."
    verb = "Would update" if dry_run and before is not None else "Would add" if dry_run else \
        "Updated" if before is not None else "Added"
    if not dry_run:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        except OSError as error:
            raise CliError(f"could not write {path}: {error.strerror or error}.") from None
    return f"{verb} the AgentQueue skill: {path} ({who})."


def _remove(path: Path, who: str, dry_run: bool) -> str:
    if not path.exists():
        return f"Not there: {path} ({who})."
    if dry_run:
        return f"Would remove {path} ({who})."
    try:
        path.unlink()
    except OSError as error:
        raise CliError(f"could not remove {path}: {error.strerror or error}.") from None
    with contextlib.suppress(OSError):
        path.parent.rmdir()  # only when nothing else is in the skill's folder
    return f"Removed {path} ({who})."
