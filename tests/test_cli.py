"""The human CLI without a daemon: install (the command it writes, merging, JSONC, modes, --remove, the
claude CLI, [cli] paths), help, the plugin's imports, and `status` at 80 columns.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

from agentqueue import paths, settings
from agentqueue.cli.parser import build_parser
from agentqueue.cli.client_configs import CLIENTS, config_path, install, read_config, server_entry
from agentqueue.services import Services

from .cli_helpers import HEAVY_FOR_A_LAUNCH, cli_env, cli_in_process
from .processes import Terminal
from .third_party import npm_bin

CLAUDE = npm_bin("claude")


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scratch HOME, and no `claude` on PATH (so Claude Code's config is edited as a file)."""
    home = tmp_path / "user"
    home.mkdir()
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PATH", f"{empty}:/usr/bin:/bin")
    for name in ("XDG_CONFIG_HOME", "AGENTQUEUE_CLAUDE_BIN"):
        monkeypatch.delenv(name, raising=False)
    return home


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# -- install ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("client", CLIENTS)
def test_install_writes_an_entry_and_keeps_other_servers(user_home: Path, tmp_path: Path, client: str) -> None:
    path = config_path(client)
    assert str(path).startswith(str(user_home))
    key = "servers" if client == "vscode" else "mcpServers"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({key: {"other": {"command": "x"}}, "theme": "dark"}))
    aq_home = tmp_path / "aq"
    _, preview = install(client, aq_home, dry_run=True)
    assert "Would write" in preview and json.loads(path.read_text())[key] == {"other": {"command": "x"}}
    _, message = install(client, aq_home)
    config = json.loads(path.read_text())
    entry = config[key]["agentqueue"]
    assert config[key]["other"] == {"command": "x"} and config["theme"] == "dark"
    assert entry["args"][-1] == "mcp" and Path(entry["command"]).is_absolute()
    assert entry["env"] == {"AGENTQUEUE_HOME": str(aq_home)}
    assert (entry.get("type") == "stdio") == (client in ("claude-code", "vscode"))
    backups = list(path.parent.glob(path.name + ".bak-*"))
    assert len(backups) == 1 and "previous file saved" in message
    assert "nothing to do" in install(client, aq_home)[1]

    _, removed = install(client, aq_home, remove=True)
    config = json.loads(path.read_text())
    assert "Removed AgentQueue" in removed and config[key] == {"other": {"command": "x"}} and config["theme"] == "dark"
    assert "nothing to do" in install(client, aq_home, remove=True)[1]


