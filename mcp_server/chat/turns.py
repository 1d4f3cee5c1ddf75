"""One turn of the conversation: send the message, read claude's events until its `result`.

The events are shown through a `View` as they come; permission questions from claude itself
(`can_use_tool`) and AgentQueue's policy questions (MCP elicitation, relayed by claude as a
`control_request`) are put to the person. Failures are classified by the engine's own parser.
"""

from __future__ import annotations

import json
import queue
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from ..engine.adapters.claude_code import ClaudeCodeParser
from .claude import EXITED, SERVER, ClaudeProcess, Line

Permission = Literal["allow", "deny", "always"]
SYNTHETIC = "<synthetic>"  # the model name on messages claude writes itself (such as "API Error: …")
TOOL_SEARCH = "ToolSearch"  # Claude Code's deferred-tool lookup: a step towards a tool call, not one of its own

# What to do next, per failure kind of services.failures (the engine's classification).
NEXT_STEPS = {
    "auth": "Claude Code is not logged in or its API key was refused. Run `claude` once and log in (/login), or "
            "set a valid ANTHROPIC_API_KEY; then send your message again.",
    "rate_limit": "The model API is rate limiting (or overloaded). Wait a minute, then send your message again; "
                  "this conversation is kept.",
    "quota": "The account is out of credit or budget. Check your plan or billing, then send again.",
    "prompt_too_long": "The conversation is too long for the model. Start a new chat (without --resume).",
    "max_turns": "The model used its turn limit. Ask it to go on, or split the request.",
    "crashed": "Run `agentqueue doctor` to check the claude CLI, then try again.",
}


class View(Protocol):
    def text(self, chunk: str) -> None: ...
    def tool_call(self, name: str, arguments: dict[str, Any]) -> None: ...
    def tool_result(self, summary: str, is_error: bool) -> None: ...
    def note(self, message: str) -> None: ...
    def ask_permission(self, tool: str, arguments: dict[str, Any], description: str) -> Permission: ...
    def ask_question(self, message: str) -> bool: ...


@dataclass
class TurnResult:
    text: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)  # this turn's, from result.usage
    cost_usd: float = 0.0  # this turn's: the growth of claude's cumulative total_cost_usd
    session_id: str | None = None
    duration_ms: int = 0
    interrupted: bool = False
    error_kind: str | None = None
    error: str | None = None  # what went wrong and the next step, for the person
    ended: bool = False  # claude exited: the conversation cannot go on in this process

    @property
    def ok(self) -> bool:
        return self.error is None and not self.interrupted


def short_name(tool: str) -> str:
    return tool.removeprefix(f"mcp__{SERVER}__")


def summarize(content: Any, structured: Any) -> str:
    """One line for a tool result: the task or request it names, else its first line of text."""
    if isinstance(structured, dict):
        record = structured.get("task") if isinstance(structured.get("task"), dict) else structured
        parts = [f"{key}={record[key]}" for key in ("id", "status", "title") if isinstance(record.get(key), (str, int))]
        if parts:
            return " ".join(parts)
    if isinstance(content, list):
        content = " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
    text = str(content or "").strip()
    if text.startswith("{"):
        try:
            return summarize(None, json.loads(text)) if isinstance(json.loads(text), dict) else text
        except ValueError:
            pass
    first = text.splitlines()[0] if text else "(no output)"
    return first[:117] + "…" if len(first) > 120 else first


def usage_of(result: dict[str, Any]) -> dict[str, int]:
    usage = result.get("usage") or {}
    return {"input": int(usage.get("input_tokens") or 0), "output": int(usage.get("output_tokens") or 0),
            "cache_read": int(usage.get("cache_read_input_tokens") or 0),
            "cache_write": int(usage.get("cache_creation_input_tokens") or 0)}


