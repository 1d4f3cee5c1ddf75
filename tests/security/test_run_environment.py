"""H1 (issue 33): the daemon's secrets in a run's environment. A hostile `command` agent, run by the real engine
inside the sandbox, dumps everything it was given into its worktree; none of the daemon's secrets may be there,
while what the person configured for agents ([agent_env]) still is."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from agentqueue.sandbox import bwrap
from agentqueue.services import Services

from ..engine_runs import engine_for, run_until
from ..git_fixtures import git_env  # noqa: F401  (fixture)

pytestmark = [pytest.mark.anyio, pytest.mark.integration,
              pytest.mark.skipif(bwrap.probe() is not None, reason="bubblewrap missing (.ci/run installs it)")]

# What the daemon could have been started with: none of it is any run's business.
DAEMON_SECRETS = {
    "AGENTQUEUE_TOKEN": "aq-token-0d1f",
    "AGENTQUEUE_DATABASE_URL": "postgresql://queue:db-password-77@127.0.0.1:5432/queue",
    "ANTHROPIC_API_KEY": "sk-ant-daemon-3c2a",
    "OPENAI_API_KEY": "sk-openai-daemon-9e1b",
    "GITHUB_TOKEN": "ghp_daemon_51aa",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-daemon-6f0c",
}
DUMP = "import json, os; open('env.json', 'w').write(json.dumps(dict(os.environ)))"


def shown(repo: str) -> dict[str, str]:
    text = subprocess.run(["git", "show", "main:env.json"], cwd=repo, capture_output=True, text=True, check=True)
    return json.loads(text.stdout)


async def test_a_command_run_gets_no_secret_of_the_daemons(services: Services, monkeypatch: pytest.MonkeyPatch,
                                                           git_env: Path) -> None:  # noqa: F811
    services.projects.create("Demo")
    repo = services.repos.add("demo", "init", name="app").checkout_path
    services.policies.edit(project_id="demo", preset="autonomous")
    services.agents.create("dumper", "command", command=shlex.join([sys.executable, "-c", DUMP]))
    services.settings.agent_env = {"PERSON_CHOSE": "for-every-agent"}  # [agent_env], as config.toml gives it
    for name, value in DAEMON_SECRETS.items():  # after the store is open: the run reads the daemon's environment
        monkeypatch.setenv(name, value)
    task = services.tasks.create("demo", "Dump", "dump your environment", repo_id="app")
    await run_until(engine_for(services), lambda: services.tasks.get(task.id).status in ("COMPLETED", "FAILED",
                                                                                          "BLOCKED"))
    assert services.tasks.get(task.id).status == "COMPLETED", services.tasks.get(task.id).reason
    env = shown(repo)
    leaked = {name for name, value in env.items() if value in DAEMON_SECRETS.values() or name in DAEMON_SECRETS}
    assert not leaked, f"the run was given the daemon's {sorted(leaked)}"
    assert not any(secret in json.dumps(env) for secret in DAEMON_SECRETS.values())
    assert env["PERSON_CHOSE"] == "for-every-agent"  # what the person configured for agents still arrives
    assert env["HOME"] == str(git_env) and env["PATH"]  # and the base set


async def test_a_kinds_own_key_reaches_only_its_kind(services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment a run of each kind starts from (Settings.agent_environment, what _ready gives a run)."""
    for name, value in DAEMON_SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9/")
    services.settings.agent_env = {"ANTHROPIC_AUTH_TOKEN": "person-set", "SHARED": "1"}
    claude = services.settings.agent_environment("claude-code")
    command = services.settings.agent_environment("command")
    codex = services.settings.agent_environment("codex")
    assert claude["ANTHROPIC_API_KEY"] == DAEMON_SECRETS["ANTHROPIC_API_KEY"] and claude["ANTHROPIC_AUTH_TOKEN"]
    assert "OPENAI_API_KEY" not in claude and codex["OPENAI_API_KEY"] == DAEMON_SECRETS["OPENAI_API_KEY"]
    assert not any(name.startswith(("ANTHROPIC_", "OPENAI_")) for name in command) and command["SHARED"] == "1"
    for env in (claude, command, codex):
        assert not {"AGENTQUEUE_TOKEN", "AGENTQUEUE_DATABASE_URL", "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY"} & set(env)


async def test_a_command_run_through_run_command_gets_no_secret_of_the_daemons(
        services: Services, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """run_command, a verify command and a hook's shell step run through FileService.run: the same allowlist."""
    for name, value in DAEMON_SECRETS.items():
        monkeypatch.setenv(name, value)
    services.settings.agent_env = {"PERSON_CHOSE": "for-every-agent"}
    work = tmp_path / "work"
    work.mkdir()
    done = services.files.run("env", work, timeout=30, env={"PORT": "4100"})
    assert done.returncode == 0, done.stderr
    assert not any(secret in done.stdout for secret in DAEMON_SECRETS.values()), done.stdout
    assert "PERSON_CHOSE=for-every-agent" in done.stdout and "PORT=4100" in done.stdout