def test_the_entry_runs_this_installs_script_even_when_sys_executable_is_a_venv_symlink(tmp_path: Path) -> None:
    """Defect 1: a venv's python is a symlink to the base interpreter; resolving it lost our packages."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    assert python.is_symlink()  # what `Path(sys.executable).resolve()` used to follow out of the venv
    # Make our package importable in the new venv (as `pip install` would) and give it pip's console script.
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    ours = sysconfig.get_path("purelib")
    (site / "agentqueue-test.pth").write_text(f"import site; site.addsitedir({ours!r})\n")
    script = venv / "bin" / "agentqueue"
    script.write_text(f"#!{python}\nimport sys\nfrom agentqueue.cli import main\nif __name__ == '__main__':\n"
                      "    sys.exit(main())\n")
    script.chmod(0o755)
    user = tmp_path / "user"
    minimal = {"PATH": "/usr/bin:/bin", "HOME": str(user), "AGENTQUEUE_HOME": str(tmp_path / "aq")}
    user.mkdir()

    # `~/.agentqueue-venv/bin/agentqueue install` with the venv not on PATH, from another directory.
    done = subprocess.run([str(script), "install", "claude-desktop"], env=minimal, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    entry = read_config("claude-desktop", user / ".config" / "Claude" / "claude_desktop_config.json").entry
    assert entry is not None and entry["command"] == str(script) and entry["args"] == ["mcp"]
    runs = subprocess.run([entry["command"], "--version"], env={"PATH": "/usr/bin:/bin"}, cwd="/",
                          capture_output=True, text=True, timeout=60)
    assert runs.returncode == 0 and runs.stdout.startswith("agentqueue"), runs.stderr

    # No script beside the interpreter: the venv's python itself (unresolved), isolated from the cwd.
    script.unlink()
    done = subprocess.run([str(python), "-c", "import json, pathlib; "
                           "from agentqueue.cli.client_configs import server_entry; "
                           "print(json.dumps(server_entry('cursor', pathlib.Path('/x'))))"],
                          env=minimal, capture_output=True, text=True, timeout=60)
    fallback = json.loads(done.stdout)
    assert fallback["command"] == str(python) and fallback["args"] == ["-P", "-m", "agentqueue", "mcp"]
    runs = subprocess.run([fallback["command"], *fallback["args"][:-1], "--version"], env={"PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=60)
    assert runs.returncode == 0 and runs.stdout.startswith("agentqueue"), runs.stderr


def test_server_entry_never_resolves_symlinks(tmp_path: Path) -> None:
    entry = server_entry("claude-code", tmp_path)
    expected = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "agentqueue")
    assert entry["command"] == expected and entry["args"] == ["mcp"]  # this venv's own script, as written


def test_jsonc_configs_are_read_and_the_dropped_comments_are_said(user_home: Path, tmp_path: Path) -> None:
    path = config_path("vscode")
    path.parent.mkdir(parents=True)
    original = ('{\n  // my servers\n  "servers": {\n    "other": {"command": "x", "args": ["a // b", "/* c */"],},\n'
                '  },\n  /* block */ "inputs": [1, 2,],\n}\n')
    path.write_text(original)
    _, message = install("vscode", tmp_path / "aq")
    written = json.loads(path.read_text())
    assert written["servers"]["other"] == {"command": "x", "args": ["a // b", "/* c */"]}  # strings untouched
    assert written["inputs"] == [1, 2] and "agentqueue" in written["servers"]
    assert "comments" in message and "backup keeps the original" in message
    backup = next(path.parent.glob("mcp.json.bak-*"))
    assert backup.read_text() == original
    # Clients that do not accept comments are not read as if they did.
    desktop = config_path("claude-desktop")
    desktop.parent.mkdir(parents=True)
    desktop.write_text('{"mcpServers": {}, // no\n}')
    with pytest.raises(SystemExit, match="not valid JSON"):
        install("claude-desktop", tmp_path / "aq")
    assert desktop.read_text() == '{"mcpServers": {}, // no\n}'


def test_install_refuses_a_broken_config(user_home: Path, tmp_path: Path) -> None:
    path = config_path("cursor")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(SystemExit, match="not valid JSON"):
        install("cursor", tmp_path / "aq")
    assert path.read_text() == "{not json"


def test_a_private_claude_json_stays_private_and_so_do_its_backups(user_home: Path, tmp_path: Path) -> None:
    path = config_path("claude-code")
    path.write_text(json.dumps({"oauthAccount": {"secret": "s"}}))
    path.chmod(0o600)
    install("claude-code", tmp_path / "aq")
    install("claude-code", tmp_path / "aq", remove=True)
    assert mode(path) == 0o600
    backups = list(user_home.glob(".claude.json.bak-*"))
    assert len(backups) == 2 and all(mode(b) == 0o600 for b in backups)
    assert json.loads(path.read_text())["oauthAccount"] == {"secret": "s"}
    # A dotfiles symlink stays a symlink; its target is what changes.
    real = tmp_path / "dotfiles" / "claude.json"
    real.parent.mkdir()
    path.rename(real)
    path.symlink_to(real)
    install("claude-code", tmp_path / "aq")
    assert path.is_symlink() and mode(real) == 0o600 and "agentqueue" in json.loads(real.read_text())["mcpServers"]


@pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")
@pytest.mark.real_cli
def test_claude_code_is_configured_with_claude_mcp_add_json(tmp_path: Path) -> None:
    user = tmp_path / "user"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "claude").symlink_to(CLAUDE)
    env = cli_env(tmp_path / "aq", user, PATH=f"{bin_dir}:/usr/bin:/bin", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1")
    (user / ".claude.json").write_text("{}")
    (user / ".claude.json").chmod(0o600)
    done = cli_in_process(env, "install", "claude-code")
    assert done.returncode == 0, done.stderr
    assert "claude mcp add-json -s user" in done.stdout
    config = json.loads((user / ".claude.json").read_text())
    assert config["mcpServers"]["agentqueue"]["env"] == {"AGENTQUEUE_HOME": str(tmp_path / "aq")}
    assert mode(user / ".claude.json") == 0o600
    assert f'claude = "{bin_dir / "claude"}"' in (tmp_path / "aq" / "config.toml").read_text()
    removed = cli_in_process(env, "install", "claude-code", "--remove")
    assert removed.returncode == 0 and "claude mcp remove -s user" in removed.stdout, removed.stderr
    assert "agentqueue" not in json.loads((user / ".claude.json").read_text()).get("mcpServers", {})


def test_install_records_the_cli_paths_the_terminal_finds(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("claude", "gh", "my-gh"):
        (bin_dir / name).write_text("#!/bin/sh\necho 1.0\n")
        (bin_dir / name).chmod(0o755)
    home = tmp_path / "aq"
    home.mkdir()
    config = home / "config.toml"
    config.write_text('# mine\n[engine]\ntask_timeout = "2h"\n\n[cli]  # pinned by hand\n'
                      f'gh = "{bin_dir / "my-gh"}"\n\n[agent_env]\nFOO = "bar"\n')
    config.chmod(0o644)  # written by hand with the usual umask, an [agent_env] key in it
    env = cli_env(home, tmp_path / "user", PATH=f"{bin_dir}:/usr/bin:/bin")
    doctor = cli_in_process(env, "doctor", width=400)  # a long temporary path wraps anywhere at 80 columns
    assert f"{config} holds keys and others may read it (mode 644)" in doctor.stdout
    assert f"chmod 600 {config}" in doctor.stdout
    preview = cli_in_process(env, "install", "cursor", "--dry-run")
    assert "Would record" in preview.stdout and "task_timeout" in config.read_text()
    assert "claude = " not in config.read_text()
    done = cli_in_process(env, "install", "cursor")
    assert done.returncode == 0, done.stderr
    assert f"claude = {bin_dir / 'claude'}" in done.stdout and "gh = " not in done.stdout.split("Recorded")[1]
    data = tomllib.loads(config.read_text())
    assert data["cli"] == {"gh": str(bin_dir / "my-gh"), "claude": str(bin_dir / "claude")}  # the user's gh kept
    assert data["engine"] == {"task_timeout": "2h"} and data["agent_env"] == {"FOO": "bar"}
    assert config.read_text().startswith("# mine\n")
    assert mode(config) == 0o600  # rewritten: the owner's bits only (issue 23: files that hold keys are 0600)
    assert "holds keys" not in cli_in_process(env, "doctor", width=400).stdout
    loaded = settings.load(home, environ={"PATH": "/usr/bin:/bin"})  # what a GUI-started daemon sees
    assert loaded.find("claude", environ={"PATH": "/usr/bin:/bin"}) == str(bin_dir / "claude")
    again = cli_in_process(env, "install", "cursor", "--remove")
    assert again.returncode == 0 and "Recorded" not in again.stdout


# -- help and the plugin path -------------------------------------------------------------------------
def test_bare_agentqueue_prints_help_and_every_command_is_described() -> None:
    done = cli_in_process({**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0 and done.stderr == ""
    assert "commands:" in done.stdout and "agentqueue install claude-code" in done.stdout
    assert all(len(line) <= 80 for line in done.stdout.splitlines())
    subcommands = next(a for a in build_parser()._actions if a.nargs == "A...")
    for name, command in subcommands.choices.items():
        assert name in done.stdout and command.description and len(command.description) > 20, name
    for read in ("status", "tasks", "show", "logs", "diff", "usage", "doctor"):
        assert "--json" in subcommands.choices[read].format_help(), read


def test_the_plugin_path_imports_nothing_heavy() -> None:
    probe = ("import sys; started = set(sys.modules); import re; from agentqueue import cli, paths; "
             "from agentqueue.daemon import relay; "
             "cli.mcp_flags(['--read-only', '--toolsets', 'tasks,notes']); paths.socket_file(paths.home_dir()); "
             "print(sorted({m for n in set(sys.modules) - started for m in (n, n.split('.')[0])} & "
             f"{HEAVY_FOR_A_LAUNCH!r}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_stop_imports_nothing_of_the_server(tmp_path: Path) -> None:
    """`agentqueue stop` sends one signal: it must not load the daemon's server (seconds of imports) to do it."""
    probe = ("import io, sys; started = set(sys.modules); from agentqueue import cli; "
             "code = cli.run(['stop'], io.StringIO(), io.StringIO()); "
             "print(code, sorted({m.split('.')[0] for m in set(sys.modules) - started} & "
             "{'mcp', 'anyio', 'uvicorn', 'starlette', 'pydantic', 'sqlite_utils', 'git'}))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "AGENTQUEUE_HOME": str(tmp_path / "aq")})
    assert done.stdout.strip() == "1 []", done.stdout + done.stderr  # 1: no daemon runs for this home


def test_mcp_reads_its_own_flags_and_leaves_anything_else_to_argparse() -> None:
    from agentqueue.cli import mcp_flags

    assert mcp_flags([]) == (False, {})
    assert mcp_flags(["--read-only", "--toolsets", "tasks,notes"]) == (
        False, {"read_only": True, "toolsets": ["tasks", "notes"]})
    assert mcp_flags(["--toolsets=git", "--standalone"]) == (True, {"toolsets": ["git"]})
    for unusual in (["--help"], ["--toolsets"], ["--toolsets", "nope"], ["--read"], ["extra"]):
        assert mcp_flags(unusual) is None, unusual
    # ... which words the error as before: a bad toolset is refused before anything starts.
    done = cli_in_process(dict(os.environ), "mcp", "--toolsets", "nope")
    assert done.returncode == 2 and "unknown toolset(s) nope" in done.stderr and done.stdout == ""


# -- status without a daemon ------------------------------------------------------------------------------
def seed_every_state(home: Path) -> dict[str, str]:
    """Two projects and one task in each of the 11 states; returns {status: task id}."""
    services = Services(home)
    services.projects.create("Alpha")
    services.projects.create("A project with a rather long name")
    ids = {}
    for n, status in enumerate(all_states()):
        project = "alpha" if n % 2 else "a-project-with-a-rather-long-name"
        task = services.tasks.create(project, f"Task in {status} with a long title that must not break the table",
                                     "d")
        services.tasks.set_status(task.id, status)
        ids[status] = task.id
    services.close()
    return ids


def all_states() -> list[str]:
    from agentqueue.store.models import TaskStatus

    return [s.value for s in TaskStatus]


def test_status_at_80_columns_shows_every_state_and_no_running_orchestrator_without_a_daemon(tmp_path: Path) -> None:
    home = tmp_path / "aq"
    seed_every_state(home)
    paths.daemon_info_path(home).write_text(json.dumps({"pid": 999999, "socket": "/nowhere"}))  # left by a crash
    env = cli_env(home, tmp_path / "user")
    done = cli_in_process(env, "status")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), [line for line in lines if len(line) > 80]
    header = next(line for line in lines if line.startswith("project"))
    assert header.split() == ["project", "state", "tasks"]
    for state in all_states():
        assert state in done.stdout, state
    flat = " ".join(done.stdout.split())
    assert "daemon not running (the orchestrator setting is 'running': tasks start when the daemon starts; " \
           "`agentqueue serve`)" in flat and "without cleaning up" in flat
    assert "orchestrator running" not in flat
    # ASSIGNED, IN_PROGRESS, WAITING_INPUT, VERIFYING: recovery requeues every claimed task, a waiting one too.
    assert "4 task(s) were running when the daemon stopped" in flat
    data = json.loads(cli_in_process(env, "status", "--json").stdout)
    assert data["daemon"] == {"running": False, "crashed": True}
    assert data["tasks"]["by_status"] == {s: 1 for s in all_states()}
    assert {r["status"] for r in data["running"]} == {"ASSIGNED", "IN_PROGRESS", "VERIFYING"}


