"""Issue 10's findings, each with the regression test that failed before its fix.

The standing classes (fuzzing, load) live in their own files; this one holds the single findings.
"""

from __future__ import annotations

import anyio
import pytest

from .conftest import ok

pytestmark = pytest.mark.anyio


async def test_a_catastrophic_regex_cannot_freeze_the_daemon(client, services, tmp_path):
    """`(a+)+$` over 40 `a`s and a `!` backtracked for hours in Python's `re`, under the daemon's lock."""
    workspace = tmp_path / "ws"
    services.projects.create("Demo", workspace=str(workspace))
    (workspace / "evil.txt").write_text("a" * 40 + "!\n" + "plain line\n")
    with anyio.fail_after(20):  # a hang detector, not a speed target: the old engine needed ~2^40 steps
        async with anyio.create_task_group() as tg:
            found: dict = {}

            async def search() -> None:
                found.update(await ok(client, "search_files", pattern="(a+)+$", path=str(workspace)))
            tg.start_soon(search)
            # Other calls are answered meanwhile.
            assert (await ok(client, "list_projects"))["projects"][0]["id"] == "demo"
    assert found["results"] == [] and found["note"] is None
    # A real regex still works, and one RE2 cannot take (a backreference) is searched for literally, with a note.
    hits = await ok(client, "search_files", pattern=r"^pl\w+ line$", path=str(workspace))
    assert hits["results"] == ["evil.txt:2:plain line"]
    literal = await ok(client, "search_files", pattern=r"(a)\1", path=str(workspace))
    assert literal["results"] == [] and "backreferences" in literal["note"] and "literally" in literal["note"]
