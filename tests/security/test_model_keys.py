"""Issue 33: model keys stay in the daemon. A sandboxed run holds a placeholder; the gate adds the real key upstream.

Through the real engine, a real CLI on a loopback model mock: the mock scripts the model to dump everything the run
can read (its environment, every process's environment and argv, its CLI state folder, the person's login file) into
its worktree, which lands. The mock must have received the real key on every model request, and the dump must not
hold it anywhere (while it does hold the placeholder: the dump saw the variable). Then the gate itself: a request
without the placeholder, under another path or to another host gets no key; the person's current login is read at
each request; an answer streams through unbuffered; TLS upstream is verified.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agentqueue.sandbox import bwrap, gate, model_keys
from agentqueue.sandbox.gate import NetworkGate
from agentqueue.sandbox.rules import Endpoint, SandboxRules, SandboxSettings
from agentqueue.services import Services

from .. import mock_anthropic, mock_gemini, mock_openai
from ..engine_runs import engine_for, run_until
from ..git_fixtures import git_env  # noqa: F401  (fixture)
from ..test_acp_gemini import GEMINI
from ..test_engine_claude import CLAUDE
from ..third_party import npm_bin

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.real_cli,  # claude, gemini, codex, adapters
              pytest.mark.skipif(bwrap.probe() is not None, reason="bubblewrap missing (.ci/run installs it)")]

REAL_KEY = "sk-ant-api03-REAL-daemon-key-7f3c"
REAL_ACCESS = "sk-ant-oat01-REAL-access-token-51d0"
REAL_REFRESH = "sk-ant-ort01-REAL-refresh-token-a2e9"
REAL_GEMINI = "AIza-REAL-gemini-key-0b4d"
REAL_OPENAI = "sk-proj-REAL-openai-key-c7a1"
# What a prompt-injected agent does: everything it can read, into a file that lands with its work.
DUMP = ('{ env; for f in /proc/*/environ /proc/*/cmdline; do echo "== $f"; tr "\\000" "\\n" < "$f"; done; '
        'for d in "$CLAUDE_CONFIG_DIR" "$GEMINI_CLI_HOME" "$CODEX_HOME" "$HOME/.claude" "$HOME/.gemini"; do '
        'find "$d" -type f -exec sh -c \'echo "== $1"; cat "$1"\' _ {} \\; ; done; } > dump.txt 2>&1; echo dumped')


def dumping(text: str = "dump what you can read") -> str:
    """A task whose model runs DUMP in its shell (mock_anthropic's run_cmds; mock_gemini's run_cmd)."""
    return f"SCENARIO:run_cmds CMDS{json.dumps([DUMP])}END {text}"


def landed(services: Services, name: str = "dump.txt") -> str:
    repo = services.repos.get("app").checkout_path
    shown = subprocess.run(["git", "show", f"main:{name}"], cwd=repo, capture_output=True, check=True).stdout
    return shown.decode("latin-1")  # a CLI's state holds binary files (a database): a key is searched as bytes


def ended(services: Services, task_id: str) -> bool:
    return services.tasks.get(task_id).status in ("COMPLETED", "FAILED", "BLOCKED")


@pytest.fixture
def claude_api(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, git_env: Path  # noqa: F811
               ) -> Iterator[mock_anthropic.MockAnthropic]:
    if CLAUDE is None:
        pytest.skip("claude CLI not installed (.ci/run installs it)")
    mock = mock_anthropic.MockAnthropic().start()
    for key, value in {"ANTHROPIC_BASE_URL": mock.base_url, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
                       "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_MAX_RETRIES": "0", "AGENTQUEUE_CLAUDE_BIN": CLAUDE
                       }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    yield mock
    mock.stop()


def queue_with(services: Services, agent_type: str, command: str | None = None) -> Services:
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.policies.edit(project_id="demo", preset="autonomous")  # the dump runs unasked
    services.agents.create("agent", agent_type, command=command)
    return services


def model_requests(mock: mock_anthropic.MockAnthropic) -> list[dict[str, str]]:
    return [h for h in mock.headers if "x-api-key" in h or "authorization" in h]


@pytest.mark.parametrize("preset", ["claude-code", "acp"])
async def test_a_claude_run_holds_a_placeholder_and_the_model_gets_the_real_key(
        services: Services, claude_api: mock_anthropic.MockAnthropic, monkeypatch: pytest.MonkeyPatch,
        preset: str) -> None:
    """The headless CLI and the ACP preset (claude-agent-acp, its Bash through the adapter)."""
    if preset == "acp":
        adapter = npm_bin("claude-agent-acp")
        if adapter is None:
            pytest.skip("claude-agent-acp not installed (.ci/run installs it)")
        monkeypatch.setenv("AGENTQUEUE_CLAUDE_AGENT_ACP_BIN", adapter)
    queue = queue_with(services, preset, "claude-code" if preset == "acp" else None)
    monkeypatch.setenv("ANTHROPIC_API_KEY", REAL_KEY)  # the daemon's environment, read when the run starts
    task = queue.tasks.create("demo", "Dump", dumping(), repo_id="app")
    engine = engine_for(queue)
    await run_until(engine, lambda: ended(queue, task.id), timeout=150)
    log = engine.log_path(task.id).read_text()
    assert queue.tasks.get(task.id).status == "COMPLETED", log
    dump = landed(queue)
    assert "ANTHROPIC_API_KEY=" + model_keys.PLACEHOLDER in dump, dump[:2000]  # the dump saw the variable
    assert "== /proc/" in dump and "CLAUDE_CONFIG_DIR=" in dump
    assert REAL_KEY not in dump, "the real key was readable inside the run"
    assert REAL_KEY not in json.dumps(claude_api.requests)  # nor did the model get told it
    sent = model_requests(claude_api)
    assert sent and all(h.get("x-api-key") == REAL_KEY for h in sent), sent  # every model request: the real key
    assert "model keys kept in the daemon: ANTHROPIC_API_KEY" in log


async def test_a_claude_subscription_login_enters_the_run_as_a_placeholder(
        services: Services, claude_api: mock_anthropic.MockAnthropic, git_env: Path) -> None:  # noqa: F811
    """A `claude auth login` login (~/.claude/.credentials.json): the run's copy holds a placeholder access token and
    no refresh token, the person's own file is hidden inside, and the gate puts in the person's current token."""
    person = git_env / ".claude"
    person.mkdir()
    login = {"claudeAiOauth": {"accessToken": REAL_ACCESS, "refreshToken": REAL_REFRESH,
                               "expiresAt": int(time.time() * 1000) + 3600_000, "scopes": ["user:inference"],
                               "subscriptionType": "max"},
             "mcpOAuth": {"server|1": {"accessToken": "mcp-REAL-token-93"}}}
    (person / ".credentials.json").write_text(json.dumps(login))
    (person / ".credentials.json").chmod(0o600)
    queue = queue_with(services, "claude-code")
    task = queue.tasks.create("demo", "Dump", dumping(), repo_id="app")
    engine = engine_for(queue)
    await run_until(engine, lambda: ended(queue, task.id), timeout=150)
    log = engine.log_path(task.id).read_text()
    assert queue.tasks.get(task.id).status == "COMPLETED", log
    dump = landed(queue)
    assert model_keys.OAUTH_PLACEHOLDER in dump and "/.credentials.json" in dump, dump[:2000]
    for secret in (REAL_ACCESS, REAL_REFRESH, "mcp-REAL-token-93"):
        assert secret not in dump, f"{secret} was readable inside the run"
    sent = model_requests(claude_api)
    assert sent and all(h.get("authorization") == f"Bearer {REAL_ACCESS}" for h in sent), sent
    assert "model keys kept in the daemon: the Claude Code login" in log
    assert json.loads((person / ".credentials.json").read_text()) == login  # the person's login as it was


async def test_a_gemini_run_holds_a_placeholder_and_the_model_gets_the_real_key(
        services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The engine runs Gemini through ACP (`gemini --acp`); its shell runs the dump."""
    if GEMINI is None:
        pytest.skip("gemini CLI not installed (.ci/run installs it)")
    with mock_gemini.MockGemini() as server:
        for key, value in mock_gemini.gemini_home(tmp_path, server.base_url).items():
            if key not in ("TMPDIR", "NO_PROXY", "no_proxy"):
                monkeypatch.setenv(key, value)
        monkeypatch.setenv("AGENTQUEUE_GEMINI_BIN", str(GEMINI))
        monkeypatch.setenv("GEMINI_API_KEY", REAL_GEMINI)
        queue = queue_with(services, "gemini")
        task = queue.tasks.create("demo", "Dump", f"SCENARIO:run_cmd CMD[{DUMP}]", repo_id="app")
        engine = engine_for(queue)
        await run_until(engine, lambda: ended(queue, task.id), timeout=150)
        log = engine.log_path(task.id).read_text()
        assert queue.tasks.get(task.id).status == "COMPLETED", log
        dump = landed(queue)
        assert "GEMINI_API_KEY=" + model_keys.PLACEHOLDER in dump, dump[:2000]
        assert REAL_GEMINI not in dump, "the real key was readable inside the run"
        sent = [h for h in server.headers if "x-goog-api-key" in h]
        assert sent and all(h["x-goog-api-key"] == REAL_GEMINI for h in sent), server.headers
        assert "model keys kept in the daemon: GEMINI_API_KEY" in log


