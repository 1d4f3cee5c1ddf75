"""A loopback mock of the Anthropic Messages API that scripts what the model does, for the real `claude`.

The scenario is chosen by a marker in the conversation (`SCENARIO:<name>`), so one mock serves
many tasks at once. Every response reports the same usage (USAGE), so a test can predict the
tokens Claude Code reports: requests × USAGE. The mock also keeps what it served (`served`, `served_tokens`):
a test of a run cut short compares the ledger with that, not with a count it assumes.

Scenarios:
  write_file   Bash `echo … > claude_hello.txt`, then "Done."
  rate_limit   HTTP 429 on every request
  auth         HTTP 401 (invalid API key) on every request
  prompt_too_long  HTTP 400 "prompt is too long" on every request
  hang         never answers (until the mock stops)
  stall        never answers while the person's newest words hold the marker; later turns get a plain answer
  midway       starts its answer (usage and "Thinking it over…") then holds while the newest words hold the marker
  loop         the same Bash call forever
  slow_write   waits SLOW_SECONDS, then like write_file
  hook_create_task  calls AgentQueue's MCP tool create_task (HOOK_TASK), then "Created."
  run_cmd      Bash with the command written as CMD[...] in the prompt, TIMES[n] times (default 1); then
               "Tool said: <the last tool result>" (so a test sees what the model was told)
  write_tool   the Write tool creates written.txt, then "Done."
  ping_pong    Bash `echo ping`, `echo pong`, alternating forever
  busy_then_hang  Bash `echo working` until STEPS[n] (default 2) tool results are in, then never answers
  followup     calls AgentQueue's create_task with FOLLOWUP, then "Tool said: <result>"
  cli_followup Bash: each of CLI_COMMANDS (`agentqueue task create` with CLI_FOLLOWUP, …), then "Tool said: …"
  search_create  ToolSearch for create_task (run claude with ENABLE_TOOL_SEARCH=true), then chat_create's call
  chat_create  calls AgentQueue's create_task in project demo, titled by the last TITLE[...] of the
               conversation, then "Created: <the tool result>" (the chat's dispatcher, turn after turn)
  edit_region  Read shared.txt, then Write it back with the prompt's LINE[...] before its END line. Sent back by
               the merge queue (its prompt says so): Read the file the prompt's conflict hunk names, then Edit
               that conflict (markers and both sides, rebuilt from the hunk) into both sides without the markers.
               With TOGETHER[n] in the prompt, a first run writes only once n runs (distinct LINE[...]) have
               asked, so all n branches leave the same main and the ones that land later conflict
  soak_write   the Write tool writes the prompt's LINE[...] (and a newline) to FILE[...], then "Done." (bench/soak.py)
  (none)       a plain text answer

`outage` (status, headers) answers every request of every scenario with that error (401 a refused key, 429 a
limit), the token counter too, until it is set back to None: the API failing for the whole queue.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

USAGE = {"input_tokens": 100, "output_tokens": 42, "cache_creation_input_tokens": 50, "cache_read_input_tokens": 25}
SLOW_SECONDS = 4.0
HOOK_TASK = {"title": "Made by the hook", "description": "Created through AgentQueue's MCP server by a hook.",
             "project_id": "demo"}
FOLLOWUP = {"title": "Follow-up from the agent", "description": "SCENARIO:followup Queued by a running agent."}
# cli_followup: the same through the terminal command an agent without MCP runs (the skill's CLI).
CLI_FOLLOWUP = {"title": "Follow-up through the CLI", "description": "SCENARIO:cli_followup Queued through the CLI."}
CLI_FOLLOWUP_COMMAND = (f"agentqueue task create '{CLI_FOLLOWUP['title']}' "
                        f"--description '{CLI_FOLLOWUP['description']}'")
CLI_MEMORY = "Run make check before landing."
# The last is a person's decision, which a run's connection is refused whatever the policy allows.
CLI_COMMANDS = (CLI_FOLLOWUP_COMMAND, f"agentqueue task memory '{CLI_MEMORY}'", "agentqueue approve swift-falcon")


def _blocks(scenario: str, text: str, messages: list[Any], answered_tool: bool) -> list[tuple[str, Any]]:
    """What the model answers in a scenario: text, or a tool call (once, or until the tool has answered)."""
    blocks: list[tuple[str, Any]]
    if scenario in ("loop", "busy_then_hang"):  # the same call each time (busy_then_hang's last request hangs)
        command = "echo same" if scenario == "loop" else "echo working"
        blocks = [("tool_use", {"name": "Bash", "input": {"command": command, "description": "again"}})]
    elif scenario == "hook_create_task" and not answered_tool:
        blocks = [("tool_use", {"name": "mcp__agentqueue__create_task", "input": HOOK_TASK})]
    elif scenario == "run_cmd":
        command = re.search(r"CMD\[(.*?)\]", text)
        times = re.search(r"TIMES\[(\d+)\]", text)
        results = _tool_results(messages)
        if len(results) < (int(times[1]) if times else 1):
            blocks = [("tool_use", {"name": "Bash", "input": {
                "command": json.loads(f'"{command[1]}"') if command else "true", "description": "run it"}})]
        else:
            blocks = [("text", f"Tool said: {results[-1] if results else '(nothing)'}")]
    elif scenario == "run_cmds":  # CMDS[<a JSON list of commands>]: one Bash call each, then what they printed
        listed = re.search(r"CMDS(\[.*?\])END", text)
        commands = json.loads(json.loads('"' + listed[1] + '"')) if listed else []
        results = _tool_results(messages)
        if len(results) < len(commands):
            blocks = [("tool_use", {"name": "Bash", "input": {"command": commands[len(results)],
                                                              "description": "step"}})]
        else:
            blocks = [("text", "Results: " + " | ".join(results))]
    elif scenario == "wait_task":
        blocks = _wait_task(text, messages)
    elif scenario == "write_tool" and not answered_tool:
        blocks = [("tool_use", {"name": "Write", "input": {"file_path": "written.txt", "content": "written\n"}})]
    elif scenario == "ping_pong":
        word = "ping" if len(_tool_results(messages)) % 2 == 0 else "pong"
        blocks = [("tool_use", {"name": "Bash", "input": {"command": f"echo {word}", "description": word}})]
    elif scenario == "chat_create" and not answered_tool:
        titles = re.findall(r"TITLE\[(.*?)\]", text)
        blocks = [("tool_use", {"name": "mcp__agentqueue__create_task", "input": {
            "project_id": "demo", "title": titles[-1] if titles else "Untitled",
            "description": "Queued from agentqueue chat."}})]
    elif scenario == "chat_create":
        blocks = [("text", f"Created: {_tool_results(messages)[-1]}")]
    elif scenario in ("followup", "cli_followup"):
        blocks = _followup(scenario, messages)
    elif scenario == "edit_region":
        blocks = _edit_region(text, messages)
    elif scenario in ("write_file", "slow_write") and not answered_tool:
        blocks = [("tool_use", {"name": "Bash", "input": {
            "command": "echo hello from claude > claude_hello.txt", "description": "write the file"}})]
    else:
        blocks = [("text", "Done: the task is finished.")]
    return blocks



def _soak_write(text: str, answered_tool: bool) -> list[tuple[str, Any]]:
    """Write the prompt's LINE[...] to its FILE[...] with the Write tool, then end the turn (bench/soak.py)."""
    if answered_tool:
        return [("text", "Done: the task is finished.")]
    path, line = re.search(r"FILE\[(.*?)\]", text), re.search(r"LINE\[(.*?)\]", text)
    return [("tool_use", {"name": "Write", "input": {"file_path": path[1] if path else "soak.txt",
                                                     "content": (line[1] if line else "") + "\n"}})]


