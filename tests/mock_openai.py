"""Loopback mock of the OpenAI Responses API (`POST /v1/responses`, SSE) that the real Codex CLI accepts.

Stdlib only. Start it from a test, point Codex at it with `codex_home()`, and only the model is scripted:

    with MockOpenAI() as mock:
        env = codex_home(tmp_path, mock.base_url)
        subprocess.run([codex, "exec", "--json", ..., "--", "SCENARIO:write_file ..."], env={**os.environ, **env}, ...)
        mock.requests  # every parsed request body, in arrival order

Behaviour is chosen by a `SCENARIO:<name>` marker anywhere in the text of the request's user messages:

- `write_file`: turn 1 answers with an `exec_command` function call running `WRITE_FILE_COMMAND`;
  once the request carries that call's `function_call_output`, turn 2 answers "Done.".
- `cli_followup`: the same with `CLI_FOLLOWUP_COMMAND` (`agentqueue task create`, a follow-up in this scenario).
- `rate_limit`: HTTP 429 with an OpenAI-style error body and `Retry-After: 0`.
- `auth`: HTTP 401 (an API key refused).
- `run_cmd`: `exec_command` with the command written as CMD[...] (or CMD[...]END when it holds a `]`; JSON string
  escapes such as `\\n` work), TIMES[n] times (default 1; the first call's id is `RUN_CMD_CALL_ID`), then "Tool
  said: <the last output>" (so a test sees what the model was told).
- `loop`: `exec_command` `echo same` over and over, until a user message after its first call carries
  "AgentQueue watchdog" (the engine's warning, sent mid-turn), then "Warned.".
- `stdin`: `exec_command` starts CMD[...]END on a terminal, `write_stdin` types TYPE[...]END into that session,
  then "Tool said: <the last output>".
- `mcp_call`: the MCP tool TOOL[namespace:name] with ARGS[<json>]END (Codex offers each MCP server as one
  `namespace` tool, `mcp__<server>`), then "Tool said: <its output>".
- anything else / no marker: one plain assistant message, `DEFAULT_TEXT`.

Every 200 response ends with `response.completed` carrying `usage` from `USAGE` (one entry per step), so a
test can predict the totals Codex prints in `turn.completed.usage` (it sums the calls of one turn).

SSE events Codex 0.169 reads (codex-rs `codex-api/src/sse/responses.rs`): `response.created` (needs a
`response` object), `response.output_item.added` / `response.output_item.done` (an `item` that parses as a
ResponseItem: `message` with `output_text` parts, or `function_call` with `name`, `call_id` and
`arguments` as a JSON *string*), `response.output_text.delta` (`delta`), and `response.completed`, whose
`response` needs an `id` and, if `usage` is present, all of `input_tokens`, `output_tokens` and
`total_tokens` (the `*_details` objects are optional). A stream that closes without `response.completed`
is a retryable "stream closed before response.completed" error.

Codex 0.169's shell tool is `exec_command` (arguments `{"cmd": "<shell string>"}`, plus optional `workdir`,
`tty`, `login`, ...); `--json` then shows it as a `command_execution` item, `/bin/bash -lc '<cmd>'`.
The other tools it offers: write_stdin, request_user_input, view_image, multi_agent_v1, get_goal,
create_goal, update_goal, web_search. On a 429 Codex drops the body and reports
"exceeded retry limit, last status: 429 Too Many Requests" (retries: see `codex_home`).
"""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from .loopback import LoopbackMock, LoopbackServer

SCENARIO_RE = re.compile(r"SCENARIO:([A-Za-z0-9_\-]+)")

MODEL = "gpt-mock"
PRICED_MODEL = "gpt-5-codex"
API_KEY_ENV = "MOCK_KEY"

WRITE_FILE_NAME = "codex_hello.txt"
WRITE_FILE_COMMAND = f"echo hello > {WRITE_FILE_NAME}"
WRITE_FILE_CONTENT = "hello\n"
WRITE_FILE_CALL_ID = "call_mock_write_file"
FINAL_TEXT = "Done."
CLI_FOLLOWUP_TITLE = "Codex follow-up through the CLI"
CLI_FOLLOWUP_COMMAND = (f"agentqueue task create '{CLI_FOLLOWUP_TITLE}' --agent-type codex "
                        "--description 'SCENARIO:cli_followup Queued by Codex through the CLI.'")
