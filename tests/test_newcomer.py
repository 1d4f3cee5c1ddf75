"""A newcomer's first hour, walked the way a person walks it (issue 8).

In a scratch HOME: the README's install command word for word (a fresh venv that is not on PATH),
`agentqueue install claude-code` from a terminal, the real `claude mcp list` from a project that
has its own `mcp_server/` folder and then under a GUI client's minimal environment, a linked repo
and a task created the way a model creates it (no repo_id) that the real `claude` CLI, pointed at a
loopback mock of the model API, lands in the repo's history; then `agentqueue doctor` on a machine
with the usual faults. Then a second day from the terminal (issue 23): a bad config value while the daemon
runs, a failed link and the task the model queued anyway, a task stopped and restarted, and an agent's question
answered with the command `agentqueue status` prints. Only the model is scripted.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from .git_fixtures import git, make_repo
from . import mock_anthropic
from .mock_anthropic import MockAnthropic
from .third_party import npm_bin
from .slowdown import scaled

ROOT = Path(__file__).resolve().parent.parent
CLAUDE = npm_bin("claude")
pytestmark = [pytest.mark.daemon, pytest.mark.real_cli, pytest.mark.integration,
              pytest.mark.skipif(CLAUDE is None, reason="claude CLI not installed (.ci/run installs it)")]


def readme_install_steps() -> list[str]:
    """The Quick start's install-and-start command, split at `&&`, exactly as the README prints it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = text.split("## Quick start", 1)[1]
    block = re.search(r"```bash\n(.*?)```", quick, re.S)
    assert block, "README's Quick start has no bash block"
    command = " ".join(line.rstrip("\\").strip() for line in block[1].strip().splitlines())
    assert "pip install ." in command and command.rstrip().endswith("agentqueue serve"), command
    return [step.strip() for step in command.split("&&")]


