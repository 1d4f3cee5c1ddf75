"""The checks `agentqueue doctor` runs: what AgentQueue needs, and how to fix each problem.

Each check is ✔ (fine), ✘ (a problem: exit status 1), ! (works, but worth fixing) or · (for
information). The agent CLIs are looked up the way the daemon looks them up (config.toml [cli],
AGENTQUEUE_*_BIN, PATH), with the running daemon's own environment when it can be read.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import tempfile
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import paths, settings
from ..daemon_client import daemon_info, running_daemon
from .client_configs import CLIENTS, read_config
from .daemon_code import running_code

AGENT_CLIS = {"claude": "claude-code", "codex": "codex", "gemini": "gemini"}
INSTALL_HINTS = {"claude": "npm install -g @anthropic-ai/claude-code", "codex": "npm install -g @openai/codex",
                 "gemini": "npm install -g @google/gemini-cli", "gh": "https://cli.github.com or your package manager"}
# What a GUI client (Claude Desktop, an IDE started from the dock) gives the servers it launches.
MINIMAL_PATH = "/usr/bin:/bin:/usr/sbin:/sbin"


@dataclass
class Check:
    name: str
    level: str  # ok | fail | warn | info
    detail: str
    fix: str | None = None


def _run(argv: list[str], env: Mapping[str, str] | None = None, timeout: float = 30,
         cwd: str | None = None) -> tuple[int | None, str]:
    """(exit status, combined output); None when it could not run or timed out."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"no answer within {timeout:.0f} s"
    except OSError as error:
        return None, error.strerror or str(error)
    return done.returncode, (done.stdout + done.stderr).strip()


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


# -- git ----------------------------------------------------------------------------------------------
def check_git() -> list[Check]:
    git = shutil.which("git")
    if git is None:
        return [Check("git", "fail", "git is not on PATH; every task runs in a git worktree.",
                      "Install git (e.g. `apt install git`, `brew install git`), then run doctor again.")]
    code, out = _run([git, "--version"])
    checks = [Check("git", "ok" if code == 0 else "fail", _first_line(out) or "git --version failed")]
    # Outside any repository (the temp dir), git reports the user's and the system's identity only.
    cwd = tempfile.gettempdir()
    name = _run([git, "config", "--get", "user.name"], cwd=cwd)[1] if code == 0 else ""
    email = _run([git, "config", "--get", "user.email"], cwd=cwd)[1] if code == 0 else ""
    if name and email:
        checks.append(Check("git identity", "ok", f"commits are authored as {name} <{email}>"))
    else:
        missing = " and ".join(k for k, v in (("user.name", name), ("user.email", email)) if not v)
        checks.append(Check(
            "git identity", "fail",
            f"git has no {missing}: the commits AgentQueue makes for your tasks would be authored as "
            "AgentQueue <agentqueue@localhost>.",
            'git config --global user.name "Your Name" && git config --global user.email you@example.com'))
    return checks


# -- settings and the daemon ------------------------------------------------------------------------
def _daemon_environ(pid: int | None) -> dict[str, str] | None:
    """The running daemon's environment (Linux /proc, same user), or None when it cannot be read."""
    if not pid:
        return None
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def check_config(home: Path) -> tuple[list[Check], settings.Settings]:
    path = settings.config_path(home)
    try:
        loaded = settings.load(home)
    except settings.ConfigError as error:
        fix = (f"Fix it in {path} or the environment (a daemon refuses to start with it; a running one keeps the "
               "settings it has until the file is valid).")
        return [Check("settings", "fail", str(error), fix)], settings.Settings()
    if path.exists():
        return [Check("config.toml", "ok", f"{path} is valid"), *check_key_files(home, loaded)], loaded
    return [Check("config.toml", "info", f"no {path}: defaults apply (see docs/config.example.toml)")], loaded


