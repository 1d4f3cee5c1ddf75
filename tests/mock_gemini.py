"""Loopback mock of the Gemini API (`generateContent`, `streamGenerateContent?alt=sse`) the real Gemini CLI accepts.

Stdlib only. Start it from a test, point the CLI at it with `gemini_home()`, and only the model is scripted:

    with MockGemini() as mock:
        env = gemini_home(tmp_path, mock.base_url)
        subprocess.run([gemini, "-o", "stream-json", ..., "-p", "SCENARIO:write_file ..."], env={**os.environ, **env})
        mock.requests  # every parsed request body, in arrival order

The CLI (0.61.0, @google/genai SDK, API-key auth) sends, per prompt:

- `POST /v1beta/models/<flash-lite>:generateContent`: the "auto" model router's complexity classifier. Its
  `generationConfig` has `responseMimeType: application/json` and a `responseJsonSchema`
  (`complexity_reasoning` string, `complexity_score` integer); a reply that doesn't parse is logged as a
  ZodError on stderr and the CLI routes by default. The mock answers every JSON-schema request with an object
  built from the schema (score `ROUTER_SCORE`, low, so the CLI routes to its flash model). Its usage counts
  in the CLI's `stats` like any other call (step `"router"`).
- `POST /v1beta/models/<model>:streamGenerateContent?alt=sse`: the chat turn, `contents` (the session context
  and the prompt as `role:user` text parts), `systemInstruction`, `tools[0].functionDeclarations`. The tool
  results come back as a `role:user` content with `functionResponse` parts. (The system instruction itself
  mentions "functionResponse", so look only at `contents`.)

An SSE chunk is `data: <GenerateContentResponse JSON>\\n\\n`: `candidates[0].content.parts` (`text` or
`functionCall: {name, args}`), `finishReason` on the last chunk, and `usageMetadata` (`promptTokenCount`,
`candidatesTokenCount`, `cachedContentTokenCount`, `thoughtsTokenCount`, `totalTokenCount`), sent here on the
last chunk only. `modelVersion` names the model in the CLI's `stats.models`.

Behaviour of the chat requests is chosen by a `SCENARIO:<name>` marker in the user text of `contents`:

- `write_file`: turn 1 answers with a `run_shell_command` function call running `WRITE_FILE_COMMAND`; once
  `contents` carries its `functionResponse`, turn 2 answers `FINAL_TEXT`. `run_shell_command` is declared
  only with `--approval-mode yolo` (or an allow rule for it); with `auto_edit` headless runs get just
  list_directory, read_file, grep_search, glob, replace, write_file, web_fetch, google_web_search, ... and
  the mock answers 400 naming the tools it got.
- `cli_followup`: the same with `CLI_FOLLOWUP_COMMAND` (`agentqueue task create`, a follow-up in this scenario).
- `run_cmd`: the shell with the command written `CMD[...]` in the task, `TIMES[n]` times, then `FINAL_TEXT`.
- `loop`: the shell with `LOOP_COMMAND` on every turn until AgentQueue's watchdog warning is in the user text
  (then `warned` is set and it answers `FINAL_TEXT`).
- `alternate`: the shell with `ALTERNATE_COMMANDS` in turn, and never a final answer.
- `write_tool`: Gemini's `write_file` tool to `PATH[...]` with `WRITE_TOOL_CONTENT`, then `FINAL_TEXT`.
- `mcp_tool`: AgentQueue's `create_task` (the declared tool whose name ends so) with `MCP_FOLLOWUP_TITLE`.
- `rate_limit`: HTTP 429 `{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED", "message": ...}}` without
  `details`, which the CLI classifies as a retryable quota error (retries: see `gemini_home`).
- anything else / no marker: `DEFAULT_TEXT`, streamed in two chunks.

Every 200 answer carries `usageMetadata` from `USAGE` (one entry per step), so a test can predict the CLI's
`result.stats` with `expected_stats()`.
"""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from .loopback import LoopbackMock, LoopbackServer

SCENARIO_RE = re.compile(r"SCENARIO:([A-Za-z0-9_\-]+)")
ROUTE_RE = re.compile(r"^/v1beta/models/([^/:]+):(generateContent|streamGenerateContent)$")

MODEL = "gemini-mock"  # the modelVersion every answer reports
API_KEY = "mock-key"
SHELL_TOOL = "run_shell_command"

