"""OpenAI Codex through `codex app-server`: JSON-RPC 2.0 over stdio, both ways (verified with codex-cli 0.169.0).

AgentQueue is the app-server's client. It sends `initialize` (the spec's stdin), then, as each answer comes back,
`initialized` and `thread/start` (the worktree, the context as developer instructions, AgentQueue's MCP server,
approval policy `untrusted`), then `turn/start` with the prompt; stdin is closed once the turn completes and the
server exits. Under `untrusted` Codex asks its client about every shell command
(`item/commandExecution/requestApproval`, even `ls`), every patch (`item/fileChange/requestApproval`, after the
`fileChange` item that lists its paths) and every MCP tool call (`mcpServer/elicitation/request`): each becomes a
`can_use_tool` question that engine/permissions.py decides as it does Claude Code's. A decline carries no reason
on Codex's wire, so the reason (and a watchdog warning) goes to the model as a `turn/steer` message of the same
turn. Tokens come from `thread/tokenUsage/updated` (each model response's `last`, and the thread's `total`), the
cost from adapters/prices.py.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

from ... import __version__
from .base import AgentConfig, AgentEvent, RunResult, RunSpec, classify_message, load_json, tokens
from .limits import AccountError, limit_kind, reset_time, resets_in_event
from .prices import openai_cost

# The sandbox Codex applies itself, per preset, when AgentQueue's own cannot run (`[sandbox] required = false`).
# Inside AgentQueue's sandbox Codex's own (bubblewrap too) cannot nest: ours holds the walls, Codex's is off.
SANDBOX = {"readonly": "read-only", "standard": "workspace-write", "autonomous": "workspace-write"}
# Codex asks about every command, patch and MCP call under `untrusted`; the policy answers (autonomous: allow).
APPROVAL = "untrusted"
# Streams of deltas the engine never reads: not sent at all.
_QUIET = ["item/agentMessage/delta", "item/commandExecution/outputDelta", "item/reasoning/textDelta",
          "item/reasoning/summaryTextDelta", "item/reasoning/summaryPartAdded", "item/plan/delta",
          "item/fileChange/outputDelta", "command/exec/outputDelta", "thread/readState/changed"]
# Codex's own error kinds (`codexErrorInfo`) that park the kind.
_ERROR_INFO = {"unauthorized": "auth", "usageLimitExceeded": "quota", "rateLimitExceeded": "rate_limit"}


def _line(message: dict[str, Any]) -> str:
    return json.dumps({"jsonrpc": "2.0", **message}) + "\n"


def account_error(message: str, event: dict[str, Any] | None = None) -> AccountError | None:
    """A failed login or a limit in a Codex error ("unexpected status 401 Unauthorized", "429 Too Many Requests",
    "You've hit your usage limit … try again in 2 hours", or its `codexErrorInfo`); None for any other error."""
    info = (event or {}).get("codexErrorInfo")
    kind = _ERROR_INFO.get(info) if isinstance(info, str) else None
    if isinstance(info, dict):  # {"responseTooManyFailedAttempts": {"httpStatusCode": 429}} and its kin
        status = next((v.get("httpStatusCode") for v in info.values() if isinstance(v, dict)), None)
        kind = {401: "auth", 403: "auth", 429: "rate_limit"}.get(status) if isinstance(status, int) else None
    kind = kind or classify_message(message)
    if kind == "auth":
        return AccountError("auth", message)
    if kind in ("rate_limit", "quota") or "usage limit" in message.lower():
        resets = resets_in_event(event) if event else None
        return AccountError("quota" if kind == "quota" else limit_kind(message), message,
                            resets if resets is not None else reset_time(message))
    return None


def _mcp_servers(mcp_config: dict[str, Any] | None) -> dict[str, Any]:
    """AgentQueue's MCP config (Claude Code's `mcpServers` shape) as Codex's `mcp_servers` config table."""
    out = {}
    for name, server in ((mcp_config or {}).get("mcpServers") or {}).items():
        out[name] = {"command": server["command"], "args": list(server.get("args") or []),
                     "env": dict(server.get("env") or {}),
                     "startup_timeout_sec": 60}  # `agentqueue mcp` on a loaded machine outlasts Codex's default
    return out