def check_key_files(home: Path, loaded: settings.Settings) -> list[Check]:
    """The home's files that hold secrets or rules ([agent_env] keys or a database password, policy.toml's rules, the
    token) must be 0600: the home folder is 0700, but a copy, a backup or a home made by hand is not always. Doctor
    changes nothing: each is reported with the command that fixes it."""
    import stat

    found = []
    for path, holds in ((settings.config_path(home), "keys" if loaded.agent_env or loaded.database_url else None),
                        (home / "policy.toml", "your permission rules"), (home / "token", "the daemon's token")):
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError:
            continue
        if holds is not None and mode & 0o077:
            found.append(Check(path.name, "warn", f"{path} holds {holds} and others may read it (mode {mode:o})",
                               f"chmod 600 {path}"))
    return found


def _health(info: dict[str, Any]) -> tuple[bool, str]:
    url = info.get("http_url")
    if url:
        try:
            with urllib.request.urlopen(url.removesuffix("/mcp") + "/health", timeout=5) as answer:
                body = json.loads(answer.read())
            return True, f"GET /health answered (version {body.get('version')})"
        except (OSError, ValueError) as error:
            reason = getattr(error, "reason", error)
            return False, f"GET {url.removesuffix('/mcp')}/health failed ({reason})"
    sock_path = info.get("socket")
    if not sock_path:
        return False, "its daemon.json names no socket"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    try:
        sock.connect(sock_path)
        return True, f"its socket {sock_path} accepts connections"
    except OSError as error:
        return False, f"its socket {sock_path} refuses connections ({error.strerror or error})"
    finally:
        sock.close()


def check_daemon(home: Path) -> tuple[list[Check], dict[str, Any] | None]:
    info = running_daemon(home)
    log = paths.logs_dir(home) / "daemon.out"
    if info is None:
        crashed = daemon_info(home) is not None
        detail = f"no daemon is running for {home}"
        if crashed:
            detail += f" (the last one stopped without cleaning up: see {log} and agentqueue.log there)"
        return [Check("daemon", "fail", detail + "; no task runs until one starts.",
                      "`agentqueue serve` starts it (a client's `agentqueue mcp` also starts it on first use); "
                      f"if it will not start, read {log}.")], None
    pid = info.get("pid")
    healthy, how = _health(info)
    if not healthy:
        return [Check("daemon", "fail", f"the daemon (pid {pid}) holds the lock but does not answer: {how}.",
                      f"`agentqueue stop` (or `kill {pid}`), then `agentqueue serve`; see {log}.")], info
    checks = [Check("daemon", "ok", f"running (pid {pid}, version {info.get('version')}); {how}")]
    code = running_code(home, info)
    advice = code.advice()
    if advice:
        fix = ("`agentqueue restart-daemon`: connected clients keep their sessions, running agents are stopped and "
               "their tasks requeued with their work (README \"Upgrading\")." if code.relation == "older" else
               "Install the AgentQueue the daemon runs again (docs/upgrading.md, \"Going back\", to go back).")
        checks.append(Check("daemon version", "warn", advice[0].lower() + advice[1:].rstrip("."), fix))
    return checks, info


def check_store(home: Path, loaded: settings.Settings, daemon: dict[str, Any] | None) -> list[Check]:
    """The SQLite store's schema against this code's (read without opening it for writing: doctor changes
    nothing), and the copies kept beside it from before its migrations."""
    from ..store.backup import migration_backups
    from ..store.reader import SCHEMA_VERSION
    from .daemon_code import OLDER, store_schema

    path = paths.db_path(home)
    if loaded.database_url or not path.exists():
        return []
    found = store_schema(home)
    if found is None:
        return [Check("store", "fail", f"{path} cannot be read as an SQLite database.",
                      f"Move it aside (mv {path} {path}.broken) or `agentqueue restore` a backup.")]
    if found > SCHEMA_VERSION:
        from ..store.sqlite import too_new

        checks = [Check("store", "fail", too_new(path, found))]
    elif found < SCHEMA_VERSION and daemon is not None:
        checks = [Check("store", "warn", f"{path} is at schema version {found}, the installed AgentQueue reads "
                        f"{SCHEMA_VERSION}: it is left as it is while the daemon of older code runs.", OLDER)]
    elif found < SCHEMA_VERSION:
        checks = [Check("store", "info", f"{path} is at schema version {found}: the daemon migrates it to "
                        f"{SCHEMA_VERSION} when it next starts, after keeping a copy beside it.")]
    else:
        checks = [Check("store", "ok", f"{path} at schema version {found}")]
    kept = migration_backups(path)
    if kept:
        size = sum(p.stat().st_size for _, p in kept) / 1e6
        checks.append(Check("store copies", "info",
                            f"{len(kept)} cop{'y' if len(kept) == 1 else 'ies'} of the store from before its "
                            f"migrations ({size:.1f} MB), the newest {kept[-1][1].name}: what `agentqueue restore` "
                            "goes back to; delete them once you will not go back."))
    return checks


