"""Model keys stay in the daemon (issue 33): a sandboxed run holds a placeholder, and the gate adds the real key.

A run of a CLI kind whose network is the gate's allowlist gets, instead of its model key (`ANTHROPIC_API_KEY`,
`ANTHROPIC_AUTH_TOKEN`, `CLAUDE_CODE_OAUTH_TOKEN`, `GEMINI_API_KEY`, `GOOGLE_API_KEY`), a placeholder made for this
run alone, and its base URL variable (`ANTHROPIC_BASE_URL`, `GOOGLE_GEMINI_BASE_URL`) points at a loopback port
inside the sandbox. That port reaches the gate (`port-N.sock`, as a loopback forward does), which reads each request,
puts the real key where the placeholder was (only in the header the CLI sends it in, only under the base URL's path)
and sends the request on to the real endpoint: the person's base URL, else the CLI's default host over TLS with the
certificate checked. A Claude Code subscription login (`.credentials.json`) is kept out the same way: the run's copy
holds a placeholder access token and no refresh token, and the gate puts in the person's current access token, read
from the person's own file at each request (their CLI refreshes it). What a prompt-injected agent can read inside is
worth nothing outside this run.

    plan = plan_for("claude-code", env, state_folder, person_folder, port)  # None: nothing to keep out
    plan.env     # the run's variables: the placeholders and the loopback base URL
    plan.route   # what the gate serves on `port` (gate.py)
"""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from .cli_homes import person_folder

MODEL_PORT = 3129  # the first loopback port inside a sandbox a model route may take (the proxy's is 3128)
PLACEHOLDER = "agentqueue-placeholder-"
OAUTH_PLACEHOLDER = "sk-ant-oat01-agentqueue-placeholder-"  # Claude Code's access tokens start sk-ant-oat01-
CREDENTIALS = ".credentials.json"  # Claude Code's login, in CLAUDE_CONFIG_DIR (else ~/.claude)
PLACEHOLDER_LIFETIME_MS = 365 * 86400 * 1000  # the copy's expiresAt: the run never refreshes (it holds no refresh)


@dataclass(frozen=True)
class Credential:
    """A key one CLI reads from its environment, and where it sends it."""

    variable: str
    header: str  # lower case
    prefix: str = ""  # "Bearer "
    query: str = ""  # a query parameter it may carry the key in instead (Gemini's `?key=`)


@dataclass(frozen=True)
class KindKeys:
    """A CLI kind's model endpoint and the keys it sends there."""

    base_variable: str  # the variable that moves the CLI's model endpoint
    default_base: str
    credentials: tuple[Credential, ...]
    elsewhere: tuple[str, ...] = ()  # switches that send the CLI to another provider: its keys are left as they are


KINDS = {
    "claude-code": KindKeys("ANTHROPIC_BASE_URL", "https://api.anthropic.com", (
        Credential("ANTHROPIC_API_KEY", "x-api-key"),
        Credential("ANTHROPIC_AUTH_TOKEN", "authorization", "Bearer "),
        Credential("CLAUDE_CODE_OAUTH_TOKEN", "authorization", "Bearer ")),
        ("CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX", "CLAUDE_CODE_USE_FOUNDRY")),
    "gemini": KindKeys("GOOGLE_GEMINI_BASE_URL", "https://generativelanguage.googleapis.com", (
        Credential("GEMINI_API_KEY", "x-goog-api-key", query="key"),
        Credential("GOOGLE_API_KEY", "x-goog-api-key", query="key")),
        ("GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_GCA")),
}
# Every variable that may hold a model key the daemon keeps: what an ACP agent's terminals never get either.
KEY_VARIABLES = tuple(dict.fromkeys(c.variable for kind in KINDS.values() for c in kind.credentials))


@dataclass(frozen=True)
class Swap:
    """One placeholder the run holds, and what the gate puts in its place."""

    name: str  # what it stands for, in the run's log: a variable's name, or "the Claude Code login"
    header: str
    prefix: str
    query: str
    placeholder: str
    real: Callable[[], str | None] = field(repr=False, compare=False)  # read when a request comes


