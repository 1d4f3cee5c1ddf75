"""Model keys stay in the daemon (issue 33): a sandboxed run holds a placeholder, and the gate adds the real key.

A run of a CLI kind whose network is the gate's allowlist gets, instead of its model key (`ANTHROPIC_API_KEY`,
`ANTHROPIC_AUTH_TOKEN`, `CLAUDE_CODE_OAUTH_TOKEN`, `GEMINI_API_KEY`, `GOOGLE_API_KEY`; Codex's `CODEX_API_KEY`,
`OPENAI_API_KEY`, its provider's `env_key` and an API-key login in auth.json), a placeholder made for this run alone,
and its model endpoint (`ANTHROPIC_BASE_URL`, `GOOGLE_GEMINI_BASE_URL`; for Codex `openai_base_url` or the provider's
`base_url` in the run's copy of config.toml) points at a loopback port inside the sandbox. That port reaches the gate
(`port-N.sock`, as a loopback forward does), which reads each request, puts the real key where the placeholder was
(only in the header the CLI sends it in, only under the base URL's path) and sends the request on to the real
endpoint: the person's base URL, else the CLI's default host over TLS with the certificate checked. A Claude Code
subscription login (`.credentials.json`) is kept out the same way: the run's copy holds a placeholder access token
and no refresh token, and the gate puts in the person's current access token, read from the person's own file at
each request (their CLI refreshes it). What a prompt-injected agent can read inside is worth nothing outside this run.

    plan = plan_for("claude-code", env, state_folder, person_folder, port)  # None: nothing to keep out
    plan.env     # the run's variables: the placeholders and the loopback base URL
    plan.route   # what the gate serves on `port` (gate.py)
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
import tomllib
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
    if kind == "codex":
        return _codex_plan(env, state, port)
    spec = KINDS.get(kind or "")
    if spec is None or any(_on(env.get(name)) for name in spec.elsewhere):
        return None
    upstream = (env.get(spec.base_variable) or "").strip() or spec.default_base
    if not _http_url(upstream):
        return None
    swaps = [_from_env(c, env[c.variable].strip()) for c in spec.credentials if (env.get(c.variable) or "").strip()]
    login = _keep_login_out(state, person) if kind == "claude-code" else None
    if login is not None:
        swaps.append(login)
    if not swaps:
        return None
    local = _local(upstream, port)
    return _plan(port, upstream, swaps, env, {spec.base_variable: local}, _expiry_note(login, person))


def _plan(port: int, upstream: str, swaps: list[Swap], env: Mapping[str, str], run_env: dict[str, str],
          more: str = "") -> Plan:
    held = ", ".join(s.name for s in swaps)
    note = (f"model keys kept in the daemon: {held} inside this run is a placeholder; the gate adds the real one to "
            f"requests for {upstream} (served inside at {_local(upstream, port)})")
    run_env.update({s.name: s.placeholder for s in swaps if s.name in env})
    return Plan(ModelRoute(port, upstream, tuple(swaps), note + more), run_env)


def _http_url(url: str) -> bool:
    parts = urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def _local(upstream: str, port: int) -> str:
    parts = urlsplit(upstream)
    return urlunsplit(("http", f"127.0.0.1:{port}", parts.path, parts.query, ""))


# Codex (0.169): the built-in provider's key is CODEX_API_KEY or an API-key login in auth.json, sent to
# `openai_base_url` (config.toml; OPENAI_BASE_URL is not read); another provider's is the variable its `env_key` names,
# sent to its `base_url`. Both as `Authorization: Bearer`. A ChatGPT login (auth.json `tokens`) is not kept out.
CODEX_KEYS = ("CODEX_API_KEY", "OPENAI_API_KEY")
CODEX_DEFAULT_BASE = "https://api.openai.com/v1"


def _codex_plan(env: Mapping[str, str], state: Path | None, port: int) -> Plan | None:
    """The run's copy of Codex's config pointed at the loopback port, and placeholders for its keys; None (nothing
    changed) where that cannot be done safely: a ChatGPT login, a provider without a Bearer key, a config this cannot
    rewrite to exactly one changed value."""
    if state is None:
        return None
    config = state / "config.toml"
    try:
        text = config.read_text(encoding="utf-8") if config.is_file() else ""
        data = tomllib.loads(text)
    except (OSError, ValueError):
        return None
    provider_id = _codex_provider(data)
    names = list(CODEX_KEYS)
    if provider_id == "openai":
        upstream, key_path = data.get("openai_base_url") or CODEX_DEFAULT_BASE, ("openai_base_url",)
    else:
        providers = data.get("model_providers")
        provider = providers.get(provider_id) if isinstance(providers, dict) else None
        if not isinstance(provider, dict) or provider.get("requires_openai_auth") or not provider.get("env_key"):
            return None  # its key comes from the Codex login, or from headers the gate does not know
        upstream, key_path = provider.get("base_url"), ("model_providers", provider_id, "base_url")
        names.append(str(provider["env_key"]))
    if not isinstance(upstream, str) or not _http_url(upstream):
        return None
    swaps = [_from_env(Credential(name, "authorization", "Bearer "), env[name].strip())
             for name in dict.fromkeys(names) if (env.get(name) or "").strip()]
    auth = _codex_auth_key(state / "auth.json") if provider_id == "openai" else None
    if auth is not None:
        swaps.append(auth)
    if not swaps:
        return None
    rewritten = _set_toml(text, data, key_path, _local(upstream, port))
    if rewritten is None:
        return None
    config.write_text(rewritten, encoding="utf-8")
    if auth is not None:
        _write_json(state / "auth.json", {"OPENAI_API_KEY": auth.placeholder})
    return _plan(port, upstream, swaps, env, {})


def _codex_provider(data: dict[str, object]) -> str:
    profiles, profile = data.get("profiles"), data.get("profile")
    chosen = profiles.get(profile) if isinstance(profiles, dict) and isinstance(profile, str) else None
    named = (chosen or {}).get("model_provider") if isinstance(chosen, dict) else None
    return str(named or data.get("model_provider") or "openai")


def _codex_auth_key(path: Path) -> Swap | None:
    """An API-key login in the run's copy of auth.json (not a ChatGPT login: its tokens are left as they are)."""
    try:
        auth = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    key = auth.get("OPENAI_API_KEY") if isinstance(auth, dict) else None
    if not isinstance(key, str) or not key.strip() or auth.get("tokens"):
        return None
    return _from_env(Credential("the Codex API-key login", "authorization", "Bearer "), key.strip())