def test_status_says_when_a_client_uses_another_home(tmp_path: Path) -> None:
    home = tmp_path / "aq"
    Services(home).close()
    user = tmp_path / "user"
    desktop = user / ".config" / "Claude" / "claude_desktop_config.json"
    desktop.parent.mkdir(parents=True)
    desktop.write_text(json.dumps({"mcpServers": {"agentqueue": {"command": "/x", "args": ["mcp"],
                                                                   "env": {"AGENTQUEUE_HOME": str(tmp_path / "b")}}}}))
    done = cli_in_process(cli_env(home, user), "status")
    said = f"claude-desktop ({desktop}) uses AGENTQUEUE_HOME={tmp_path / 'b'}, not {home}"
    assert "".join(said.split()) in "".join(done.stdout.split())  # long paths may be folded at 80 columns


@pytest.mark.slow
def test_reads_refuse_in_one_sentence(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "aq", tmp_path / "user")
    empty = cli_in_process(env, "tasks")
    assert empty.returncode == 1 and "No AgentQueue data" in empty.stderr
    assert not paths.db_path(tmp_path / "aq").exists()  # a read never creates a store
    Services(tmp_path / "aq").close()
    for args in (["show", "nope"], ["logs", "nope"], ["diff", "nope"], ["tasks", "--status", "DONE"],
                 ["usage", "--since", "0"]):
        done = cli_in_process(env, *args)
        assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
        assert "Traceback" not in done.stderr


