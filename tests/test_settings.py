"""config.toml and AGENTQUEUE_* variables: parsed, refused clearly when wrong, and applied to the daemon and agents."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentqueue import paths, settings
from agentqueue.engine.orchestrator import EngineConfig
from agentqueue.services import Services

from .conftest import db_snapshot, fail
from .git_fixtures import git, git_env  # noqa: F401  (git_env: fixture)
from .test_engine_lifecycle import make_engine, run_until_final

SCRIPT = Path(sys.executable).parent / "agentqueue"


def write_config(home: Path, text: str) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    path = settings.config_path(home)
    path.write_text(text)
    return path


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for _, _, name, *_ in settings.ENGINE_KEYS:
        monkeypatch.delenv(name, raising=False)
    for name, _ in settings.CLI_KEYS.values():
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AGENTQUEUE_PORT", raising=False)
    for name in ("AGENTQUEUE_DATABASE_URL", "AGENTQUEUE_LABELS", "AGENTQUEUE_LEASE_SECONDS"):
        monkeypatch.delenv(name, raising=False)


def test_every_section_is_read(tmp_path: Path, clean_env: None) -> None:
    claude = executable(tmp_path / "bin" / "claude")
    write_config(tmp_path / "home", f"""
[engine]
task_timeout = "1h"
stall_seconds = "90s"
poll_seconds = 0.5
max_turns = 12
rate_limit_backoff = "1.5m"
pr_poll_seconds = 30

[cli]
claude = "{claude}"

[env]
path = ["{tmp_path / 'extra'}"]
pass = ["HTTPS_PROXY"]

[agent_env]
ANTHROPIC_BASE_URL = "http://127.0.0.1:9"
RETRIES = 3