CLI_CALL_ID = "call_mock_cli"
RUN_CMD_CALL_ID = "call_mock_run_cmd"
CMD_RE = re.compile(r"CMD\[(.*?)\]")
DEFAULT_TEXT = "Hello from mock."
AUTH_MESSAGE = "Incorrect API key provided: mock-key."
RATE_LIMIT_MESSAGE = "Rate limit reached for gpt-mock on requests per min (RPM): Limit 1, Used 1, Requested 1."

# usage reported by each response, per step; distinct numbers so sums are unambiguous.
USAGE = {
    "tool_call": {"input_tokens": 120, "cached_tokens": 20, "output_tokens": 30, "reasoning_tokens": 5},
    "final": {"input_tokens": 150, "cached_tokens": 60, "output_tokens": 12, "reasoning_tokens": 3},
    "text": {"input_tokens": 90, "cached_tokens": 10, "output_tokens": 7, "reasoning_tokens": 0},
}


def usage_body(step: str) -> dict[str, Any]:
    u = USAGE[step]
    return {
        "input_tokens": u["input_tokens"],
        "input_tokens_details": {"cached_tokens": u["cached_tokens"]},
        "output_tokens": u["output_tokens"],
        "output_tokens_details": {"reasoning_tokens": u["reasoning_tokens"]},
        "total_tokens": u["input_tokens"] + u["output_tokens"],
    }


def expected_turn_usage(*steps: str) -> dict[str, int]:
    """What Codex prints in `turn.completed.usage` after the mock answered with these steps."""
    return {
        "input_tokens": sum(USAGE[s]["input_tokens"] for s in steps),
        "cached_input_tokens": sum(USAGE[s]["cached_tokens"] for s in steps),
        "output_tokens": sum(USAGE[s]["output_tokens"] for s in steps),
        "reasoning_output_tokens": sum(USAGE[s]["reasoning_tokens"] for s in steps),
    }


def _user_text(body: dict[str, Any]) -> str:
    parts: list[str] = []
    items = body.get("input")
    if isinstance(items, str):
        return items
    for item in items or []:
        if not isinstance(item, dict) or item.get("role") != "user":
            continue
        content = item.get("content")
        if isinstance(content, str):
            parts.append(content)
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
    return "\n".join(parts)


def scenario_of(body: dict[str, Any]) -> str | None:
    found = SCENARIO_RE.search(_user_text(body))
    return found.group(1) if found else None


def _has_call_output(body: dict[str, Any], call_id: str) -> bool:
    return any(isinstance(i, dict) and i.get("type") == "function_call_output" and i.get("call_id") == call_id
               for i in body.get("input") or [])


def call_outputs(body: dict[str, Any]) -> list[str]:
    """The text of every function call output in the request, oldest first."""
    return [o if isinstance(o := i.get("output"), str) else json.dumps(o) for i in body.get("input") or []
            if isinstance(i, dict) and i.get("type") == "function_call_output"]


def said_after_calls(body: dict[str, Any]) -> str:
    """The text of user messages that came after the first function call (what was said to the model mid-run)."""
    items = [i for i in body.get("input") or [] if isinstance(i, dict)]
    first = next((n for n, i in enumerate(items) if i.get("type") == "function_call"), len(items))
    return _user_text({"input": items[first:]})