@dataclass(frozen=True)
class ModelRoute:
    """A loopback port inside one run that the gate serves as the run's model endpoint, with the real keys."""

    port: int
    upstream: str  # the real endpoint's base URL
    swaps: tuple[Swap, ...]
    note: str = field(default="", compare=False)  # one line for the run's log

    @property
    def scheme(self) -> str:
        return urlsplit(self.upstream).scheme

    @property
    def host(self) -> str:
        return urlsplit(self.upstream).hostname or ""

    @property
    def upstream_port(self) -> int:
        parts = urlsplit(self.upstream)
        return parts.port or (443 if parts.scheme == "https" else 80)

    @property
    def host_header(self) -> str:
        parts = urlsplit(self.upstream)
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if parts.scheme == "https" else 80
        return host if self.upstream_port == default else f"{host}:{self.upstream_port}"

    def covers(self, path: str) -> bool:
        """Whether a request path lies under the real endpoint's base path (only there is a key added)."""
        base = urlsplit(self.upstream).path.rstrip("/")
        if not path.startswith("/") or any(s in (".", "..") for s in path.split("/")) or "%2e" in path.lower():
            return False
        return not base or path == base or path.startswith(base + "/")


@dataclass(frozen=True)
class Plan:
    """What one run gets instead of its keys."""

    route: ModelRoute
    env: dict[str, str]  # placeholders and the loopback base URL, laid over the run's environment


def plan_for(kind: str | None, env: Mapping[str, str], state: Path | None, person: Path | None,
             port: int) -> Plan | None:
    """The placeholders and the route for a run of `kind` whose network goes through the gate; None when the kind
    sends no key the daemon holds (a `command` agent, Bedrock, no key set). `state` is the run's own copy of the
    CLI's state folder (cli_homes.py), whose login copy is rewritten here; `person` the person's own folder."""
    spec = KINDS.get(kind or "")
    if spec is None or any(_on(env.get(name)) for name in spec.elsewhere):
        return None
    upstream = (env.get(spec.base_variable) or "").strip() or spec.default_base
    parts = urlsplit(upstream)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    swaps = [_from_env(c, env[c.variable].strip()) for c in spec.credentials if (env.get(c.variable) or "").strip()]
    login = _keep_login_out(state, person) if kind == "claude-code" else None
    if login is not None:
        swaps.append(login)
    if not swaps:
        return None
    local = urlunsplit(("http", f"127.0.0.1:{port}", parts.path, parts.query, ""))
    run_env = {spec.base_variable: local, **{s.name: s.placeholder for s in swaps if s.name in env}}
    held = ", ".join(s.name for s in swaps)
    note = (f"model keys kept in the daemon: {held} inside this run is a placeholder; the gate adds the real one to "
            f"requests for {upstream} (served inside at {local})")
    return Plan(ModelRoute(port, upstream, tuple(swaps), note + _expiry_note(login, person)), run_env)


def not_kept_out(kind: str | None, env: Mapping[str, str], why: str) -> str | None:
    """The run's log line when its keys do enter the run (no gate: network open or off, or no sandbox)."""
    spec = KINDS.get(kind or "")
    if spec is None:
        return None
    held = [f"{c.variable} is in its environment" for c in spec.credentials if (env.get(c.variable) or "").strip()]
    person = person_folder(kind or "", env)
    if kind == "claude-code" and person is not None and (person / CREDENTIALS).is_file():
        held.append("its copy of the Claude Code login holds the person's tokens")
    return f"model keys NOT kept out of this run ({why}): {'; '.join(held)}" if held else None


def kept_out(env: Mapping[str, str], inner: Mapping[str, str]) -> dict[str, str]:
    """`env` with each model key replaced as the run's own environment (`inner`) has it: the placeholder where the
    gate keeps the key, nothing where the run has none. For what a run starts beside its agent (ACP terminals)."""
    out = {k: v for k, v in env.items() if k not in KEY_VARIABLES or k in inner}
    out.update({k: inner[k] for k in KEY_VARIABLES if k in out})
    return out