[server]
port = 9911
""")
    loaded = settings.load(tmp_path / "home", environ={"PATH": "/usr/bin"})
    assert loaded.engine["task_timeout"] == 3600 and loaded.engine["stall_seconds"] == 90
    assert loaded.engine["poll_seconds"] == 0.5 and loaded.engine["max_turns"] == 12
    assert loaded.engine["rate_limit_backoff"] == 90 and loaded.engine["pr_poll_seconds"] == 30
    assert loaded.engine["rate_limit_max_backoff"] == 900  # untouched default
    assert loaded.find("claude", {}) == str(claude)
    assert loaded.search_path({"PATH": "/usr/bin"}) == f"{tmp_path / 'extra'}{os.pathsep}/usr/bin"
    assert loaded.pass_env == ["HTTPS_PROXY"]
    assert loaded.agent_env == {"ANTHROPIC_BASE_URL": "http://127.0.0.1:9", "RETRIES": "3"}
    assert loaded.port == 9911
    config = EngineConfig.from_settings(loaded)
    assert config.limits.timeout_seconds == 3600 and config.limits.stall_seconds == 90 and config.max_turns == 12
    assert loaded.sources["engine.task_timeout"] == "config.toml"


def test_no_file_means_the_defaults(tmp_path: Path, clean_env: None) -> None:
    loaded = settings.load(tmp_path / "nothing-here")
    assert loaded.engine["task_timeout"] == 3600 and loaded.port == settings.DEFAULT_PORT and loaded.pass_env is None


def test_an_environment_variable_wins_over_the_file(tmp_path: Path, clean_env: None) -> None:
    write_config(tmp_path, "[engine]\ntask_timeout = 60\n[server]\nport = 1000\n")
    loaded = settings.load(tmp_path, environ={"AGENTQUEUE_TASK_TIMEOUT": "2h", "AGENTQUEUE_PORT": "0"})
    assert loaded.engine["task_timeout"] == 7200 and loaded.port == 0
    assert loaded.sources["engine.task_timeout"] == "env AGENTQUEUE_TASK_TIMEOUT"


@pytest.mark.parametrize(("text", "environ", "needles"), [
    ("", {"AGENTQUEUE_TASK_TIMEOUT": "soon"}, ["AGENTQUEUE_TASK_TIMEOUT", "'soon'", "duration"]),
    ("[engine]\ntask_timeout = \"an hour\"\n", {}, ["[engine] task_timeout", "'an hour'", "\"1h\""]),
    ("[engine]\nstall_seconds = 0\n", {}, ["stall_seconds", "at least 1"]),
    ("[engine]\nmax_turns = \"ten\"\n", {}, ["max_turns", "whole number"]),
    ("", {"AGENTQUEUE_MAX_TURNS": "2.5"}, ["AGENTQUEUE_MAX_TURNS", "whole number"]),
    ("", {"AGENTQUEUE_PORT": "auto"}, ["AGENTQUEUE_PORT", "'auto'", "0 for any free port"]),
    ("[server]\nport = 70000\n", {}, ["[server] port", "70000"]),
    ("[cli]\nclaude = \"/no/such/claude\"\n", {}, ["[cli] claude", "/no/such/claude", "not an executable"]),
    ("", {"AGENTQUEUE_CODEX_BIN": "/no/codex"}, ["AGENTQUEUE_CODEX_BIN", "/no/codex"]),
    ("[engin]\nmax_turns = 3\n", {}, ["unknown section [engin]", "[engine]"]),
    ("[engine]\nmax_turn = 3\n", {}, ["unknown key(s) max_turn", "max_turns"]),
    ("[agent_env]\n\"BAD-NAME\" = \"x\"\n", {}, ["'BAD-NAME'", "not a valid environment variable name"]),
    ("[agent_env]\nFLAG = true\n", {}, ["[agent_env] FLAG", "string"]),
    ("[env]\npath = [\"relative/bin\"]\n", {}, ["[env] path", "absolute"]),
    ("[env]\npass = \"HOME\"\n", {}, ["[env] pass", "list"]),
    ("[engine\n", {}, ["not valid TOML"]),
])
def test_a_bad_value_is_refused_naming_the_key(tmp_path: Path, clean_env: None, text: str, environ: dict,
                                               needles: list[str]) -> None:
    write_config(tmp_path, text)
    with pytest.raises(settings.ConfigError) as refused:
        settings.load(tmp_path, environ={"PATH": "/usr/bin:/bin", **environ})
    message = str(refused.value)
    for needle in needles:
        assert needle in message, message
    assert "\n" not in message


def test_describe_redacts_secrets(tmp_path: Path, clean_env: None) -> None:
    write_config(tmp_path, "[agent_env]\nANTHROPIC_API_KEY = \"sk-secret-value-1234\"\nREGION = \"eu\"\n")
    rows = {r["key"]: r for r in settings.describe(settings.load(tmp_path))}
    assert "sk-secret" not in rows["agent_env.ANTHROPIC_API_KEY"]["value"]
    assert rows["agent_env.ANTHROPIC_API_KEY"]["value"].endswith("1234")
    assert rows["agent_env.REGION"]["value"] == "eu" and rows["engine.task_timeout"]["source"] == "default"


# -- the daemon refuses to start on a bad value, in one sentence -------------------------------------------------
@pytest.mark.integration
@pytest.mark.parametrize(("config", "environ", "needle"), [
    ("", {"AGENTQUEUE_TASK_TIMEOUT": "soon"}, "AGENTQUEUE_TASK_TIMEOUT = 'soon' is not a duration"),
    ("[engine]\nstall_seconds = \"forever\"\n", {}, "[engine] stall_seconds = 'forever'"),
    ("", {"AGENTQUEUE_PORT": "auto"}, "AGENTQUEUE_PORT = 'auto' is not a port"),
])
@pytest.mark.daemon
def test_serve_with_a_bad_setting_exits_at_once_with_the_sentence(tmp_path: Path, config: str, environ: dict,
                                                                   needle: str) -> None:
    home = tmp_path / "home"
    write_config(home, config)
    env = {**os.environ, "AGENTQUEUE_HOME": str(home), **environ}
    started = time.monotonic()
    done = subprocess.run([str(SCRIPT), "serve", "--no-http"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == paths.EXIT_CANNOT_START, done.stderr
    assert needle in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert time.monotonic() - started < 30


@pytest.mark.integration
def test_other_commands_survive_a_bad_port_variable(tmp_path: Path) -> None:
    """`AGENTQUEUE_PORT=auto` used to crash every command while its parser was being built."""
    env = {**os.environ, "AGENTQUEUE_HOME": str(tmp_path / "home"), "AGENTQUEUE_PORT": "auto"}
    done = subprocess.run([str(SCRIPT), "--version"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "agentqueue" in done.stdout, done.stderr


# -- agents get the configured environment --------------------------------------------------------------------
DUMP_ENV = shlex.join([sys.executable, "-c", "import json, os, pathlib; "
                       "pathlib.Path('agent-env.json').write_text(json.dumps(dict(os.environ)))"])


@pytest.mark.anyio
async def test_an_agent_runs_with_the_configured_environment(home: Path, git_env: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    extra = home.parent / "extra-bin"
    extra.mkdir(parents=True)
    write_config(home, f"""
[env]
path = ["{extra}"]
pass = ["KEEP_ME"]