@pytest.fixture
def person(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A terminal on a fresh machine: its own HOME, the usual PATH, no AgentQueue yet."""
    user_home = tmp_path / "newcomer"
    user_home.mkdir()
    # AGENTQUEUE_PORT=0: a free HTTP port, so another AgentQueue on this machine can't take 8765 from us.
    env = {"HOME": str(user_home), "PATH": os.environ["PATH"], "LANG": "C.UTF-8", "AGENTQUEUE_PORT": "0",
           "GIT_CONFIG_NOSYSTEM": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1"}
    for key in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CERT", "SSL_CERT_FILE",
                "PIP_DEFAULT_TIMEOUT", "PIP_CONFIG_FILE", "PIP_CACHE_DIR", "PIP_NO_INDEX"):
        if key in os.environ:  # the machine's package mirror, not AgentQueue's business
            env[key] = os.environ[key]
    yield env
    script = user_home / ".agentqueue-venv" / "bin" / "agentqueue"
    if script.exists():
        subprocess.run([str(script), "stop", "--force"], env=env, capture_output=True, timeout=60)


def run(argv: list[str] | str, env: dict[str, str], cwd: Path | None = None, timeout: float = 120,
        check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          shell=isinstance(argv, str))
    if check:
        assert done.returncode == 0, f"{argv} → {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done


def mcp_list(env: dict[str, str], cwd: Path) -> str:
    listed = run([CLAUDE, "mcp", "list"], env, cwd=cwd, timeout=180)
    return listed.stdout + listed.stderr


async def wait_for_task(client: Client, task_id: str, timeout: float = 150) -> dict:
    with anyio.fail_after(scaled(timeout)):
        while True:
            task = (await client.call_tool("get_task", {"task_id": task_id})).structured_content
            if task["status"] in ("COMPLETED", "BLOCKED", "FAILED", "PAUSED"):
                return task
            await anyio.sleep(0.5)


def test_the_first_hour_as_a_newcomer_walks_it(person: dict[str, str], tmp_path: Path) -> None:
    user_home = Path(person["HOME"])
    # 1. The README's install-and-start command, word for word, in a terminal at the repo root.
    *install, serve = readme_install_steps()
    run(" && ".join(install), person, cwd=ROOT, timeout=900)
    script = user_home / ".agentqueue-venv" / "bin" / "agentqueue"
    assert script.exists()
    site = next((user_home / ".agentqueue-venv" / "lib").glob("python3*/site-packages"))
    assert (site / "agentqueue" / "tools").is_dir() and (site / "agentqueue" / "prompts").is_dir()
    assert not any((site / name).exists() for name in ("tools", "prompts", "mcp_server")), "generic top-level names"
    started = subprocess.Popen(shlex.split(serve.replace("~", str(user_home))), env=person, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    first_line = started.stdout.readline()
    assert "AgentQueue" in first_line and "is running" in first_line, first_line + started.stderr.read()
    run([str(script), "stop", "--force"], person)
    assert started.wait(timeout=30) == 0
    rest = started.stdout.read()
    assert "agentqueue install claude-code" in rest

    # 2. `install claude-code` from a terminal where `agentqueue` is not on PATH but `claude` is.
    terminal = {**person, "PATH": f"{Path(CLAUDE).parent}{os.pathsep}/usr/bin{os.pathsep}/bin"}
    said = run([str(script), "install", "claude-code"], terminal).stdout
    config = json.loads((user_home / ".claude.json").read_text())
    entry = config["mcpServers"]["agentqueue"]
    assert entry["command"] == str(script), entry  # the venv's own script, not a resolved base python
    assert "claude" in said

    # 3. The health check from a project with a top-level mcp_server/ folder, then under a GUI's bare env.
    project = tmp_path / "their-project"
    for name in ("mcp_server", "agentqueue", "tools", "prompts"):
        (project / name).mkdir(parents=True)
        (project / name / "__init__.py").write_text("raise SystemExit('shadowed')\n")
    assert "✔ Connected" in mcp_list(terminal, project)
    run([str(script), "stop", "--force"], person)
    gui = {"PATH": "/usr/bin:/bin", "HOME": str(user_home), "AGENTQUEUE_PORT": "0"}  # `env -i PATH=/usr/bin:/bin`
    assert "✔ Connected" in mcp_list(gui, project)

    # 4. Keys go in config.toml (the GUI-started daemon has none); a linked repo; a task without repo_id.
    aq_home = user_home / ".local" / "share" / "agentqueue"
    mock = MockAnthropic().start()
    try:
        with (aq_home / "config.toml").open("a") as conf:
            conf.write(f'\n[agent_env]\nANTHROPIC_API_KEY = "test-key"\nANTHROPIC_BASE_URL = "{mock.base_url}"\n'
                       'CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = "1"\nDISABLE_TELEMETRY = "1"\n')
        run([str(script), "stop", "--force"], person)  # the config is read at start
        repo = make_repo(user_home / "webapp")  # their code, in their home folder (outside it, linking asks)
        params = StdioServerParameters(command=str(script), args=["mcp"], env=gui, cwd=str(project))

        async def as_a_model_would() -> dict:
            async with Client(params, mode="legacy") as client:
                for tool, args in (("create_project", {"name": "Web App"}),
                                   ("add_repo", {"project_id": "web-app", "source": "link", "path": str(repo)}),
                                   ("set_active_project", {"project_id": "web-app"})):
                    result = await client.call_tool(tool, args)
                    assert not result.is_error, result.content[0].text
                created = await client.call_tool("create_task", {
                    "title": "Say hello", "description": "SCENARIO:write_file Create claude_hello.txt."})
                assert not created.is_error, created.content[0].text
                return await wait_for_task(client, created.structured_content["id"])

        task = anyio.run(as_a_model_would)
    finally:
        mock.stop()
    assert task["status"] == "COMPLETED", task
    assert task["repo_id"] == "webapp"
    assert git(repo, "show", "main:claude_hello.txt") == "hello from claude"
    assert "claude_hello.txt" in git(repo, "log", "--name-only", "--format=%s", "main")

    # 5. doctor on the usual faults: no git identity (a fresh HOME has none), a CLI the daemon can't find
    #    (config.toml without the path `install` recorded, and a GUI's PATH), a stopped daemon, a token
    #    file others can read. Each is reported with its fix; doctor changes nothing.
    run([str(script), "stop", "--force"], person)
    conf = aq_home / "config.toml"
    conf.write_text("\n".join(line for line in conf.read_text().splitlines() if not line.startswith("claude =")))
    token = aq_home / "token"
    token.chmod(0o644)
    doctor = run([str(script), "doctor", "--json"], {**gui, "GIT_CONFIG_NOSYSTEM": "1"}, check=False)
    assert doctor.returncode == 1, doctor.stdout + doctor.stderr
    problems = {check["name"]: check for check in json.loads(doctor.stdout)["checks"] if check["level"] == "fail"}
    assert set(problems) == {"git identity", "claude", "daemon", "token file"}, problems
    assert all(check["fix"] for check in problems.values()), problems
    assert "chmod 600" in problems["token file"]["fix"] and "user.email" in problems["git identity"]["fix"]
    assert stat.S_IMODE(token.stat().st_mode) == 0o644

    # 6. Day two (issue 23), from the terminal the README set up: a bad config value, a failed link, a task to
    #    stop and restart, and an agent's question answered with the command the terminal prints.
    token.chmod(0o600)
    run([str(script), "install", "claude-code"], terminal)  # records the `claude =` path again
    day_two(script, terminal, params, conf, user_home, repo)


def day_two(script: Path, terminal: dict[str, str], params: StdioServerParameters, conf: Path, user_home: Path,
            repo: Path) -> None:
    from .processes import at_a_terminal

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return run([str(script), *args], terminal, check=False)

    def shown(task_id: str) -> dict:
        done = cli("show", task_id, "--json")
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def until(task_id: str, *states: str, timeout: float = 150) -> dict:
        deadline = time.monotonic() + timeout
        while (task := shown(task_id))["task"]["status"] not in states:
            assert time.monotonic() < deadline, f"{task_id} still {task['task']['status']}, not {states}"
            time.sleep(0.5)
        return task

    slow, mock = mock_anthropic.SLOW_SECONDS, MockAnthropic().start()
    try:
        conf.write_text(re.sub(r'ANTHROPIC_BASE_URL = ".*"', f'ANTHROPIC_BASE_URL = "{mock.base_url}"',
                               conf.read_text()))

        async def as_a_model_would() -> dict:
            async with Client(params, mode="legacy") as client:  # starts the daemon, in the same folder as day one
                await client.call_tool("create_project", {"name": "Docs"})
                failed = await client.call_tool("add_repo", {"project_id": "docs", "source": "link",
                                                             "path": str(user_home / "no-such-checkout")})
                assert failed.is_error
                loose = await client.call_tool("create_task", {
                    "project_id": "docs", "title": "Write the guide", "description": "SCENARIO:slow_write Guide."})
                return loose.structured_content

        loose = anyio.run(as_a_model_would)
        assert "has no repo" in loose["warning"] and "add_repo" in loose["warning"]  # the failed link, told

        # A bad value while the daemon runs: reads say it once and still answer; doctor fails with it.
        good = conf.read_text()
        conf.write_text(good + '\n[engine]\ntask_timeout = "soon"\n')
        status = cli("status")
        assert status.returncode == 0 and status.stderr.count("task_timeout = 'soon'") == 1, status.stderr
        assert "Traceback" not in status.stderr + status.stdout
        doctor = run([str(script), "doctor", "--json"], terminal, check=False)
        failing = [c for c in json.loads(doctor.stdout)["checks"] if c["level"] == "fail"]
        assert any("task_timeout" in c["detail"] for c in failing) and all(c["fix"] for c in failing), failing
        conf.write_text(good)

        # The task in a project without a repo: stopped mid-run from the terminal, shown with its next step in
        # terminal words, restarted, and done.
        mock_anthropic.SLOW_SECONDS = 600  # the first run waits on its model until it is stopped...
        until(loose["id"], "IN_PROGRESS")
        stopped = cli("stop-task", loose["id"])
        assert stopped.returncode == 0, stopped.stderr
        held = until(loose["id"], "BLOCKED")
        show = cli("show", loose["id"])
        assert f"agentqueue restart {loose['id']}" in " ".join(show.stdout.split()), show.stdout
        assert "has no repo" in show.stdout and "restart_task" not in show.stdout
        assert held["task"]["warning"] == loose["warning"]
        mock_anthropic.SLOW_SECONDS = 1  # ...the rerun gets its answer at once
        assert cli("restart", loose["id"]).returncode == 0
        assert until(loose["id"], "COMPLETED", "BLOCKED")["task"]["status"] == "COMPLETED"

        # An agent's question, answered from the terminal with the command `status` prints.
        add = cli("add", "Touch it", "-d", "SCENARIO:run_cmd CMD[touch DAY_TWO_MARKER]", "--project", "web-app",
                  "--json")
        assert add.returncode == 0, add.stderr
        asked = json.loads(add.stdout)["id"]
        waiting = until(asked, "WAITING_INPUT")
        request = waiting["task"]["pending_requests"][0]["id"]
        assert f"agentqueue allow {request}" in " ".join(cli("status").stdout.split())
        code, said = at_a_terminal([str(script), "allow", request], terminal, "y\n")
        assert code == 0 and f"Allowed {request}" in said, said
        assert until(asked, "COMPLETED", "BLOCKED")["task"]["status"] == "COMPLETED"
    finally:
        mock_anthropic.SLOW_SECONDS = slow
        mock.stop()
    assert git(repo, "show", "main:DAY_TWO_MARKER") == ""
