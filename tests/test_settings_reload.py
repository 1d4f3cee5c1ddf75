"""Settings reload (issue 22): edits of config.toml and policy.toml reach new runs without a restart, a bad edit
keeps what the daemon had and `doctor` says so, a key that needs a restart says so, and no value is ever logged.

The first tests drive `settings_reload.Reloader` on a real home (the same object the daemon holds); the `daemon`
ones start a real `agentqueue serve` with a command agent that prints its environment, and run the real doctor.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import sys
import time
from pathlib import Path

import pytest

from agentqueue import paths, settings, settings_reload
from agentqueue.cli.doctor_checks import check_settings_applied

from .cli_helpers import LiveDaemon, cli_env, cli_in_process, run_cli, start_daemon, stop_daemon, wait_until

pytestmark = [pytest.mark.integration]
SECRET = "sk-ant-secret-value-0123456789"


def write(path: Path, text: str) -> None:
    """An edit as an editor makes it: new content, and a new mtime even within the same clock tick."""
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text(text)
    if path.stat().st_mtime_ns <= before:
        os.utime(path, ns=(before + 1_000_000, before + 1_000_000))


def reloader(home: Path) -> tuple[settings_reload.Reloader, settings.Settings, list[settings.Settings]]:
    live = settings.load(home)
    applied: list[settings.Settings] = []
    return settings_reload.Reloader(home, live, applied.append, every=1.0), live, applied


def test_an_edit_is_applied_in_place_and_announced_by_key_name_only(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    write(tmp_path / "config.toml", '[engine]\ntask_timeout = "1h"\n[agent_env]\nPROBE = "one"\n')
    watcher, live, applied = reloader(tmp_path)
    held_by_a_service = live  # every service holds this very object
    assert not watcher.check()  # nothing changed
    caplog.set_level(logging.INFO, logger="agentqueue.settings")
    write(tmp_path / "config.toml", f'[engine]\ntask_timeout = "2m"\n[agent_env]\nPROBE = "two"\n'
                                    f'ANTHROPIC_API_KEY = "{SECRET}"\n')
    assert watcher.check()
    assert held_by_a_service.engine["task_timeout"] == 120 and held_by_a_service.agent_env == {
        "PROBE": "two", "ANTHROPIC_API_KEY": SECRET}
    assert held_by_a_service.agent_environment()["PROBE"] == "two"
    assert applied and applied[-1] is live  # the engine is told (it rebuilds its tunables)
    said = caplog.text
    assert "config.toml changed: agent_env.ANTHROPIC_API_KEY, agent_env.PROBE, engine.task_timeout" in said
    published = settings_reload.status_path(tmp_path).read_text()
    for value in (SECRET, "two", "2m"):
        assert value not in said and value not in published
    assert settings_reload.status_path(tmp_path).stat().st_mode & 0o777 == 0o600
    status = json.loads(published)
    assert status["files"]["config.toml"]["applied"] == settings_reload.digest(tmp_path / "config.toml")
    assert status["restart_needed"] == [] and status["pid"] == os.getpid()


def test_a_bad_edit_keeps_the_old_settings_and_an_undo_clears_the_error(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    good = '[engine]\nmax_turns = 7\n[agent_env]\nPROBE = "one"\n'
    write(tmp_path / "config.toml", good)
    watcher, live, _ = reloader(tmp_path)
    caplog.set_level(logging.INFO, logger="agentqueue.settings")
    write(tmp_path / "config.toml", '[engine]\nmax_turns = "lots"\n[agent_env]\nPROBE = "two"\n')
    assert watcher.check()
    assert live.engine["max_turns"] == 7 and live.agent_env == {"PROBE": "one"}  # nothing of the bad edit
    assert "config.toml was not applied:" in caplog.text and "max_turns = 'lots' is not a whole number" in caplog.text
    status = settings_reload.read_status(tmp_path)
    assert status and "is not a whole number" in status["files"]["config.toml"]["error"]
    assert not watcher.check()  # refused once, said once
    write(tmp_path / "config.toml", good)  # undone
    assert watcher.check()
    assert settings_reload.read_status(tmp_path)["files"]["config.toml"]["error"] is None


def test_a_key_that_needs_a_restart_keeps_its_value_and_says_so(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    write(tmp_path / "config.toml", "[server]\nport = 8765\n")
    watcher, live, _ = reloader(tmp_path)
    caplog.set_level(logging.INFO, logger="agentqueue.settings")
    write(tmp_path / "config.toml", '[server]\nport = 9999\n[engine]\npoll_seconds = 2\n')
    watcher.check()
    assert live.port == 8765 and live.engine["poll_seconds"] == 2  # the rest of the edit applies
    assert "restart needed: server.port changed in config.toml" in caplog.text
    assert "agentqueue restart-daemon" in caplog.text
    assert settings_reload.read_status(tmp_path)["restart_needed"] == ["server.port"]
    write(tmp_path / "config.toml", '[server]\nport = 8765\n[engine]\npoll_seconds = 2\n')  # put back
    watcher.check()
    assert settings_reload.read_status(tmp_path)["restart_needed"] == []
    assert "server.port is back to the value the daemon runs with" in caplog.text


def test_a_variable_that_overrides_an_edited_key_is_named(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    live = settings.load(tmp_path, {"AGENTQUEUE_TASK_TIMEOUT": "30"})
    watcher = settings_reload.Reloader(tmp_path, live, environ={"AGENTQUEUE_TASK_TIMEOUT": "30"})
    caplog.set_level(logging.INFO, logger="agentqueue.settings")
    write(tmp_path / "config.toml", "[engine]\ntask_timeout = 99\n")
    watcher.check()
    assert live.engine["task_timeout"] == 30
    assert "engine.task_timeout, but AGENTQUEUE_TASK_TIMEOUT overrides it" in caplog.text


def test_a_broken_policy_edit_is_reported(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    watcher, _, _ = reloader(tmp_path)
    caplog.set_level(logging.INFO, logger="agentqueue.settings")
    write(tmp_path / "policy.toml", 'preset = "autonomous"\n')
    watcher.check()
    assert "policy.toml changed: preset" in caplog.text
    write(tmp_path / "policy.toml", 'preset = "yolo"\n')
    watcher.check()
    error = settings_reload.read_status(tmp_path)["files"]["policy.toml"]["error"]
    assert "not one of readonly, standard, autonomous" in error
    assert "policy.toml was not applied:" in caplog.text


def test_a_home_without_the_files_is_up_to_date(tmp_path: Path) -> None:
    watcher, _, _ = reloader(tmp_path)
    status = settings_reload.read_status(tmp_path)
    assert status["files"]["config.toml"]["applied"] == status["files"]["policy.toml"]["applied"] == "absent"
    assert not watcher.check()


def test_a_bad_reload_interval_is_one_sentence() -> None:
    assert settings_reload.reload_seconds({}) == 1.0
    assert settings_reload.reload_seconds({"AGENTQUEUE_RELOAD_SECONDS": "0"}) == 0
    with pytest.raises(settings.ConfigError, match="AGENTQUEUE_RELOAD_SECONDS = 'often' is not a duration"):
        settings_reload.reload_seconds({"AGENTQUEUE_RELOAD_SECONDS": "often"})


# -- a real daemon -----------------------------------------------------------------------------------------
# A command agent that prints what the run gave it, and sleeps when its prompt says SLEEP (a timeout's subject).
PROBE = ("import os, sys, time\nprompt = sys.stdin.read()\n"
         "print('PROBE=' + os.environ.get('RELOAD_PROBE', '-'), flush=True)\n"
         "time.sleep(30 if 'SLEEP' in prompt else 0)\n")
PROBE_COMMAND = shlex.join([sys.executable, "-c", PROBE])


def daemon(tmp_path: Path, config: str, **env: str) -> LiveDaemon:
    home = tmp_path / "aq"
    home.mkdir()
    (home / "config.toml").write_text(config)
    live = start_daemon(cli_env(home, tmp_path / "user", **env))
    live.call("create_project", name="Demo")
    live.call("add_repo", source="init", project_id="demo", name="app")
    live.call("create_agent", name="probe", agent_type="command", command=PROBE_COMMAND)
    wait_until(lambda: settings_reload.read_status(home), 30, "the daemon to publish its settings")
    return live


def run_task(live: LiveDaemon, description: str, *statuses: str) -> str:
    task = live.call("create_task", project_id="demo", title="probe", description=description, agent_type="command",
                     max_retries=0)
    wait_until(lambda: live.call("get_task", task_id=task["id"])["status"] in statuses, 90,
               f"task {task['id']} to reach {statuses}")
    return paths.task_log(live.home, task["id"]).read_text()


def applied(live: LiveDaemon) -> bool:
    status = settings_reload.read_status(live.home) or {}
    entry = status.get("files", {}).get("config.toml", {})
    return settings_reload.digest(live.home / "config.toml") in (entry.get("applied"), entry.get("error_digest"))


def doctor(live: LiveDaemon) -> tuple[int, dict[str, dict]]:
    done = cli_in_process(live.env, "doctor", "--json")
    return done.returncode, {c["name"]: c for c in json.loads(done.stdout)["checks"]}


def daemon_log(live: LiveDaemon) -> str:
    return (paths.logs_dir(live.home) / "agentqueue.log").read_text() + (live.home / "serve.out").read_text()


@pytest.mark.daemon
def test_an_edit_reaches_the_next_run_without_a_restart_and_no_secret_is_logged(tmp_path: Path) -> None:
    live = daemon(tmp_path, '[agent_env]\nRELOAD_PROBE = "probe-one"\n')
    try:
        assert "PROBE=probe-one" in run_task(live, "first", "COMPLETED")
        config = live.home / "config.toml"
        write(config, config.read_text().replace('"probe-one"', f'"probe-two"\nANTHROPIC_API_KEY = "{SECRET}"')
              + "\n[engine]\ntask_timeout = 2\n")
        wait_until(lambda: applied(live), 30, "the edit to be applied")
        assert "PROBE=probe-two" in run_task(live, "second", "COMPLETED")
        timed_out = run_task(live, "third SLEEP", "FAILED", "BLOCKED")  # the new [engine] task_timeout
        assert "PROBE=probe-two" in timed_out and "wall-clock timeout after 2 s" in timed_out
        assert live.process.poll() is None  # the same daemon all along
        logged = daemon_log(live)
        assert "config.toml changed: agent_env.ANTHROPIC_API_KEY, agent_env.RELOAD_PROBE, engine.task_timeout" \
            in logged
        published = settings_reload.status_path(live.home).read_text()
        for value in (SECRET, "probe-two"):
            assert value not in logged and value not in published
        code, checks = doctor(live)
        assert checks["settings applied"]["level"] == "ok", checks["settings applied"]
    finally:
        stop_daemon(live)


@pytest.mark.daemon
def test_a_bad_edit_keeps_the_old_values_and_doctor_fails_with_the_error(tmp_path: Path) -> None:
    live = daemon(tmp_path, '[agent_env]\nRELOAD_PROBE = "probe-one"\n')
    try:
        config = live.home / "config.toml"
        write(config, config.read_text().replace('"probe-one"', '"probe-two"') + '\n[engine]\nstall_seconds = "soon"\n')
        wait_until(lambda: applied(live), 30, "the edit to be refused")
        assert "PROBE=probe-one" in run_task(live, "still the old values", "COMPLETED")
        assert "config.toml was not applied:" in daemon_log(live)
        read = run_cli(live.env, "status")  # the terminal's reads say what to fix, and still answer
        assert read.returncode == 0 and "stall_seconds = 'soon'" in read.stderr and "Traceback" not in read.stderr
        code, checks = doctor(live)
        check = checks["config.toml applied"]
        assert code == 1 and check["level"] == "fail", check
        assert "stall_seconds = 'soon' is not a duration" in check["detail"]
        assert "agent_env.RELOAD_PROBE" in check["detail"] and "engine.stall_seconds" in check["detail"]
        assert "probe-two" not in json.dumps(check)
        assert f"Fix {config}" in check["fix"] and "keeps running with the settings it had" in check["fix"]
        # A key that needs a restart: the rest applies, doctor names the key and the command.
        write(config, config.read_text().replace('stall_seconds = "soon"', "stall_seconds = 60")
              + "\n[server]\nport = 1\n")
        wait_until(lambda: applied(live), 30, "the fixed edit to be applied")
        assert "PROBE=probe-two" in run_task(live, "now the new values", "COMPLETED")
        code, checks = doctor(live)
        assert "config.toml applied" not in checks
        restart = checks["restart needed"]
        assert code == 1 and restart["level"] == "fail" and "restart needed: server.port" in restart["detail"]
        assert "agentqueue restart-daemon" in restart["fix"]
        assert "restart needed: server.port" in daemon_log(live)
    finally:
        stop_daemon(live)


@pytest.mark.daemon
def test_doctor_fails_on_a_daemon_that_predates_an_edit_it_did_not_apply(tmp_path: Path) -> None:
    """The issue's case: [agent_env] edited under a running daemon that does not reload (turned off here, or a
    daemon from before settings reload, which publishes nothing)."""
    live = daemon(tmp_path, '[agent_env]\nRELOAD_PROBE = "probe-one"\n', AGENTQUEUE_RELOAD_SECONDS="0")
    try:
        code, checks = doctor(live)
        assert checks["settings applied"]["level"] == "ok"
        time.sleep(0.05)  # the edit comes after the daemon's start, by the clock too
        config = live.home / "config.toml"
        write(config, config.read_text().replace('"probe-one"', '"probe-two"'))
        code, checks = doctor(live)
        check = checks["config.toml applied"]
        assert code == 1 and check["level"] == "fail"
        assert "agent_env.RELOAD_PROBE" in check["detail"] and "does not reload" in check["detail"]
        assert "agentqueue restart-daemon" in check["fix"]
        assert "PROBE=probe-one" in run_task(live, "the daemon's old value", "COMPLETED")
        settings_reload.status_path(live.home).unlink()  # a daemon from before settings reload
        code, checks = doctor(live)
        check = checks["settings applied"]
        assert code == 1 and check["level"] == "fail" and "started before config.toml was last edited" in check[
            "detail"]
        assert "agentqueue restart-daemon" in check["fix"]
        assert check_settings_applied(live.home, None) == []  # no daemon, nothing to say
    finally:
        stop_daemon(live)
