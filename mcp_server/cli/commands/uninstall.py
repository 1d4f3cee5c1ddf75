"""`agentqueue uninstall [--yes] [--purge]`: take AgentQueue out of the user's clients and repos.

It removes our entry from every client config that has one, stops the daemon, removes our
worktrees (under $AGENTQUEUE_HOME/worktrees) from the users' repos and deletes the task branches
(`<task_id>/<slug>`) of tasks we know. Never another branch, never a file of the user's checkout.
A task branch whose commits are not in its repo's default branch is kept (its work exists nowhere
else) unless --purge, which also deletes the data directory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ... import paths
from ...visible import visible
from ..output import CliError, duration
from ..parser import add_command

if TYPE_CHECKING:
    import subprocess

    from ..client_configs import ClientConfig


def register(sub: argparse._SubParsersAction) -> None:
    command = add_command(
        sub, "uninstall", "remove AgentQueue from every client, stop it, prune its worktrees and branches", run,
        "Remove our entry from every client config, stop the daemon, remove our worktrees and the "
        "task branches (<task_id>/<slug>) of known tasks from your repos. Branches with work not in "
        "the default branch, and the data directory, are kept unless --purge.")
    command.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    command.add_argument("--purge", action="store_true",
                         help="also delete unmerged task branches and the data directory")


def run(args: argparse.Namespace, home: Path) -> int:
    return uninstall(home, yes=args.yes, purge=args.purge)


@dataclass
class RepoPlan:
    repo_id: str
    checkout: Path
    default_branch: str
    worktrees: list[Path] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)    # task branches whose work is in the default branch
    unmerged: list[str] = field(default_factory=list)  # task branches with commits found nowhere else


def _git(checkout: Path, *args: str) -> subprocess.CompletedProcess[str]:
    import subprocess

    return subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=60)


def _known_branches(home: Path) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(repos, task branches) from the store, read-only; empty when there is no store."""
    import sqlite3

    db = paths.db_path(home)
    if not db.exists():
        return [], []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    conn.row_factory = sqlite3.Row
    try:
        repos = [dict(r) for r in conn.execute("SELECT id, checkout_path, default_branch FROM repos ORDER BY id")]
        tasks = [dict(r) for r in conn.execute(
            "SELECT id, repo_id, branch FROM tasks WHERE branch IS NOT NULL AND repo_id IS NOT NULL ORDER BY id")]
    finally:
        conn.close()
    return repos, tasks


def plan_repos(home: Path) -> list[RepoPlan]:
    repos, tasks = _known_branches(home)
    ours = (home / "worktrees").resolve()
    plans = []
    for repo in repos:
        checkout = Path(repo["checkout_path"])
        if not (checkout / ".git").exists():
            continue
        plan = RepoPlan(repo["id"], checkout, repo["default_branch"])
        listed = _git(checkout, "worktree", "list", "--porcelain")
        for line in listed.stdout.splitlines():
            if line.startswith("worktree "):
                path = Path(line.removeprefix("worktree ")).resolve()
                if path.is_relative_to(ours):
                    plan.worktrees.append(path)
        for task in tasks:
            branch = task["branch"]
            # Only a branch we named for one of our tasks: `<task_id>/<slug>`.
            if task["repo_id"] != repo["id"] or not branch.startswith(f"{task['id']}/"):
                continue
            if _git(checkout, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}").returncode != 0:
                continue
            merged = _git(checkout, "merge-base", "--is-ancestor", f"refs/heads/{branch}",
                          f"refs/heads/{plan.default_branch}").returncode == 0
            (plan.merged if merged else plan.unmerged).append(branch)
        if plan.worktrees or plan.merged or plan.unmerged:
            plans.append(plan)
    return plans


def _show_plan(home: Path, configs: list[ClientConfig], daemon: dict[str, Any] | None, running: list[dict[str, Any]],
               plans: list[RepoPlan], purge: bool) -> None:
    """What uninstall will do, printed before it asks."""
    print("agentqueue uninstall will:")
    if configs:
        for config in configs:
            print(f"  - remove the AgentQueue entry from {config.client} ({config.path})")
    else:
        print("  - (no client config has an AgentQueue entry)")
    if daemon is not None:
        interrupt = f", interrupting {len(running)} running agent(s)" if running else ""
        print(f"  - stop the daemon (pid {daemon.get('pid')}){interrupt}")
        for row in running:
            print(visible(f"      {row['agent_id']}: {row['task_id']} ({row['status']}, {duration(row['elapsed_s'])})"))
    for plan in plans:
        if plan.worktrees:
            print(f"  - remove {len(plan.worktrees)} worktree(s) of repo {plan.repo_id} ({plan.checkout})")
        if plan.merged:
            print(visible(f"  - delete {len(plan.merged)} task branch(es) of {plan.repo_id} already in "
                          f"{plan.default_branch}: " + ", ".join(plan.merged)))
        if plan.unmerged:
            verb = "delete" if purge else "keep"
            print(visible(f"  - {verb} {len(plan.unmerged)} task branch(es) of {plan.repo_id} with work not in "
                          f"{plan.default_branch}: " + ", ".join(plan.unmerged)
                          + ("" if purge else "  (--purge deletes them)")))
    if purge:
        print(f"  - DELETE the data directory {home} (database, logs, notes, config, workspaces)")
    else:
        print(f"  - keep the data directory {home} (database, logs, notes, config; --purge deletes it)")