def _started(info: dict[str, Any]) -> float | None:
    from datetime import datetime

    try:
        return datetime.fromisoformat(str(info.get("started_at")).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def check_settings_applied(home: Path, daemon: dict[str, Any] | None, wait: float = 3.0) -> list[Check]:
    """Whether the running daemon runs with config.toml and policy.toml as they are now (settings_reload.py)."""
    import time

    from .. import settings_reload as reload

    if daemon is None:
        return []
    pid = daemon.get("pid")
    restart = f"Restart the daemon: {reload.RESTART_COMMAND}."
    status = reload.read_status(home)
    deadline = time.monotonic() + wait
    while status is not None and status.get("pid") == pid and _unapplied(home, status) and status.get(
            "reload_seconds") and time.monotonic() < deadline:  # an edit of the last second: let its poll come
        time.sleep(0.2)
        status = reload.read_status(home)
    if status is None or status.get("pid") != pid:
        started = _started(daemon)
        newer = [name for name in reload.FILES if started is not None and (home / name).exists()
                 and (home / name).stat().st_mtime > started]
        if newer:
            return [Check("settings applied", "fail",
                          f"the daemon (pid {pid}) started before {' and '.join(newer)} was last edited, and it does "
                          "not say which settings it runs with (it predates settings reload): it may still use the "
                          "old [agent_env], paths and limits.", restart)]
        return [Check("settings applied", "info", f"the daemon (pid {pid}) started after the last edit of "
                                                  "config.toml and policy.toml")]
    checks = []
    for name in reload.FILES:
        entry = (status.get("files") or {}).get(name) or {}
        current = reload.digest(home / name)
        if current == entry.get("applied"):
            continue
        keys = reload.changed_keys(entry.get("keys") or {}, reload.key_fingerprints(home / name))
        what = f" ({', '.join(keys)})" if keys else ""
        if entry.get("error") and entry.get("error_digest") == current:
            keeps = ("every tool call and agent question is refused until it is fixed" if name == reload.POLICY_NAME
                     else "the daemon keeps running with the settings it had")
            checks.append(Check(f"{name} applied", "fail", f"the daemon (pid {pid}) refused the last edit of "
                                                           f"{name}{what}: {entry['error']}",
                                f"Fix {home / name}; {keeps}, and applies the file within seconds once it is valid."))
        elif not status.get("reload_seconds"):
            checks.append(Check(f"{name} applied", "fail",
                                f"the daemon (pid {pid}) started before {name} was last edited{what} and does not "
                                "reload settings (AGENTQUEUE_RELOAD_SECONDS=0): it still runs with the old ones.",
                                restart))
        else:
            checks.append(Check(f"{name} applied", "fail",
                                f"the daemon (pid {pid}) has not applied the last edit of {name}{what}: its reload "
                                f"looks stuck (see {paths.logs_dir(home) / 'agentqueue.log'}).", restart))
    for key in status.get("restart_needed") or []:
        checks.append(Check("restart needed", "fail",
                            f"restart needed: {key} changed in config.toml after the daemon (pid {pid}) started; "
                            f"it keeps the old value ({reload.RESTART_NEEDED.get(key, 'bound at start')}).", restart))
    if not checks:
        how = "reloads them within a second" if status.get("reload_seconds") else "does not reload them"
        checks.append(Check("settings applied", "ok", f"the daemon runs with config.toml and policy.toml as they "
                                                      f"are now (it {how})"))
    return checks


def _unapplied(home: Path, status: dict[str, Any]) -> bool:
    """An edit the daemon has neither applied nor refused yet."""
    from .. import settings_reload as reload

    for name in reload.FILES:
        entry = (status.get("files") or {}).get(name) or {}
        if reload.digest(home / name) not in (entry.get("applied"), entry.get("error_digest")):
            return True
    return False


def check_token(home: Path) -> list[Check]:
    path = paths.token_path(home)
    notes = []
    if os.environ.get("AGENTQUEUE_TOKEN"):
        notes.append(Check("token", "info", "AGENTQUEUE_TOKEN is set in this terminal: HTTP clients of a daemon "
                                            "started here use it instead of the token file."))
    if not path.exists():
        return notes + [Check("token file", "info", f"no {path} yet: the first `agentqueue serve` with HTTP "
                                                    "creates it (mode 0600).")]
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        return notes + [Check("token file", "fail",
                              f"{path} has mode {mode:04o}: other users can read the HTTP bearer token.",
                              f"chmod 600 {shlex.quote(str(path))}")]
    return notes + [Check("token file", "ok", f"{path} has mode {mode:04o}")]


# -- the team's shared database ----------------------------------------------------------------------
def check_team(home: Path, loaded: settings.Settings) -> list[Check]:
    """Team mode: the shared PostgreSQL database answers, at which schema, and which daemons share it."""
    if not loaded.database_url:
        return []
    from ..store.db import StoreOpenError, open_store

    where = settings.redact_url(loaded.database_url)
    from ..store.base import StoreNotMigrated

    try:
        store = open_store(paths.db_path(home), loaded.database_url, migrate=False)  # doctor changes nothing
    except StoreNotMigrated as error:
        return [Check("team database", "warn", f"{error} A daemon of this version migrates it when it starts.",
                      "Upgrade AgentQueue for every daemon of the team, then `agentqueue restart-daemon` on each.")]
    except StoreOpenError as error:
        return [Check("team database", "fail", str(error))]
    try:
        daemons = store.all("SELECT hostname, home, lease_until FROM daemons ORDER BY started_at")
        version = store.schema_version
    finally:
        store.close()
    members = "; ".join(f"{d['hostname']} {d['home']}" for d in daemons) or "none running"
    return [Check("team database", "ok", f"{where} (schema {version}); daemons sharing it: {members}")]


# -- notifications -----------------------------------------------------------------------------------
def check_notify(home: Path, loaded: settings.Settings) -> list[Check]:
    """Each [notify] URL (secrets masked) with its last success and last error, from the store."""
    urls = list(loaded.notify.get("urls", ()))
    urls += [u for p in loaded.notify.get("projects", {}).values() for u in p.get("urls", ()) if u not in urls]
    if not urls:
        return [Check("notifications", "info", "no [notify] urls: nobody is told when a task needs a person, and "
                      "permission requests wait 24 h before they are denied",
                      'add [notify] urls = ["ntfy://ntfy.sh/your-topic"] (any Apprise URL) to config.toml')]
    states: dict[str, dict[str, Any]] = {}
    if paths.db_path(home).exists() or loaded.database_url:
        from ..notify.outbox import target_of, target_states
        from ..store.reader import open_read_store

        try:
            store = open_read_store(paths.db_path(home), loaded.database_url, migrate=False)  # changes nothing
            try:
                states = {row["target"]: row for row in target_states(store)}
            finally:
                store.close()
        except Exception:  # an old store without the table, a database that does not answer: no history
            states = {}
        states = {url: states[target_of(url)] for url in urls if target_of(url) in states}
    return [_notifier(url, states.get(url)) for url in urls]


def _notifier(url: str, state: dict[str, Any] | None) -> Check:
    name = f"notifier {settings.mask_url(url)}"
    if state is None:
        return Check(name, "info", "nothing sent yet", "agentqueue notify test sends a test message")
    ok_at, error_at = state.get("last_ok_at"), state.get("last_error_at")
    waiting = f"; {state['waiting']} message(s) waiting" if state.get("waiting") else ""
    lost = f"; {state['given_up']} given up after retries" if state.get("given_up") else ""
    if error_at and (not ok_at or error_at > ok_at):
        return Check(name, "warn", f"last error {error_at}: {state.get('last_error')}; last success "
                     f"{ok_at or 'never'}{waiting}{lost}",
                     "check the URL and the service, then run agentqueue notify test")
    return Check(name, "ok", f"last success {ok_at}" + (f"; last error {error_at}" if error_at else "") + waiting
                 + lost)


# -- the CLIs the daemon runs -----------------------------------------------------------------------
def _registered_agent_types(home: Path) -> set[str] | None:
    """The agent types registered in the store (None when there is no store yet)."""
    if not paths.db_path(home).exists():
        return None
    import sqlite3

    try:
        conn = sqlite3.connect(f"file:{paths.db_path(home)}?mode=ro", uri=True, timeout=5)
        try:
            return {row[0] for row in conn.execute("SELECT agent_type FROM agents")}
        finally:
            conn.close()
    except sqlite3.Error:
        return None


def check_clis(home: Path, loaded: settings.Settings, daemon: dict[str, Any] | None) -> list[Check]:
    environ = _daemon_environ(daemon.get("pid")) if daemon else None
    seen_by = f"the running daemon (pid {daemon['pid']})" if environ is not None and daemon else "a daemon started here"
    if environ is not None:
        try:
            loaded = settings.load(home, environ=environ)
        except settings.ConfigError:
            pass  # reported by the config check
    env = environ if environ is not None else os.environ
    types = _registered_agent_types(home)
    checks = []
    for key in (*AGENT_CLIS, "gh"):
        found = loaded.find(key, environ=env)
        source = loaded.sources.get(f"cli.{key}", "PATH")
        env_name = settings.CLI_KEYS[key][0]
        agent_type = AGENT_CLIS.get(key)
        if found is None:
            needed = agent_type is not None and (agent_type in (types or set()) or (not types and key == "claude"))
            if key == "gh":
                checks.append(Check("gh", "warn", "gh (the GitHub CLI) is not found: tasks that need approval in "
                                                  "a repo with a GitHub remote cannot open pull requests (they wait "
                                                  "for `agentqueue approve`).",
                                    f"Install gh ({INSTALL_HINTS['gh']}), run `gh auth login`, then "
                                    "`agentqueue install <client>` records its path in config.toml [cli]."))
                continue
            why = (f"a registered {agent_type} agent needs it" if agent_type in (types or set())
                   else "the default agent is a claude-code agent" if needed
                   else f"needed only for {agent_type} agents")
            checks.append(Check(
                key, "fail" if needed else "info",
                f"not found by {seen_by} (not in config.toml [cli] {key}, {env_name} or PATH); {why}.",
                (f"Install it ({INSTALL_HINTS[key]}); then run `agentqueue install <client>` in a terminal that "
                 f"finds it (it records the path in config.toml [cli]), and restart the daemon.") if needed else None))
            continue
        code, out = _run([found, "--version"], timeout=30)
        version = _first_line(out)
        if code != 0:
            checks.append(Check(key, "fail", f"{found} --version failed: {version or 'no output'}",
                                f"Reinstall {key} ({INSTALL_HINTS[key]}) or fix [cli] {key} in config.toml."))
            continue
        where = {"config.toml": "config.toml [cli]"}.get(source, source)
        detail = f"{version} at {found} (from {where}, as {seen_by} finds it)"
        if key == "gh":
            auth_code, auth = _run([found, "auth", "status"], timeout=20)
            if auth_code == 0:
                checks.append(Check("gh", "ok", detail + "; logged in"))
            else:
                why_not = _first_line(auth) or "gh auth status failed"
                checks.append(Check("gh", "warn", detail + f"; not logged in ({why_not})", "gh auth login"))
            continue
        if source == "PATH" and environ is None:
            checks.append(Check(key, "warn", detail + ": a daemon started by a GUI client, with a minimal PATH, "
                                                      "may not find it.",
                                f"`agentqueue install <client>` records it, or add `{key} = \"{found}\"` under [cli] "
                                f"in {settings.config_path(home)}."))
        else:
            checks.append(Check(key, "ok", detail))
    return checks


# -- agent logins ---------------------------------------------------------------------------------------
def check_logins(home: Path, loaded: settings.Settings, daemon: dict[str, Any] | None) -> list[Check]:
    """For each registered agent kind, the real, minimal login check the engine uses to resume a parked kind
    (services/login_probe.py), with the daemon's own environment when it can be read. Nothing registered: nothing
    to check (and nothing slow)."""
    from ..services.login_probe import check_login
    from ..services.parking import PARKABLE

    types = sorted((_registered_agent_types(home) or set()) & set(PARKABLE))
    if not types:
        return []
    environ = _daemon_environ(daemon.get("pid")) if daemon else None
    if environ is not None:
        try:
            loaded = settings.load(home, environ=environ)
        except settings.ConfigError:
            pass  # reported by the config check
    cli_of = {agent_type: key for key, agent_type in AGENT_CLIS.items()}
    checks = []
    for agent_type in types:
        found = loaded.find(cli_of[agent_type], environ=environ if environ is not None else os.environ)
        result = check_login(agent_type, found, loaded.agent_environment(agent_type, environ))  # as its runs
        level = "ok" if result.ok else "fail" if result.ok is False else "warn"
        fix = result.fix if result.ok is False else None if result.ok else (
            "Check that the agent can reach its API and log in; a task's log shows what the CLI says.")
        checks.append(Check(f"{agent_type} login", level, result.detail, fix))
    return checks


# -- client configs -------------------------------------------------------------------------------------
def _entry_runs(entry: dict[str, Any]) -> tuple[bool, str]:
    """Run the entry's command with `--version` in place of `mcp`, under a GUI client's minimal environment."""
    command = entry.get("command")
    args = [str(a) for a in entry.get("args") or []]
    if not isinstance(command, str) or not command:
        return False, "its entry has no command"
    if not os.path.isabs(command):
        return False, f"its command {command!r} is not an absolute path (a GUI client's PATH may not find it)"
    if not (os.path.isfile(command) and os.access(command, os.X_OK)):
        return False, f"its command {command} does not exist or is not executable"
    if "mcp" not in args:
        return True, f"{command} exists (its args {args} are not `mcp`: not run)"
    argv = [command, *args[:args.index("mcp")], "--version"]
    env_extra = entry.get("env") if isinstance(entry.get("env"), dict) else {}
    env = {"PATH": MINIMAL_PATH, "HOME": str(Path.home()), **{k: str(v) for k, v in env_extra.items()}}
    code, out = _run(argv, env=env, timeout=60, cwd=str(Path.home()))
    if code == 0 and "agentqueue" in out:
        return True, f"`{shlex.join(argv)}` → {_first_line(out)}"
    return False, f"`{shlex.join(argv)}` failed: {_first_line(out[-500:]) or f'status {code}'}"


def check_clients(home: Path) -> list[Check]:
    checks = []
    pointing = 0
    for client in CLIENTS:
        config = read_config(client)
        if config.error:
            checks.append(Check(client, "fail", config.error,
                                f"Fix {config.path} (the client cannot read it either), then "
                                f"`agentqueue install {client}`."))
            continue
        if config.entry is None:
            continue
        pointing += 1
        runs, how = _entry_runs(config.entry)
        checks.append(Check(client, "ok" if runs else "fail", f"{config.path}: {how}",
                            None if runs else f"`agentqueue install {client}` writes a command that runs."))
        other = config.entry_home()
        if other is not None and other != home.resolve():
            checks.append(Check(f"{client} home", "warn",
                                f"{client} uses AGENTQUEUE_HOME={other}, this terminal uses {home}: the client and "
                                "the CLI see different queues.",
                                f"`agentqueue install {client}` points it at {home}, or set "
                                f"AGENTQUEUE_HOME={other} in this terminal."))
    if not pointing:
        checks.append(Check("clients", "warn", "no MCP client config points at AgentQueue.",
                            "agentqueue install claude-code   (or claude-desktop, cursor, vscode)"))
    return checks


def check_walls(daemon: dict[str, Any] | None) -> list[Check]:
    """The walls of the installed code that the running daemon lacks (it reports its own in daemon.json; one older
    than that report reports none): doctor never claims a wall for runs that a daemon without it starts."""
    from ..walls import lacking

    if daemon is None:
        return []
    missing = lacking(daemon.get("walls"))
    if not missing:
        return []
    what = ("does not say which walls it puts around runs (it predates that report)" if daemon.get("walls") is None
            else "lacks walls the installed code has")
    return [Check("walls", "fail", f"the running daemon (pid {daemon.get('pid')}, AgentQueue {daemon.get('version')}) "
                  f"{what}: its runs may go without {', '.join(missing)}"
                  + (", i.e. UNSANDBOXED" if "sandbox" in missing else "") + ".",
                  "`agentqueue restart-daemon` restarts it on the installed code.")]


def check_sandbox(home: Path, loaded: settings.Settings, daemon: dict[str, Any] | None = None) -> list[Check]:
    """A real probe of bubblewrap, and the settings that weaken the walls (a warning each). With a daemon running,
    about its runs only when it reports a sandbox of its own (check_walls says when it does not)."""
    from ..sandbox.bwrap import probe
    from ..sandbox.rules import SandboxConfigError, project_settings
    from ..walls import lacking

    why = probe()
    required = loaded.sandbox.required is not False
    if daemon is not None and "sandbox" in lacking(daemon.get("walls")):
        checks = [Check("sandbox", "fail", f"the running daemon (pid {daemon.get('pid')}) reports no sandbox: its "
                        "runs are not known to be contained"
                        + (" (bubblewrap works here: the installed code would use it)" if why is None else f"; {why}"),
                        "`agentqueue restart-daemon` restarts it on the installed code.")]
    elif why is None:
        whose = f"every run of the daemon (pid {daemon.get('pid')})" if daemon else "every run"
        checks = [Check("sandbox", "ok", f"bubblewrap starts a sandbox here (probed): {whose} is contained")]
    elif required:
        checks = [Check("sandbox", "fail", why, "Until it is fixed no agent runs (tasks go BLOCKED).")]
    else:
        checks = [Check("sandbox", "warn", f"{why} [sandbox] required = false: agents run UNSANDBOXED.",
                        "Install bubblewrap and remove `required = false`.")]
    if why is None and not required:
        checks.append(Check("sandbox required", "warn", "[sandbox] required = false: a machine without a working "
                            "sandbox would run agents unsandboxed.", "Remove `required = false` from config.toml."))
    if loaded.sandbox.network == "open":
        checks.append(Check("sandbox network", "warn", "[sandbox] network = \"open\": runs reach any host, not only "
                            "the allowlist.", "Set network = \"allowlist\" and list the hosts in [sandbox] hosts."))
    try:
        import tomllib
        data = tomllib.loads((home / "policy.toml").read_text(encoding="utf-8"))
        projects = data.get("projects", {}) if isinstance(data.get("projects"), dict) else {}
        for project_id in projects:
            chosen = project_settings(home / "policy.toml", project_id)
            if chosen.network == "open" or chosen.required is False:
                what = "network = \"open\"" if chosen.network == "open" else "required = false"
                checks.append(Check(f"sandbox ({project_id})", "warn",
                                    f"policy.toml sets {what} for project {project_id}."))
    except FileNotFoundError:
        pass
    except (OSError, ValueError, SandboxConfigError) as error:
        checks.append(Check("sandbox (policy.toml)", "fail", str(error)))
    return checks


# -- all of it ------------------------------------------------------------------------------------------
def run_checks(home: Path) -> list[Check]:
    checks = check_git()
    config_checks, loaded = check_config(home)
    checks += config_checks
    daemon_checks, daemon = check_daemon(home)
    checks += daemon_checks
    checks += check_store(home, loaded, daemon)
    checks += check_settings_applied(home, daemon)
    checks += check_token(home)
    checks += check_team(home, loaded)
    checks += check_walls(daemon)
    checks += check_sandbox(home, loaded, daemon)
    checks += check_notify(home, loaded)
    checks += check_clis(home, loaded, daemon)
    checks += check_logins(home, loaded, daemon)
    checks += check_clients(home)
    return checks

