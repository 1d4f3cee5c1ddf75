"""Any agent that speaks the Agent Client Protocol (ACP) on stdio: JSON-RPC 2.0, one message a line, both ways.

AgentQueue is the ACP *client*. The run's `AcpSession` is its parser and its driver at once: it sends
`initialize`, `session/new` (the worktree as cwd, AgentQueue's MCP server in `mcpServers`) and `session/prompt`,
reads the answers and the agent's `session/update` notifications from the same stdout the runner reads, and turns
the agent's own requests (`session/request_permission`, `fs/*`, `terminal/*`) into `control` events that the run's
channel answers (engine/acp_client.py: the policy, the worktree jail, the sandbox). A loop warning cancels the turn
(`session/cancel`) and is sent as the next prompt of the same session. ACP's reject carries no reason, so a
refusal's reason (the rule, how to lift it) is sent as the next prompt once the turn ends (`refused`). Stdin is
closed after the last turn.

Messages are checked against the `agent-client-protocol` package's schema (pinned in pyproject.toml), imported
here only, lazily: the daemon pays for it on the first ACP run, and nothing on the plugin path imports it. Its own
connection class wants asyncio streams of its own; the runner already owns the process's pipes (one reader, the
task log, the watchdog), so this module speaks the few JSON-RPC messages a client sends itself.

Usage: the ACP `PromptResponse.usage` of each turn (unstable in the schema), else Gemini CLI's
`_meta.quota.token_count` (0.61.0 sends only that: input and output per turn, per model in `model_usage`, where
only a turn's first model call names the model its router chose and the later ones are named by the configured
alias, `auto`: those are the named model's, `AcpSession.aliases`); a `usage_update` notification's `cost` (USD)
is the cost when the agent sends one, else each model's tokens are priced by adapters/prices.py, else the cost is
unknown.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from .acp_presets import argv_of, preset_of
from .base import AgentConfig, AgentEvent, RunResult, RunSpec, classify_message, load_json, tokens
from .prices import tokens_cost

Send = Callable[[bytes], Awaitable[bool]]

# How long the agent may take to answer initialize / session/new before the run is failed.
SETUP_TIMEOUT = 120.0
# A turn ends with one of these stop reasons (ACP StopReason); the failure kind for the ones that are failures.
STOP_FAILURES = {"max_tokens": "prompt_too_long", "max_turn_requests": "max_turns", "refusal": "crashed"}


@functools.cache
def schema() -> Any:
    """The ACP schema module (pydantic models of every message)."""
    from acp import schema as acp_schema  # noqa: PLC0415  (lazy: a few hundred models)

    return acp_schema


def protocol_version() -> int:
    from acp.meta import PROTOCOL_VERSION  # noqa: PLC0415

    return int(PROTOCOL_VERSION)


def mcp_servers(mcp_config: dict[str, Any] | None) -> list[dict[str, Any]]:
    """`{"mcpServers": {name: {command, args, env}}}` (agent_mcp.agentqueue_server) as ACP's stdio `McpServer` list."""
    servers = []
    for name, server in ((mcp_config or {}).get("mcpServers") or {}).items():
        entry = {"name": name, "command": server["command"], "args": list(server.get("args") or []),
                 "env": [{"name": k, "value": v} for k, v in (server.get("env") or {}).items()]}
        servers.append(schema().McpServerStdio.model_validate(entry).model_dump(by_alias=True, exclude_none=True))
    return servers


def build(config: AgentConfig, prompt: str, context: str, mcp_config: dict[str, Any] | None,
          session: type[AcpSession] | None = None) -> RunSpec:
    """An ACP agent: its command (a preset's, acp_presets.py, or as written), stdin kept open for the session."""
    schema()  # its import takes seconds: here, in the engine's worker thread, not on the event loop later
    argv = argv_of(config.command or "", config.preset, config.binary, config.model)
    full = f"{context}\n\n{prompt}" if context else prompt
    known = preset_of(config.command)
    parser = (session or AcpSession)(full, mcp_servers(mcp_config), client_reads=known is None or known.client_reads)
    parser.model = config.model
    if known is not None:
        parser.aliases = known.model_aliases
        parser.session_meta, parser.session_mode = known.session_meta, known.session_mode
        parser.session_usage = known.session_usage
        if known.model_config and config.model:
            parser.model_option = (known.model_config, config.model)
    return RunSpec(argv=argv, stdin=b"", interactive=True, parser=parser)


