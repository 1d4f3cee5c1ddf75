"""The human CLI: `agentqueue install <client>` merges configs safely; `agentqueue status` reads the store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentqueue.install import CLIENTS, config_path, install
from agentqueue.services import Services


@pytest.fixture
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "user"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    return home


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


def test_install_refuses_a_broken_config(user_home: Path, tmp_path: Path) -> None:
    path = config_path("cursor")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(SystemExit, match="not valid JSON"):
        install("cursor", tmp_path / "aq")
    assert path.read_text() == "{not json"


def test_status_command_shows_projects_and_warnings(tmp_path: Path) -> None:
    home = tmp_path / "aq"
    services = Services(home)
    services.projects.create("Shown")
    services.tasks.create("shown", "Waiting", "no agent can run this")
    services.close()
    done = subprocess.run([sys.executable, "-m", "agentqueue", "status"], capture_output=True, text=True,
                          env={**os.environ, "AGENTQUEUE_HOME": str(home), "COLUMNS": "200"}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "shown" in done.stdout and "daemon not running" in done.stdout
    assert "READY task(s) have no agent" in done.stdout
