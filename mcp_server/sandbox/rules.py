"""What one sandboxed run may touch: the files it can write, the secrets it cannot read, the hosts it can reach.

The walls stand under every preset; the preset only decides what the policy asks. `readonly` mounts the
worktree read-only; `standard` and `autonomous` make it writable. The network is an allowlist unless a
person sets `network = "open"` (or `"off"`): the model endpoint of the agent's CLI is always on it, package
registries only when the policy lets installs run without asking.

Settings: `[sandbox]` in config.toml (required, network, hosts, writable) and `[projects.<id>.sandbox]` in
policy.toml (network, hosts, writable, required) for one project.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

if TYPE_CHECKING:
    from .model_keys import ModelRoute

NETWORK_MODES = ("allowlist", "open", "off")
KEYS = {"required", "network", "hosts", "writable", "tmp_size", "max_processes"}
# Limits per run (issue 33): each private /tmp, /var/tmp and /run is a tmpfs (host RAM) of at most this many bytes,
# and a run's processes and threads together are at most this many (a pids cgroup: sandbox/limits.py).
DEFAULT_TMP_SIZE = 1024 ** 3
DEFAULT_MAX_PROCESSES = 1024
_SIZE = re.compile(r"(\d+)\s*([kmgt]i?b?|b)?\Z", re.IGNORECASE)
_HOST = re.compile(r"(?:\*\.)?[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?(?::\d{1,5})?\Z"
                   r"|\[[0-9A-Fa-f:.]+\](?::\d{1,5})?\Z")

# Secrets no run may read, relative to the home folder (the sandbox puts an empty folder or file there).
SECRETS = (".ssh", ".aws", ".gnupg", ".config/gh", ".netrc", ".git-credentials", ".docker", ".kube",
           ".config/gcloud", ".azure", ".npmrc", ".pypirc", ".password-store", ".config/hub", ".cargo/credentials",
           ".cargo/credentials.toml", ".local/share/keyrings", ".pki", ".terraform.d")
# Caches every run may write, relative to the home folder. A CLI's own state is not among them: each run gets a
# throwaway copy of it (cli_homes.py), so nothing a run writes steers a later run or the person's own sessions.
SHARED_STATE = (".cache", ".npm", ".local/state")
# Skill folders inside a CLI's writable state: skills steer every later session of the person's (issue 24's
# `agentqueue install --skill --user` writes one), so a run never plants or changes one.
USER_SKILLS = (".claude/skills", ".codex/skills")
# Codex's exec-policy rules (`rules/*.rules` in its home): a prefix rule with `decision="allow"` runs matching commands
# without asking its client (verified with 0.169), so a planted one would take later runs' commands out of
# AgentQueue's policy. Frozen like the skills, under ~/.codex and under $CODEX_HOME (with its skills).
CODEX_RULES = ".codex/rules"
CODEX_HOME_FROZEN = ("skills", "rules")
# Where each CLI's model lives unless its environment says otherwise.
DEFAULT_ENDPOINTS = {
    "claude-code": ("api.anthropic.com:443", "statsig.anthropic.com:443", "console.anthropic.com:443"),
    "codex": ("api.openai.com:443", "chatgpt.com:443", "auth.openai.com:443"),
    "gemini": ("generativelanguage.googleapis.com:443", "oauth2.googleapis.com:443", "cloudcode-pa.googleapis.com:443"),
}
ENDPOINT_VARIABLES = ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "GEMINI_BASE_URL",
                      "CODE_ASSIST_ENDPOINT")
# Package registries: reachable only when the policy lets installs run without asking.
REGISTRIES = ("registry.npmjs.org:443", "registry.yarnpkg.com:443", "pypi.org:443", "files.pythonhosted.org:443",
              "crates.io:443", "index.crates.io:443", "static.crates.io:443", "proxy.golang.org:443",
              "sum.golang.org:443", "rubygems.org:443", "repo.maven.apache.org:443", "repo1.maven.org:443")


class SandboxConfigError(ValueError):
    """A [sandbox] setting that cannot be used; the message names where it is and what is expected."""


@dataclass(frozen=True)
class SandboxSettings:
    """One level of [sandbox] settings; None means "not set here"."""

    required: bool | None = None
    network: str | None = None
    hosts: tuple[str, ...] = ()
    writable: tuple[Path, ...] = ()
    tmp_size: int | None = None  # bytes; None: DEFAULT_TMP_SIZE
    max_processes: int | None = None  # None: DEFAULT_MAX_PROCESSES

    def over(self, base: SandboxSettings) -> SandboxSettings:
        """These settings laid over `base`: scalars replace, lists add up."""
        return SandboxSettings(self.required if self.required is not None else base.required,
                               self.network or base.network, base.hosts + self.hosts, base.writable + self.writable,
                               self.tmp_size or base.tmp_size, self.max_processes or base.max_processes)


def parse_size(value: Any, where: str) -> int | None:
    """A size in bytes: an integer, or a string such as "512M" or "2G" (powers of 1024); None when not set."""
    if value is None:
        return None
    found = _SIZE.match(value.strip()) if isinstance(value, str) else None
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif found:
        unit = (found.group(2) or "b")[0].lower()
        size = int(found.group(1)) * 1024 ** "bkmgt".index(unit)
    else:
        raise SandboxConfigError(f'{where} tmp_size = {value!r} is not a size: give bytes or e.g. "512M", "2G".')
    if size < 1024 ** 2:
        raise SandboxConfigError(f"{where} tmp_size = {value!r} is under 1 MiB; a run needs some /tmp.")
    return size


def parse_settings(table: Any, where: str) -> SandboxSettings:
    """A [sandbox] table from config.toml or policy.toml, checked."""
    if not isinstance(table, dict):
        raise SandboxConfigError(f"{where} must be a table ([sandbox]).")
    unknown = sorted(set(table) - KEYS)
    if unknown:
        raise SandboxConfigError(f"{where}: unknown key(s) {', '.join(unknown)}. Known: {', '.join(sorted(KEYS))}.")
    required = table.get("required")
    if required is not None and not isinstance(required, bool):
        raise SandboxConfigError(f"{where} required = {required!r} is not true or false.")
    network = table.get("network")
    if network is not None and network not in NETWORK_MODES:
        raise SandboxConfigError(f"{where} network = {network!r} is not one of {', '.join(NETWORK_MODES)}.")
    hosts = table.get("hosts", [])
    if not isinstance(hosts, list) or not all(isinstance(h, str) and _HOST.match(h.strip()) for h in hosts):
        raise SandboxConfigError(f"{where} hosts must be a list of host names or host:port, e.g. "
                                 '["github.com", "registry.npmjs.org:443"] (no URLs).')
    writable = table.get("writable", [])
    if not isinstance(writable, list) or not all(isinstance(p, str) and p.strip() for p in writable):
        raise SandboxConfigError(f"{where} writable must be a list of absolute folders, e.g. [\"~/.m2\"].")
    paths = [Path(os.path.expanduser(p.strip())) for p in writable]
    relative = [str(p) for p in paths if not p.is_absolute()]
    if relative:
        raise SandboxConfigError(f"{where} writable: {', '.join(relative)} is not absolute; give /… or ~/….")
    processes = table.get("max_processes")
    if processes is not None and (not isinstance(processes, int) or isinstance(processes, bool) or processes < 16):
        raise SandboxConfigError(f"{where} max_processes = {processes!r} is not a whole number of at least 16.")
    return SandboxSettings(required, network, tuple(h.strip().lower() for h in hosts), tuple(paths),
                           parse_size(table.get("tmp_size"), where), processes)


def project_settings(policy_file: Path, project_id: str | None) -> SandboxSettings:
    """policy.toml's [sandbox] and [projects.<id>.sandbox], the project's laid over the global one."""
    try:
        data = tomllib.loads(policy_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return SandboxSettings()
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise SandboxConfigError(f"{policy_file} cannot be read ({error}); fix it or move it aside.") from None
    found = parse_settings(data.get("sandbox", {}), f"{policy_file} [sandbox]")
    projects = data.get("projects", {})
    if project_id and isinstance(projects, dict) and isinstance(projects.get(project_id), dict):
        table = projects[project_id].get("sandbox")
        if table is not None:
            found = parse_settings(table, f"{policy_file} [projects.{project_id}.sandbox]").over(found)
    return found


@dataclass(frozen=True)
class Endpoint:
    """One allowed destination: a host (maybe `*.suffix`) and a port (None: any)."""

    host: str
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> Endpoint:
        text = text.strip().lower()
        if text.startswith("["):
            host, _, port = text[1:].partition("]")
            port = port.removeprefix(":")
        else:
            host, _, port = text.rpartition(":") if text.count(":") == 1 else (text, "", "")
        return cls(host, int(port) if port else None)

    @property
    def loopback(self) -> bool:
        return self.host in ("127.0.0.1", "localhost", "::1") and self.port is not None

    def allows(self, host: str, port: int) -> bool:
        host = host.lower().strip("[]")
        if self.port is not None and self.port != port:
            return False
        if self.host.startswith("*."):
            return host.endswith(self.host[1:])
        same_loopback = self.loopback and host in ("127.0.0.1", "localhost", "::1")
        return host == self.host or same_loopback

    def __str__(self) -> str:
        return self.host + (f":{self.port}" if self.port is not None else "")


@dataclass(frozen=True)
class SandboxRules:
    """Everything bubblewrap and the network gate need for one run."""

    workdir: Path
    workdir_writable: bool
    writable: tuple[Path, ...] = ()  # besides the workdir: CLI state, the task's git refs, extra folders
    hidden: tuple[Path, ...] = ()  # secrets and AgentQueue's home: an empty folder or file in their place
    sockets: tuple[Path, ...] = ()  # Unix sockets the run may connect to (the daemon's, for the agent toolset)
    readable: tuple[Path, ...] = ()  # programs under a folder the sandbox makes private (/tmp): shown read-only
    frozen: tuple[Path, ...] = ()  # inside a writable folder, yet read-only: the person's skills (USER_SKILLS)
    network: str = "allowlist"
    endpoints: tuple[Endpoint, ...] = ()
    masks: Mapping[Path, bytes | None] = field(default_factory=dict)  # files shown with other content (or none)
    tmp_size: int = DEFAULT_TMP_SIZE  # bytes of each private tmpfs (/tmp, /var/tmp, /run, a covered secret folder)
    max_processes: int = DEFAULT_MAX_PROCESSES  # processes and threads of the run together, where it can be held
    env: Mapping[str, str] = field(default_factory=dict)  # variables the run gets: its CLI's own state folder
    scratch: tuple[Path, ...] = ()  # folders made for this run alone, removed when it ends
    models: tuple[ModelRoute, ...] = ()  # loopback ports the gate serves as the model endpoint, keys added (model_keys)

    @property
    def forwards(self) -> tuple[int, ...]:
        """Loopback ports the run reaches as if they were its own (a local model mock, a local proxy, a model route)."""
        return tuple(sorted({e.port for e in self.endpoints if e.loopback and e.port} | {m.port for m in self.models}))

    def allows(self, host: str, port: int) -> bool:
        if self.network == "open":
            return True
        return self.network == "allowlist" and any(e.allows(host, port) for e in self.endpoints)

    def describe(self) -> str:
        """One line for the task log: under which rules this run ran."""
        net = {"open": "network open (no allowlist)", "off": "network off"}.get(
            self.network, "network allowlist: " + (", ".join(map(str, self.endpoints)) or "(empty)"))
        return (f"sandboxed (bubblewrap): {self.workdir} {'writable' if self.workdir_writable else 'read-only'}; "
                f"writable besides: {', '.join(map(str, self.writable)) or 'none'}; the rest of the system read-only; "
                f"hidden: {', '.join(map(str, self.hidden))}; {net}")


def endpoints_of(env: Mapping[str, str], agent_type: str | None, writable: Sequence[Path] = ()) -> list[str]:
    """The model endpoints an agent is configured with (`ANTHROPIC_BASE_URL` and the like), as host:port; a CLI
    config file inside a folder a run may write (`writable`) is not read: a run would choose the next one's hosts."""
    found: list[str] = []
    configured = False
    for name in ENDPOINT_VARIABLES:
        url = env.get(name, "").strip()
        if url:
            configured = True
            parsed = urlparse(url if "://" in url else f"https://{url}")
            if parsed.hostname:
                port = parsed.port or (443 if parsed.scheme == "https" else 80)
                host = f"[{parsed.hostname}]" if ":" in parsed.hostname else parsed.hostname
                found.append(f"{host}:{port}")
    found += codex_endpoints(env, writable)
    if agent_type in DEFAULT_ENDPOINTS and not configured:
        found += DEFAULT_ENDPOINTS[agent_type]
    return found