[agent_env]
FROM_CONFIG = "yes"
""")
    monkeypatch.setenv("KEEP_ME", "kept")
    monkeypatch.setenv("DROP_ME", "dropped")
    services = Services(home)
    try:
        services.projects.create("Env")
        services.repos.add("env", "init", name="envrepo")
        services.agents.create("dumper", "command", command=DUMP_ENV)
        task = services.tasks.create("env", "Dump the environment", "write agent-env.json")
        await run_until_final(services, make_engine(services), task.id)
        assert services.tasks.get(task.id).status == "COMPLETED"
        repo = services.repos.get("envrepo").checkout_path
        seen = json.loads(git(repo, "show", "main:agent-env.json"))
    finally:
        services.close()
    assert seen["FROM_CONFIG"] == "yes" and seen["KEEP_ME"] == "kept"
    assert "DROP_ME" not in seen
    assert seen["PATH"].split(os.pathsep)[0] == str(extra)
    assert seen["HOME"] == os.environ["HOME"]


# -- create_agent refuses a CLI that isn't there ---------------------------------------------------------------
@pytest.mark.anyio
@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_create_agent_refuses_a_cli_that_is_not_installed(client, services: Services, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    for name, _ in settings.CLI_KEYS.values():
        monkeypatch.delenv(name, raising=False)
    before = db_snapshot(services)
    for agent_type, hint in (("claude-code", "@anthropic-ai/claude-code"), ("codex", "@openai/codex"),
                             ("gemini", "@google/gemini-cli")):
        text = await fail(client, "create_agent", name=f"a-{agent_type}", agent_type=agent_type)
        assert hint in text and "[cli]" in text and "config.toml" in text, text
    assert db_snapshot(services) == before
    # With the CLI where the config says, it is accepted.
    cli = executable(tmp_path / "somewhere" / "codex")
    monkeypatch.setenv("AGENTQUEUE_CODEX_BIN", str(cli))
    result = await client.call_tool("create_agent", {"name": "cx", "agent_type": "codex"})
    assert not result.is_error, result.content[0].text
    assert stat.S_IMODE(cli.stat().st_mode) & 0o111


def test_the_documented_example_config_is_valid(tmp_path: Path, clean_env: None) -> None:
    example = Path(__file__).resolve().parent.parent / "docs" / "config.example.toml"
    write_config(tmp_path, example.read_text())
    assert settings.load(tmp_path).engine["task_timeout"] == 3600


@pytest.mark.anyio
async def test_a_hook_llm_run_gets_the_same_environment(home: Path, git_env: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from agentqueue.engine.hook_runner import HookRunner

    write_config(home, '[env]\npass = ["KEEP_ME"]\n\n[agent_env]\nFROM_CONFIG = "yes"\n')
    monkeypatch.setenv("KEEP_ME", "kept")
    monkeypatch.setenv("DROP_ME", "dropped")
    services = Services(home)
    try:
        project = services.projects.create("Hooked")
        hook = services.hooks.create("hooked", "Env", {"type": "periodic", "interval_seconds": 3600}, action="llm",
                                     prompt_template="print your environment",
                                     llm_config={"agent_type": "command", "command": DUMP_ENV})
        _, status = await HookRunner(services, services.home, listen=False).fire(hook.id)
        assert status == "completed", services.hooks.runs(hook.id, 1)
        seen = json.loads((Path(project.workspace) / "agent-env.json").read_text())
    finally:
        services.close()
    assert seen["FROM_CONFIG"] == "yes" and seen["KEEP_ME"] == "kept" and "DROP_ME" not in seen


@pytest.mark.integration
@pytest.mark.slow
def test_a_standalone_server_with_a_bad_setting_says_so_on_stderr(tmp_path: Path) -> None:
    env = {**os.environ, "AGENTQUEUE_HOME": str(tmp_path / "home"), "AGENTQUEUE_STALL_SECONDS": "never"}
    done = subprocess.run([str(SCRIPT), "mcp", "--standalone"], env=env, input="", capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == paths.EXIT_CANNOT_START and done.stdout == ""
    assert "AGENTQUEUE_STALL_SECONDS = 'never'" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_team_settings_come_from_the_file_or_the_environment(tmp_path: Path, clean_env: None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(tmp_path, '[team]\ndatabase_url = "postgresql://aq:pw@db:5432/q"\nlabels = ["gpu"]\n'
                           'lease_seconds = "1m"\n')
    loaded = settings.load(tmp_path)
    assert (loaded.database_url, loaded.labels, loaded.lease_seconds) == ("postgresql://aq:pw@db:5432/q", ["gpu"], 60)
    shown = {row["key"]: row["value"] for row in settings.describe(loaded)}
    assert shown["team.database_url"] == "postgresql://aq:••••@db:5432/q", "the password is never shown"
    monkeypatch.setenv("AGENTQUEUE_LABELS", "a, b")
    assert settings.load(tmp_path).labels == ["a", "b"]


@pytest.mark.parametrize("text, says", [
    ('[team]\ndatabase_url = "mysql://x"\n', "is not a PostgreSQL URL"),
    ('[team]\nlabels = ["no spaces allowed"]\n', "is not a list of labels"),
    ('[team]\nlease_seconds = 0\n', "too small"),
])
def test_bad_team_settings_are_refused_saying_what_to_give(tmp_path: Path, clean_env: None, text: str,
                                                            says: str) -> None:
    write_config(tmp_path, text)
    with pytest.raises(settings.ConfigError, match=says):
        settings.load(tmp_path)


def test_an_unreachable_team_database_is_one_sentence_with_the_fix(tmp_path: Path) -> None:
    from agentqueue.store.db import StoreOpenError, open_store

    with pytest.raises(StoreOpenError) as refused:
        open_store(tmp_path / "aq.db", "postgresql://aq:secret@127.0.0.1:9/queue")
    message = str(refused.value)
    assert "AGENTQUEUE_DATABASE_URL" in message and "secret" not in message and "127.0.0.1:9" in message
    assert not (tmp_path / "aq.db").exists(), "no SQLite file is made instead"
