"""A scripted ACP agent on stdio, built on the `agent-client-protocol` SDK's agent side: the stand-in for any ACP
agent (the way the loopback mocks stand in for a model). Run as `python tests/acp_script_agent.py`.

Each prompt's text chooses what it does (markers as in the model mocks):

- `CMD[...]`: asks `session/request_permission` for an `execute` call of that command; when allowed, runs it in a
  client terminal (`terminal/create`, `wait_for_exit`, `output`, `release`), and says how much output it got.
- `WRITE[name]`: writes `name` (relative to its cwd) through `fs/write_text_file`, then reads it back.
- a prompt that starts "AgentQueue refused" (the client telling it why a call was refused): `told: <text>`.
- always: a `usage_update` with a USD cost of `COST`, and a PromptResponse with `USAGE`.

It says what happened in its agent message, one line per step, so a test reads it in the run's summary.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from typing import Any

import acp
from acp import schema

COST = 0.0123
USAGE = {"input": 100, "output": 20, "cached": 30, "thought": 5}


class ScriptAgent:
    def __init__(self) -> None:
        self.client: Any = None
        self.cwd = os.getcwd()

    def on_connect(self, conn: Any) -> None:
        self.client = conn

    async def initialize(self, protocol_version: int, client_capabilities: Any = None, client_info: Any = None,
                         **kwargs: Any) -> schema.InitializeResponse:
        return schema.InitializeResponse(protocol_version=protocol_version)

    async def new_session(self, cwd: str, mcp_servers: Any = None, **kwargs: Any) -> schema.NewSessionResponse:
        self.cwd = cwd
        names = ",".join(getattr(s, "name", "?") for s in mcp_servers or [])
        sys.stderr.write(f"script agent: mcp servers [{names}]\n")
        return schema.NewSessionResponse(session_id="script-session")

    async def set_session_mode(self, session_id: str, mode_id: str, **kwargs: Any) -> schema.SetSessionModeResponse:
        return schema.SetSessionModeResponse()  # a preset's mode (claude-code's "default"): taken, nothing changes

    async def say(self, session_id: str, text: str) -> None:
        await self.client.session_update(session_id, acp.update_agent_message_text(text + "\n"))

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> schema.PromptResponse:
        text = " ".join(getattr(block, "text", "") or "" for block in prompt)
        if (found := re.search(r"CMD\[(.+?)\]", text)) is not None:
            await self.run(session_id, found.group(1))
        if (found := re.search(r"WRITE\[(.+?)\]", text)) is not None:
            path = os.path.join(self.cwd, found.group(1))
            await self.client.write_text_file(session_id=session_id, path=path, content="written over ACP\n")
            back = await self.client.read_text_file(session_id=session_id, path=path)
            await self.say(session_id, f"read back: {back.content.strip()}")
        if text.startswith("AgentQueue refused"):  # a refusal's reason, sent by the client as a prompt
            await self.say(session_id, f"told: {text}")
        await self.client.session_update(session_id, schema.UsageUpdate(
            session_update="usage_update", used=150, size=200_000, cost=schema.Cost(amount=COST, currency="USD")))
        usage = schema.Usage(input_tokens=USAGE["input"], output_tokens=USAGE["output"],
                             cached_read_tokens=USAGE["cached"], thought_tokens=USAGE["thought"],
                             total_tokens=sum(USAGE.values()))
        return schema.PromptResponse(stop_reason="end_turn", usage=usage)

    async def run(self, session_id: str, command: str) -> None:
        call = schema.ToolCallUpdate(tool_call_id="call-1", title=command, kind="execute", status="pending",
                                     raw_input={"command": command})
        options = [schema.PermissionOption(option_id="allow-once", name="Allow", kind="allow_once"),
                   schema.PermissionOption(option_id="allow-always", name="Always", kind="allow_always"),
                   schema.PermissionOption(option_id="reject", name="Reject", kind="reject_once")]
        answer = await self.client.request_permission(session_id=session_id, tool_call=call, options=options)
        chosen = getattr(answer.outcome, "option_id", "cancelled")
        await self.say(session_id, f"permission: {chosen}")
        if chosen != "allow-once":
            return
        try:
            term = await self.client.create_terminal(session_id=session_id, command=command)
        except acp.RequestError as error:
            await self.say(session_id, f"terminal refused: {error}")
            return
        exited = await self.client.wait_for_terminal_exit(session_id=session_id, terminal_id=term.terminal_id)
        out = await self.client.terminal_output(session_id=session_id, terminal_id=term.terminal_id)
        await self.client.release_terminal(session_id=session_id, terminal_id=term.terminal_id)
        await self.say(session_id, f"exit: {exited.exit_code}")
        await self.say(session_id, f"output: {len(out.output.encode())} bytes, truncated: {out.truncated}")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        return None


if __name__ == "__main__":
    asyncio.run(acp.run_agent(ScriptAgent()))
