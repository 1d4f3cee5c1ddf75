"""Shared fixtures: a fresh AGENTQUEUE_HOME per test, the server built on it, clients in both eras."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp import Client

from agentqueue.app import build_server
from agentqueue.services import Services


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "aq-home"
    monkeypatch.setenv("AGENTQUEUE_HOME", str(root))
    return root


@pytest.fixture
def services(home: Path) -> Services:
    svc = Services(home)
    yield svc
    svc.close()


@pytest.fixture
def server(services: Services):
    return build_server(services)


@pytest.fixture(params=["legacy", "modern"])
def era(request: pytest.FixtureRequest) -> str:
    """Both protocol eras: 2025-11-25 handshake ("legacy") and 2026-07-28 sessionless ("modern")."""
    return request.param


@pytest.fixture
async def client(server, era: str) -> AsyncIterator[Client]:
    async with Client(server, mode="legacy" if era == "legacy" else "auto") as c:
        yield c


def db_snapshot(services: Services) -> str:
    """Every row of every table, for asserting that a refused call changed nothing."""
    conn = sqlite3.connect(services.store.path)
    try:
        return "\n".join(conn.iterdump())
    finally:
        conn.close()


async def ok(client: Client, tool: str, **args) -> dict:
    """Call a tool that must succeed; returns its structured result."""
    result = await client.call_tool(tool, args)
    text = result.content[0].text if result.content else ""
    assert not result.is_error, f"{tool}({args}) failed: {text}"
    assert isinstance(result.structured_content, dict), f"{tool} returned no structured content"
    return result.structured_content


async def fail(client: Client, tool: str, **args) -> str:
    """Call a tool that must be refused with a tool error; returns the error text."""
    result = await client.call_tool(tool, args)
    assert result.is_error, f"{tool}({args}) unexpectedly succeeded: {result.structured_content}"
    return result.content[0].text