def _wait_task(text: str, messages: list[Any]) -> list[tuple[str, Any]]:
    """TASK[<id>]: AgentQueue's wait_for_task as an MCP tool, once in the conversation; then what it said."""
    results = _tool_results(messages)
    if results:
        return [("text", f"Tool said: {results[-1]}")]
    task = re.search(r"TASK\[(.*?)\]", text)
    return [("tool_use", {"name": "mcp__agentqueue__wait_for_task", "input": {"task_id": task[1] if task else ""}})]


def _followup(scenario: str, messages: list[Any]) -> list[tuple[str, Any]]:
    """followup: AgentQueue's create_task as an MCP tool; cli_followup: each of CLI_COMMANDS through Bash. Then
    what the first call said."""
    results = _tool_results(messages)
    if scenario == "followup" and not results:
        return [("tool_use", {"name": "mcp__agentqueue__create_task", "input": FOLLOWUP})]
    if scenario == "cli_followup" and len(results) < len(CLI_COMMANDS):
        return [("tool_use", {"name": "Bash", "input": {"command": CLI_COMMANDS[len(results)],
                                                        "description": "agentqueue task"}})]
    return [("text", f"Tool said: {results[-1] if scenario == 'followup' else results[0]}")]


def _search_create(text: str, messages: list[Any]) -> list[tuple[str, Any]]:
    results = _tool_results(messages)
    titles = re.findall(r"TITLE\[(.*?)\]", text)
    if not results:
        return [("tool_use", {"name": "ToolSearch", "input": {"query": "select:mcp__agentqueue__create_task",
                                                              "max_results": 1}})]
    if len(results) == 1:
        return [("tool_use", {"name": "mcp__agentqueue__create_task", "input": {
            "project_id": "demo", "title": titles[-1] if titles else "Untitled",
            "description": "Queued from agentqueue chat."}})]
    return [("text", f"Created: {results[-1]}")]