def _tool_names(body: dict[str, Any]) -> set[str]:
    return {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: LoopbackServer

    def log_message(self, *args: Any) -> None:
        pass

    def _json(self, code: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self) -> None:
        self._json(404, {"error": {"message": f"mock: no route {self.command} {self.path}",
                                   "type": "invalid_request_error", "param": None, "code": "not_found"}})

    def do_GET(self) -> None:
        self.server.mock._record(self.command, self.path, None, self.headers)
        self._not_found()

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_unparsed": raw.decode("utf-8", "replace")}
        self.server.mock._record(self.command, self.path, body, self.headers)
        if self.path.split("?")[0].rstrip("/") != "/v1/responses":
            return self._not_found()
        scenario = scenario_of(body)
        if scenario == "rate_limit":
            headers = {"x-ratelimit-remaining-requests": "0"}
            if self.server.mock.retry_after is not None:
                headers["retry-after"] = self.server.mock.retry_after
            return self._json(429, {"error": {"message": RATE_LIMIT_MESSAGE, "type": "requests", "param": None,
                                              "code": "rate_limit_exceeded"}}, headers)
        if scenario == "cli_followup":  # an agent without MCP queues a follow-up through `agentqueue task create`
            if _has_call_output(body, CLI_CALL_ID):
                return self._stream(body, [self._message(FINAL_TEXT)], "final")
            call = {"type": "function_call", "id": "fc_mock_cli", "status": "completed", "name": "exec_command",
                    "call_id": CLI_CALL_ID, "arguments": json.dumps({"cmd": CLI_FOLLOWUP_COMMAND})}
            return self._stream(body, [call], "tool_call")
        if scenario == "auth":
            return self._json(401, {"error": {"message": AUTH_MESSAGE, "type": "invalid_request_error", "param": None,
                                              "code": "invalid_api_key"}})
        if scenario == "mcp_call":
            return self._mcp_call(body)
        if scenario == "stdin":
            return self._stdin(body)
        if scenario in ("run_cmd", "loop"):
            return self._run_cmd(body, scenario)
        if scenario == "write_file":
            if _has_call_output(body, WRITE_FILE_CALL_ID):
                return self._stream(body, [self._message(FINAL_TEXT)], "final")
            if "exec_command" not in _tool_names(body):
                return self._json(400, {"error": {"message": f"mock: no exec_command tool in {_tool_names(body)}",
                                                  "type": "invalid_request_error", "param": None, "code": None}})
            call = {"type": "function_call", "id": "fc_mock_write_file", "status": "completed",
                    "name": "exec_command", "call_id": WRITE_FILE_CALL_ID,
                    "arguments": json.dumps({"cmd": WRITE_FILE_COMMAND})}
            return self._stream(body, [call], "tool_call")
        return self._stream(body, [self._message(DEFAULT_TEXT)], "text")

    def _run_cmd(self, body: dict[str, Any], scenario: str) -> None:
        """run_cmd: `exec_command` with CMD[...] TIMES[n] times, then "Tool said: <the last output>"; loop: `echo same`
        until the model is told by a user message after its first call (the watchdog), then "Warned."."""
        text = _user_text(body)
        outputs = call_outputs(body)
        if scenario == "loop":
            if len(outputs) and "AgentQueue watchdog" in said_after_calls(body):
                return self._stream(body, [self._message("Warned.")], "final")
            command, times = "echo same", 10_000
        else:
            found = re.search(r"CMD\[(.*?)\]END", text) or CMD_RE.search(text)
            count = re.search(r"TIMES\[(\d+)\]", text)
            command, times = (json.loads(f'"{found[1]}"') if found else "true"), int(count[1]) if count else 1
        if len(outputs) >= times:
            return self._stream(body, [self._message(f"Tool said: {outputs[-1] if outputs else '(nothing)'}")],
                                "final")
        step = f"_{len(outputs)}" if outputs else ""  # the first call is RUN_CMD_CALL_ID
        call = {"type": "function_call", "id": f"fc_mock_run_cmd{step}", "status": "completed",
                "name": "exec_command", "call_id": RUN_CMD_CALL_ID + step, "arguments": json.dumps({"cmd": command})}
        return self._stream(body, [call], "tool_call")

    def _mcp_call(self, body: dict[str, Any]) -> None:
        """mcp_call: the MCP tool TOOL[namespace:name] (Codex offers a server's tools as one `namespace` tool) with
        ARGS[<json>]END, then "Tool said: <its output>"."""
        text = _user_text(body)
        outputs = call_outputs(body)
        if outputs:
            return self._stream(body, [self._message(f"Tool said: {outputs[-1]}")], "final")
        tool, args = re.search(r"TOOL\[(.*?):(.*?)\]", text), re.search(r"ARGS\[(.*?)\]END", text)
        call = {"type": "function_call", "id": "fc_mock_mcp", "status": "completed",
                "namespace": tool[1] if tool else "", "name": tool[2] if tool else "", "call_id": "call_mock_mcp",
                "arguments": args[1] if args else "{}"}
        return self._stream(body, [call], "tool_call")

    def _stdin(self, body: dict[str, Any]) -> None:
        """stdin: `exec_command` starts CMD[...] on a terminal, then `write_stdin` types TYPE[...] into it, then "Tool
        said: <the last output>"."""
        text, outputs = _user_text(body), call_outputs(body)
        if len(outputs) >= 2 or outputs and "session ID" not in outputs[0]:
            return self._stream(body, [self._message(f"Tool said: {outputs[-1]}")], "final")
        if outputs:
            session = re.search(r"session ID (\d+)", outputs[0])
            typed = re.search(r"TYPE\[(.*?)\]END", text)
            args = {"session_id": int(session[1]) if session else 0,
                    "chars": json.loads(f'"{typed[1]}"') if typed else "", "yield_time_ms": 1000}
            call = {"type": "function_call", "id": "fc_mock_stdin_1", "status": "completed", "name": "write_stdin",
                    "call_id": "call_mock_stdin_1", "arguments": json.dumps(args)}
            return self._stream(body, [call], "tool_call")
        found = re.search(r"CMD\[(.*?)\]END", text)
        args = {"cmd": found[1] if found else "cat", "tty": True, "yield_time_ms": 500}
        call = {"type": "function_call", "id": "fc_mock_stdin_0", "status": "completed", "name": "exec_command",
                "call_id": "call_mock_stdin_0", "arguments": json.dumps(args)}
        return self._stream(body, [call], "tool_call")

    def _message(self, text: str) -> dict[str, Any]:
        return {"type": "message", "id": f"msg_mock_{next(self.server.mock._ids)}", "role": "assistant",
                "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]}

    def _stream(self, body: dict[str, Any], items: list[dict[str, Any]], step: str) -> None:
        rid = f"resp_mock_{next(self.server.mock._ids)}"
        base = {"id": rid, "object": "response", "model": body.get("model") or MODEL}
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": {**base, "status": "in_progress", "output": []}}]
        for index, item in enumerate(items):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                events.append({"type": "response.output_item.added", "output_index": index,
                               "item": {**item, "status": "in_progress", "content": []}})
                events.append({"type": "response.output_text.delta", "item_id": item["id"], "output_index": index,
                               "content_index": 0, "delta": text})
            else:
                events.append({"type": "response.output_item.added", "output_index": index,
                               "item": {**item, "status": "in_progress", "arguments": ""}})
            events.append({"type": "response.output_item.done", "output_index": index, "item": item})
        events.append({"type": "response.completed",
                       "response": {**base, "status": "completed", "output": items, "usage": usage_body(step)}})
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        for event in events:
            self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        self.wfile.flush()
        self.close_connection = True
        self.server.mock._sent(step)


class MockOpenAI(LoopbackMock):
    """The mock server, run in a background thread. `port=0` picks a free port."""

    handler = _Handler
    name = "mock-openai"

    def __init__(self, host: str = "127.0.0.1", port: int = 0, retry_after: str | None = "0") -> None:
        super().__init__(host, port)
        self.retry_after = retry_after  # the 429's Retry-After header; None leaves it out

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"


def codex_home(tmp_path: Path, base_url: str, *, max_retries: int | None = 0, model: str = MODEL) -> dict[str, str]:
    """A CODEX_HOME whose config.toml points Codex at the mock; returns the env vars to run codex with.

    Retries (observed with codex 0.169.0): a 429 that carries `Retry-After` is retried
    `stream_max_retries` times (provider key, default 5), each retry printed as a
    `{"type":"error","message":"Reconnecting... n/N (exceeded retry limit, last status: 429 ...)"}` line and
    delayed by Retry-After; a 429 *without* Retry-After is not retried at all. `request_max_retries`
    (default 4) did not change the 429 count. `max_retries` sets both keys; None leaves Codex's defaults.
    The config passes `codex exec --strict-config`, so every key below is one 0.169.0 knows. `model`: the name Codex
    sends and reports (the mock answers any); `PRICED_MODEL` has a price in adapters/prices.py and, like MODEL, no
    entry in Codex's bundled catalog, so Codex offers the same tools for both.
    """
    home = Path(tmp_path) / "codex-home"
    home.mkdir(parents=True, exist_ok=True)
    user_home = Path(tmp_path) / "home"
    user_home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(f"""\
model = "{model}"
model_provider = "mock"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[history]
persistence = "none"

[model_providers.mock]
name = "mock"
base_url = "{base_url}"
env_key = "{API_KEY_ENV}"
wire_api = "responses"
stream_idle_timeout_ms = 10000
""" + ("" if max_retries is None else f"request_max_retries = {max_retries}\nstream_max_retries = {max_retries}\n"))
    return {
        "CODEX_HOME": str(home),
        API_KEY_ENV: "mock-key",
        "HOME": str(user_home),  # nothing of the real user's (~/.codex, ~/.gitconfig, shell rc files) leaks in
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "RUST_LOG": "error",
    }
