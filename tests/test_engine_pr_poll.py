"""PRs of tasks awaiting approval are watched with `gh pr view`: merged -> COMPLETED, closed -> BLOCKED.

`gh` is a fake on PATH (a third-party CLI): `pr create` prints a URL, `pr view` prints the state
written in a file, as GitHub would answer.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from agentqueue.engine.orchestrator import Engine, EngineConfig
from agentqueue.services import Services

from .engine_runs import passes
from .slowdown import scaled

pytestmark = pytest.mark.anyio

FAKE_GH = """#!{python}
import json, sys, pathlib
state = pathlib.Path({state!r})
if sys.argv[1:3] == ["pr", "create"]:
    head = sys.argv[sys.argv.index("--head") + 1]
    print("https://github.com/o/r/pull/" + str(abs(hash(head)) % 1000))
elif sys.argv[1:3] == ["pr", "view"]:
    states = json.loads(state.read_text()) if state.exists() else {{}}
    print(json.dumps(states.get(sys.argv[3], {{"state": "OPEN", "mergedAt": None}})))
"""


@pytest.fixture
def gh_states(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    states = tmp_path / "pr-states.json"
    gh = bindir / "gh"
    gh.write_text(FAKE_GH.format(python=sys.executable, state=str(states)))
    gh.chmod(0o755)
    monkeypatch.setenv("AGENTQUEUE_GH_BIN", str(gh))
    return states


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()


async def test_merged_pr_completes_the_task_and_closed_pr_blocks_it(services: Services, tmp_path: Path,
                                                                     gh_states: Path) -> None:
    seed = tmp_path / "seed"
    seed.mkdir()
    git(seed, "init", "-q", "-b", "main")
    git(seed, "commit", "-q", "--allow-empty", "-m", "init")
    git(tmp_path, "clone", "-q", "--bare", str(seed), "origin.git")
    services.projects.create("Reviewed", max_concurrent_agents=2)
    services.repos.add("reviewed", "clone", url=str(tmp_path / "origin.git"), name="app")
    agent = f"{sys.executable} -c \"import sys; open(sys.stdin.read().split()[2] + '.txt', 'w').write('x')\""
    services.agents.create("writer", "command", command=agent)
    merged = services.tasks.create("reviewed", "One", "write it", repo_id="app", requires_approval=True)
    closed = services.tasks.create("reviewed", "Two", "write it", repo_id="app", requires_approval=True)
    engine = Engine(services, services.home, config=EngineConfig(poll_seconds=0.1, pr_poll_seconds=0.2))
    async with anyio.create_task_group() as tg:
        tg.start_soon(engine.run)
        with anyio.fail_after(scaled(30)):
            while {services.tasks.get(t.id).status for t in (merged, closed)} != {"AWAITING_APPROVAL"}:
                await anyio.sleep(0.1)
        urls = {t.id: services.tasks.get(t.id).pr_url for t in (merged, closed)}
        assert all(url and url.startswith("https://github.com/o/r/pull/") for url in urls.values())
        await passes(engine, 6)  # open PRs, polled meanwhile (every 0.2 s; a pass takes >= 0.1 s): nothing changes
        assert services.tasks.get(merged.id).status == "AWAITING_APPROVAL"
        gh_states.write_text(__import__("json").dumps({
            urls[merged.id]: {"state": "MERGED", "mergedAt": "2026-11-22T00:00:00Z"},
            urls[closed.id]: {"state": "CLOSED", "mergedAt": None}}))
        with anyio.fail_after(scaled(10)):
            while services.tasks.get(merged.id).status != "COMPLETED" or services.tasks.get(closed.id).status \
                    != "BLOCKED":
                await anyio.sleep(0.1)
        await engine.shutdown()
        tg.cancel_scope.cancel()
    assert not engine.workspaces.path_for("app", merged.id).exists()  # the PR holds the work now
    reasons = [e.payload["reason"] for e in services.events.recent(20, task_id=closed.id, event_type="task.blocked")]
    assert reasons == ["pr_closed"]