def build(config: AgentConfig, prompt: str, context: str, mcp_config: dict[str, Any] | None) -> RunSpec:
    """`codex app-server` on stdio: the spec's stdin is `initialize`; the parser continues the conversation."""
    sandbox = "danger-full-access" if config.sandboxed else SANDBOX.get(config.preset, "workspace-write")
    # The person's config cannot send the questions elsewhere (`approvals_reviewer = "auto_review"` would hand them
    # to a Codex subagent).
    thread: dict[str, Any] = {"approvalPolicy": APPROVAL, "approvalsReviewer": "user", "sandbox": sandbox}
    if context:
        thread["developerInstructions"] = context
    if config.model:
        thread["model"] = config.model
    servers = _mcp_servers(mcp_config)
    if servers:
        thread["config"] = {"mcp_servers": servers}
    hello = {"id": 1, "method": "initialize", "params": {
        "clientInfo": {"name": "agentqueue", "version": __version__},
        "capabilities": {"experimentalApi": True, "optOutNotificationMethods": _QUIET}}}
    return RunSpec(argv=[config.binary or "codex", "app-server"], stdin=_line(hello).encode(), interactive=True,
                   parser=CodexParser(thread, prompt))


def shell_script(command: str) -> str:
    """The script a Codex command runs: `/bin/bash -lc 'touch X'` is `touch X`; anything else is itself."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    if len(words) == 3 and re.fullmatch(r"(?:/\S*/)?(?:ba|z|da)?sh", words[0]) and words[1] in ("-c", "-lc"):
        return words[2]
    return command


class CodexParser:
    """The client side of one app-server conversation: the stream read into events, the handshake and the answers
    written back (`send` events, `encode_answer`, `encode_message`)."""

    def __init__(self, thread: dict[str, Any] | None = None, prompt: str = "") -> None:
        self.thread = thread or {}  # `thread/start`'s parameters, and the turn's prompt (build's)
        self.prompt = prompt
        self.next_id = 2  # 1 is `initialize`, in the spec's stdin
        self.pending: dict[int, str] = {1: "initialize"}  # our requests awaiting an answer: id -> method
        self.thread_id: str | None = None
        self.turn_id: str | None = None  # the turn in progress (None between turns)
        self.model: str | None = None
        self.items: dict[str, dict[str, Any]] = {}  # items seen started, by id (a patch's paths)
        self.asks: dict[str, dict[str, Any]] = {}  # questions out to the policy: key -> what to answer Codex
        self.usage = tokens()
        self.cost: float | None = 0.0
        self.messages: list[str] = []
        self.failure: str | None = None
        self.failure_event: dict[str, Any] | None = None
        self.turns = 0
        self.in_turn = False  # a turn started and has not completed
        self.account_error: AccountError | None = None  # a failed login or a limit, at its first error line

    # -- writing ---------------------------------------------------------------------------------------------------
    def _request(self, method: str, params: dict[str, Any]) -> str:
        self.pending[self.next_id] = method
        self.next_id += 1
        return _line({"id": self.next_id - 1, "method": method, "params": params})

    def _steer(self, text: str) -> str:
        """A user message into the turn in progress: the model reads it in its next request."""
        if not (self.thread_id and self.turn_id):
            return ""
        return self._request("turn/steer", {"threadId": self.thread_id, "expectedTurnId": self.turn_id,
                                            "input": [{"type": "text", "text": text}]})

    def encode_message(self, text: str) -> bytes:
        return self._steer(text).encode()

    def encode_answer(self, request_id: str, response: dict[str, Any]) -> bytes:
        """The policy's answer to one part of a question; Codex gets its answer once every part has one (a patch is
        asked about path by path), any deny's reason first, as a message to the model."""
        key, _, _ = request_id.partition("#")
        ask = self.asks.get(key)
        if ask is None:
            return b""
        ask["answers"].append(response)
        if len(ask["answers"]) < ask["parts"]:
            return b""
        del self.asks[key]
        denied = next((a for a in ask["answers"] if a.get("behavior") != "allow"), None)
        result = ask["allow"] if denied is None else ask["deny"]
        reason = str((denied or {}).get("message") or "")
        return (self._steer(f"AgentQueue: {reason}") if denied and reason else "").encode() + \
            _line({"id": ask["id"], "result": result}).encode()

    # -- reading ---------------------------------------------------------------------------------------------------
    def feed(self, line: str) -> list[AgentEvent]:
        message = load_json(line)
        if message is None:
            return [AgentEvent("text", line.rstrip())] if line.strip() else []
        method = message.get("method")
        if method is None:
            return self._response(message)
        if "id" in message:
            return self._server_request(str(method), message)
        return self._notification(str(method), message.get("params") or {})

    def _response(self, message: dict[str, Any]) -> list[AgentEvent]:
        """An answer to one of our requests: the handshake goes on, or the run cannot start."""
        answered = message.get("id")
        method = self.pending.pop(answered, None) if isinstance(answered, int) else None
        if "error" in message:
            text = str((message.get("error") or {}).get("message") or message["error"])
            if method == "turn/steer":  # the turn ended meanwhile: nothing to tell it any more
                return [AgentEvent("system", f"could not tell the model: {text}")]
            if method == "mcpServerStatus/list":  # the turn goes on without knowing its MCP servers' state
                return [AgentEvent("system", f"could not list the MCP servers: {text}"), self._start_turn()]
            self.failure = f"codex app-server refused {method}: {text}"
            self._account(text)
            return [AgentEvent("error", self.failure), AgentEvent("done")]
        result = message.get("result") or {}
        if method == "initialize":
            return [AgentEvent("send", _line({"method": "initialized"})),
                    AgentEvent("send", self._request("thread/start", dict(self.thread)))]
        if method == "thread/start":
            self.thread_id = (result.get("thread") or {}).get("id")
            self.model = result.get("model") or self.model
            # Its answer comes once the thread's MCP servers are up (or failed): a turn started sooner could call
            # a server's tool before Codex knows it ("unsupported call"), as Claude Code's would not.
            listing = {"threadId": self.thread_id, "detail": "toolsAndAuthOnly"}
            return [AgentEvent("system", f"codex thread {self.thread_id} (model {self.model})"),
                    AgentEvent("send", self._request("mcpServerStatus/list", listing))]
        if method == "mcpServerStatus/list":
            down = [f"{s.get('name')} ({s.get('runtimeStatus')})" for s in result.get("data") or []
                    if isinstance(s, dict) and s.get("runtimeStatus") not in (None, "connected")]
            return ([AgentEvent("system", "MCP servers not connected: " + ", ".join(down))] if down else []) + \
                [self._start_turn()]
        if method == "turn/start":
            self.turn_id = (result.get("turn") or {}).get("id") or self.turn_id
        return []

    def _start_turn(self) -> AgentEvent:
        turn = {"threadId": self.thread_id, "input": [{"type": "text", "text": self.prompt}]}
        return AgentEvent("send", self._request("turn/start", turn))

    def _server_request(self, method: str, message: dict[str, Any]) -> list[AgentEvent]:
        """Codex asks: a command, a patch or an MCP call goes to the policy; anything else is refused at once."""
        params = message.get("params") or {}
        raw_id = message["id"]
        accept, decline = {"decision": "accept"}, {"decision": "decline"}
        if method == "item/commandExecution/requestApproval":
            script = shell_script(str(params.get("command") or ""))
            return self._ask(raw_id, accept, decline, [("Bash", {"command": script}, params.get("reason"))])
        if method == "item/fileChange/requestApproval":
            item = self.items.get(str(params.get("itemId"))) or {}
            parts = []
            for change in item.get("changes") or []:
                kind = (change.get("kind") or {}) if isinstance(change, dict) else {}
                tool = "Write" if kind.get("type") == "add" else "Edit"
                for path in (change.get("path"), kind.get("move_path")):
                    if path:
                        parts.append((tool, {"file_path": str(path)}, params.get("reason")))
            if not parts:  # a patch whose paths were never shown cannot be judged
                return [AgentEvent("system", "codex asked about a patch it did not show: declined"),
                        AgentEvent("send", _line({"id": raw_id, "result": decline}))]
            return self._ask(raw_id, accept, decline, parts)
        meta = params.get("_meta") or {}
        if method == "mcpServer/elicitation/request" and meta.get("codex_approval_kind") == "mcp_tool_call":
            tool = f"mcp__{params.get('serverName')}__{meta.get('tool_name')}"
            given = meta.get("tool_params")
            arguments: dict[str, Any] = given if isinstance(given, dict) else {}
            return self._ask(raw_id, {"action": "accept", "content": {}}, {"action": "decline"},
                             [(tool, arguments, params.get("message"))])
        why = (f"AgentQueue does not answer {method}: no person is at this run's terminal. Do the task another way, "
               "or finish and say in your summary what you need.")
        return [AgentEvent("system", f"refused codex's {method}"),
                AgentEvent("send", _line({"id": raw_id, "error": {"code": -32601, "message": why}}))]

    def _ask(self, raw_id: Any, allow: dict[str, Any], deny: dict[str, Any],
             parts: list[tuple[str, dict[str, Any], Any]]) -> list[AgentEvent]:
        key = str(raw_id)
        self.asks[key] = {"id": raw_id, "allow": allow, "deny": deny, "parts": len(parts), "answers": []}
        return [AgentEvent("control", data={"request_id": f"{key}#{n}", "request": {
            "subtype": "can_use_tool", "tool_name": tool, "input": tool_input,
            **({"description": str(why)} if why else {})}}) for n, (tool, tool_input, why) in enumerate(parts)]

    def _notification(self, method: str, params: dict[str, Any]) -> list[AgentEvent]:
        item = params.get("item") or {}
        if method == "turn/started":
            self.turn_id = (params.get("turn") or {}).get("id") or self.turn_id
            self.in_turn = True
            return []
        if method == "item/started":
            self.items[str(item.get("id"))] = item
            return self._started(item)
        if method == "item/completed":
            return self._completed(item)
        if method == "item/commandExecution/terminalInteraction" and str(params.get("stdin") or "").strip():
            # Typed into a terminal session Codex started: 0.169 asks nobody about it, so it is shown and counted.
            return [AgentEvent("tool_call", tool="write_stdin", args={"stdin": str(params["stdin"])})]
        if method == "thread/tokenUsage/updated":
            return self._usage(params.get("tokenUsage") or {})
        if method == "turn/completed":
            return self._turn_completed(params.get("turn") or {})
        if method == "error":
            error = params.get("error") or {}
            text = str(error.get("message") or "codex reported an error")
            if error.get("additionalDetails"):  # a retry's "Reconnecting... 1/5" says why only here
                text = f"{text} ({error['additionalDetails']})"
            self._account(text, error)
            if not params.get("willRetry"):
                self.failure, self.failure_event = text, error
            return [AgentEvent("system" if params.get("willRetry") else "error", text)]
        if method == "account/rateLimits/updated":
            self._used_up(params.get("rateLimits") or {})
            return []
        if method == "model/rerouted":
            self.model = params.get("toModel") or self.model
            return [AgentEvent("system", f"model rerouted to {self.model}")]
        if method in ("warning", "configWarning", "deprecationNotice"):
            return [AgentEvent("system", str(params.get("message") or params.get("summary") or method))]
        return []

    def _started(self, item: dict[str, Any]) -> list[AgentEvent]:
        kind = item.get("type")
        if kind == "commandExecution":
            return [AgentEvent("tool_call", tool="shell",
                               args={"command": shell_script(str(item.get("command") or ""))})]
        if kind == "mcpToolCall":
            tool = f"{item.get('server')}.{item.get('tool')}"
            return [AgentEvent("tool_call", tool=tool, args=item.get("arguments"))]
        if kind == "fileChange":
            paths = [c.get("path") for c in item.get("changes") or [] if isinstance(c, dict)]
            return [AgentEvent("tool_call", tool="apply_patch", args={"paths": paths})]
        return []

    def _completed(self, item: dict[str, Any]) -> list[AgentEvent]:
        kind = item.get("type")
        if kind == "agentMessage":
            self.messages.append(item.get("text") or "")
            return [AgentEvent("text", item.get("text") or "")]
        if kind == "commandExecution":
            output = item.get("aggregatedOutput")
            text = output if output is not None else f"{item.get('status')} (exit {item.get('exitCode')})"
            return [AgentEvent("tool_result", text=str(text)[:2000])]
        if kind == "mcpToolCall":
            return [AgentEvent("tool_result", text=json.dumps(item.get("result") or item.get("error"))[:2000])]
        if kind == "fileChange":
            return [AgentEvent("tool_result", text=f"file_change {item.get('status')}")]
        return []

    def _usage(self, usage: dict[str, Any]) -> list[AgentEvent]:
        """The thread's running total, and the response that just ended priced on its own (a long prompt's rate is
        per request)."""
        self.usage = self._tokens(usage.get("total") or {})
        cost = openai_cost(self.model, self._tokens(usage.get("last") or {}))
        self.cost = None if cost is None or self.cost is None else self.cost + cost
        return [AgentEvent("usage")]

    @staticmethod
    def _tokens(breakdown: dict[str, Any]) -> dict[str, int]:
        cached = int(breakdown.get("cachedInputTokens") or 0)
        # OpenAI counts cached tokens inside inputTokens; ours are uncached input. Reasoning is inside outputTokens.
        return tokens(int(breakdown.get("inputTokens") or 0) - cached, breakdown.get("outputTokens"), cached,
                      breakdown.get("cacheWriteInputTokens"), breakdown.get("totalTokens"))

    def _turn_completed(self, turn: dict[str, Any]) -> list[AgentEvent]:
        self.in_turn = False
        self.turn_id = None
        status = turn.get("status")
        if status == "completed":
            self.turns += 1
        else:
            error = turn.get("error") or {}
            self.failure = str(error.get("message") or self.failure or f"the turn ended {status}")
            self.failure_event = error or self.failure_event
            self._account(self.failure, self.failure_event)
        return [AgentEvent("system", f"turn {status}"), AgentEvent("done")]

    def _used_up(self, limits: dict[str, Any]) -> None:
        """A rate-limit snapshot with a window used up (or a limit reached) parks the kind."""
        for window in (limits.get("primary"), limits.get("secondary")):
            if isinstance(window, dict) and float(window.get("usedPercent") or 0) >= 100:
                self._account("usage limit reached (rate limit window used up)", window)
        if limits.get("rateLimitReachedType"):
            self._account(f"usage limit reached ({limits['rateLimitReachedType']})", limits)

    def feed_stderr(self, line: str) -> None:
        """Codex logs its HTTP errors on stderr too: a 401 or a limit there parks the kind as well."""
        if re.search(r"\b(401|403|429)\b|usage limit|api key", line, re.IGNORECASE):
            self._account(line.strip())

    def _account(self, message: str, event: dict[str, Any] | None = None) -> None:
        if self.account_error is None and message:
            self.account_error = account_error(message, event)

    def finish(self, exit_code: int | None) -> RunResult:
        summary = "\n".join(self.messages)[-2000:]
        cost = self.cost if any(self.usage.values()) else 0.0
        if self.failure or not self.turns:
            message = self.failure or f"codex exited with {exit_code} before completing a turn."
            found = account_error(message, self.failure_event)
            kind = found.kind if found else classify_message(message) or "crashed"
            # Killed or died mid-turn: what the responses so far used is paid for (their usage came as they ended).
            return RunResult("failed", summary=summary, tokens=self.usage, cost_usd=cost, error_type=kind,
                             error_message=message, resets_at=found.resets_at if found else None,
                             partial=self.in_turn)
        return RunResult("completed", summary=summary, tokens=self.usage, cost_usd=cost)
