"""`agentqueue install --skill`: the skill that teaches agents `agentqueue task …`, added by a person to a repository
or to their own skills (issue 24), and the `task` commands covering the whole `agent` toolset.

Real git repositories and the real command (in this process with `cli.run`, or as the process an agent starts);
the daemon-backed commands themselves are driven by a real agent in test_agent_cli.py.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agentqueue import cli
from agentqueue.cli.commands.task import TOOLS
from agentqueue.server.toolsets import NAMED_TOOLSETS

SKILL_FILES = (".claude/skills/agentqueue/SKILL.md", ".agents/skills/agentqueue/SKILL.md")


def agentqueue(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.run(list(argv), out, err, width=200)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "src").mkdir()
    return path


def front_matter(text: str) -> dict[str, str]:
    """The YAML front matter's `key: value` lines (the skill keeps to plain one-line values)."""
    match = re.match(r"---\n(.*?)\n---\n", text, re.S)
    assert match, "SKILL.md opens with YAML front matter"
    return dict(line.split(": ", 1) for line in match[1].splitlines())


def test_the_skill_is_added_to_a_repository_for_claude_and_codex_and_taken_out_again(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTQUEUE_TASK_ID", raising=False)
    monkeypatch.chdir(repo / "src")  # the default is the current folder's repository, from anywhere in it
    code, said, _ = agentqueue("install", "--skill", "--dry-run")
    assert code == 0 and "Would add" in said and not (repo / ".claude").exists()
    code, said, _ = agentqueue("install", "--skill")
    assert code == 0 and said.count("Added the AgentQueue skill") == 2 and "Commit them" in said
    for rel in SKILL_FILES:
        text = (repo / rel).read_text()
        meta = front_matter(text)
        assert meta["name"] == "agentqueue" and "agentqueue task" in meta["description"]
        assert len(meta["description"]) <= 1024  # the agent-skills standard's limit
        for action in TOOLS:  # it teaches every action the command has
            assert f"agentqueue task {action}" in text, action
    assert agentqueue("install", "--skill", "--repo", str(repo))[1].count("Unchanged") == 2
    code, said, _ = agentqueue("install", "--skill", "--repo", str(repo), "--remove")
    assert code == 0 and said.count("Removed") == 2
    assert not any((repo / rel).exists() for rel in SKILL_FILES)


def test_the_skill_goes_to_the_persons_own_skills_with_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTQUEUE_TASK_ID", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    code, said, err = agentqueue("install", "--skill", "--user")
    assert code == 0, err
    assert all((tmp_path / "me" / rel).is_file() for rel in SKILL_FILES) and "Commit" not in said


@pytest.mark.parametrize(("argv", "words"), [
    (["install"], "name a client"),
    (["install", "claude-code", "--skill"], "separately"),
    (["install", "--user"], "go with --skill"),
    (["install", "--skill", "--repo", "/nonexistent/folder"], "is not a folder"),
])
def test_a_wrong_install_says_what_to_do_and_writes_nothing(argv: list[str], words: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTQUEUE_TASK_ID", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    code, said, err = agentqueue(*argv)
    assert code != 0 and words in err and said == ""
    assert list(tmp_path.iterdir()) == []


def test_outside_a_repository_the_skill_needs_repo_or_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTQUEUE_TASK_ID", raising=False)
    monkeypatch.chdir(tmp_path)
    code, _, err = agentqueue("install", "--skill")
    assert code == 1 and "--repo PATH" in err and "--user" in err
    assert list(tmp_path.iterdir()) == []


def test_an_agent_run_is_refused_the_install(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A person's choice only: the engine sets AGENTQUEUE_TASK_ID in every run (the walls hold regardless: the
    sandbox and the protected paths, see test_sandbox.py and test_protected_paths.py)."""
    monkeypatch.setenv("AGENTQUEUE_TASK_ID", "swift-falcon")
    code, _, err = agentqueue("install", "--skill", "--repo", str(repo))
    assert code == 1 and "installed by a person" in err
    assert not (repo / ".claude").exists() and not (repo / ".agents").exists()


def test_every_agent_tool_has_a_task_command() -> None:
    covered = {tool for tools in TOOLS.values() for tool in tools}
    assert set(NAMED_TOOLSETS["agent"]) <= covered, set(NAMED_TOOLSETS["agent"]) - covered
    code, said, _ = agentqueue("task", "--help")
    assert code == 0 and all(action in said for action in TOOLS)


@pytest.mark.integration
def test_a_refusal_is_one_sentence_and_no_daemon_is_started_for_a_run(tmp_path: Path) -> None:
    """Inside a run AGENTQUEUE_NO_START is set: with no daemon the command says so and starts none."""
    env = {**os.environ, "AGENTQUEUE_HOME": str(tmp_path / "aq"), "AGENTQUEUE_NO_START": "1"}
    agentqueue_bin = str(Path(sys.executable).parent / "agentqueue")
    done = subprocess.run([agentqueue_bin, "task", "create", "T", "-d", "x"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("agentqueue task: ") and "AGENTQUEUE_NO_START" in done.stderr, done.stderr
    assert not (tmp_path / "aq" / "daemon.json").exists()


@pytest.mark.parametrize("planted", [".claude/skills", ".agents/skills/agentqueue",
                                     ".claude/skills/agentqueue/SKILL.md"])
def test_a_link_the_repository_carries_is_never_written_through(repo: Path, tmp_path: Path, planted: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A hostile repository commits `.claude/skills -> ~/…` (or links SKILL.md itself to ~/.bashrc): installing the
    skill there must not write, or remove, anything outside it."""
    monkeypatch.delenv("AGENTQUEUE_TASK_ID", raising=False)
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "bashrc"
    victim.write_text("mine\n")
    link = repo / planted
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim if planted.endswith(".md") else outside)
    for extra in ([], ["--remove"]):
        code, said, err = agentqueue("install", "--skill", "--repo", str(repo), *extra)
        assert code == 1 and "symbolic link" in err and "Nothing was changed" in err, (said, err)
    assert sorted(p.name for p in outside.iterdir()) == ["bashrc"] and victim.read_text() == "mine\n"
