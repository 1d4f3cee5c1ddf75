"""Settings reload: the daemon applies edits of config.toml and policy.toml to new runs without a restart.

The daemon polls both files (size, mtime and inode; `AGENTQUEUE_RELOAD_SECONDS`, default 1, 0 turns it off).
A changed config.toml is loaded whole with `settings.load`; when it is valid its values are copied into the
daemon's one `Settings` object, which every service holds, so the next run, tool call or lookup uses them.
A bad value keeps the settings the daemon has and logs the one-sentence error. The keys in `RESTART_NEEDED`
cannot change while the daemon runs: they keep their old value and the log says "restart needed".
policy.toml is read again at each decision already (services/policy.py); here it is only announced and checked.

What the daemon applied is published in `$AGENTQUEUE_HOME/settings_applied.json` (0600): per file the hash
it runs with, a fingerprint per key (so `doctor` can name the keys not applied, never show a value), the
rejected edit's error and the keys that wait for a restart. `agentqueue doctor` reads it (cli/doctor_checks.py).
Values are never logged nor published: only key names (an `[agent_env]` value or a URL may be a secret).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from . import settings as settings_module
from .settings import FIELDS, ConfigError, Settings

log = logging.getLogger("agentqueue.settings")

STATUS_NAME = "settings_applied.json"
POLICY_NAME = "policy.toml"
FILES = (settings_module.CONFIG_NAME, POLICY_NAME)
DEFAULT_RELOAD_SECONDS = 1.0
ABSENT = "absent"  # the digest of a file that does not exist (its defaults apply)

# The one list of what a running daemon cannot change: config.toml key -> why. Outside config.toml the same holds
# for AGENTQUEUE_HOME, the environment it was started with, and `serve`'s flags (--host, --port, --no-http).
RESTART_NEEDED: dict[str, str] = {
    "server.port": "the HTTP listener is bound at start",
    "server.allowed_hosts": "the HTTP app's Host check is built at start",
    "server.metrics_public": "the HTTP app's /metrics gate is built at start",
    "team.database_url": "the store is opened at start",
    "team.labels": "this daemon registers its labels with the team at start",
    "team.lease_seconds": "this daemon's lease is set at start",
}
RESTART_COMMAND = "`agentqueue restart-daemon` (or a client's restart_daemon tool)"
_ATTRS = {f"{f.section}.{f.key}": f.attr for f in FIELDS}


def reload_seconds(environ: Mapping[str, str] | None = None) -> float:
    """How often the daemon looks at the files; 0 when AGENTQUEUE_RELOAD_SECONDS turns the reload off."""
    raw = (os.environ if environ is None else environ).get("AGENTQUEUE_RELOAD_SECONDS", "").strip()
    if not raw:
        return DEFAULT_RELOAD_SECONDS
    seconds = settings_module.duration_seconds(raw)
    if seconds is None or seconds < 0:
        raise ConfigError(f"AGENTQUEUE_RELOAD_SECONDS = {raw!r} is not a duration: give seconds (1), or 0 to "
                          "turn the settings reload off.")
    return seconds


def status_path(home: Path) -> Path:
    return home / STATUS_NAME


def signature(path: Path) -> tuple[int, int, int] | None:
    """(mtime in ns, size, inode): what the poll compares, without reading the file."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    return stat.st_mtime_ns, stat.st_size, stat.st_ino


def digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return ABSENT