def agent_binary(agent_type: str, command: str | None, settings: Any) -> str | None:
    """The program an agent type runs, where the daemon finds it: None for a command, or an ACP command run as
    written; a preset's CLI is found like the agent CLIs (config.toml [cli], AGENTQUEUE_*_BIN, PATH)."""
    from ...services.agents import find_cli  # noqa: PLC0415  (services import this package)

    if agent_type == "command":
        return None
    if agent_type == "acp":
        preset = preset_of(command)
        return settings.find(preset.cli) if preset is not None and preset.cli else None
    return find_cli(agent_type, settings)


def as_dict(value: Any) -> dict[str, Any]:
    """A JSON object from the agent, or {} for anything else it sent in its place."""
    return value if isinstance(value, dict) else {}


def answer_line(request_id: str, response: dict[str, Any]) -> bytes:
    """A JSON-RPC answer line; request_id is the JSON text of the agent's id (a number stays a number)."""
    return (f'{{"jsonrpc":"2.0","id":{request_id},' + json.dumps(response)[1:] + "\n").encode()


def _text(content: Any) -> str:
    """The text of an ACP content block (or a tool call's content list)."""
    if isinstance(content, list):
        return "\n".join(t for t in (_text(c) for c in content) if t)
    if not isinstance(content, dict):
        return ""
    if content.get("type") == "text":
        return str(content.get("text") or "")
    if content.get("type") == "content":
        return _text(content.get("content"))
    if content.get("type") == "diff":
        return f"diff {content.get('path')}"
    return ""