WRITE_FILE_NAME = "gemini_hello.txt"
WRITE_FILE_COMMAND = f"echo hello > {WRITE_FILE_NAME}"
WRITE_FILE_CONTENT = "hello\n"
FINAL_TEXT = "Done."
CLI_FOLLOWUP_TITLE = "Gemini follow-up through the CLI"
CLI_FOLLOWUP_COMMAND = (f"agentqueue task create '{CLI_FOLLOWUP_TITLE}' --agent-type gemini "
                        "--description 'SCENARIO:cli_followup Queued by Gemini through the CLI.'")
DEFAULT_TEXT = "Hello from mock."
CMD_RE = re.compile(r"CMD\[(.+?)\]")
TIMES_RE = re.compile(r"TIMES\[(\d+)\]")
PATH_RE = re.compile(r"PATH\[(.+?)\]")
WRITE_TOOL_CONTENT = "written by gemini's write_file\n"
LOOP_COMMAND = "ls"
ALTERNATE_COMMANDS = ("ls", "pwd")
WATCHDOG_TEXT = "AgentQueue watchdog"
MCP_FOLLOWUP_TITLE = "Gemini follow-up through MCP"
ROUTER_SCORE = 10
RATE_LIMIT_MESSAGE = "Too many requests for gemini-mock (mock rate limit)."

# usageMetadata per step; distinct numbers so sums are unambiguous.
USAGE = {
    "router": {"prompt": 50, "cached": 0, "candidates": 5, "thoughts": 3},
    "tool_call": {"prompt": 120, "cached": 20, "candidates": 30, "thoughts": 6},
    "final": {"prompt": 150, "cached": 60, "candidates": 12, "thoughts": 2},
    "text": {"prompt": 90, "cached": 10, "candidates": 7, "thoughts": 0},
}


def usage_metadata(step: str) -> dict[str, int]:
    u = USAGE[step]
    return {"promptTokenCount": u["prompt"], "candidatesTokenCount": u["candidates"],
            "cachedContentTokenCount": u["cached"], "thoughtsTokenCount": u["thoughts"],
            "totalTokenCount": u["prompt"] + u["candidates"] + u["thoughts"]}


def expected_stats(*steps: str) -> dict[str, int]:
    """What the CLI prints in the stream-json `result.stats` after the mock answered with these steps.

    input_tokens = prompt (cached included), input = prompt - cached, output_tokens = candidates only,
    total_tokens = totalTokenCount (thoughts included), summed over every call, the router's too.
    """
    prompt = sum(USAGE[s]["prompt"] for s in steps)
    cached = sum(USAGE[s]["cached"] for s in steps)
    return {"input_tokens": prompt, "cached": cached, "input": prompt - cached,
            "output_tokens": sum(USAGE[s]["candidates"] for s in steps),
            "total_tokens": sum(usage_metadata(s)["totalTokenCount"] for s in steps)}


def _parts(body: dict[str, Any], role: str = "user") -> list[dict[str, Any]]:
    return [part for content in body.get("contents") or [] if isinstance(content, dict)
            and content.get("role", "user") == role for part in content.get("parts") or [] if isinstance(part, dict)]


def user_text(body: dict[str, Any]) -> str:
    return "\n".join(user_texts(body))


def user_texts(body: dict[str, Any]) -> list[str]:
    """The text parts of the user's contents, oldest first."""
    return [p["text"] for p in _parts(body) if isinstance(p.get("text"), str)]


def scenario_of(body: dict[str, Any]) -> str | None:
    found = SCENARIO_RE.search(user_text(body))
    return found.group(1) if found else None