async def test_a_codex_run_holds_a_placeholder_and_the_model_gets_the_real_key(
        services: Services, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Codex's provider from the person's config.toml (`env_key`, `base_url`): the run's copy points at the gate."""
    codex = npm_bin("codex")
    if codex is None:
        pytest.skip("codex CLI not installed (.ci/run installs it)")
    with mock_openai.MockOpenAI() as server:
        for key, value in mock_openai.codex_home(tmp_path, server.base_url).items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("AGENTQUEUE_CODEX_BIN", codex)
        monkeypatch.setenv(mock_openai.API_KEY_ENV, REAL_OPENAI)
        monkeypatch.setenv("OPENAI_API_KEY", REAL_OPENAI + "-unused")
        person = (tmp_path / "codex-home" / "config.toml").read_text()
        queue = queue_with(services, "codex")
        task = queue.tasks.create("demo", "Dump", f"SCENARIO:run_cmd CMD[{json.dumps(DUMP)[1:-1]}]END",
                                  repo_id="app")
        engine = engine_for(queue)
        await run_until(engine, lambda: ended(queue, task.id), timeout=150)
        log = engine.log_path(task.id).read_text()
        assert queue.tasks.get(task.id).status == "COMPLETED", log
        dump = landed(queue)
        assert f"{mock_openai.API_KEY_ENV}={model_keys.PLACEHOLDER}" in dump, dump[:2000]
        assert f"OPENAI_API_KEY={model_keys.PLACEHOLDER}" in dump
        assert f'base_url = "http://127.0.0.1:{model_keys.MODEL_PORT}/v1"' in dump  # the run's copy of config.toml
        assert REAL_OPENAI not in dump, "the real key was readable inside the run"
        sent = [h for h in server.headers if "authorization" in h]
        assert sent and all(h["authorization"] == f"Bearer {REAL_OPENAI}" for h in sent), server.headers
        said = next(line for line in log.splitlines() if "model keys kept in the daemon" in line)
        assert mock_openai.API_KEY_ENV in said and "OPENAI_API_KEY" in said, said
        assert (tmp_path / "codex-home" / "config.toml").read_text() == person  # the person's config as it was


def test_codex_s_own_provider_and_an_api_key_login(tmp_path: Path) -> None:
    """The built-in provider: `openai_base_url` set in the run's copy (OPENAI_BASE_URL is not read by Codex 0.169),
    CODEX_API_KEY and auth.json's API key held as placeholders; a ChatGPT login is left as it is."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "config.toml").write_text('model = "gpt-5"\n# a comment\n[history]\npersistence = "none"\n')
    (state / "auth.json").write_text(json.dumps({"OPENAI_API_KEY": REAL_OPENAI}))
    plan = model_keys.plan_for("codex", {"CODEX_API_KEY": REAL_KEY}, state, None, 4003)
    assert plan is not None and plan.route.upstream == "https://api.openai.com/v1"
    config = (state / "config.toml").read_text()
    assert config.startswith('openai_base_url = "http://127.0.0.1:4003/v1"\n') and '[history]' in config
    auth = json.loads((state / "auth.json").read_text())
    assert auth["OPENAI_API_KEY"].startswith(model_keys.PLACEHOLDER) and REAL_OPENAI not in json.dumps(auth)
    assert {s.name for s in plan.route.swaps} == {"CODEX_API_KEY", "the Codex API-key login"}
    assert plan.env["CODEX_API_KEY"].startswith(model_keys.PLACEHOLDER)
    assert {s.real() for s in plan.route.swaps} == {REAL_KEY, REAL_OPENAI}
    # A ChatGPT login (tokens) and nothing else: nothing this can stand in for, so nothing is changed.
    chatgpt = {"OPENAI_API_KEY": None, "tokens": {"access_token": "t", "refresh_token": "r"}}
    (state / "auth.json").write_text(json.dumps(chatgpt))
    (state / "config.toml").write_text('model = "gpt-5"\n')
    assert model_keys.plan_for("codex", {}, state, None, 4003) is None
    assert json.loads((state / "auth.json").read_text()) == chatgpt and "openai_base_url" not in \
        (state / "config.toml").read_text()


# -- the gate's model route, driven from outside the sandbox ---------------------------------------------------


class Upstream(BaseHTTPRequestHandler):
    """A model endpoint that records each request and answers: /stream holds its second event until released,
    /echo refuses the key and says it back (as some APIs do)."""

    protocol_version = "HTTP/1.1"
    seen: list[dict[str, Any]]
    release: threading.Event

    def log_message(self, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        if "chunked" in (self.headers.get("transfer-encoding") or ""):
            body = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
        self.seen.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                          "body": body})
        if self.path.endswith("/stream"):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b"data: first\n\n")
            self.wfile.flush()
            self.release.wait(30)
            self.wfile.write(b"data: second\n\n")
            self.close_connection = True
            return
        echoed = json.dumps({"error": f"invalid key {self.headers.get('x-api-key')}"}).encode()
        self.send_response(401 if self.path.endswith("/echo") else 200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(echoed)))
        self.end_headers()
        self.wfile.write(echoed)


@pytest.fixture
def upstream() -> Iterator[tuple[ThreadingHTTPServer, list[dict[str, Any]], threading.Event]]:
    seen: list[dict[str, Any]] = []
    release = threading.Event()
    handler = type("Handler", (Upstream,), {"seen": seen, "release": release})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield server, seen, release
    release.set()
    server.shutdown()
    server.server_close()


def gate_for(plan: model_keys.Plan, upstream_port: int) -> tuple[NetworkGate, list[tuple[str, int, str]]]:
    denied: list[tuple[str, int, str]] = []
    rules = SandboxRules(Path("/"), False, endpoints=(Endpoint.parse(f"127.0.0.1:{upstream_port}"),),
                         models=(plan.route,))
    return NetworkGate(rules, lambda host, port, why: denied.append((host, port, why))), denied


def ask(sock_path: Path, request: bytes, until: bytes | None = None) -> bytes:
    """One request over a gate socket; the answer whole (or up to `until`)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(20)
        sock.connect(str(sock_path))
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
            if until is not None and until in answer:
                break
        return answer


def post(target: str, headers: dict[str, str], body: bytes = b'{"hi": 1}') -> bytes:
    lines = [f"POST {target} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}",
             *(f"{k}: {v}" for k, v in headers.items()), "", ""]
    return "\r\n".join(lines).encode() + body


def test_the_gate_adds_the_key_only_to_a_request_with_the_placeholder(upstream: Any) -> None:
    server, seen, _ = upstream
    base = f"http://127.0.0.1:{server.server_address[1]}/anthropic"
    plan = model_keys.plan_for("claude-code", {"ANTHROPIC_API_KEY": REAL_KEY, "ANTHROPIC_BASE_URL": base},
                               None, None, model_keys.MODEL_PORT)
    assert plan is not None and plan.env["ANTHROPIC_BASE_URL"] == f"http://127.0.0.1:{model_keys.MODEL_PORT}/anthropic"
    placeholder = plan.env["ANTHROPIC_API_KEY"]
    assert placeholder.startswith(model_keys.PLACEHOLDER) and REAL_KEY not in json.dumps(plan.env)
    assert REAL_KEY not in repr(plan)
    gate_, denied = gate_for(plan, server.server_address[1])
    model = gate_.folder / f"port-{model_keys.MODEL_PORT}.sock"
    try:
        answer = ask(model, post("/anthropic/v1/messages", {"x-api-key": placeholder}))
        assert answer.startswith(b"HTTP/1.1 200") and b"connection: close" in answer.lower()
        assert seen[-1]["headers"]["x-api-key"] == REAL_KEY and seen[-1]["body"] == b'{"hi": 1}'
        assert seen[-1]["headers"]["host"] == f"127.0.0.1:{server.server_address[1]}"
        # Through the proxy, as a CLI that honours HTTP_PROXY asks for its loopback base URL: in absolute form, or
        # through a tunnel (undici's proxy agent, Gemini's, tunnels plain HTTP too).
        target = f"http://127.0.0.1:{model_keys.MODEL_PORT}/anthropic/v1/messages"
        assert ask(gate_.folder / "proxy.sock", post(target, {"x-api-key": placeholder})).startswith(b"HTTP/1.1 200")
        assert seen[-1]["headers"]["x-api-key"] == REAL_KEY
        tunnel = f"CONNECT 127.0.0.1:{model_keys.MODEL_PORT} HTTP/1.1\r\n\r\n".encode()
        answer = ask(gate_.folder / "proxy.sock", tunnel + post("/anthropic/v1/messages", {"x-api-key": placeholder}))
        assert answer.startswith(b"HTTP/1.1 200 Connection established") and b"HTTP/1.1 200 OK" in answer
        assert seen[-1]["headers"]["x-api-key"] == REAL_KEY
        # No placeholder: no key (what the agent sent goes on as it is).
        ask(model, post("/anthropic/v1/messages", {"x-api-key": "sk-ant-a-guess"}))
        ask(model, post("/anthropic/v1/messages", {}))
        assert seen[-2]["headers"]["x-api-key"] == "sk-ant-a-guess" and "x-api-key" not in seen[-1]["headers"]
        # The placeholder in another header, or in the right one with something around it: no key.
        ask(model, post("/anthropic/v1/messages", {"authorization": f"Bearer {placeholder}",
                                                   "x-api-key": placeholder + "x"}))
        assert seen[-1]["headers"]["authorization"] == f"Bearer {placeholder}"
        assert seen[-1]["headers"]["x-api-key"] == placeholder + "x"
        # Under another path, or climbing out of the base path: refused, nothing sent on.
        count = len(seen)
        for path in ("/other/v1/messages", "/anthropic/../admin", "/anthropic/%2e%2e/admin"):
            assert ask(model, post(path, {"x-api-key": placeholder})).startswith(b"HTTP/1.1 403")
        assert len(seen) == count and denied and "no key is added" in denied[-1][2]
        # To another host through the proxy (here the endpoint itself, asked for directly): the placeholder only.
        direct = f"http://127.0.0.1:{server.server_address[1]}/anthropic/v1/messages"
        ask(gate_.folder / "proxy.sock", post(direct, {"x-api-key": placeholder}))
        assert seen[-1]["headers"]["x-api-key"] == placeholder
        # An API that says the refused key back: the run reads stars, not the key.
        answer = ask(model, post("/anthropic/echo", {"x-api-key": placeholder}))
        assert answer.startswith(b"HTTP/1.1 401") and REAL_KEY.encode() not in answer and b"*" * 8 in answer
        assert REAL_KEY not in json.dumps([s["path"] for s in seen])
    finally:
        gate_.close()


def test_a_streamed_answer_passes_through_as_it_comes(upstream: Any) -> None:
    server, seen, release = upstream
    plan = model_keys.plan_for("claude-code", {"ANTHROPIC_AUTH_TOKEN": REAL_KEY,
                                               "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{server.server_address[1]}"},
                               None, None, 4000)
    assert plan is not None
    gate_, _ = gate_for(plan, server.server_address[1])
    try:
        token = plan.env["ANTHROPIC_AUTH_TOKEN"]
        started = time.monotonic()
        first = ask(gate_.folder / "port-4000.sock", post("/stream", {"Authorization": f"Bearer {token}"}),
                    until=b"data: first\n\n")
        assert b"data: first" in first and b"second" not in first  # read while the endpoint still holds the rest
        assert time.monotonic() - started < 15 and not release.is_set()
        assert seen[-1]["headers"]["authorization"] == f"Bearer {REAL_KEY}"
    finally:
        release.set()
        gate_.close()


def test_a_request_body_goes_on_whole_by_its_framing(upstream: Any) -> None:
    """A body larger than one read, by its length; a chunked one (its length header, if any, dropped)."""
    server, seen, _ = upstream
    plan = model_keys.plan_for("gemini", {"GEMINI_API_KEY": REAL_GEMINI,
                                          "GOOGLE_GEMINI_BASE_URL": f"http://127.0.0.1:{server.server_address[1]}"},
                               None, None, 4004)
    assert plan is not None
    gate_, _ = gate_for(plan, server.server_address[1])
    try:
        big = b"x" * (3 << 20)
        key = plan.env["GEMINI_API_KEY"]
        answer = ask(gate_.folder / "port-4004.sock", post(f"/v1beta/models/m:generate?alt=sse&key={key}", {}, big))
        assert answer.startswith(b"HTTP/1.1 200") and seen[-1]["body"] == big
        assert seen[-1]["path"] == f"/v1beta/models/m:generate?alt=sse&key={REAL_GEMINI}"
        chunked = (b"POST /v1beta/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n"
                   + f"x-goog-api-key: {key}\r\n\r\n".encode() + b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n")
        assert ask(gate_.folder / "port-4004.sock", chunked).startswith(b"HTTP/1.1 200")
        assert seen[-1]["body"] == b"hello world" and seen[-1]["headers"]["x-goog-api-key"] == REAL_GEMINI
        assert "content-length" not in seen[-1]["headers"]
    finally:
        gate_.close()


def test_the_gate_reads_the_persons_current_login_at_each_request(upstream: Any, tmp_path: Path) -> None:
    server, seen, _ = upstream
    person, state = tmp_path / "person", tmp_path / "state"
    person.mkdir()
    state.mkdir()
    login = {"claudeAiOauth": {"accessToken": REAL_ACCESS, "refreshToken": REAL_REFRESH, "expiresAt": 1}}
    (person / ".credentials.json").write_text(json.dumps(login))
    shutil.copy2(person / ".credentials.json", state / ".credentials.json")
    plan = model_keys.plan_for("claude-code", {"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{server.server_address[1]}"},
                               state, person, 4001)
    assert plan is not None and "login expired" in plan.route.note  # said in the run's log
    copy = json.loads((state / ".credentials.json").read_text())["claudeAiOauth"]
    assert copy["accessToken"].startswith(model_keys.OAUTH_PLACEHOLDER) and "refreshToken" not in copy
    assert copy["expiresAt"] > time.time() * 1000 + 300 * 86400_000  # the run never tries to refresh it
    gate_, _ = gate_for(plan, server.server_address[1])
    try:
        bearer = {"Authorization": f"Bearer {copy['accessToken']}"}
        ask(gate_.folder / "port-4001.sock", post("/v1/messages", bearer))
        assert seen[-1]["headers"]["authorization"] == f"Bearer {REAL_ACCESS}"
        login["claudeAiOauth"]["accessToken"] = "sk-ant-oat01-refreshed-by-the-person"  # their CLI refreshed it
        (person / ".credentials.json").write_text(json.dumps(login))
        ask(gate_.folder / "port-4001.sock", post("/v1/messages", bearer))
        assert seen[-1]["headers"]["authorization"] == "Bearer sk-ant-oat01-refreshed-by-the-person"
    finally:
        gate_.close()


def test_a_run_of_no_cli_kind_or_another_provider_has_nothing_swapped() -> None:
    env = {"ANTHROPIC_API_KEY": REAL_KEY, "GEMINI_API_KEY": REAL_GEMINI}
    assert model_keys.plan_for("command", env, None, None, 4000) is None
    assert model_keys.plan_for("claude-code", {**env, "CLAUDE_CODE_USE_BEDROCK": "1"}, None, None, 4000) is None
    assert model_keys.plan_for("claude-code", {}, None, None, 4000) is None
    plan = model_keys.plan_for("gemini", env, None, None, 4000)
    assert plan is not None and set(plan.env) == {"GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL"}
    assert plan.route.upstream == "https://generativelanguage.googleapis.com"
    # What an ACP agent's terminals get: the placeholder the run holds, never the daemon's value.
    assert model_keys.kept_out({**env, "PATH": "/bin"}, {"GEMINI_API_KEY": "p", "PATH": "/bin"}) == {
        "GEMINI_API_KEY": "p", "PATH": "/bin"}


@pytest.mark.parametrize("network", ["open", "off"])
def test_without_the_gate_the_keys_enter_the_run_as_before_and_its_log_says_so(
        services: Services, tmp_path: Path, network: str) -> None:
    services.settings.sandbox = SandboxSettings(network=network)
    lines: list[str] = []
    env = {"PATH": "/usr/bin", "HOME": str(tmp_path), "ANTHROPIC_API_KEY": REAL_KEY}
    with services.sandbox.around(["claude", "-p"], env, tmp_path, None, preset="standard", actor="agent:a",
                                 agent_type="claude-code", log_line=lines.append) as (_, inner):
        assert inner["ANTHROPIC_API_KEY"] == REAL_KEY and "ANTHROPIC_BASE_URL" not in inner
    assert any(f"model keys NOT kept out of this run (network {network}" in line for line in lines), lines
    assert not any("kept in the daemon" in line for line in lines)


def test_a_login_the_gate_cannot_stand_in_for_enters_the_run_and_its_log_says_so(
        services: Services, tmp_path: Path) -> None:
    """A Codex ChatGPT login (auth.json `tokens`): copied as before, and the run's log names it."""
    home = tmp_path / "codex-home"
    home.mkdir()
    tokens = {"OPENAI_API_KEY": None, "tokens": {"access_token": "chatgpt-REAL-access", "refresh_token": "r"}}
    (home / "auth.json").write_text(json.dumps(tokens))
    lines: list[str] = []
    env = {"PATH": "/usr/bin", "HOME": str(tmp_path), "CODEX_HOME": str(home)}
    with services.sandbox.around(["codex", "app-server"], env, tmp_path, None, preset="standard", actor="agent:a",
                                 agent_type="codex", log_line=lines.append) as (_, inner):
        assert json.loads((Path(inner["CODEX_HOME"]) / "auth.json").read_text()) == tokens
    said = [line for line in lines if "NOT kept out" in line]
    assert said and "cannot stand in for" in said[0] and "auth.json holds the person's login" in said[0], lines


def test_the_persons_logins_are_hidden_from_every_run(services: Services, git_env: Path,  # noqa: F811
                                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run's CLI gets its own copy (with a placeholder where the gate stands in); the person's files themselves are
    covered in every run, of any kind (a `command` agent could read ~/.claude/.credentials.json before)."""
    codex_home = tmp_path / "codex-home"
    for path in (git_env / ".claude" / ".credentials.json", git_env / ".claude.json", codex_home / "auth.json",
                 git_env / ".gemini" / "oauth_creds.json"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text('{"person": "login"}')
    monkeypatch.setenv("CODEX_HOME", str(codex_home))
    logins = {git_env / ".claude" / ".credentials.json", git_env / ".claude.json", codex_home / "auth.json",
              git_env / ".gemini" / "oauth_creds.json"}
    work = tmp_path / "work"
    work.mkdir()
    for kind in ("command", "claude-code", "codex", "gemini"):
        rules = services.sandbox.rules_for(work, None, preset="standard", agent_type=kind, env=dict(os.environ))
        assert logins <= set(rules.hidden), (kind, rules.hidden)
        argv = bwrap.build_argv(rules, ["true"], tmp_path)
        for login in logins:  # each covered by an empty file inside
            at = argv.index(str(login))
            assert argv[at - 2:at] == ["--ro-bind", "/dev/null"], (kind, login)
        for scratch in rules.scratch:
            shutil.rmtree(scratch, ignore_errors=True)


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    folder = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", folder / "key.pem",
                    "-out", folder / "cert.pem", "-days", "2", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost"], check=True, capture_output=True)
    return folder / "cert.pem", folder / "key.pem", folder


def test_an_https_endpoint_is_reached_over_verified_tls(upstream: Any, tls_pair: tuple[Path, Path, Path],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    server, seen, _ = upstream
    cert, key, _ = tls_pair
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    port = server.server_address[1]
    plan = model_keys.plan_for("claude-code", {"ANTHROPIC_API_KEY": REAL_KEY,
                                               "ANTHROPIC_BASE_URL": f"https://localhost:{port}"}, None, None, 4002)
    assert plan is not None
    rules = SandboxRules(Path("/"), False, endpoints=(Endpoint.parse(f"localhost:{port}"),), models=(plan.route,))
    gate_ = NetworkGate(rules, lambda *_: None)
    try:
        request = post("/v1/messages", {"x-api-key": plan.env["ANTHROPIC_API_KEY"]})
        # A certificate nobody vouches for: no connection, no key sent.
        assert ask(gate_.folder / "port-4002.sock", request).startswith(b"HTTP/1.1 502")
        assert seen == []
        monkeypatch.setattr(gate, "tls_context", lambda: ssl.create_default_context(cafile=str(cert)))
        assert ask(gate_.folder / "port-4002.sock", request).startswith(b"HTTP/1.1 200")
        assert seen[-1]["headers"]["x-api-key"] == REAL_KEY and seen[-1]["headers"]["host"] == f"localhost:{port}"
    finally:
        gate_.close()
