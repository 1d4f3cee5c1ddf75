"""Can an agent kind log in? One real, minimal check per kind, shared by the engine (to resume a kind parked on a
failed login, engine/parking.py) and `agentqueue doctor`.

The CLI's own status command where it has one (`claude auth status`, `codex login status`); with an API key, the
smallest real call that the key must pass and that costs nothing: Anthropic's token counter, OpenAI's and Google's
model lists. A refused key is `ok=False` with its fix; an answer that could not be had (no network, no CLI) is
`ok=None`, never a pass or a failure.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

from .failures import CONFIG_HINT, LOGIN

TIMEOUT = 20.0


@dataclass(frozen=True)
class LoginCheck:
    ok: bool | None  # True: it logs in; False: refused or not logged in; None: could not tell
    detail: str
    fix: str | None = None


def _refused(agent_type: str, detail: str) -> LoginCheck:
    return LoginCheck(False, detail, f"{LOGIN.get(agent_type, 'log the CLI in or set its API key')} {CONFIG_HINT}.")


def _http(agent_type: str, request: urllib.request.Request, what: str) -> LoginCheck:
    """One call the key must pass: 401/403 refuse it; any other answer (even 429, or 404 from a gateway) means the
    key was taken."""
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return LoginCheck(True, f"{what}: the API took the key (HTTP {response.status})")
    except urllib.error.HTTPError as error:
        if error.code in (401, 403):
            body = error.read(500).decode("utf-8", errors="replace")
            return _refused(agent_type, f"{what}: the API refused the key (HTTP {error.code}) {body[:200]}".strip())
        return LoginCheck(True, f"{what}: the API took the key (HTTP {error.code})")
    except (urllib.error.URLError, OSError, ValueError) as error:
        return LoginCheck(None, f"{what}: no answer ({getattr(error, 'reason', error)})")


def _run(argv: list[str], env: Mapping[str, str]) -> tuple[int | None, str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, env=dict(env),
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return None, f"no answer within {TIMEOUT:.0f} s"
    except OSError as error:
        return None, error.strerror or str(error)
    return done.returncode, (done.stdout + done.stderr).strip()


def _claude(binary: str | None, env: Mapping[str, str]) -> LoginCheck:
    key, token = env.get("ANTHROPIC_API_KEY"), env.get("ANTHROPIC_AUTH_TOKEN")
    said = ""
    if binary:  # the CLI's own status command: is there a login or a key at all, and which
        code, out = _run([binary, "auth", "status", "--json"], env)
        try:
            status = json.loads(out[out.find("{"):]) if "{" in out else {}
        except ValueError:
            status = {}
        if status.get("loggedIn") is False:
            return _refused("claude-code", "`claude auth status`: not logged in and no API key")
        if status.get("loggedIn") and status.get("authMethod") not in ("api_key", "apiKey") and not key and not token:
            return LoginCheck(True, f"`claude auth status`: logged in ({status.get('authMethod')})")
        said = "" if status else f"`claude auth status` gave no status ({out[:120] or code}); "
    if not key and not token:
        return LoginCheck(None, said + "no ANTHROPIC_API_KEY to check")
    # A key: whether the API takes it, by the one call that needs it and costs nothing (counting tokens).
    base = (env.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com").rstrip("/")
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01",
               **({"x-api-key": key} if key else {"authorization": f"Bearer {token}"})}
    body = json.dumps({"model": "claude-haiku-4-5", "messages": [{"role": "user", "content": "ping"}]}).encode()
    return _http("claude-code", urllib.request.Request(f"{base}/v1/messages/count_tokens", body, headers),
                 "counting a one-word prompt's tokens")


def _codex(binary: str | None, env: Mapping[str, str]) -> LoginCheck:
    key = env.get("OPENAI_API_KEY") or env.get("CODEX_API_KEY")
    if key:
        base = (env.get("OPENAI_BASE_URL") or "https://api.openai.com/v1").rstrip("/")
        return _http("codex", urllib.request.Request(f"{base}/models", headers={"authorization": f"Bearer {key}"}),
                     "listing the models")
    if not binary:
        return LoginCheck(None, "the codex CLI is not found")
    code, out = _run([binary, "login", "status"], env)
    if code == 0:
        return LoginCheck(True, f"`codex login status`: {out.splitlines()[0] if out else 'logged in'}")
    if code is None:
        return LoginCheck(None, f"`codex login status` did not answer: {out[:200]}")
    return _refused("codex", f"`codex login status`: {out[:200] or 'not logged in'}")


def _gemini(env: Mapping[str, str]) -> LoginCheck:
    key = env.get("GEMINI_API_KEY") or env.get("GOOGLE_API_KEY")
    if key:
        base = (env.get("GOOGLE_GEMINI_BASE_URL") or "https://generativelanguage.googleapis.com").rstrip("/")
        return _http("gemini", urllib.request.Request(f"{base}/v1beta/models", headers={"x-goog-api-key": key}),
                     "listing the models")
    from pathlib import Path

    creds = Path(env.get("HOME") or Path.home()) / ".gemini" / "oauth_creds.json"
    if creds.exists():
        return LoginCheck(True, f"signed in with Google ({creds})")
    return _refused("gemini", "no GEMINI_API_KEY and no Google sign-in (~/.gemini/oauth_creds.json)")


def check_login(agent_type: str, binary: str | None, env: Mapping[str, str]) -> LoginCheck:
    """Whether an agent of `agent_type` run with `env` (the agents' environment) can log in."""
    if agent_type == "claude-code":
        return _claude(binary, env)
    if agent_type == "codex":
        return _codex(binary, env)
    if agent_type == "gemini":
        return _gemini(env)
    return LoginCheck(True, "a command agent: no login to check")