class Conversation:
    """The turns of one claude process, and what they cost so far (claude reports it cumulatively)."""

    def __init__(self, process: ClaudeProcess) -> None:
        self.process = process
        self.total_cost = 0.0
        self.session_id: str | None = None
        self.warned_mcp = False
        self.retry_noted = False
        self.searches: dict[str, dict[str, Any]] = {}

    def turn(self, message: str, view: View) -> TurnResult:
        out = TurnResult()
        parser = ClaudeCodeParser()  # the engine's reading of results and errors
        streamed: set[str] = set()  # message ids whose text already arrived as deltas
        tools: dict[str, dict[str, Any]] = {}
        self.retry_noted = False  # a 429 is told once a turn, however often claude retries it
        self.searches = {}  # ToolSearch calls, folded into the tool they find
        started = time.monotonic()
        if not self.process.send(message):
            return self._ended(out)
        while True:
            try:
                item = self.process.events.get(timeout=0.1)
            except queue.Empty:
                continue
            except KeyboardInterrupt:
                self._interrupt(out, view)
                continue
            if item is EXITED:
                return self._ended(out)
            try:
                if self._handle(item, out, parser, streamed, tools, view):
                    break
            except KeyboardInterrupt:
                self._interrupt(out, view)
        out.duration_ms = int((time.monotonic() - started) * 1000)
        return out

    def _interrupt(self, out: TurnResult, view: View) -> None:
        if not out.interrupted:
            out.interrupted = True
            self.process.interrupt()
            view.note("Interrupting… (the conversation stays)")

    def _ended(self, out: TurnResult) -> TurnResult:
        out.ended = True
        out.error_kind = "crashed"
        out.error = f"{self.process.why_it_ended()}. {NEXT_STEPS['crashed']}"
        return out

    def _handle(self, item: Line, out: TurnResult, parser: ClaudeCodeParser, streamed: set[str],
                tools: dict[str, dict[str, Any]], view: View) -> bool:
        """Show one event; True once the turn's result arrived."""
        event = item.event
        if event is None:
            return False
        parser.feed(item.raw)
        kind = event.get("type")
        if kind == "stream_event":
            delta = (event.get("event") or {}).get("delta") or {}
            if delta.get("type") == "text_delta" and delta.get("text"):
                streamed.add(str(event.get("api_message_id") or ""))
                out.text += delta["text"]
                view.text(delta["text"])
        elif kind == "assistant":
            self._assistant(event.get("message") or {}, out, streamed, tools, view)
        elif kind == "user":
            self._tool_results(event, tools, view)
        elif kind == "system":
            self._system(event, view)
        elif kind == "control_request":
            self._control(event, view)
        elif kind == "result":
            self._result(event, out, parser)
            return True
        return False

    def _assistant(self, message: dict[str, Any], out: TurnResult, streamed: set[str],
                   tools: dict[str, dict[str, Any]], view: View) -> None:
        """A model message: its text (unless it already streamed) and one line per tool call."""
        for block in message.get("content") or []:
            if message.get("model") == SYNTHETIC and str(block.get("text") or "").startswith("API Error"):
                continue  # claude's own wording of a failed request: the turn's error says it, with the next step
            if block.get("type") == "text" and block.get("text") and str(message.get("id")) not in streamed:
                out.text += block["text"]
                view.text(block["text"])
            elif block.get("type") == "tool_use":
                call = {"name": short_name(str(block.get("name"))), "input": block.get("input") or {},
                        "result": None, "is_error": False}
                tools[str(block.get("id"))] = call
                out.tool_calls.append(call)
                if call["name"] == TOOL_SEARCH:  # shown with the tool it finds, not as a step of its own
                    self.searches[str(block.get("id"))] = call
                    continue
                view.tool_call(call["name"], call["input"])

    def _tool_results(self, event: dict[str, Any], tools: dict[str, dict[str, Any]], view: View) -> None:
        """The tools' answers, one line each (a ToolSearch that found its tool: none, its call line follows)."""
        content = (event.get("message") or {}).get("content")
        for block in content if isinstance(content, list) else []:
            if not (isinstance(block, dict) and block.get("type") == "tool_result"):
                continue
            extra = event.get("tool_use_result")
            structured = extra.get("structuredContent") if isinstance(extra, dict) else None
            summary = summarize(block.get("content"), structured)
            call = tools.get(str(block.get("tool_use_id")))
            if call is not None:
                call["result"], call["is_error"] = summary, bool(block.get("is_error"))
            search = self.searches.pop(str(block.get("tool_use_id")), None)
            if search is not None and not block.get("is_error"):
                continue
            if search is not None:
                view.tool_call(search["name"], search["input"])
            view.tool_result(summary, bool(block.get("is_error")))

    def _system(self, event: dict[str, Any], view: View) -> None:
        subtype = event.get("subtype")
        if subtype == "init":
            self.session_id = event.get("session_id") or self.session_id
            ours = [s for s in event.get("mcp_servers") or [] if s.get("name") == SERVER]
            if ours and ours[0].get("status") not in ("connected", "pending") and not self.warned_mcp:
                self.warned_mcp = True
                view.note(f"AgentQueue's MCP server is {ours[0].get('status')} in claude: the queue's tools are "
                          "missing. `agentqueue doctor` says why.")
        elif subtype == "api_retry" and not self.retry_noted:  # once: claude may retry ten times
            self.retry_noted = True
            view.note(f"The model API answered {event.get('error_status')} ({event.get('error')}); claude retries "
                      f"by itself (up to {event.get('max_retries')} times). Ctrl-C stops waiting.")

    def _control(self, event: dict[str, Any], view: View) -> None:
        request_id = str(event.get("request_id"))
        request = event.get("request") or {}
        subtype = request.get("subtype")
        if subtype == "can_use_tool":
            arguments = request.get("input") or {}
            description = str(request.get("description") or "")
            choice = view.ask_permission(str(request.get("tool_name")), arguments, description)
            if choice == "deny":
                self.process.answer(request_id, {"behavior": "deny", "message": "The person at the chat said no."})
                return
            response: dict[str, Any] = {"behavior": "allow", "updatedInput": arguments}
            if choice == "always" and request.get("permission_suggestions"):
                response["updatedPermissions"] = request["permission_suggestions"]
            self.process.answer(request_id, response)
        elif subtype == "elicitation":  # AgentQueue's policy asks before a risky tool call
            approved = view.ask_question(str(request.get("message") or "Allow this action?"))
            self.process.answer(request_id, {"action": "accept", "content": {"approve": True}} if approved
                                else {"action": "decline"})
        else:
            self.process.refuse(request_id, f"agentqueue chat does not handle {subtype!r} requests")

    def _result(self, event: dict[str, Any], out: TurnResult, parser: ClaudeCodeParser) -> None:
        self.session_id = event.get("session_id") or self.session_id
        out.session_id = self.session_id
        total = float(event.get("total_cost_usd") or 0.0)
        out.cost_usd, self.total_cost = max(total - self.total_cost, 0.0), total
        out.usage = usage_of(event)
        if out.interrupted and not any(out.usage.values()):
            # claude reports no usage for an interrupted turn: the engine's count of what the stream showed so far
            streamed = parser.usage.tokens()
            out.usage = {key: streamed[key] for key in out.usage}
        if not out.text and isinstance(event.get("result"), str) and not event.get("is_error"):
            out.text = event["result"]
        if event.get("is_error") and not (out.interrupted and event.get("subtype") == "error_during_execution"):
            finished = parser.finish(0)
            out.error_kind = finished.error_type or "crashed"
            out.error = f"{finished.error_message} — {NEXT_STEPS.get(out.error_kind, NEXT_STEPS['crashed'])}"