class AcpSession:
    """One ACP run: the parser the runner feeds stdout to, and the driver that sends the client's requests."""

    def __init__(self, prompt: str, servers: list[dict[str, Any]], client_reads: bool = True) -> None:
        self.prompt = prompt
        self.servers = servers
        self.client_reads = client_reads  # offer fs/read_text_file (acp_presets.AcpPreset.client_reads)
        self.session_id: str | None = None
        self.agent_info: dict[str, Any] = {}
        self._ids = 0
        self._waiting: dict[int, anyio.Event] = {}
        self._answers: dict[int, dict[str, Any]] = {}
        self._send: Send | None = None
        self.in_turn = False
        self.warnings: list[str] = []  # loop warnings waiting to be sent as the next prompt
        self.seen_calls: set[str] = set()  # toolCallIds already told to the watchdog
        self.pending_calls: dict[str, dict[str, Any]] = {}  # announced with no input yet: told when it comes
        self.message: list[str] = []  # the agent's message being streamed (chunks), flushed as one text event
        self.texts: list[str] = []
        self.stop_reason: str | None = None
        self.error: str | None = None
        self.usage = tokens()
        self.model_usage: dict[str, dict[str, int]] = {}
        self.reported_cost: float | None = None  # usage_update.cost (cumulative, USD)
        self.unpaid_turns = 0  # turns that ended without usage (a cancelled one): the figures are partial
        self.turns = 0
        self.account_error: Any = None  # a failed login or a limit (adapters/limits.py), set by an agent's subclass
        self.session_meta: dict[str, Any] = {}  # a preset's `_meta` for session/new
        self.session_mode: str | None = None  # a preset's session mode, set right after session/new
        self.session_usage: Any = None  # a preset's reader of the session's tokens, for an agent that reports none
        self.run_env: dict[str, str] | None = None  # the environment the run started with (its CODEX_HOME)
        self.read_usage: tuple[bool, Any] = (False, None)  # (read yet, what session_usage found), see before_finish
        self.model_option: tuple[str, str] | None = None  # (config option id, model) set after session/new
        self.model: str | None = None  # the model the run was configured with (the task's or the agent's), if any
        # Names the agent reports usage under that are not a model (Gemini's "auto"): a turn's tokens under one are
        # the turn's one named model's, else the configured model's, else unknown.
        self.aliases: tuple[str, ...] = ()
        self.refusals: list[str] = []  # refusals' reasons waiting to be sent as the next prompt
        self.told: set[str] = set()  # reasons already sent: a refused retry is not told twice

    # -- the driver ----------------------------------------------------------------------------------
    async def request(self, method: str, params: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
        """Send one JSON-RPC request and wait for its answer: {"result": …} or {"error": …}."""
        assert self._send is not None
        self._ids += 1
        request_id = self._ids
        done = self._waiting[request_id] = anyio.Event()
        message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        if not await self._send((json.dumps(message) + "\n").encode()):
            return {"error": {"message": f"the agent closed its stdin before {method}"}}
        with anyio.move_on_after(timeout):  # None: as long as the turn takes (the watchdog bounds the run)
            await done.wait()
        self._waiting.pop(request_id, None)
        return self._answers.pop(request_id, None) or {"error": {"message": f"no answer to {method} in {timeout} s"}}

    async def notify(self, method: str, params: dict[str, Any]) -> bool:
        assert self._send is not None
        return await self._send((json.dumps({"jsonrpc": "2.0", "method": method, "params": params}) + "\n").encode())

    async def drive(self, send: Send, close: Callable[[], Awaitable[None]], cwd: Path) -> None:
        """The whole session: set up, the task's prompt, a prompt per loop warning, then stdin closed (the agent
        exits on EOF)."""
        self._send = send
        try:
            if await self._start(cwd):
                await self._prompt(self.prompt)
                while (self.warnings or self.refusals) and self.error is None:
                    await self._prompt(self.warnings.pop(0) if self.warnings else self._refusal_note())
        finally:
            await close()

    async def _start(self, cwd: Path) -> bool:
        capabilities = {"fs": {"readTextFile": self.client_reads, "writeTextFile": True}, "terminal": True}
        params = schema().InitializeRequest.model_validate(
            {"protocolVersion": protocol_version(), "clientCapabilities": capabilities,
             "clientInfo": {"name": "agentqueue", "version": "1"}}).model_dump(by_alias=True, exclude_none=True)
        answer = await self.request("initialize", params, SETUP_TIMEOUT)
        if "error" in answer:
            self.error = f"initialize failed: {_error_text(answer)}"
            return False
        self.agent_info = as_dict(answer.get("result"))
        params = {"cwd": str(cwd), "mcpServers": self.servers, **({"_meta": self.session_meta} if self.session_meta
                                                                    else {})}
        answer = await self.request("session/new", params, SETUP_TIMEOUT)
        if "error" in answer:
            self.error = f"session/new failed: {_error_text(answer)}"
            return False
        self.session_id = str(as_dict(answer.get("result")).get("sessionId") or "")
        if not self.session_id:
            self.error = "session/new answered without a sessionId."
        if self.session_id and self.session_mode:
            answer = await self.request("session/set_mode", {"sessionId": self.session_id, "modeId": self.session_mode},
                                        SETUP_TIMEOUT)
            if "error" in answer:  # its own mode would decide calls the policy must: no prompt is sent
                self.error = f"session/set_mode {self.session_mode} failed: {_error_text(answer)}"
                return False
        if self.session_id and self.model_option:
            option, model = self.model_option
            params = {"sessionId": self.session_id, "configId": option, "value": model}
            answer = await self.request("session/set_config_option", params, SETUP_TIMEOUT)
            if "error" in answer:  # not another model than the one asked for
                self.error = f"the agent refused the model {model!r}: {_error_text(answer)}"
                return False
        return bool(self.session_id)

    async def _prompt(self, text: str) -> None:
        self.in_turn = True
        try:
            answer = await self.request("session/prompt", {"sessionId": self.session_id,
                                                           "prompt": [{"type": "text", "text": text}]})
        finally:
            self.in_turn = False
        self._flush_message()
        if "error" in answer:
            self.error = _error_text(answer)
            return
        result = as_dict(answer.get("result"))
        self.turns += 1
        self.stop_reason = str(result.get("stopReason") or "")
        self._count(result)

    async def warn(self, message: str) -> bool:
        """A loop warning for the model: the turn is cancelled and the warning is its next prompt, same session."""
        if self._send is None or self.session_id is None or not self.in_turn:
            return False
        # A cancelled turn may be dropped from the agent's history (gemini 0.61.0's next request once carried only the
        # warning, and its model, told nothing of the task, answered and ended): the warning restates the task.
        self.warnings.append(f"{message}\n\nThe task you were working on, as it was given to you:\n\n{self.prompt}")
        return await self.notify("session/cancel", {"sessionId": self.session_id})

    def refused(self, reason: str) -> None:
        """A call the policy (or a person) refused: ACP's reject carries no message, so the reason is the next prompt
        of the same session once this turn ends (each reason once per run)."""
        if reason and reason not in self.told:
            self.told.add(reason)
            self.refusals.append(reason)

    def _refusal_note(self) -> str:
        reasons, self.refusals = self.refusals, []
        if len(reasons) == 1:
            return f"AgentQueue refused your last tool call: {reasons[0]}"
        return "AgentQueue refused tool calls of your last turn:\n" + "\n".join(f"- {r}" for r in reasons)

    def encode_answer(self, request_id: str, response: dict[str, Any]) -> bytes:
        """An answer to the agent's request (the session is the run's wire); a refusal's reason, which the channel
        puts in the answer's `_meta.agentqueue.refusal` (engine/acp_client.py), is kept for the next prompt."""
        if isinstance(response.get("result"), dict):
            reason = as_dict(as_dict(response["result"].get("_meta")).get("agentqueue")).get("refusal")
            if isinstance(reason, str):
                self.refused(reason)
        return answer_line(request_id, response)

    def encode_message(self, text: str) -> bytes:
        return b""  # a loop warning goes as a prompt (warn)

    # -- the parser ----------------------------------------------------------------------------------
    def feed(self, line: str) -> list[AgentEvent]:
        message = load_json(line)
        if message is None or message.get("jsonrpc") != "2.0":
            return [AgentEvent("text", line.rstrip())] if line.strip() else []
        method = message.get("method")
        if method is None:  # an answer to one of ours; a turn's end flushes the message it streamed into the log
            request_id = message.get("id")
            events: list[AgentEvent] = []
            if isinstance(request_id, int) and request_id in self._waiting:
                self._answers[request_id] = message
                self._waiting[request_id].set()
                self._flush_into(events)
            return events
        params = as_dict(message.get("params"))
        if "id" not in message:
            return self._update(as_dict(params.get("update"))) if method == "session/update" else []
        events = []
        self._flush_into(events)
        if method == "session/request_permission":
            events += self._tool_call(as_dict(params.get("toolCall")))
        return [*events, AgentEvent("control", data={"request_id": json.dumps(message["id"]), "request": message})]

    def _update(self, update: dict[str, Any]) -> list[AgentEvent]:
        kind = update.get("sessionUpdate")
        if kind == "agent_message_chunk":
            self.message.append(_text(update.get("content")))
            return []
        events: list[AgentEvent] = []
        self._flush_into(events)
        call_id = str(update.get("toolCallId") or "")
        if kind == "tool_call" and update.get("rawInput") == {} and call_id:
            # Claude's adapter announces a call before its input ("Terminal", rawInput {}) and sends the input in a
            # tool_call_update: told to the watchdog then, or every call would look the same to its loop detector.
            self.pending_calls[call_id] = update
        elif kind == "tool_call":
            events += self._tool_call(update)
        elif kind == "tool_call_update" and call_id in self.pending_calls and (
                as_dict(update.get("rawInput")) or update.get("status") in ("completed", "failed")):
            events += self._tool_call({**self.pending_calls.pop(call_id), **update})
        if kind == "tool_call_update" and update.get("status") in ("completed", "failed"):
            events.append(AgentEvent("tool_result", text=f"{update.get('status')}: {_text(update.get('content'))}"[
                :2000]))
        elif kind == "usage_update" and isinstance(update.get("cost"), dict):
            cost = update["cost"]
            if str(cost.get("currency") or "").upper() == "USD" and isinstance(cost.get("amount"), (int, float)):
                self.reported_cost = float(cost["amount"])
        return events

    def _tool_call(self, call: dict[str, Any]) -> list[AgentEvent]:
        """A tool call for the watchdog, once per toolCallId (Gemini asks before it announces; others announce)."""
        call_id = str(call.get("toolCallId") or "")
        if call_id and call_id in self.seen_calls:
            return []
        self.seen_calls.add(call_id)
        args = call.get("rawInput") if call.get("rawInput") is not None else {
            "title": call.get("title"), "locations": call.get("locations")}
        return [AgentEvent("tool_call", tool=str(call.get("kind") or "other"), args=args)]

    def _flush_into(self, events: list[AgentEvent]) -> None:
        text = "".join(self.message)
        self.message.clear()
        if text.strip():
            self.texts.append(text)
            events.append(AgentEvent("text", text))

    def _flush_message(self) -> None:
        self._flush_into([])

    def _count(self, result: dict[str, Any]) -> None:
        """A turn's usage: ACP's `usage`, else Gemini's `_meta.quota`; a turn with neither is unpaid (partial)."""
        usage = result.get("usage")
        quota = as_dict(as_dict(result.get("_meta")).get("quota"))
        if isinstance(usage, dict):
            given = {k: _count_of(usage.get(k)) for k in ("inputTokens", "outputTokens", "thoughtTokens",
                                                          "cachedReadTokens", "cachedWriteTokens", "totalTokens")}
            turn = tokens(given["inputTokens"], given["outputTokens"] + given["thoughtTokens"],
                          given["cachedReadTokens"], given["cachedWriteTokens"], given["totalTokens"] or None)
            self._add(None, turn)
        elif isinstance(quota.get("token_count"), dict):
            listed = quota.get("model_usage")
            per_model = [m for m in (listed if isinstance(listed, list) else []) if isinstance(m, dict)]
            entries = per_model or [{"model": None, "token_count": quota["token_count"]}]
            named = {m for m in (e.get("model") for e in entries) if isinstance(m, str) and m not in self.aliases}
            for entry in entries:
                count = as_dict(entry.get("token_count"))
                model = entry.get("model") if isinstance(entry.get("model"), str) else None
                if model in self.aliases or model is None:
                    model = self._routed(named, model)
                self._add(model, tokens(_count_of(count.get("input_tokens")), _count_of(count.get("output_tokens"))))
        else:
            self.unpaid_turns += 1

    def _routed(self, named: set[str], alias: str | None) -> str | None:
        """The model behind an alias's tokens: the turn's one named model (Gemini names the model its router chose
        on a turn's first call only), else the configured model when it is not an alias, else the alias (unpriced)."""
        if len(named) == 1:
            return next(iter(named))
        if not named and self.model and self.model not in self.aliases:
            return self.model
        return alias

    def _add(self, model: str | None, turn: dict[str, int]) -> None:
        for key, value in turn.items():
            self.usage[key] += value
        counts = self.model_usage.setdefault(model or "", dict.fromkeys(("input", "output", "cache_read"), 0))
        for key in counts:
            counts[key] += turn[key]

    def cost(self) -> float | None:
        """The agent's own USD figure, else each model's tokens priced (None when one's price is unknown)."""
        if self.reported_cost is not None:
            return round(self.reported_cost, 6)
        total = 0.0
        for model, counts in self.model_usage.items():
            if not any(counts.values()):
                continue
            cost = tokens_cost(model or None, counts, one_request=False)  # the run's sum of many requests
            if cost is None:
                return None
            total += cost
        return round(total, 6)

    def before_finish(self) -> None:
        """The session's tokens from a file the run wrote, read once in a worker thread (runner.py) before finish:
        the run could make that file a FIFO or a huge one, which must never hold up the event loop."""
        found = self.session_usage(self.session_id, self.run_env) if self.session_usage and self.session_id else None
        self.read_usage = (True, found)

    def finish(self, exit_code: int | None) -> RunResult:
        self._flush_message()
        if not self.read_usage[0]:
            self.before_finish()  # a caller that did not run it (a test driving the parser)
        found = self.read_usage[1]
        if found is not None:  # the whole session's bill, every turn in it (a cancelled one too)
            model, self.usage, self.unpaid_turns = found[0], found[1], 0
            self.model_usage = {model or "": {key: self.usage[key] for key in ("input", "output", "cache_read")}}
        summary = "\n".join(self.texts)[-2000:]
        common: dict[str, Any] = {"summary": summary, "tokens": dict(self.usage), "cost_usd": self.cost(),
                                  "partial": bool(self.unpaid_turns) or self.error is not None}
        if self.error is not None:
            return RunResult("failed", error_type=classify_message(self.error) or "crashed",
                             error_message=self.error, **common)
        if not self.turns:
            return RunResult("failed", error_type="crashed", error_message=f"The ACP agent exited ({exit_code}) "
                             "before it answered the prompt.", **{**common, "partial": True})
        if self.stop_reason in STOP_FAILURES:
            return RunResult("failed", error_type=STOP_FAILURES[self.stop_reason],
                             error_message=f"The agent stopped its turn: {self.stop_reason}.", **common)
        return RunResult("completed", **common)


def _count_of(value: Any) -> int:
    """A token count the agent sent, or 0 for anything that is not a count."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _error_text(answer: dict[str, Any]) -> str:
    error = as_dict(answer.get("error"))
    data = error.get("data")
    return str(error.get("message") or "error") + (f" ({json.dumps(data)[:500]})" if data else "")