def function_responses(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [p["functionResponse"] for p in _parts(body) if isinstance(p.get("functionResponse"), dict)]


def tool_names(body: dict[str, Any]) -> set[str]:
    return {decl.get("name") for tool in body.get("tools") or [] if isinstance(tool, dict)
            for decl in tool.get("functionDeclarations") or [] if isinstance(decl, dict)}


def json_schema_of(body: dict[str, Any]) -> dict[str, Any] | None:
    config = body.get("generationConfig") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    if schema is None and "json" in str(config.get("responseMimeType") or ""):
        schema = {}
    return schema if isinstance(schema, dict) else None


def _from_schema(schema: dict[str, Any], name: str = "") -> Any:
    kind = str(schema.get("type") or "object").lower()
    if "score" in name and kind in ("integer", "number"):
        return ROUTER_SCORE
    if schema.get("enum"):
        return schema["enum"][0]
    if kind == "object":
        return {key: _from_schema(sub, key) for key, sub in (schema.get("properties") or {}).items()
                if isinstance(sub, dict)}
    return {"string": "mock", "integer": 1, "number": 1, "boolean": False, "array": []}.get(kind)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: LoopbackServer

    def log_message(self, *args: Any) -> None:
        pass

    def _json(self, code: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json; charset=UTF-8")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, code: int, status: str, message: str) -> None:
        self._json(code, {"error": {"code": code, "message": message, "status": status}})

    def do_GET(self) -> None:
        self.server.mock._record(self.command, self.path, None, self.headers)
        self._error(404, "NOT_FOUND", f"mock: no route {self.command} {self.path}")

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        self.server.mock._record(self.command, self.path, body, self.headers)
        route = ROUTE_RE.match(self.path.split("?")[0])
        if route is None:
            return self._error(404, "NOT_FOUND", f"mock: no route {self.command} {self.path}")
        stream = route.group(2) == "streamGenerateContent"
        schema = json_schema_of(body)
        if schema is not None:  # the router's classifier (or another structured utility call)
            return self._answer(stream, [[{"text": json.dumps(_from_schema(schema))}]], "router")
        scenario = scenario_of(body)
        if scenario == "rate_limit":
            return self._error(429, "RESOURCE_EXHAUSTED", RATE_LIMIT_MESSAGE)
        if scenario == "cli_followup":  # an agent without MCP queues a follow-up through `agentqueue task create`
            if any(r.get("name") == SHELL_TOOL for r in function_responses(body)):
                return self._answer(stream, [[{"text": FINAL_TEXT}]], "final")
            call = {"functionCall": {"name": SHELL_TOOL,
                                     "args": {"command": CLI_FOLLOWUP_COMMAND, "description": "Queue a follow-up."}}}
            return self._answer(stream, [[call]], "tool_call")
        if scenario in ("run_cmd", "loop", "alternate", "mcp_tool", "write_tool"):
            return self._scripted(stream, scenario, body)
        if scenario == "write_file":
            if any(r.get("name") == SHELL_TOOL for r in function_responses(body)):
                return self._answer(stream, [[{"text": FINAL_TEXT}]], "final")
            if SHELL_TOOL not in tool_names(body):
                return self._error(400, "INVALID_ARGUMENT",
                                   f"mock: no {SHELL_TOOL} tool in {sorted(map(str, tool_names(body)))}")
            call = {"functionCall": {"name": SHELL_TOOL,
                                     "args": {"command": WRITE_FILE_COMMAND, "description": "Write the hello file."}}}
            return self._answer(stream, [[call]], "tool_call")
        half = len(DEFAULT_TEXT) // 2
        return self._answer(stream, [[{"text": DEFAULT_TEXT[:half]}], [{"text": DEFAULT_TEXT[half:]}]], "text")


    def _scripted(self, stream: bool, scenario: str, body: dict[str, Any]) -> None:
        """The scenarios of tests/test_acp_gemini.py (see the module's docstring)."""
        if scenario == "run_cmd":  # the shell with CMD[...] from the task, TIMES[n] times (default once)
            command, times = CMD_RE.search(user_text(body)), TIMES_RE.search(user_text(body))
            command = command.group(1) if command else WRITE_FILE_COMMAND
            times = int(times.group(1)) if times else 1
            if len([r for r in function_responses(body) if r.get("name") == SHELL_TOOL]) >= times:
                return self._answer(stream, [[{"text": FINAL_TEXT}]], "final")
            call = {"functionCall": {"name": SHELL_TOOL, "args": {"command": command, "description": "Run it."}}}
            return self._answer(stream, [[call]], "tool_call")
        if scenario == "loop":  # the same call again and again, until a watchdog warning is in the conversation
            if WATCHDOG_TEXT in user_text(body):
                self.server.mock.warned = True
                return self._answer(stream, [[{"text": FINAL_TEXT}]], "final")
            call = {"functionCall": {"name": SHELL_TOOL, "args": {"command": LOOP_COMMAND, "description": "Again."}}}
            return self._answer(stream, [[call]], "tool_call")
        if scenario == "alternate":  # two commands in turn, forever (a ping-pong, which Gemini's loop check misses)
            done = len([r for r in function_responses(body) if r.get("name") == SHELL_TOOL])
            args = {"command": ALTERNATE_COMMANDS[done % 2], "description": "Again."}
            return self._answer(stream, [[{"functionCall": {"name": SHELL_TOOL, "args": args}}]], "tool_call")
        if scenario == "write_tool":  # Gemini's own write_file tool, to PATH[...] (relative to the cwd or absolute)
            if function_responses(body):
                return self._answer(stream, [[{"text": FINAL_TEXT}]], "final")
            path = PATH_RE.search(user_text(body))
            args = {"file_path": path.group(1) if path else WRITE_FILE_NAME, "content": WRITE_TOOL_CONTENT}
            return self._answer(stream, [[{"functionCall": {"name": "write_file", "args": args}}]], "tool_call")
        if scenario == "mcp_tool":  # AgentQueue's create_task, through the MCP server the client gave the agent
            names = [n for n in tool_names(body) if str(n).endswith("create_task")]
            if function_responses(body) or not names:
                text = FINAL_TEXT if names else f"no create_task tool in {sorted(map(str, tool_names(body)))}"
                return self._answer(stream, [[{"text": text}]], "final")
            call = {"functionCall": {"name": names[0], "args": {"title": MCP_FOLLOWUP_TITLE,
                                                                "description": "Queued by Gemini through MCP."}}}
            return self._answer(stream, [[call]], "tool_call")

    def _answer(self, stream: bool, chunks: list[list[dict[str, Any]]], step: str) -> None:
        """chunks: the parts of each streamed chunk (joined into one response when not streaming)."""
        rid = f"mock-{next(self.server.mock._ids)}"

        def response(parts: list[dict[str, Any]], last: bool) -> dict[str, Any]:
            candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
            out: dict[str, Any] = {"candidates": [candidate], "modelVersion": MODEL, "responseId": rid}
            if last:
                candidate["finishReason"] = "STOP"
                out["usageMetadata"] = usage_metadata(step)
            return out

        if not stream:
            self._json(200, response([p for parts in chunks for p in parts], True))
        else:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("connection", "close")
            self.end_headers()
            for index, parts in enumerate(chunks):
                self.wfile.write(f"data: {json.dumps(response(parts, index == len(chunks) - 1))}\r\n\r\n".encode())
            self.wfile.flush()
            self.close_connection = True
        self.server.mock._sent(step)


class MockGemini(LoopbackMock):
    """The mock server, run in a background thread. `port=0` picks a free port."""

    handler = _Handler
    name = "mock-gemini"

    warned = False  # the `loop` scenario saw the watchdog's warning

    @property
    def base_url(self) -> str:
        """For GOOGLE_GEMINI_BASE_URL: no path, the SDK adds `/v1beta/models/...`."""
        return f"http://{self.host}:{self.port}"

    @property
    def chat_requests(self) -> list[dict[str, Any]]:
        """The POST bodies that were not structured (router) calls."""
        return [r for r in self.requests if json_schema_of(r) is None]


def gemini_home(tmp_path: Path, base_url: str, *, max_attempts: int | None = 1) -> dict[str, str]:
    """A HOME whose ~/.gemini/settings.json selects API-key auth; returns the env vars to run gemini with.

    Retries (read from and checked against gemini-cli 0.61.0): a 429 without `details` is a
    RetryableQuotaError, retried up to `general.maxAttempts` (default 10, capped at 10) times with backoff
    starting at 5 s and doubling to 30 s: with the default, 10 requests and 204 s measured. `max_attempts` sets
    that key (1 = no retry, the run fails in about a second); None leaves the default. Every 429 error message
    gets the CLI's advice "Please wait and try again later. To increase your limits, request a quota increase
    through AI Studio, ..." appended. Exit code after an API error: 144 for a 400, 173 seen for the 429.

    The other keys keep a run offline and quiet: no usage statistics (Clearcut) or telemetry, no update check,
    no ripgrep download; GEMINI_CLI_NO_RELAUNCH skips the re-spawn with a bigger heap. Every key is one in
    0.61.0's settings schema. Trust is left to the adapter's `--skip-trust`.
    """
    user_home = Path(tmp_path) / "home"
    (user_home / ".gemini").mkdir(parents=True, exist_ok=True)
    tmp = Path(tmp_path) / "tmp"
    tmp.mkdir(exist_ok=True)  # the CLI writes gemini-client-error-*.json reports to TMPDIR
    general: dict[str, Any] = {"enableAutoUpdate": False, "enableAutoUpdateNotification": False}
    if max_attempts is not None:
        general["maxAttempts"] = max_attempts
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": general,
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "tools": {"useRipgrep": False},
    }
    (user_home / ".gemini" / "settings.json").write_text(json.dumps(settings, indent=2))
    return {
        "HOME": str(user_home),  # nothing of the real user's (~/.gemini, ~/.gitconfig) leaks in
        "GEMINI_API_KEY": API_KEY,
        "GOOGLE_GEMINI_BASE_URL": base_url,
        "TMPDIR": str(tmp),
        "GEMINI_CLI_NO_RELAUNCH": "true",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "NO_COLOR": "1",
        "CI": "1",
    }
