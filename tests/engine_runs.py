"""The engine on a test's home, for the tests that run real agents: built, run until something holds, or run beside
a person's MCP client (who answers the policy's questions yes)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
from mcp import Client

from agentqueue.engine.orchestrator import Engine, EngineConfig
from agentqueue.engine.watchdog import WatchdogLimits
from agentqueue.server.app import build_server
from agentqueue.services import Services

from .conftest import person_says_yes
from .slowdown import scaled


def engine_for(services: Services, **limits: float) -> Engine:
    config = EngineConfig(poll_seconds=0.1, rate_limit_backoff=30,
                          limits=WatchdogLimits(stall_seconds=limits.get("stall", 60),
                                                timeout_seconds=limits.get("timeout", 120)))
    return Engine(services, services.home, config=config)


async def run_until(engine: Engine, done: Callable[[], bool], timeout: float = 90) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        with anyio.fail_after(scaled(timeout)):
            while not done():
                await anyio.sleep(0.1)
        await engine.shutdown()
        tg.cancel_scope.cancel()


async def passes(engine: Engine, count: int = 5, timeout: float = 60) -> None:
    """Until the running engine has looked at the queue `count` more times: how a test says "and nothing happened"
    without a fixed sleep (a fast machine gets there sooner, a busy one later, each having looked as often)."""
    until = engine.ticks + count
    with anyio.fail_after(scaled(timeout)):
        while engine.ticks < until:
            await anyio.sleep(0.02)


@asynccontextmanager
async def engine_and_person(services: Services, watchdog: WatchdogLimits | None = None,
                            **limits: float) -> AsyncIterator[tuple[Engine, Client]]:
    """The engine running, and a person's MCP client on the same home; the engine is shut down on the way out."""
    engine = engine_for(services, **limits)
    if watchdog is not None:
        engine.config.limits = watchdog
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        try:
            async with Client(build_server(services), mode="legacy", elicitation_callback=person_says_yes) as client:
                yield engine, client
        finally:
            with anyio.CancelScope(shield=True):
                await engine.shutdown(grace=10)
            tg.cancel_scope.cancel()