def codex_endpoints(env: Mapping[str, str], writable: Sequence[Path] = ()) -> list[str]:
    """Codex names its model providers' URLs in the person's `$CODEX_HOME/config.toml`, not in the environment
    (runs get a copy of it, never the file itself: cli_homes.py)."""
    home = env.get("CODEX_HOME") or os.path.join(env.get("HOME", ""), ".codex")
    config = Path(os.path.realpath(Path(home, "config.toml")))
    if any(config.is_relative_to(os.path.realpath(w)) for w in writable):
        return []
    try:
        data = tomllib.loads(config.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, ValueError):
        return []
    found = []
    providers = data.get("model_providers", {})
    urls = [data.get("openai_base_url")]  # the built-in provider's, when the person moved it
    urls += [p.get("base_url") for p in providers.values() if isinstance(p, dict)] if isinstance(providers, dict) \
        else []
    for url in urls:
        parsed = urlparse(url) if isinstance(url, str) else None
        if parsed and parsed.hostname:
            found.append(f"{parsed.hostname}:{parsed.port or (443 if parsed.scheme == 'https' else 80)}")
    return found


def state_paths(home_dir: Path, env: Mapping[str, str]) -> list[Path]:
    """The cache folders every run may write (never a CLI's settings: cli_homes.py)."""
    found = [home_dir / n for n in SHARED_STATE]
    if env.get("XDG_CACHE_HOME"):
        found.append(Path(env["XDG_CACHE_HOME"]))
    return found


def closed_loopback(found: Sequence[str], named: Sequence[str], closed: set[int]) -> list[str]:
    """`found` without the loopback endpoints on a port of AgentQueue's own (its HTTP port, PostgreSQL's) that the
    person's config (`named`: config.toml's and policy.toml's hosts) does not name: a run reaching the daemon's
    /mcp or its database would act as the daemon."""
    allowed = {e.port for e in map(Endpoint.parse, named) if e.loopback}
    return [text for text in found
            if not ((e := Endpoint.parse(text)).loopback and e.port in closed and e.port not in allowed)]


def secret_paths(home_dir: Path) -> list[Path]:
    return [home_dir / s for s in SECRETS]