def uninstall(home: Path, yes: bool = False, purge: bool = False) -> int:
    from ...daemon_client import running_daemon
    from ..client_configs import configs_with_entry, install
    from .stop import running_agents

    configs = configs_with_entry()
    daemon = running_daemon(home)
    running = running_agents(home) if daemon is not None else []
    plans = plan_repos(home)
    _show_plan(home, configs, daemon, running, plans, purge)
    if not yes:
        if not sys.stdin.isatty():
            raise CliError("Nothing changed: there is no terminal to ask. Pass --yes to uninstall.")
        if input("Proceed? [y/N] ").strip().lower() not in ("y", "yes"):
            print("Nothing changed.")
            return 1
    problems = 0
    for config in configs:
        try:
            _, message = install(config.client, home, remove=True)
        except SystemExit as error:
            message, problems = f"{config.client}: {error}", problems + 1
        print(message)
    if daemon is not None:
        from ...daemon_client import stop

        stopped, message = stop(home)
        print(message)
        if not stopped:
            problems += 1
    for plan in plans:
        problems += _prune(plan, purge)
    if purge and home.exists():
        shutil.rmtree(home, ignore_errors=True)
        paths.socket_path(home).unlink(missing_ok=True)
        print(f"Deleted {home}.")
    elif home.exists():
        print(f"Your data is kept in {home}; `agentqueue uninstall --purge` (or deleting it) removes it.")
    print(f"To remove the program too: {removal_advice(Path(sys.prefix), Path(sys.base_prefix), Path.home())}")
    return 1 if problems else 0


def removal_advice(prefix: Path, base_prefix: Path, user_home: Path) -> str:
    """The command that removes this very install, as the README installed it (a venv and a link on PATH) or as
    pipx, uv or pip did."""
    if "pipx" in prefix.parts and "venvs" in prefix.parts:
        return "`pipx uninstall agentqueue`."
    if "uv" in prefix.parts and "tools" in prefix.parts:
        return "`uv tool uninstall agentqueue`."
    if prefix == base_prefix:
        return "`pip uninstall agentqueue`."
    link = user_home / ".local" / "bin" / "agentqueue"
    try:
        linked = link.is_symlink() and Path(os.path.realpath(link)).is_relative_to(os.path.realpath(prefix))
    except OSError:
        linked = False

    def shown(path: Path) -> str:
        return f"~/{path.relative_to(user_home)}" if path.is_relative_to(user_home) else str(path)

    if linked:
        return f"`rm -r {shown(prefix)} {shown(link)}` (its venv and the link on your PATH)."
    return f"`rm -r {shown(prefix)}` (its venv), or `pip uninstall agentqueue` in it."


def _prune(plan: RepoPlan, purge: bool) -> int:
    """Each worktree removed unless it holds uncommitted work (--purge: anyway). Never `git worktree remove`: it runs
    git with the worktree's own `.git`, which a run wrote (engine/run_repo.py); the daemon's folder for the worktree
    in the repository says what is uncommitted."""
    import subprocess

    from ...engine.workspaces import admin_of

    problems = 0
    common = plan.checkout / ".git"
    for path in plan.worktrees:
        admin = admin_of(common, path) if common.is_dir() else None
        if admin is None:
            why = "its repository no longer lists it"
        else:
            done = subprocess.run(["git", "-c", "core.fsmonitor=false", "status", "--porcelain"], cwd=path,
                                  capture_output=True, text=True, timeout=60,
                                  env={**os.environ, "GIT_DIR": str(admin), "GIT_WORK_TREE": str(path)})
            why = (done.stderr.strip() or "git status failed") if done.returncode else (
                "it has uncommitted changes" if done.stdout.strip() else "")
        if why and not purge:
            problems += 1
            print(visible(f"Kept worktree {path}: {why} (--purge removes it anyway)", multiline=True))
            continue
        shutil.rmtree(path, ignore_errors=True)  # a link the run left inside is removed, never followed
        print(f"Removed worktree {path}")
    _git(plan.checkout, "worktree", "prune")
    for branch in plan.merged + (plan.unmerged if purge else []):
        done = _git(plan.checkout, "branch", "-D", branch)
        if done.returncode == 0:
            print(visible(f"Deleted branch {branch} in {plan.checkout}"))
        else:
            problems += 1
            print(visible(f"Kept branch {branch} in {plan.checkout}: {done.stderr.strip()}", multiline=True))
    return problems