def _ctrl_c_on_a_tty(env: dict[str, str], wait_for: bytes, *args: str) -> tuple[int, str]:
    """Run the CLI on a pseudo-terminal, wait until it shows `wait_for`, press Ctrl-C (SIGINT)."""
    import signal

    with Terminal([sys.executable, "-m", "agentqueue", *args], env, foreground=True) as term:
        assert term.read_until(wait_for), term.text
        term.process.send_signal(signal.SIGINT)
        code = term.process.wait(timeout=30)
        term.drain()
    return code, term.text


def test_status_watch_and_logs_follow_end_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    home = tmp_path / "aq"
    services = Services(home)
    services.projects.create("Alpha")
    task = services.tasks.create("alpha", "Waits", "no agent will run it")
    services.close()
    env = cli_env(home, tmp_path / "user")
    code, shown = _ctrl_c_on_a_tty(env, b"READY", "status", "--watch")
    assert code == 0 and "Traceback" not in shown and "KeyboardInterrupt" not in shown
    code, shown = _ctrl_c_on_a_tty(env, b"Waiting for", "logs", task.id, "-f")
    assert code == 0 and "Traceback" not in shown and "KeyboardInterrupt" not in shown


def test_show_gives_a_held_tasks_reason_and_next_step(tmp_path: Path) -> None:
    home = tmp_path / "aq"
    ids = seed_every_state(home)
    env = cli_env(home, tmp_path / "user")
    shown = cli_in_process(env, "show", ids["BLOCKED"])
    assert shown.returncode == 0, shown.stderr
    flat = " ".join(shown.stdout.split())
    assert "reason Set to BLOCKED with set_task_status" in flat
    # The terminal names its own command; the stored next step (for a model, --json) names the tool (issue 23).
    assert f"next step `agentqueue restart {ids['BLOCKED']}`" in flat and "restart_task" not in flat
    data = json.loads(cli_in_process(env, "show", ids["BLOCKED"], "--json").stdout)
    assert data["task"]["status"] == "BLOCKED" and data["reason"] == data["task"]["reason"]
    assert data["next_step"].startswith("restart_task") and data["attempts"] == 0 and data["result"] is None
