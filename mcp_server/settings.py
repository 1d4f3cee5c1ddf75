"""What the daemon and its agents run with: `$AGENTQUEUE_HOME/config.toml`, then `AGENTQUEUE_*` variables.

The daemon inherits the environment of whatever started it (a terminal, or a GUI client with a
minimal PATH), so everything that matters can be pinned in the config file, which is read at
every start. Precedence: an `AGENTQUEUE_*` environment variable, then the file, then the default.
A bad value is refused with one sentence naming where it came from, the key and what is expected.

    [engine]     poll_seconds, task_timeout, stall_seconds, max_turns, rate_limit_backoff,
                 rate_limit_max_backoff, pr_poll_seconds,
                 login_check_seconds                       (durations: 90, "90s", "10m", "1h"),
                 max_task_depth                            (how deep agents may queue follow-ups)
                 agent_nice                                (0-19: agents' CPU priority below the daemon's)
                 land_max_file, land_max_binary, land_max_total (sizes: 10485760, "10MiB"), land_max_files
                                                           (a landing over one waits for a person)
    [cli]        claude, codex, gemini, gh                 (paths of the CLIs)
    [env]        path = ["/dir", …]  prepended to PATH when finding CLIs and for agents
                 pass = ["NAME", …]  agents inherit these too, besides a base set and their kind's own
    [agent_env]  NAME = "value"      set for every agent run (ANTHROPIC_*, OPENAI_*… only for that kind's runs)
    [server]     port, metrics_public                      (GET /metrics without the token: true/false)
                 allowed_hosts = ["box.lan", …]            (Host names HTTP clients use; needed off loopback)
    [files]      roots = ["~/code", …]                     (where workspaces and linked repos may be without asking)
    [mcp]        toolsets = ["default", …]                 (what a client that names no --toolsets lists first; "all")
    [audit]      retention_days                            (audit log rows older than this are pruned)
    [team]       database_url = "postgresql://…"           (a team's shared queue; default: the home's SQLite file)
                 labels = ["gpu", …]                       (agents with one of these labels may run here)
                 lease_seconds                             (how long a silent daemon keeps its runs; default 30)
    [sandbox]    required = true                           (no sandbox, no run; false runs unsandboxed)
                 network = "allowlist" | "open" | "off"   (what runs reach; the model endpoint is always allowed)
                 hosts = ["github.com", "host:port", …]    (added to the allowlist)
                 writable = ["~/.m2", …]                   (folders runs may write besides the worktree)
    [notify]     urls = ["ntfy://…", …]                    (Apprise URLs told when a person is needed)
                 permission, approval, blocked, failed, parked, completed = "on" | "off" | "digest"
                 quiet_hours = "22:00-07:00", digest_interval, board_url, [notify.projects."name"]
                                                           (notify/config.py)
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from .notify.config import KEYS as NOTIFY_KEYS, NotifyConfigError, parse_key as parse_notify_key
from .sandbox.rules import (
    DEFAULT_MAX_PROCESSES, DEFAULT_TMP_SIZE, SandboxConfigError, SandboxSettings, parse_settings,
)

CONFIG_NAME = "config.toml"
DEFAULT_PORT = 8765
DEFAULT_AUDIT_RETENTION_DAYS = 30
DEFAULT_LEASE_SECONDS = 30.0
LABEL = re.compile(r"[A-Za-z0-9_.:-]{1,64}\Z")

# The CLI each key names, the env var that overrides it, the agent type that runs it.
CLI_KEYS = {"claude": ("AGENTQUEUE_CLAUDE_BIN", "claude-code"), "codex": ("AGENTQUEUE_CODEX_BIN", "codex"),
            "gemini": ("AGENTQUEUE_GEMINI_BIN", "gemini"), "gh": ("AGENTQUEUE_GH_BIN", None),
            # The ACP adapters the `claude-code` and `codex` ACP presets run (engine/adapters/acp_presets.py).
            "claude-agent-acp": ("AGENTQUEUE_CLAUDE_AGENT_ACP_BIN", None),
            "codex-acp": ("AGENTQUEUE_CODEX_ACP_BIN", None)}
CLI_FOR_AGENT = {agent: key for key, (_, agent) in CLI_KEYS.items() if agent}
# What every run keeps of the daemon's environment (plus LC_*): an allowlist, so a secret the daemon was started
# with (its own token, a database password, a cloud key) never reaches an agent that was not meant to have it.
BASE_ENV = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "TERM", "TMPDIR", "SHELL", "TZ", "COLORTERM",
            "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME",
            "SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy",
            "https_proxy")
# Each agent kind's own variables (prefixes, then names): its model key, endpoint and switches. A command or a
# custom ACP agent has none: it gets what [agent_env] and [env] pass give it.
KIND_ENV: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "claude-code": (("ANTHROPIC_", "CLAUDE_"),
                    ("DISABLE_TELEMETRY", "DISABLE_ERROR_REPORTING", "DISABLE_AUTOUPDATER", "DISABLE_BUG_COMMAND",
                     "DISABLE_COST_WARNINGS", "DISABLE_NON_ESSENTIAL_MODEL_CALLS", "DISABLE_PROMPT_CACHING",
                     "MAX_THINKING_TOKENS", "MAX_MCP_OUTPUT_TOKENS", "MCP_TIMEOUT", "MCP_TOOL_TIMEOUT",
                     "BASH_DEFAULT_TIMEOUT_MS", "BASH_MAX_TIMEOUT_MS", "API_TIMEOUT_MS")),
    "codex": (("OPENAI_", "CODEX_"), ("RUST_LOG",)),
    "gemini": (("GEMINI_", "GOOGLE_"), ("CODE_ASSIST_ENDPOINT",)),
}
# Never in a run, whoever asks: AgentQueue's own bearer token and its database URL (with its password).
NEVER_ENV = ("AGENTQUEUE_TOKEN", "AGENTQUEUE_DATABASE_URL")
_HOST = re.compile(r"[A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\]")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*\Z")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_SHOWN_HOST = re.compile(r"(localhost|[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+|\[[0-9A-Fa-f:.]+\])(:\d+)?")
_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.I)
Parser = Callable[[Any, str], Any]  # (raw value, where it came from) -> the value, or a ConfigError
_FLAGS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


class ConfigError(Exception):
    """A setting AgentQueue cannot use; the message names its source, the key and what is expected."""


@dataclass
class Settings:
    engine: dict[str, float] = field(default_factory=lambda: {k: d for k, d, _ in ENGINE_KEYS})
    cli: dict[str, str] = field(default_factory=dict)  # only what the file or env set; PATH is searched later
    path: list[str] = field(default_factory=list)
    pass_env: list[str] | None = None
    agent_env: dict[str, str] = field(default_factory=dict)
    port: int = DEFAULT_PORT
    allowed_hosts: list[str] = field(default_factory=list)  # Host headers accepted besides loopback
    roots: list[Path] = field(default_factory=list)  # folders a workspace or linked repo may be in without asking
    metrics_public: bool = False  # GET /metrics answers without the bearer token (a scraper on a trusted network)
    audit_retention_days: int = DEFAULT_AUDIT_RETENTION_DAYS
    database_url: str | None = None  # postgresql://…: the store is a team's shared database (team mode)
    labels: list[str] = field(default_factory=list)  # this daemon runs agents labelled with one of these
    lease_seconds: float = DEFAULT_LEASE_SECONDS  # a daemon silent this long loses its runs to the others
    sandbox: SandboxSettings = field(default_factory=SandboxSettings)  # [sandbox]: walls around every run
    # [mcp] toolsets: what a connection that names none lists at first; its model may enable the rest.
    toolsets: list[str] = field(default_factory=lambda: ["default"])
    notify: dict[str, Any] = field(default_factory=dict)  # [notify], each key as notify/config.py read it
    sources: dict[str, str] = field(default_factory=dict)  # "engine.task_timeout" -> "config.toml" | "env NAME"

    def search_path(self, environ: Mapping[str, str] | None = None) -> str:
        """PATH with [env] path first: where CLIs are looked for and what agents get."""
        inherited = (os.environ if environ is None else environ).get("PATH", os.defpath)
        return os.pathsep.join([*self.path, inherited]) if self.path else inherited

    def find(self, cli: str, environ: Mapping[str, str] | None = None) -> str | None:
        """The executable for a [cli] key: its AGENTQUEUE_*_BIN variable (read now), the file's path, else PATH."""
        env = os.environ if environ is None else environ
        override = env.get(CLI_KEYS[cli][0], "").strip()
        if override:
            found = override if os.sep in override else shutil.which(override, path=self.search_path(env))
            return found if found and os.access(found, os.X_OK) else None
        configured = self.cli.get(cli)
        if configured:
            return configured
        return shutil.which(cli, path=self.search_path(env))

    def agent_environment(self, kind: str | None = None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """What a run of agent kind `kind` starts from: the base set, the kind's own variables, [env] pass, then
        [agent_env] (a model variable of another kind's only for that kind). None: every kind's (a daemon-side
        login check, never a run)."""
        source = os.environ if environ is None else environ
        kinds = list(KIND_ENV) if kind is None else [kind]
        keep = set(BASE_ENV) | set(self.pass_env or ()) | set(_codex_key_names(source) if "codex" in kinds else ())
        env = {k: v for k, v in source.items() if k in keep or k.startswith("LC_") or _of_kinds(k, kinds)}
        env["PATH"] = self.search_path(source)
        env.update({k: v for k, v in self.agent_env.items() if _of_kinds(k, kinds) or not _of_kinds(k, KIND_ENV)})
        for name in NEVER_ENV:
            env.pop(name, None)
        return env


def _of_kinds(name: str, kinds: list[str] | dict[str, Any]) -> bool:
    """Whether `name` is one of these agent kinds' own variables (KIND_ENV)."""
    return any(name.startswith(KIND_ENV[k][0]) or name in KIND_ENV[k][1] for k in kinds if k in KIND_ENV)


def _codex_key_names(source: Mapping[str, str]) -> list[str]:
    """The variables the person's Codex config names for its providers' keys (`env_key`), e.g. a proxy's key."""
    home = source.get("CODEX_HOME") or os.path.join(source.get("HOME") or os.path.expanduser("~"), ".codex")
    try:
        data = tomllib.loads(Path(home, "config.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, ValueError):
        return []
    providers = data.get("model_providers")
    found = [p.get("env_key") for p in providers.values() if isinstance(p, dict)] if isinstance(providers, dict) else []
    return [name for name in found if isinstance(name, str) and _ENV_NAME.match(name)]


def config_path(home: Path) -> Path:
    return home / CONFIG_NAME


def duration_seconds(value: Any) -> float | None:
    """Seconds from 90, 1.5, "90s", "10m", "1h" or "1d"; None when `value` is not a duration (a bool neither)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    match = _DURATION.match(str(value))
    return float(match[1]) * _UNITS[match[2]] if match else None


def parse_duration(value: Any, where: str) -> float:
    """Seconds from 90, 1.5, "90s", "10m", "1h" or "1d"; anything else is a ConfigError."""
    if isinstance(value, bool):
        raise ConfigError(f"{where} = {value!r} is not a duration: "
                          "give seconds (90) or a string like \"10m\" or \"1h\".")
    seconds = duration_seconds(value)
    if seconds is None:
        raise ConfigError(f"{where} = {value!r} is not a duration: give seconds (90) or a number with s, m, h "
                          "or d (\"90s\", \"10m\", \"1h\").")
    if not math.isfinite(seconds):
        raise ConfigError(f"{where} = {value!r} is not a finite duration.")
    return seconds


def _number(raw: Any, where: str, minimum: float, whole: bool) -> float:
    if whole:
        try:
            value = float(int(str(raw).strip())) if not isinstance(raw, bool) else None
        except ValueError:
            value = None
        if value is None:
            raise ConfigError(f"{where} = {raw!r} is not a whole number.")
    else:
        value = parse_duration(raw, where)
    if value < minimum:
        raise ConfigError(f"{where} = {raw!r} is too small: it must be at least {minimum:g}.")
    return int(value) if whole else value


def _seconds(minimum: float) -> Parser:
    """A duration of at least `minimum` seconds."""
    return partial(_number, minimum=minimum, whole=False)


def _nice(raw: Any, where: str) -> int:
    value = _number(raw, where, minimum=0, whole=True)
    if value > 19:
        raise ConfigError(f"{where} = {raw!r} is too big: niceness goes from 0 (agents as the daemon) to 19 (lowest).")
    return int(value)


_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?\s*\Z", re.I)
_SIZE_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3, "kib": 1024, "mib": 1024 ** 2,
               "gib": 1024 ** 3}


def _bytes(raw: Any, where: str) -> int:
    """A size in bytes, at least 1: a whole number, or a number with B, KB, MB, GB (powers of 1000) or KiB, MiB, GiB."""
    match = _SIZE.match(str(raw)) if isinstance(raw, (int, float, str)) and not isinstance(raw, bool) else None
    size = int(float(match[1]) * _SIZE_UNITS[(match[2] or "").lower()]) if match else 0
    if size < 1:
        raise ConfigError(f"{where} = {raw!r} is not a size: give bytes (10485760) or a number with a unit, "
                          "e.g. \"10MiB\", \"500KB\", \"1GiB\".")
    return size


def _whole(minimum: int) -> Parser:
    """A whole number of at least `minimum`."""
    return partial(_number, minimum=minimum, whole=True)


def _executable(raw: Any, where: str, search_path: str) -> str:
    if not isinstance(raw, str) or not raw.strip():
        raise ConfigError(f"{where} must be the path of an executable (a string).")
    value = os.path.expanduser(raw.strip())
    found = value if os.sep in value else shutil.which(value, path=search_path)
    if not found or not os.path.isfile(found) or not os.access(found, os.X_OK):
        raise ConfigError(f"{where} = {raw!r} is not an executable file. Give the CLI's absolute path "
                          f"(`which {Path(value).name}` in a terminal prints it), or remove the setting.")
    return os.path.abspath(found)


def _names(raw: Any, where: str) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
        raise ConfigError(f"{where} must be a list of environment variable names, e.g. [\"HTTPS_PROXY\"].")
    bad = [n for n in raw if not _ENV_NAME.match(n)]
    if bad:
        raise ConfigError(f"{where} has invalid environment variable name(s): {', '.join(map(repr, bad))}.")
    return list(raw)


def _directories(raw: Any, where: str) -> list[str]:
    if not isinstance(raw, list) or not all(isinstance(d, str) and os.path.isabs(os.path.expanduser(d)) for d in raw):
        raise ConfigError(f"{where} must be a list of absolute directories, e.g. [\"/usr/local/bin\"].")
    return [os.path.expanduser(d) for d in raw]


def _port(raw: Any, where: str) -> int:
    try:
        port = int(str(raw).strip()) if not isinstance(raw, bool) else -1
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise ConfigError(f"{where} = {raw!r} is not a port: give a number from 1 to 65535, or 0 for any free port.")
    return port


def _metrics_public(raw: Any, where: str) -> bool:
    flag = _FLAGS.get(str(raw).strip().lower()) if isinstance(raw, (bool, str)) else None
    if flag is None:
        raise ConfigError(f"{where} = {raw!r} is not true or false: say `metrics_public = true` to serve "
                          "GET /metrics without the token, or false (the default) to require it.")
    return flag


def _hosts(raw: Any, where: str) -> list[str]:
    hosts = [h.strip() for h in raw.split(",")] if isinstance(raw, str) else raw
    if not isinstance(hosts, list) or not all(isinstance(h, str) and _HOST.fullmatch(h) for h in hosts):
        raise ConfigError(f"{where} = {raw!r} is not a list of host names: give the names or addresses HTTP "
                          'clients use to reach this machine, e.g. ["box.lan", "10.0.0.5"] (no ports, no URLs).')
    return [h for h in hosts if h]


def _roots(raw: Any, where: str) -> list[Path]:
    items = [p for p in raw.split(os.pathsep) if p.strip()] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not all(isinstance(p, str) and p.strip() for p in items):
        raise ConfigError(f"{where} = {raw!r} is not a list of folders: give absolute paths (or ~/…), e.g. "
                          '["~/code", "/srv/repos"].')
    roots = [Path(os.path.expanduser(p.strip())) for p in items]
    relative = [str(p) for p in roots if not p.is_absolute()]
    if relative:
        raise ConfigError(f"{where}: {', '.join(relative)} is not absolute; give absolute paths or ~/….")
    return roots


def _retention_days(raw: Any, where: str) -> int:
    try:
        days = int(str(raw).strip()) if not isinstance(raw, (bool, float)) else 0
    except ValueError:
        days = 0
    if days < 1:
        raise ConfigError(f"{where} = {raw!r} is not a number of days: give a whole number, at least 1 "
                          "(audit rows older than that are deleted).")
    return days


def _toolsets(raw: Any, where: str) -> list[str]:
    from .server.toolsets import parse_toolsets  # the toolset names come from the tool registry: only when set

    try:
        return parse_toolsets(",".join(raw) if isinstance(raw, list) and all(isinstance(x, str) for x in raw)
                              else raw if isinstance(raw, str) else "")
    except ValueError as error:
        raise ConfigError(f"{where} = {raw!r}: {error}, e.g. [\"default\", \"git\"] or [\"all\"].") from None


def _database_url(raw: Any, where: str) -> str:
    if not isinstance(raw, str) or not re.match(r"postgres(ql)?://", raw.strip()):
        raise ConfigError(f"{where} is not a PostgreSQL URL: give postgresql://user@host:port/database "
                          "(or remove it for the embedded SQLite store).")
    return raw.strip()


def _labels(raw: Any, where: str) -> list[str]:
    labels = [x.strip() for x in raw.split(",")] if isinstance(raw, str) else raw
    if not isinstance(labels, list) or not all(isinstance(x, str) and LABEL.match(x) for x in labels if x):
        raise ConfigError(f"{where} = {raw!r} is not a list of labels: give short names of letters, digits and "
                          '"_.:-", e.g. ["gpu", "linux"].')
    return [x for x in labels if x]


def _notify(key: str) -> Parser:
    """A `[notify]` key, read by notify/config.py."""
    def parse(raw: Any, where: str) -> Any:
        try:
            return parse_notify_key(key, raw, where)
        except NotifyConfigError as error:
            raise ConfigError(str(error)) from None
    return parse


@dataclass(frozen=True)
class Field:
    """One setting: `[section] key` in config.toml, the variable that overrides it, and how a raw value is read."""

    section: str
    key: str
    env: str | None  # None: the file only
    parse: Callable[..., Any]  # (raw, where) -> value; one-sentence ConfigError naming `where` when it is wrong
    attr: str  # the Settings attribute it sets (for `engine` and `cli`, under `key`)
    default: Any = None  # engine fields; the other attributes keep their default on Settings
    searches_path: bool = False  # parse also gets the search path ([env] path first), to find an executable


# In load order: [env] path comes first because the [cli] fields are looked for on it.
FIELDS: tuple[Field, ...] = (
    Field("env", "path", None, _directories, "path"),
    Field("env", "pass", None, _names, "pass_env"),
    Field("engine", "poll_seconds", "AGENTQUEUE_POLL_SECONDS", _seconds(0.01), "engine", 1.0),
    Field("engine", "task_timeout", "AGENTQUEUE_TASK_TIMEOUT", _seconds(1), "engine", 3600.0),
    Field("engine", "stall_seconds", "AGENTQUEUE_STALL_SECONDS", _seconds(1), "engine", 600.0),
    Field("engine", "max_turns", "AGENTQUEUE_MAX_TURNS", _whole(1), "engine", 50),
    Field("engine", "rate_limit_backoff", "AGENTQUEUE_RATE_LIMIT_BACKOFF", _seconds(0), "engine", 60.0),
    Field("engine", "rate_limit_max_backoff", "AGENTQUEUE_RATE_LIMIT_MAX_BACKOFF", _seconds(0), "engine", 900.0),
    Field("engine", "pr_poll_seconds", "AGENTQUEUE_PR_POLL_SECONDS", _seconds(1), "engine", 60.0),
    Field("engine", "login_check_seconds", "AGENTQUEUE_LOGIN_CHECK_SECONDS", _seconds(0.1), "engine", 30.0),
    Field("engine", "max_task_depth", "AGENTQUEUE_MAX_TASK_DEPTH", _whole(0), "engine", 3),
    Field("engine", "agent_nice", "AGENTQUEUE_AGENT_NICE", _nice, "engine", 10),
    # What one landing may add before a person sees it (engine/land_guards.py): a file, a binary, in all.
    Field("engine", "land_max_file", "AGENTQUEUE_LAND_MAX_FILE", _bytes, "engine", 10 * 1024 ** 2),
    Field("engine", "land_max_binary", "AGENTQUEUE_LAND_MAX_BINARY", _bytes, "engine", 1024 ** 2),
    Field("engine", "land_max_total", "AGENTQUEUE_LAND_MAX_TOTAL", _bytes, "engine", 50 * 1024 ** 2),
    Field("engine", "land_max_files", "AGENTQUEUE_LAND_MAX_FILES", _whole(1), "engine", 2000),
    *(Field("cli", key, env_name, _executable, "cli", searches_path=True) for key, (env_name, _) in CLI_KEYS.items()),
    Field("server", "port", "AGENTQUEUE_PORT", _port, "port"),
    Field("server", "metrics_public", "AGENTQUEUE_METRICS_PUBLIC", _metrics_public, "metrics_public"),
    Field("server", "allowed_hosts", "AGENTQUEUE_ALLOWED_HOSTS", _hosts, "allowed_hosts"),
    Field("files", "roots", "AGENTQUEUE_ROOTS", _roots, "roots"),
    Field("audit", "retention_days", "AGENTQUEUE_AUDIT_RETENTION_DAYS", _retention_days, "audit_retention_days"),
    Field("mcp", "toolsets", None, _toolsets, "toolsets"),  # no variable: the daemon's environment is not the client's
    Field("team", "database_url", "AGENTQUEUE_DATABASE_URL", _database_url, "database_url"),
    Field("team", "labels", "AGENTQUEUE_LABELS", _labels, "labels"),
    Field("team", "lease_seconds", "AGENTQUEUE_LEASE_SECONDS", _seconds(1), "lease_seconds"),
    *(Field("notify", key, "AGENTQUEUE_NOTIFY_URLS" if key == "urls" else None, _notify(key), "notify")
      for key in NOTIFY_KEYS),
)
_KEYED = ("engine", "cli", "notify")  # Settings attributes that are dicts of their section's keys
# (key, default, environment variable) of each [engine] field.
ENGINE_KEYS: list[tuple[str, Any, str | None]] = [(f.key, f.default, f.env) for f in FIELDS if f.section == "engine"]
# Every section config.toml may have, with its keys (None: any name, [agent_env]); [sandbox] is read by its own parser.
SECTIONS: dict[str, set[str] | None] = {
    section: {f.key for f in FIELDS if f.section == section}
    for section in ("engine", "cli", "env", "agent_env", "server", "audit", "files", "mcp", "team", "notify")}
SECTIONS["agent_env"] = None
SECTIONS["sandbox"] = {"required", "network", "hosts", "writable", "tmp_size", "max_processes"}


def _read_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        return {}
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path} is not valid TOML ({error}). "
                          "Fix it, or move it aside to use the defaults.") from None
    except OSError as error:
        raise ConfigError(f"{path} cannot be read ({error.strerror or error}).") from None
    for section, value in data.items():
        if section not in SECTIONS:
            raise ConfigError(f"{path}: unknown section [{section}]. Known sections: "
                              f"{', '.join(f'[{s}]' for s in SECTIONS)}.")
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: `{section}` must be a table ([{section}]).")
        known = SECTIONS[section]
        unknown = sorted(set(value) - known) if known is not None else []
        if unknown:
            raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)} in [{section}]. Known keys: "
                              f"{', '.join(sorted(known))}.")
    return data


def load(home: Path, environ: Mapping[str, str] | None = None) -> Settings:
    """The settings for `home`: its config.toml, overridden by AGENTQUEUE_* variables."""
    env = os.environ if environ is None else environ
    path = config_path(home)
    data = _read_file(path)
    settings = Settings()
    settings.agent_env = _agent_env(data.get("agent_env", {}), path, settings.sources)
    for spec in FIELDS:
        chosen = _pick(spec, data, path, env)
        if chosen is None:
            continue
        raw, where, source = chosen
        value = spec.parse(raw, where, settings.search_path(env)) if spec.searches_path else spec.parse(raw, where)
        if spec.attr in _KEYED:
            getattr(settings, spec.attr)[spec.key] = value
        else:
            setattr(settings, spec.attr, value)
        settings.sources[f"{spec.section}.{spec.key}"] = source
    _load_sandbox(settings, data, path, env)
    return settings


def store_url(home: Path, environ: Mapping[str, str] | None = None) -> str | None:
    """Only where the store is (`[team] database_url`), for a terminal read or `stop` that must work while another
    key of config.toml is bad; raises ConfigError only when this key itself cannot be read."""
    env = os.environ if environ is None else environ
    if env.get("AGENTQUEUE_DATABASE_URL", "").strip():
        return _database_url(env["AGENTQUEUE_DATABASE_URL"], "AGENTQUEUE_DATABASE_URL")
    path = config_path(home)
    try:
        with path.open("rb") as handle:
            team = tomllib.load(handle).get("team")
    except FileNotFoundError:
        return None
    except (OSError, tomllib.TOMLDecodeError):
        load(home, env)  # raises the one-sentence error doctor gives
        raise
    raw = team.get("database_url") if isinstance(team, dict) else None
    return None if raw is None else _database_url(raw, f"{path} [team] database_url")


def _pick(spec: Field, data: dict[str, Any], path: Path, env: Mapping[str, str]) -> tuple[Any, str, str] | None:
    """(raw value, where it came from for an error, source for `describe`) of a field that is set, else None."""
    if spec.env and env.get(spec.env, "").strip():
        return env[spec.env], spec.env, f"env {spec.env}"
    if spec.key in data.get(spec.section, {}):
        return data[spec.section][spec.key], f"{path} [{spec.section}] {spec.key}", "config.toml"
    return None


def _agent_env(table: dict[str, Any], path: Path, sources: dict[str, str]) -> dict[str, str]:
    """[agent_env]: any variable names, each set to a string for every agent run."""
    values = {}
    for name, value in table.items():
        where = f"{path} [agent_env] {name}"
        if not _ENV_NAME.match(name):
            raise ConfigError(f"{where}: {name!r} is not a valid environment variable name.")
        if name in NEVER_ENV:
            raise ConfigError(f"{where}: AgentQueue's own {name} is never given to agents; remove it.")
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ConfigError(f"{where} must be a string (quote it: {name} = \"…\").")
        values[name] = str(value)
        sources[f"agent_env.{name}"] = "config.toml"
    return values


def _load_sandbox(settings: Settings, data: dict[str, Any], path: Path, env: Mapping[str, str]) -> None:
    """[sandbox], with AGENTQUEUE_SANDBOX_REQUIRED and AGENTQUEUE_SANDBOX_NETWORK over the file."""
    table = dict(data.get("sandbox", {}))
    where = f"{path} [sandbox]"
    for key, name in (("required", "AGENTQUEUE_SANDBOX_REQUIRED"), ("network", "AGENTQUEUE_SANDBOX_NETWORK")):
        raw = env.get(name, "").strip()
        if raw:
            where = f"{where} (or {name})"
            if key == "required":
                flag = _FLAGS.get(raw.lower())
                if flag is None:
                    raise ConfigError(f"{name} = {raw!r} is not true or false.")
                table[key] = flag
            else:
                table[key] = raw
            settings.sources[f"sandbox.{key}"] = f"env {name}"
        elif key in table:
            settings.sources[f"sandbox.{key}"] = "config.toml"
    try:
        settings.sandbox = parse_settings(table, where)
    except SandboxConfigError as error:
        raise ConfigError(str(error)) from None


def _shown_number(value: float) -> str:
    """A setting's number as a person wrote it: whole numbers in full (a size in bytes), others shortest."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def describe(settings: Settings) -> list[dict[str, str]]:
    """Every effective setting with where it came from, secrets redacted (for `doctor` and `config`)."""
    rows = [{"key": f"engine.{k}", "value": _shown_number(settings.engine[k]),
             "source": settings.sources.get(f"engine.{k}", "default")} for k, *_ in ENGINE_KEYS]
    for key in CLI_KEYS:
        found = settings.find(key)
        rows.append({"key": f"cli.{key}", "value": found or "(not found)",
                     "source": settings.sources.get(f"cli.{key}", "PATH" if found else "-")})
    rows.append({"key": "env.path", "value": os.pathsep.join(settings.path) or "(none)",
                 "source": settings.sources.get("env.path", "default")})
    rows.append({"key": "env.pass", "value": "(base set and each kind's own)" if settings.pass_env is None
                 else ", ".join(settings.pass_env) or "(base set only)", "source": settings.sources.get("env.pass",
                                                                                                       "default")})
    for name, value in sorted(settings.agent_env.items()):
        shown = "••••" + value[-4:] if _SECRET.search(name) and len(value) > 8 else ("••••" if _SECRET.search(name)
                                                                                    else value)
        rows.append({"key": f"agent_env.{name}", "value": shown, "source": "config.toml"})
    rows.append({"key": "server.port", "value": str(settings.port), "source": settings.sources.get("server.port",
                                                                                                   "default")})
    rows.append({"key": "files.roots", "value": ", ".join(map(str, settings.roots)) or "(none: only the home's "
                 "workspaces/)", "source": settings.sources.get("files.roots", "default")})
    rows.append({"key": "server.allowed_hosts", "value": ", ".join(settings.allowed_hosts) or "(loopback only)",
                 "source": settings.sources.get("server.allowed_hosts", "default")})
    rows.append({"key": "server.metrics_public", "value": str(settings.metrics_public).lower(),
                 "source": settings.sources.get("server.metrics_public", "default")})
    rows.append({"key": "mcp.toolsets", "value": ", ".join(settings.toolsets),
                 "source": settings.sources.get("mcp.toolsets", "default")})
    rows.append({"key": "audit.retention_days", "value": str(settings.audit_retention_days),
                 "source": settings.sources.get("audit.retention_days", "default")})
    rows.append({"key": "team.database_url", "value": redact_url(settings.database_url) if settings.database_url
                 else "(none: the home's SQLite file)", "source": settings.sources.get("team.database_url", "default")})
    rows.append({"key": "team.labels", "value": ", ".join(settings.labels) or "(none)",
                 "source": settings.sources.get("team.labels", "default")})
    rows.append({"key": "team.lease_seconds", "value": f"{settings.lease_seconds:g}",
                 "source": settings.sources.get("team.lease_seconds", "default")})
    rows.append({"key": "notify.urls", "value": ", ".join(map(mask_url, settings.notify.get("urls", ()))) or
                 "(none: nobody is told when a person is needed)", "source": settings.sources.get("notify.urls",
                                                                                                   "default")})
    rows.append({"key": "sandbox.required", "value": str(settings.sandbox.required is not False).lower(),
                 "source": settings.sources.get("sandbox.required", "default")})
    rows.append({"key": "sandbox.network", "value": settings.sandbox.network or "allowlist",
                 "source": settings.sources.get("sandbox.network", "default")})
    rows.append({"key": "sandbox.hosts", "value": ", ".join(settings.sandbox.hosts) or "(only the model endpoint)",
                 "source": "config.toml" if settings.sandbox.hosts else "default"})
    rows.append({"key": "sandbox.writable", "value": ", ".join(map(str, settings.sandbox.writable)) or "(none)",
                 "source": "config.toml" if settings.sandbox.writable else "default"})
    rows.append({"key": "sandbox.tmp_size", "value": f"{(settings.sandbox.tmp_size or DEFAULT_TMP_SIZE) >> 20} MiB",
                 "source": "config.toml" if settings.sandbox.tmp_size else "default"})
    rows.append({"key": "sandbox.max_processes", "value": str(settings.sandbox.max_processes or DEFAULT_MAX_PROCESSES),
                 "source": "config.toml" if settings.sandbox.max_processes else "default"})
    return rows


def redact_url(url: str) -> str:
    """A database URL with its password hidden, for logs and `doctor`."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1••••@", url)


def mask_url(url: str) -> str:
    """A notifier URL with its secrets hidden: only the scheme and a host name stay (a token in the host's place,
    as in tgram://TOKEN/…, goes too)."""
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0].split("?", 1)[0]
    host = host.rsplit("@", 1)[-1]  # user:password@ goes
    if not _SHOWN_HOST.fullmatch(host):
        host = "••••"
    return f"{scheme}://{host}/••••" if rest.strip("/") != host else f"{scheme}://{host}"