def _set_toml(text: str, data: dict[str, object], key: tuple[str, ...], value: str) -> str | None:
    """`text` with the one value at `key` set to `value` (a top-level key, or a key of a `[table.name]`), checked by
    reading it back: None unless exactly that value changed."""
    line = f"{key[-1]} = {json.dumps(value)}"  # a JSON string of a URL is a TOML basic string
    lines = text.splitlines()
    if len(key) == 1:
        head = next((i for i, row in enumerate(lines) if row.lstrip().startswith("[")), len(lines))
        kept = [row for row in lines[:head] if not re.match(rf"\s*{re.escape(key[0])}\s*=", row)]
        out = [line, *kept, *lines[head:]]
    else:
        table = re.compile(r"\s*\[\s*" + r"\s*\.\s*".join(f'(?:{re.escape(k)}|"{re.escape(k)}")' for k in key[:-1])
                           + r"\s*\]\s*(?:#.*)?$")
        start = next((i for i, row in enumerate(lines) if table.match(row)), None)
        if start is None:
            return None
        end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines))
        at = next((i for i in range(start + 1, end) if re.match(rf"\s*{re.escape(key[-1])}\s*=", lines[i])), None)
        if at is None:
            return None
        out = [*lines[:at], line, *lines[at + 1:]]
    rewritten = "\n".join(out) + "\n"
    expected = json.loads(json.dumps(data, default=str))
    folder = expected
    for part in key[:-1]:
        folder = folder[part]
    folder[key[-1]] = value
    try:
        return rewritten if json.loads(json.dumps(tomllib.loads(rewritten), default=str)) == expected else None
    except ValueError:
        return None


def _write_json(path: Path, data: object) -> None:
    fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(data, out)
    os.replace(path.with_suffix(".tmp"), path)


def not_kept_out(kind: str | None, env: Mapping[str, str], why: str) -> str | None:
    """The run's log line when its keys do enter the run (no gate: network open or off, or no sandbox)."""
    names = [c.variable for c in KINDS[kind].credentials] if kind in KINDS else list(CODEX_KEYS) if kind == "codex" \
        else []
    held = [f"{name} is in its environment" for name in names if (env.get(name) or "").strip()]
    person = person_folder(kind or "", env)
    login = {"claude-code": CREDENTIALS, "codex": "auth.json", "gemini": "oauth_creds.json"}.get(kind or "")
    if login and person is not None and (person / login).is_file() and (
            kind != "claude-code" or person_login(person / login)[0] is not None):
        held.append(f"its copy of {login} holds the person's login")
    return f"model keys NOT kept out of this run ({why}): {'; '.join(held)}" if held else None


def kept_out(env: Mapping[str, str], inner: Mapping[str, str]) -> dict[str, str]:
    """`env` with every model key variable as the run itself holds it (`inner`: the run's own environment): its
    placeholder, its own value where the gate keeps none out, or nothing when the run has none (fail closed). For
    what a run starts beside its agent (an ACP agent's terminals)."""
    keys = {c.variable for kind in KINDS.values() for c in kind.credentials} | set(CODEX_KEYS)
    return {k: inner[k] if k in keys else v for k, v in env.items() if k not in keys or k in inner}


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
    _write_json(copy, shown)
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
