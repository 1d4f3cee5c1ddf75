"""Real git repositories for the repo / git / jail tests: seeded checkouts, a bare `origin`, a project.

Everything runs the real `git` binary. The tests never depend on the machine's git configuration:
`git_env` points HOME at an empty directory and turns off the system config, and every commit the
helpers make carries an explicit identity. Commits AgentQueue makes itself use whatever identity git
has (none here), i.e. its fallback.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentqueue.services import Services

from .conftest import db_snapshot, fail

AUTHOR = ("Test Author", "author@example.test")
IDENTITY = ("-c", f"user.name={AUTHOR[0]}", "-c", f"user.email={AUTHOR[1]}")


def git(cwd: Path | str, *args: str, check: bool = True) -> str:
    """Run git in `cwd` with a fixed identity; returns stdout without the trailing newline."""
    done = subprocess.run(["git", *IDENTITY, *args], cwd=cwd, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed in {cwd}: {done.stderr}")
    return done.stdout.rstrip("\n")


def commit_file(repo: Path, name: str, content: str, message: str | None = None) -> str:
    """Write a file, commit it, return the new HEAD sha."""
    target = repo / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    git(repo, "add", "--", name)
    git(repo, "commit", "-q", "-m", message or f"edit {name}")
    return git(repo, "rev-parse", "HEAD")


def make_repo(path: Path, branch: str = "main", files: dict[str, str] | None = None) -> Path:
    """A non-bare repo on `branch` with one commit per file (default: a README and app.py)."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", branch)
    git(path, "config", "user.name", AUTHOR[0])  # repo-local: AgentQueue's own commits here use it too
    git(path, "config", "user.email", AUTHOR[1])
    for name, content in (files or {"README.md": "# demo\n", "app.py": "print('hello')\n"}).items():
        commit_file(path, name, content, f"add {name}")
    return path


def make_origin(path: Path, branch: str = "main", extra_branches: dict[str, dict[str, str]] | None = None) -> Path:
    """A bare repo at `path` (HEAD on `branch`), seeded from a scratch checkout next to it."""
    seed = make_repo(path.with_name(path.name.removesuffix(".git") + "-seed"), branch)
    for name, files in (extra_branches or {}).items():
        git(seed, "switch", "-q", "-c", name, branch)
        for file, content in files.items():
            commit_file(seed, file, content)
        git(seed, "switch", "-q", branch)
    git(path.parent, "clone", "-q", "--bare", str(seed), str(path))
    return path


def sha(repo: Path, ref: str) -> str | None:
    """The commit `ref` names in the checkout `repo`, or None."""
    out = git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    return out or None


def bare_sha(git_dir: Path, ref: str) -> str | None:
    """The commit `ref` names in a bare repo (`git --git-dir <git_dir> rev-parse`)."""
    done = subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                          capture_output=True, text=True)
    return done.stdout.strip() or None


def current_branch(repo: Path) -> str:
    return git(repo, "symbolic-ref", "--short", "HEAD")


def porcelain(repo: Path) -> str:
    return git(repo, "status", "--porcelain", "--untracked-files=all")


def repo_state(repo: Path) -> str:
    """Every ref, where HEAD points, the working tree status and in-progress operations: for 'nothing changed'."""
    git_dir = Path(git(repo, "rev-parse", "--absolute-git-dir"))
    markers = sorted(p.name for p in git_dir.iterdir() if p.name in {"MERGE_HEAD", "REBASE_HEAD", "CHERRY_PICK_HEAD"})
    return "\n".join([
        git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
        git(repo, "symbolic-ref", "-q", "HEAD", check=False) or git(repo, "rev-parse", "HEAD"),
        porcelain(repo), " ".join(markers),
    ])


def assert_clear(text: str, tool: str, *needles: str) -> None:
    """A refusal that says what was wrong: not bare, not an internal error, naming every needle."""
    detail = re.sub(rf"^Error executing tool {tool}:?", "", text).strip()
    assert len(detail) >= 10, f"bare error: {text!r}"
    assert "internal error" not in text.lower(), text
    for needle in needles:
        assert needle.lower() in text.lower(), f"{needle!r} not in {text!r}"


async def refused(client, services: Services, tool: str, *needles: str, **args) -> str:
    """A call that must fail cleanly (see assert_clear) and leave the database as it was."""
    before = db_snapshot(services)
    text = await fail(client, tool, **args)
    assert_clear(text, tool, *needles)
    assert db_snapshot(services) == before, f"{tool} changed the database although it was refused"
    return text


def _isolate(monkeypatch: pytest.MonkeyPatch, user_home: Path) -> None:
    user_home.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("HOME", str(user_home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM", "GIT_DIR", "GIT_WORK_TREE",
                "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL",
                "AGENTQUEUE_GH_BIN", "AGENTQUEUE_RUN_COMMAND"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def git_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No user or system git config and no identity from the environment: only what each repo sets."""
    _isolate(monkeypatch, tmp_path / "user-home")
    return tmp_path / "user-home"


@pytest.fixture(scope="session")
def git_templates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built once per run and copied into each test: `origin.git` (main + develop), `origin-seed`, `mine`."""
    root = tmp_path_factory.mktemp("git-templates")
    with pytest.MonkeyPatch.context() as monkeypatch:
        _isolate(monkeypatch, root / "user-home")
        make_origin(root / "origin.git", extra_branches={"develop": {"dev.txt": "dev\n"}})
        make_repo(root / "mine")
    return root


@dataclass
class World:
    """Project 'proj' with three repos: `app` cloned from the bare `origin` (the project's first repo), `lib`
    made by init (no remote) and `mine` linked in place (repo-local identity, no remote). `seed` is a
    checkout of origin that is not registered."""

    project: str
    workspace: Path
    origin: Path
    app: Path
    lib: Path
    mine: Path
    seed: Path
    tmp: Path


@pytest.fixture
def world(services: Services, tmp_path: Path, git_env: Path, git_templates: Path) -> World:
    for name in ("origin.git", "origin-seed", "mine"):
        shutil.copytree(git_templates / name, tmp_path / name, symlinks=True)
    project = services.projects.create("Proj")
    app = services.repos.add(project.id, "clone", url=str(tmp_path / "origin.git"), name="app")
    lib = services.repos.add(project.id, "init", name="lib")
    linked = services.repos.add(project.id, "link", path=str(tmp_path / "mine"), name="mine")
    return World(project=project.id, workspace=Path(project.workspace), origin=tmp_path / "origin.git",
                 app=Path(app.checkout_path), lib=Path(lib.checkout_path), mine=Path(linked.checkout_path),
                 seed=tmp_path / "origin-seed", tmp=tmp_path)


def on_main(services: Services, name: str) -> str | None:
    """A file's content on the default branch (main) of the project's repo `app`, or None when it is not there."""
    repo = services.repos.get("app").checkout_path
    done = subprocess.run(["git", "show", f"main:{name}"], cwd=repo, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None
