"""Issue 33, M6: an ACP agent's terminal that prints without end costs the daemon a bounded ring buffer (the last
`outputByteLimit` bytes, OUTPUT_LIMIT when the agent gives none), not a file read whole into memory. The real
engine runs the scripted ACP agent (tests/acp_script_agent.py); its command prints 500 MB."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentqueue.engine.acp_client import OUTPUT_LIMIT
from agentqueue.sandbox import bwrap
from agentqueue.services import Services

from .. import acp_script_agent as script
from ..engine_runs import engine_and_person
from ..test_acp_gemini import ended, until
from ..test_permissions_claude import status
from .memory import MiB, rss_peak

pytestmark = [pytest.mark.anyio, pytest.mark.integration, pytest.mark.slow,
              pytest.mark.skipif(bwrap.probe() is not None, reason="bubblewrap missing (.ci/run installs it)")]

AGENT = f"{sys.executable} {Path(script.__file__).resolve()}"
FLOOD = "head -c 500000000 /dev/zero | tr '\\\\0' x"


async def test_a_flooding_terminal_is_capped_in_a_ring_buffer(services: Services) -> None:
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("script", "acp", command=AGENT)
    services.policies.edit(project_id="demo", preset="autonomous")
    task = services.tasks.create("demo", "Flood", f"CMD[{FLOOD}]", max_retries=0)
    with rss_peak() as peak:
        async with engine_and_person(services):
            await until(ended(services, task.id), "the run to end", timeout=150)
    _, result = services.tasks.results(task.id)
    said = result.summary if result else ""
    assert status(services, task.id) == "COMPLETED", said
    assert "exit: 0" in said and f"output: {OUTPUT_LIMIT} bytes, truncated: True" in said, said
    assert peak.grew < 64 * MiB, f"the daemon grew {peak.grew / MiB:.0f} MiB for a terminal's output"