# The person's CLI logins (and Claude Code's global config, which may hold a /login-managed `primaryApiKey` and MCP
# servers' variables): hidden from every sandboxed run. A run of the CLI's own kind gets its copy (cli_homes.py).
LOGIN_FILES = {"claude-code": (CREDENTIALS,), "codex": ("auth.json",), "gemini": ("oauth_creds.json",)}


def person_logins(env: Mapping[str, str], homes: Iterable[Path]) -> list[Path]:
    """The person's login files of every CLI, as the daemon's environment and each home folder name them."""
    found: list[Path] = []
    for home in homes:
        there = {**env, "HOME": str(home)}
        for kind, names in LOGIN_FILES.items():
            folder = person_folder(kind, there)
            found += [folder / name for name in names] if folder is not None else []
        found.append(Path(env["CLAUDE_CONFIG_DIR"]) / ".claude.json" if env.get("CLAUDE_CONFIG_DIR")
                     else home / ".claude.json")
    return list(dict.fromkeys(found))


def _from_env(credential: Credential, value: str) -> Swap:
    return Swap(credential.variable, credential.header, credential.prefix, credential.query,
                PLACEHOLDER + secrets.token_hex(16), lambda: value)


def _keep_login_out(state: Path | None, person: Path | None) -> Swap | None:
    """The run's copy of a Claude Code subscription login, rewritten to a placeholder access token with no refresh
    token (and nothing else of the file: the MCP servers' tokens stay out too, as runs use only AgentQueue's)."""
    copy = state / CREDENTIALS if state is not None else None
    if copy is None or person is None or not copy.is_file():
        return None
    try:
        login = json.loads(copy.read_text(encoding="utf-8")).get("claudeAiOauth")
    except (OSError, ValueError, AttributeError):
        login = None
    if not isinstance(login, dict) or not isinstance(login.get("accessToken"), str):
        copy.unlink(missing_ok=True)  # a file the gate cannot stand in for enters no run
        return None
    placeholder = OAUTH_PLACEHOLDER + secrets.token_hex(16)
    kept = {k: login[k] for k in ("scopes", "subscriptionType", "rateLimitTier") if k in login}
    shown = {"claudeAiOauth": {"accessToken": placeholder, "expiresAt": int(time.time() * 1000)
                               + PLACEHOLDER_LIFETIME_MS, **kept}}
    fd = os.open(copy.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(shown, out)
    os.replace(copy.with_suffix(".tmp"), copy)
    source = person / CREDENTIALS
    return Swap("the Claude Code login", "authorization", "Bearer ", "", placeholder,
                lambda: person_login(source)[0])


def person_login(source: Path) -> tuple[str | None, float | None]:
    """The person's current Claude Code access token and when it expires (epoch seconds), read now."""
    try:
        login = json.loads(source.read_text(encoding="utf-8")).get("claudeAiOauth")
    except (OSError, ValueError, AttributeError):
        return None, None
    if not isinstance(login, dict) or not isinstance(login.get("accessToken"), str):
        return None, None
    expires = login.get("expiresAt")
    return login["accessToken"], expires / 1000 if isinstance(expires, (int, float)) else None


def _expiry_note(login: Swap | None, person: Path | None) -> str:
    if login is None or person is None:
        return ""
    _, expires = person_login(person / CREDENTIALS)
    if expires is None or expires > time.time():
        return ""
    shown = time.strftime("%Y-%m-%d %H:%M", time.localtime(expires))
    return (f"; the person's Claude Code login expired at {shown} and a run does not refresh it: run `claude` once "
            "on this machine (it refreshes its login), or the model will refuse this run")


def _on(value: str | None) -> bool:
    return (value or "").strip().lower() not in ("", "0", "false", "no", "off")


def clean(value: str | None) -> str | None:
    """A credential fit for a header line (no CR, LF or NUL), else None."""
    if value is None:
        return None
    value = value.strip()
    return value if value and not any(c in value for c in "\r\n\0") else None