def _edit_region(text: str, messages: list[Any]) -> list[tuple[str, Any]]:
    """Read shared.txt, then write it back changed, then end the turn (scenario edit_region); sent back by the
    merge queue, resolve the conflict its prompt shows."""
    results = _tool_results(messages)
    if "Sent back by the merge queue" in text:
        return _resolve_conflict(_user_text(messages), results)
    if not results:
        return [("tool_use", {"name": "Read", "input": {"file_path": "shared.txt"}})]
    if len(results) > 1:
        return [("text", "Done: the task is finished.")]
    shown = results[-1]  # the file as Read showed it (`  1→text` lines)
    if shown.startswith("["):  # content blocks rather than a string
        shown = "\n".join(b.get("text", "") for b in json.loads(shown) if isinstance(b, dict))
    lines = [m[1] for m in re.finditer(r"^\s*\d+(?:→|\t)(.*)$", shown, re.M)]
    while lines and not lines[-1]:  # Read numbers the empty line after a final newline too
        lines.pop()
    line = re.search(r"LINE\[(.*?)\]", text)
    lines.insert(lines.index("END") if "END" in lines else len(lines), line[1] if line else "a line")
    return [("tool_use", {"name": "Write", "input": {"file_path": "shared.txt", "content": "\n".join(lines) + "\n"}})]


MARKERS = ("<<<<<<<", "=======", ">>>>>>>")


def _resolve_conflict(prompt: str, results: list[str]) -> list[tuple[str, Any]]:
    """Sent back with a conflict (scenario edit_region): Read the file the prompt's `git diff` hunk names, then Edit
    the conflict as the hunk shows it (markers and both sides) into both sides' lines, then end the turn. Acts only
    on what the prompt carries: an Edit whose old text is not in the file fails, and the conflict stays."""
    hunk = re.search(r"### The conflicts \(git diff\)\n```diff\n(.*?)\n```", prompt, re.S)
    path = re.search(r"^diff --cc (.+)$", hunk[1], re.M) if hunk else None
    if hunk is None or path is None:
        return [("text", "The prompt carries no conflict hunk to resolve.")]
    if not results:
        return [("tool_use", {"name": "Read", "input": {"file_path": path[1]}})]
    if len(results) > 1:
        return [("text", f"Resolved the conflict in {path[1]}: {results[-1]}")]
    # A combined diff's lines start with one column per side; the merged file holds those without a '-'.
    body = hunk[1].split("\n@@@", 1)[-1].split("\n")[1:]
    merged = [line[2:] for line in body if len(line) >= 2 and "-" not in line[:2]]
    starts = [i for i, line in enumerate(merged) if line.startswith(MARKERS[0])]
    ends = [i for i, line in enumerate(merged) if line.startswith(MARKERS[2])]
    if not starts or not ends:
        return [("text", "The hunk shows no conflict markers.")]
    conflict = merged[starts[0]:ends[0] + 1]
    kept = [line for line in conflict if not line.startswith(MARKERS)]
    return [("tool_use", {"name": "Edit", "input": {"file_path": path[1], "old_string": "\n".join(conflict),
                                                    "new_string": "\n".join(kept)}})]