def key_fingerprints(path: Path) -> dict[str, str]:
    """`section.key` (a top-level key alone) -> a short hash of its value as written; {} when unreadable.

    Enough to name which keys differ between two versions of a file without keeping any value."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{inner}": item for inner, item in value.items()})
        else:
            flat[key] = value
    return {key: hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]
            for key, value in flat.items()}


def policy_error(home: Path) -> str | None:
    """policy.toml's one-sentence error, read as the daemon's decisions read it; None when it is valid."""
    from .services.policy import Policies
    from .services.policy_rules import PolicyError

    try:
        Policies(home).effective()
    except PolicyError as error:
        return str(error)
    return None


def changed_keys(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    return sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))


def read_status(home: Path) -> dict[str, Any] | None:
    try:
        status = json.loads(status_path(home).read_text())
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None


@dataclass
class FileState:
    """What the daemon knows of one file: what it runs with, and the last edit it refused."""

    signature: tuple[int, int, int] | None = None
    applied: str = ABSENT  # digest of the content in force
    keys: dict[str, str] = field(default_factory=dict)  # key fingerprints of that content
    error: str | None = None  # why the file's current content is not applied
    error_digest: str | None = None

    def public(self) -> dict[str, Any]:
        return {"applied": self.applied, "keys": self.keys, "error": self.error, "error_digest": self.error_digest}


class Reloader:
    """Holds the daemon's live `Settings` and brings them up to date with the files (`check`, from a thread)."""

    def __init__(self, home: Path, live: Settings, on_applied: Callable[[Settings], None] | None = None,
                 check_policy: Callable[[], str | None] | None = None, every: float = DEFAULT_RELOAD_SECONDS,
                 environ: Mapping[str, str] | None = None) -> None:
        self.home = home
        self.live = live
        self.on_applied = on_applied  # e.g. the engine rebuilding its tunables from the new values
        self.check_policy = check_policy or (lambda: policy_error(home))  # policy.toml's error, or None
        self.every = every
        self.environ = os.environ if environ is None else environ
        self.started = {key: getattr(live, _ATTRS[key]) for key in RESTART_NEEDED}  # what was bound at start
        self.restart_needed: list[str] = []
        self.files = {name: FileState(signature=(-1, -1, -1), applied="") for name in FILES}  # not looked at yet
        for name in FILES:  # loaded again now, silently: an edit made since the services read the file counts
            self._look(name, announce=False)
        self.publish()

    # -- the poll --------------------------------------------------------------------------------------
    def check(self) -> bool:
        """Look at both files; apply what changed. True when anything was applied or refused."""
        changed = False
        for name in FILES:
            changed = self._look(name, announce=True) or changed
        if changed:
            self.publish()
        return changed

    def _look(self, name: str, announce: bool) -> bool:
        path = self.home / name
        state = self.files[name]
        now = signature(path)
        if now == state.signature:
            return False
        state.signature = now
        current = digest(path)
        if current == state.applied:  # touched, or an edit refused and then undone
            cleared = state.error is not None
            state.error = state.error_digest = None
            return cleared
        if current == state.error_digest:  # refused already (and said so)
            return False
        if name == settings_module.CONFIG_NAME:
            self._apply_config(path, state, current, announce)
        else:
            self._apply_policy(path, state, current, announce)
        return True

    def _apply_config(self, path: Path, state: FileState, current: str, announce: bool) -> None:
        try:
            new = settings_module.load(self.home, self.environ)
        except ConfigError as error:
            state.error, state.error_digest = str(error), current
            log.warning("config.toml was not applied: %s The daemon keeps the settings it has; `agentqueue "
                        "doctor` shows this until the file is fixed.", error)
            return
        if digest(path) != current:  # edited again while it was read: the next poll takes the newer content
            state.signature = None
            return
        keys = key_fingerprints(path)
        names = changed_keys(state.keys, keys)
        restart = []
        for key, was in self.started.items():  # these stay as they were bound at start
            if getattr(new, _ATTRS[key]) != was:
                restart.append(key)
                setattr(new, _ATTRS[key], was)
        for spec in dataclasses.fields(Settings):
            setattr(self.live, spec.name, getattr(new, spec.name))
        state.applied, state.keys, state.error, state.error_digest = current, keys, None, None
        fresh = [k for k in restart if k not in self.restart_needed]
        self.restart_needed = restart
        if self.on_applied is not None:
            self.on_applied(self.live)
        if not announce:
            return
        overridden = [k for k in names if self._env_override(k)]
        applied = [k for k in names if k not in RESTART_NEEDED and k not in overridden]
        back = [k for k in names if k in RESTART_NEEDED and k not in restart and k not in overridden]
        if applied:
            log.info("config.toml changed: %s; new runs use it", ", ".join(applied))
        for key in overridden:
            log.info("config.toml changed: %s, but %s overrides it for this daemon", key, self._env_override(key))
        for key in fresh:
            log.warning("restart needed: %s changed in config.toml (%s); the daemon keeps the old value until "
                        "%s", key, RESTART_NEEDED[key], RESTART_COMMAND)
        if back:
            log.info("config.toml: %s is back to the value the daemon runs with; no restart needed", ", ".join(back))
        if not names:
            log.info("config.toml was rewritten with the same settings")

    def _env_override(self, key: str) -> str | None:
        spec = next((f for f in FIELDS if f"{f.section}.{f.key}" == key), None)
        return spec.env if spec and spec.env and self.environ.get(spec.env, "").strip() else None

    def _apply_policy(self, path: Path, state: FileState, current: str, announce: bool) -> None:
        error = self.check_policy()
        if error:
            state.error, state.error_digest = error, current
            log.warning("policy.toml was not applied: %s Until it is fixed every tool call and agent question is "
                        "refused with this sentence.", error)
            return
        keys = key_fingerprints(path)
        names = changed_keys(state.keys, keys)
        state.applied, state.keys, state.error, state.error_digest = current, keys, None, None
        if announce:
            log.info("policy.toml changed: %s; it applies from the next decision", ", ".join(names) or
                     "(the same rules)")

    # -- what doctor reads -----------------------------------------------------------------------------
    def publish(self) -> None:
        status = {"pid": os.getpid(), "reload_seconds": self.every, "checked_at": time.time(),
                  "files": {name: state.public() for name, state in self.files.items()},
                  "restart_needed": self.restart_needed}
        target = status_path(self.home)
        partial = target.with_name(f".{target.name}.{os.getpid()}")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            json.dump(status, handle)
        os.replace(partial, target)  # atomic: doctor never reads half a file
