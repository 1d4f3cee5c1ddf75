"""agentqueue://tasks/{id}/log: the agent's streamed output, with change notifications in both eras."""

from __future__ import annotations

import sys

import anyio
import pytest

from agentqueue.engine.orchestrator import Engine, EngineConfig
from agentqueue.server.app import BuiltServer
from agentqueue.services import Services

from .test_mcp_resources_prompts import watch  # noqa: F401  (fixture: a client plus subscribe(uri))
from .slowdown import scaled

pytestmark = [pytest.mark.both_eras, pytest.mark.anyio]

AGENT = f"{sys.executable} -c \"import time; print('step one', flush=True); time.sleep(0.5); print('step two')\""


async def test_task_log_streams_and_notifies(services: Services, built: BuiltServer, watch) -> None:  # noqa: F811
    client, subscribe = watch
    services.projects.create("Logs")
    services.agents.create("talker", "command", command=AGENT)
    task = services.tasks.create("logs", "Talk", "say things")
    uri = f"agentqueue://tasks/{task.id}/log"
    before = await client.read_resource(uri)
    assert before.contents[0].text == "(no agent has run this task yet)"
    notifier = built.notifier
    engine = Engine(services, services.home, flush=notifier.flush, config=EngineConfig(poll_seconds=0.1),
                    on_log=lambda task_id: notifier.mark(f"agentqueue://tasks/{task_id}/log"))
    async with subscribe(uri) as next_update, anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        assert await next_update() == uri  # the log grew while the agent ran
        with anyio.fail_after(scaled(20)):
            while services.tasks.get(task.id).status != "COMPLETED":
                await anyio.sleep(0.05)
        await engine.shutdown()
        tg.cancel_scope.cancel()
    text = (await client.read_resource(uri)).contents[0].text
    assert "step one" in text and "step two" in text and "[done] completed" in text