def _user_text(messages: list[dict[str, Any]]) -> str:
    """Every text block the user side of the conversation holds (the prompt, the CLI's reminders), joined."""
    texts = []
    for message in messages:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        texts += [b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    return "\n".join(texts)


def _tool_results(messages: list[dict[str, Any]]) -> list[str]:
    """The text of every tool result the conversation holds, oldest first."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    inner = block.get("content")
                    out.append(inner if isinstance(inner, str) else json.dumps(inner))
    return out


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


class MockAnthropic:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []  # each request's headers (names lower case): the credential it carried
        self.served: list[dict[str, Any]] = []  # each response written whole: its id, model, usage and request
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.ids = itertools.count(1)
        # An outage of the whole API (every scenario): (HTTP status, extra headers), until set back to None.
        self.outage: tuple[int, dict[str, str]] | None = None
        mock = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return

            def do_HEAD(self) -> None:  # connectivity probes
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                mock._json(self, 404, {"type": "error", "error": {"type": "not_found_error", "message": "no"}})

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                try:
                    request = json.loads(body)
                except ValueError:
                    request = {}
                mock.handle(self, request)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> MockAnthropic:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    def messages_for(self, scenario: str) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.requests if f"SCENARIO:{scenario}" in json.dumps(r.get("messages"))]

    def served_tokens(self, needle: str) -> dict[str, int]:
        """The tokens of every response served to a request whose conversation holds `needle`, in the ledger's
        terms (input without the cache; total the sum of the four)."""
        with self.lock:
            usages = [s["usage"] for s in self.served if needle in json.dumps(s["request"].get("messages"))]
        out = {"input": sum(u["input_tokens"] for u in usages), "output": sum(u["output_tokens"] for u in usages),
               "cache_read": sum(u["cache_read_input_tokens"] for u in usages),
               "cache_write": sum(u["cache_creation_input_tokens"] for u in usages)}
        return {**out, "total": sum(out.values())}

    def _record(self, message_id: str, request: dict[str, Any]) -> None:
        with self.lock:
            self.served.append({"id": message_id, "model": request.get("model"), "usage": dict(USAGE),
                                "request": request})

    # -- behaviour ----------------------------------------------------------------------------
    @staticmethod
    def _json(handler: BaseHTTPRequestHandler, code: int, payload: dict[str, Any],
              headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        handler.send_response(code)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(data)))
        for key, value in (headers or {}).items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(data)

    def handle(self, handler: BaseHTTPRequestHandler, request: dict[str, Any]) -> None:
        with self.lock:
            self.headers.append({k.lower(): v for k, v in handler.headers.items()})
        outage = self.outage
        if outage is not None and handler.path.startswith("/v1/messages"):
            if not handler.path.startswith("/v1/messages/count_tokens"):
                with self.lock:
                    self.requests.append(request)
            return self._refuse(handler, *outage)
        if handler.path.startswith("/v1/messages/count_tokens"):
            return self._json(handler, 200, {"input_tokens": 123})
        if not handler.path.startswith("/v1/messages"):
            return self._json(handler, 404, {"type": "error", "error": {"type": "not_found_error", "message": "no"}})
        with self.lock:
            self.requests.append(request)
        text = json.dumps(request.get("messages"))
        match = re.search(r"SCENARIO:(\w+)", text)
        scenario = match.group(1) if match else ""
        messages = request.get("messages") or []
        last = messages[-1].get("content") if messages else None
        answered_tool = isinstance(last, list) and any(
            isinstance(block, dict) and block.get("type") == "tool_result" for block in last)
        if scenario == "rate_limit":
            return self._json(handler, 429, {"type": "error", "error": {
                "type": "rate_limit_error",
                "message": "Number of request tokens has exceeded your per-minute rate limit"}},
                {"retry-after": "0"})
        if scenario == "auth":
            return self._json(handler, 401, {"type": "error", "error": {
                "type": "authentication_error", "message": "invalid x-api-key"}})
        if scenario == "prompt_too_long":
            return self._json(handler, 400, {"type": "error", "error": {
                "type": "invalid_request_error", "message": "prompt is too long: 250000 tokens > 200000 maximum"}})
        steps = re.search(r"STEPS\[(\d+)\]", text)
        if scenario == "hang" or (scenario == "stall" and "SCENARIO:stall" in _newest_user_text(messages)) or (
                scenario == "busy_then_hang" and len(_tool_results(messages)) >= (int(steps[1]) if steps else 2)):
            self.stopping.wait(600)
            return None
        if scenario == "midway" and "SCENARIO:midway" in _newest_user_text(messages):
            return self._begin_and_hold(handler, request)
        if scenario == "slow_write" and not answered_tool:
            self.stopping.wait(SLOW_SECONDS)
        if scenario == "edit_region" and answered_tool and "Sent back by the merge queue" not in text:
            self._together(text)
        # search_create: as with ENABLE_TOOL_SEARCH, find create_task with ToolSearch, then call it.
        blocks = _search_create(text, messages) if scenario == "search_create" else \
            _soak_write(text, answered_tool) if scenario == "soak_write" else \
            _blocks(scenario, text, messages, answered_tool)
        stop = "tool_use" if blocks[0][0] == "tool_use" else "end_turn"
        self._stream(handler, request, blocks, stop)

    def _begin_and_hold(self, handler: BaseHTTPRequestHandler, request: dict[str, Any]) -> None:
        """A streamed answer that starts (message_start with USAGE, a first text delta) and never ends."""
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.end_headers()
        handler.wfile.write(_sse("message_start", {"type": "message_start", "message": {
            "id": f"msg_mock_{next(self.ids)}", "type": "message", "role": "assistant", "model": request.get("model"),
            "content": [], "stop_reason": None, "stop_sequence": None, "usage": USAGE}})
            + _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                           "content_block": {"type": "text", "text": ""}})
            + _sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                           "delta": {"type": "text_delta", "text": "Thinking it over…"}}))
        handler.wfile.flush()
        self.stopping.wait(600)
        handler.close_connection = True

    def _refuse(self, handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str]) -> None:
        """The API's answer during an outage: 401 a key it does not take, 429 a limit (with the given headers)."""
        kind, message = {401: ("authentication_error", "invalid x-api-key"),
                         429: ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit")
                         }.get(status, ("api_error", "unavailable"))
        self._json(handler, status, {"type": "error", "error": {"type": kind, "message": message}}, headers)

    def _together(self, text: str, timeout: float = 60) -> None:
        """Wait until as many runs as the prompt's TOGETHER[n] (told apart by their LINE[...]) have asked."""
        wanted = re.search(r"TOGETHER\[(\d+)\]", text)
        deadline = time.monotonic() + timeout
        while wanted and time.monotonic() < deadline and not self.stopping.is_set():
            with self.lock:
                seen = {m for r in self.requests for m in re.findall(r"LINE\[.*?\]", json.dumps(r.get("messages")))}
            if len(seen) >= int(wanted[1]):
                return
            self.stopping.wait(0.05)

    def _stream(self, handler: BaseHTTPRequestHandler, request: dict[str, Any], blocks: list[tuple[str, Any]],
                stop: str) -> None:
        message_id = f"msg_mock_{next(self.ids)}"
        if not request.get("stream"):
            content = [{"type": "text", "text": v} if k == "text" else
                       {"type": "tool_use", "id": f"toolu_{next(self.ids)}", **v} for k, v in blocks]
            self._json(handler, 200, {"id": message_id, "type": "message", "role": "assistant",
                                      "model": request.get("model"), "content": content, "stop_reason": stop,
                                      "stop_sequence": None, "usage": USAGE})
            return self._record(message_id, request)
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream")
        handler.send_header("cache-control", "no-cache")
        handler.send_header("connection", "close")
        handler.end_headers()
        start_usage = {**USAGE, "output_tokens": 1}
        out = [_sse("message_start", {"type": "message_start", "message": {
            "id": message_id, "type": "message", "role": "assistant", "model": request.get("model"), "content": [],
            "stop_reason": None, "stop_sequence": None, "usage": start_usage}})]
        for index, (kind, value) in enumerate(blocks):
            if kind == "text":
                out.append(_sse("content_block_start", {"type": "content_block_start", "index": index,
                                                        "content_block": {"type": "text", "text": ""}}))
                out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                                        "delta": {"type": "text_delta", "text": value}}))
            else:
                block = {"type": "tool_use", "id": f"toolu_{next(self.ids)}", "name": value["name"], "input": {}}
                out.append(_sse("content_block_start",
                                {"type": "content_block_start", "index": index, "content_block": block}))
                out.append(_sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": {
                    "type": "input_json_delta", "partial_json": json.dumps(value["input"])}}))
            out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
        out.append(_sse("message_delta", {"type": "message_delta",
                                          "delta": {"stop_reason": stop, "stop_sequence": None},
                                          "usage": {"output_tokens": USAGE["output_tokens"]}}))
        out.append(_sse("message_stop", {"type": "message_stop"}))
        handler.wfile.write(b"".join(out))
        handler.wfile.flush()
        handler.close_connection = True
        self._record(message_id, request)


def _newest_user_text(messages: list[dict[str, Any]]) -> str:
    """What the person said last: the newest user text block, past the CLI's own additions
    (<system-reminder> blocks or messages, e.g. when an MCP server finishes connecting)."""
    for message in reversed(messages):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        texts = [b.get("text", "") for b in blocks if isinstance(b, dict) and b.get("type") == "text"
                 and not b.get("text", "").lstrip().startswith(("<system-reminder>", "[Request interrupted"))]
        texts = [t for t in texts if t.strip()]
        if texts:
            return texts[-1]  # a turn after an interrupt may share the interrupted turn's message
    return ""
