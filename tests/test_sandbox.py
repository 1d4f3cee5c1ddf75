"""The OS sandbox around every run (bubblewrap): an attacker's agent under `autonomous`, where the policy
allows everything and only the walls stand, for a `command` agent and for the real `claude` CLI against
the loopback model mock. Then the same attempts under `standard` (the policy asks first), fail closed, and
run_command / hook / verify commands inside the same walls.
"""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentqueue.engine.orchestrator import Engine, EngineConfig
from agentqueue.engine.watchdog import WatchdogLimits
from agentqueue.sandbox import bwrap
from agentqueue.services import Services

from .git_fixtures import git_env  # noqa: F401  (fixture)
from .mock_anthropic import MockAnthropic
from .test_engine_claude import run_until
from .third_party import npm_bin
from .slowdown import scaled

CLAUDE = npm_bin("claude")
SECRET = "SECRET-KEY-MATERIAL-7f3a91"
pytestmark = [pytest.mark.anyio, pytest.mark.integration,
              pytest.mark.skipif(bwrap.probe() is not None, reason="bubblewrap missing (.ci/run installs it)")]

# What a hostile agent tries; each attempt's outcome goes into report.json in its worktree.
ATTACK = r"""
import json, os, socket, sys, urllib.request
victim, port, aq_home = sys.argv[1], int(sys.argv[2]), sys.argv[3]
home = os.environ["HOME"]
report = {}
def attempt(name, action):
    try:
        report[name] = "ok:" + str(action())[:200]
    except Exception as error:
        report[name] = "fail:" + type(error).__name__
attempt("read_secret", lambda: open(home + "/.ssh/id_rsa").read())
attempt("read_through_link", lambda: open("leak").read())
attempt("write_outside", lambda: open(victim + "/outside.txt", "w").write("pwned"))
attempt("write_through_link", lambda: open("escape/pwned.txt", "w").write("pwned"))
attempt("write_home", lambda: open(home + "/planted.txt", "w").write("pwned"))
attempt("direct_socket", lambda: socket.create_connection(("127.0.0.1", port), timeout=3).close())
attempt("through_proxy", lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10).read())
attempt("list_agentqueue_home", lambda: sorted(os.listdir(aq_home)))
attempt("remount", lambda: os.system("mount -o remount,rw / 2>/dev/null") or "remounted")
open("report.json", "w").write(json.dumps(report))
print(json.dumps(report))
"""


class Listener:
    """A TCP server on loopback that no run may reach; it counts who got through."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.hits = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.hits += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


def git(repo: str | Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def target(tmp_path: Path, git_env: Path) -> Iterator[dict]:  # noqa: F811
    """A planted secret in the user's home, a folder outside every worktree, a listener no run may reach."""
    ssh = git_env / ".ssh"
    ssh.mkdir(parents=True, exist_ok=True)
    (ssh / "id_rsa").write_text(SECRET + "\n")
    victim = tmp_path / "victim"
    victim.mkdir()
    listener = Listener()
    yield {"home": git_env, "victim": victim, "listener": listener}
    listener.close()


def plant_links(repo: str, victim: Path, home: Path) -> None:
    """The repo's default branch carries symlinks out of any worktree: one to a folder, one to the secret."""
    Path(repo, "escape").symlink_to(victim)
    Path(repo, "leak").symlink_to(home / ".ssh" / "id_rsa")
    git(repo, "add", "escape", "leak")
    git(repo, "-c", "user.name=Planter", "-c", "user.email=p@example.com", "commit", "-q", "-m", "links")


def engine_for(services: Services) -> Engine:
    config = EngineConfig(poll_seconds=0.1,
                          limits=WatchdogLimits(stall_seconds=scaled(60), timeout_seconds=scaled(120)))
    return Engine(services, services.home, config=config)


def assert_contained(services: Services, task_id: str, report: dict, target: dict, repo: str) -> None:
    """Nothing got out, nothing got in, and the secret is nowhere AgentQueue keeps or lands text."""
    assert report["read_secret"].startswith("fail"), report
    assert report["read_through_link"].startswith("fail"), report
    assert not (target["victim"] / "outside.txt").exists()
    assert not (target["victim"] / "pwned.txt").exists()
    assert not (target["home"] / "planted.txt").exists()
    assert report["direct_socket"].startswith("fail"), report
    assert report["through_proxy"].startswith("fail"), report
    assert target["listener"].hits == 0
    assert "agentqueue.db" not in report["list_agentqueue_home"] and "token" not in report["list_agentqueue_home"]
    assert report["remount"] != "ok:remounted"
    log = (services.home / "logs" / "tasks" / f"{task_id}.log").read_text()
    assert "[sandbox] sandboxed (bubblewrap)" in log
    everything = log + json.dumps(services.tasks.get(task_id).model_dump()) + git(repo, "log", "-p", "--all")
    assert SECRET not in everything
    port = target["listener"].port
    refused = services.audit.query(task_id=task_id, action="sandbox:deny")
    assert any(f"127.0.0.1:{port}" in (row.message or "") for row in refused), refused
    assert any(str(port) in line for line in services.tasks.get(task_id).sandbox_denials)
    assert f"refused a connection to 127.0.0.1:{port}" in log


async def test_a_command_agent_under_autonomous_is_held_by_the_walls(services: Services, target: dict) -> None:
    services.projects.create("Demo")
    repo = services.repos.add("demo", "init", name="app").checkout_path
    plant_links(repo, target["victim"], target["home"])
    services.policies.edit(project_id="demo", preset="autonomous")  # the policy allows all: only the sandbox stands
    attack = shlex.join([sys.executable, "-c", ATTACK, str(target["victim"]), str(target["listener"].port),
                         str(services.home)])
    services.agents.create("attacker", "command", command=attack)
    task = services.tasks.create("demo", "Escape", "try everything", repo_id="app")
    await run_until(engine_for(services),
                    lambda: services.tasks.get(task.id).status in ("COMPLETED", "BLOCKED", "FAILED"))
    assert services.tasks.get(task.id).status == "COMPLETED", services.tasks.get(task.id).reason
    report = json.loads(git(repo, "show", "main:report.json"))
    assert_contained(services, task.id, report, target, repo)


@pytest.fixture
def claude_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, git_env: Path) -> Iterator[MockAnthropic]:  # noqa: F811
    if CLAUDE is None:
        pytest.skip("claude CLI not installed (.ci/run installs it)")
    mock = MockAnthropic().start()
    for key, value in {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": mock.base_url,
                       "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
                       "CLAUDE_CODE_MAX_RETRIES": "0", "AGENTQUEUE_CLAUDE_BIN": CLAUDE}.items():
        monkeypatch.setenv(key, value)
    yield mock
    mock.stop()


def claude_attack(victim: Path, port: int, aq_home: Path) -> list[str]:
    """The same attempts as shell commands, the way a model asks Claude Code's Bash tool to run them."""
    return ["cat ~/.ssh/id_rsa", "cat leak", f"echo pwned > {victim}/outside.txt", "echo pwned > escape/pwned.txt",
            "echo pwned > ~/planted.txt",
            f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 3)'",
            f"curl -sS -m 10 http://127.0.0.1:{port}/", f"ls {aq_home}", "mount -o remount,rw / && echo remounted"]


@pytest.mark.real_cli
async def test_the_real_claude_under_autonomous_is_held_by_the_walls(services: Services, target: dict,
                                                                     claude_env: MockAnthropic) -> None:
    services.projects.create("Demo")
    repo = services.repos.add("demo", "init", name="app").checkout_path
    plant_links(repo, target["victim"], target["home"])
    services.policies.edit(project_id="demo", preset="autonomous")
    services.agents.create("claude", "claude-code")
    commands = claude_attack(target["victim"], target["listener"].port, services.home)
    task = services.tasks.create("demo", "Escape", f"SCENARIO:run_cmds CMDS{json.dumps(commands)}END", repo_id="app")
    await run_until(engine_for(services),
                    lambda: services.tasks.get(task.id).status in ("COMPLETED", "BLOCKED", "FAILED"))
    assert services.tasks.get(task.id).status == "COMPLETED", services.tasks.get(task.id).reason
    answers = claude_env.messages_for("run_cmds")[-1]
    said = json.dumps(answers)
    assert SECRET not in said  # the model never saw the secret either
    for path in (target["victim"] / "outside.txt", target["victim"] / "pwned.txt", target["home"] / "planted.txt"):
        assert not path.exists()
    assert target["listener"].hits == 0
    assert "remounted" not in said.replace("&& echo remounted", "")
    log = (services.home / "logs" / "tasks" / f"{task.id}.log").read_text()
    assert "[sandbox] sandboxed (bubblewrap)" in log and SECRET not in log
    assert SECRET not in git(repo, "log", "-p", "--all")
    refused = services.audit.query(task_id=task.id, action="sandbox:deny")
    assert any(f"127.0.0.1:{target['listener'].port}" in (row.message or "") for row in refused), refused


@pytest.mark.real_cli
async def test_under_standard_the_policy_asks_before_the_sandbox_is_reached(services: Services, target: dict,
                                                                           claude_env: MockAnthropic) -> None:
    services.projects.create("Demo")
    repo = services.repos.add("demo", "init", name="app").checkout_path
    plant_links(repo, target["victim"], target["home"])
    services.policies.edit(project_id="demo", preset="standard", ask_timeout="1s")  # nobody answers: denied
    services.agents.create("claude", "claude-code")
    commands = claude_attack(target["victim"], target["listener"].port, services.home)
    task = services.tasks.create("demo", "Escape", f"SCENARIO:run_cmds CMDS{json.dumps(commands)}END", repo_id="app")
    await run_until(engine_for(services),
                    lambda: services.tasks.get(task.id).status in ("COMPLETED", "BLOCKED", "FAILED"), timeout=150)
    rows = services.audit.query(task_id=task.id, action="Bash(*", limit=100)
    decided = {row.action: row.decision for row in rows}
    for command in commands:
        assert decided.get(f"Bash({command})", "").startswith(("ask", "deny")), (command, decided)
    assert target["listener"].hits == 0 and not (target["victim"] / "outside.txt").exists()
    assert SECRET not in json.dumps(claude_env.messages_for("run_cmds"))


async def test_no_sandbox_no_run_unless_a_person_says_so(services: Services, git_env: Path,  # noqa: F811
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("worker", "command",
                           command=shlex.join([sys.executable, "-c", "open('x.txt','w').write('x')"]))
    monkeypatch.setattr(bwrap, "find_bwrap", lambda: None)
    bwrap.probe.cache_clear()
    try:
        task = services.tasks.create("demo", "Write", "x", repo_id="app")
        await run_until(engine_for(services), lambda: services.tasks.get(task.id).status == "BLOCKED")
        held = services.tasks.get(task.id)
        assert "bubblewrap" in held.reason and "required = false" in held.next_step
        assert not (services.home / "logs" / "tasks" / f"{task.id}.log").exists() or \
            "$ " not in (services.home / "logs" / "tasks" / f"{task.id}.log").read_text()
        with pytest.raises(Exception, match="bubblewrap"):
            services.files.run("true", Path(services.projects.get("demo").workspace))
        # A person opts out: the run goes ahead, and its log says it was not sandboxed.
        (services.home / "config.toml").write_text("[sandbox]\nrequired = false\n")
        from agentqueue import settings as settings_module
        services.settings = settings_module.load(services.home)
        services.sandbox.settings = services.settings
        services.tasks.restart(task.id)
        await run_until(engine_for(services), lambda: services.tasks.get(task.id).status == "COMPLETED")
        log = (services.home / "logs" / "tasks" / f"{task.id}.log").read_text()
        assert "NOT sandboxed" in log
    finally:
        monkeypatch.undo()
        bwrap.probe.cache_clear()


def test_run_command_hooks_and_verify_share_the_walls(services: Services, target: dict) -> None:
    services.projects.create("Demo")
    workspace = Path(services.projects.get("demo").workspace)
    workspace.mkdir(parents=True, exist_ok=True)
    out = services.files.run(f"cat ~/.ssh/id_rsa; echo pwned > {target['victim']}/x.txt; echo ok > inside.txt; "
                             f"curl -sS -m 5 http://127.0.0.1:{target['listener'].port}/ ; echo done", workspace)
    assert SECRET not in out.stdout + out.stderr
    assert not (target["victim"] / "x.txt").exists()
    assert (workspace / "inside.txt").read_text() == "ok\n"
    assert target["listener"].hits == 0
    assert "done" in out.stdout
    refused = services.audit.query(action="sandbox:deny")
    assert any(str(target["listener"].port) in (row.message or "") for row in refused)


def test_readonly_mounts_the_worktree_read_only(services: Services) -> None:
    services.projects.create("Demo")
    services.policies.edit(project_id="demo", preset="readonly", add_rule="tool:run_command")
    workspace = Path(services.projects.get("demo").workspace)
    workspace.mkdir(parents=True, exist_ok=True)
    out = services.files.run("echo x > written.txt; cat written.txt", workspace)
    assert not (workspace / "written.txt").exists()
    assert "Read-only file system" in out.stderr


def test_network_open_and_settings_errors(services: Services, tmp_path: Path) -> None:
    (services.home / "policy.toml").write_text('[projects.demo.sandbox]\nnetwork = "sideways"\n')
    with pytest.raises(Exception, match="network"):
        services.sandbox.settings_for("demo")
    (services.home / "policy.toml").write_text('[projects.demo.sandbox]\nnetwork = "open"\nhosts = ["github.com"]\n')
    chosen = services.sandbox.settings_for("demo")
    assert chosen.network == "open" and "github.com" in chosen.hosts


def test_the_gate_lets_through_only_the_allowlist(tmp_path: Path) -> None:
    """The host side alone: an allowed loopback server answers through the proxy (absolute-form and CONNECT),
    a port off the list gets 403 and is reported, a forward reaches only its own port."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from agentqueue.sandbox.gate import NetworkGate
    from agentqueue.sandbox.rules import Endpoint, SandboxRules

    class Hello(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = f"hello {self.path}".encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    denied: list[tuple[str, int]] = []
    rules = SandboxRules(tmp_path, True,
                         endpoints=(Endpoint.parse(f"127.0.0.1:{port}"), Endpoint.parse("*.example.org")))
    gate = NetworkGate(rules, lambda host, p, _why: denied.append((host, p)))

    def ask(request: bytes, path: str = "proxy.sock") -> bytes:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(gate.folder / path))
            sock.sendall(request)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
            return data

    try:
        assert b"hello /x?y=1" in ask(f"GET http://127.0.0.1:{port}/x?y=1 HTTP/1.1\r\nHost: a\r\n\r\n".encode())
        assert b"hello /x" in ask(b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", f"port-{port}.sock")
        refused = ask(f"GET http://127.0.0.1:{port + 1}/ HTTP/1.1\r\n\r\n".encode())
        assert refused.startswith(b"HTTP/1.1 403") and b"allowlist" in refused
        assert ask(b"CONNECT evil.example.com:443 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 403")
        assert ask(b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
        assert denied == [("127.0.0.1", port + 1), ("evil.example.com", 443)]
        assert rules.allows("api.example.org", 443) and not rules.allows("example.org.evil.com", 443)
    finally:
        gate.close()
        server.shutdown()
    assert not gate.folder.exists()


def test_doctor_and_the_board_show_what_lowers_the_walls(services: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    from agentqueue.cli import doctor_checks as doctor
    from agentqueue.board.data import overview

    services.projects.create("Demo")
    checks = {c.name: c for c in doctor.check_sandbox(services.home, services.settings)}
    assert checks["sandbox"].level == "ok" and "probed" in checks["sandbox"].detail
    assert overview(services)["sandbox"] is None and overview(services)["projects"][0]["sandbox"] is None
    (services.home / "policy.toml").write_text('[projects.demo.sandbox]\nnetwork = "open"\n')
    checks = {c.name: c for c in doctor.check_sandbox(services.home, services.settings)}
    assert checks["sandbox (demo)"].level == "warn" and "open" in checks["sandbox (demo)"].detail
    assert overview(services)["projects"][0]["sandbox"] == "sandbox network open"
    monkeypatch.setattr(bwrap, "find_bwrap", lambda: None)
    bwrap.probe.cache_clear()
    try:
        failed = {c.name: c for c in doctor.check_sandbox(services.home, services.settings)}["sandbox"]
        assert failed.level == "fail" and "bubblewrap" in failed.detail
        assert overview(services)["sandbox"] == "no sandbox: no run starts"
    finally:
        monkeypatch.undo()
        bwrap.probe.cache_clear()


def test_a_mask_shows_the_default_branchs_file_read_only(services: Services, tmp_path: Path) -> None:
    """Planted settings (engine/protected.py) are shown to a Codex or Gemini rerun as the default branch has them."""
    work = tmp_path / "work"
    (work / ".gemini").mkdir(parents=True)
    (work / ".gemini" / "settings.json").write_text('{"planted": true}')
    (work / ".mcp.json").write_text('{"planted": true}')
    rules = services.sandbox.rules_for(work, None, preset="standard", agent_type="gemini",
                                       env={"PATH": "/usr/bin:/bin"},
                                       masks={work / ".gemini" / "settings.json": b'{"default": true}',
                                              work / ".mcp.json": None})
    argv = ["/bin/sh", "-c", "cat .gemini/settings.json; echo; wc -c < .mcp.json; echo x > .gemini/settings.json"]
    with services.sandbox.contained(argv, {"PATH": "/usr/bin:/bin"}, rules, lambda *_: None) as (inner, env):
        done = subprocess.run(inner, cwd=work, env=env, capture_output=True, text=True, timeout=30)
    assert done.stdout.splitlines()[:2] == ['{"default": true}', "0"], done
    assert "Read-only file system" in done.stderr or "Permission denied" in done.stderr
    assert (work / ".gemini" / "settings.json").read_text() == '{"planted": true}'  # the worktree is untouched


def test_registries_open_when_the_policy_lets_installs_run(services: Services, tmp_path: Path) -> None:
    """Standard asks before installs, so registries are off its list; a rule a person adds counts at once, even for
    a run already going (the gate asks the policy when the connection comes)."""
    services.projects.create("Demo")
    rules = services.sandbox.rules_for(tmp_path, "demo", preset="standard", env={"PATH": "/usr/bin"})
    assert not rules.allows("registry.npmjs.org", 443)
    assert not services.sandbox.registry_allowed("demo", "registry.npmjs.org", 443)
    services.policies.edit(project_id="demo", add_rule="Bash(npm install:*)", rule_list="allow")
    assert services.sandbox.registry_allowed("demo", "registry.npmjs.org", 443)
    assert not services.sandbox.registry_allowed("demo", "evil.example.com", 443)
    services.policies.edit(project_id="demo", preset="autonomous")
    autonomous = services.sandbox.rules_for(tmp_path, "demo", preset="autonomous", env={"PATH": "/usr/bin"})
    assert autonomous.allows("pypi.org", 443)


def test_a_cli_installed_by_npm_under_tmp_is_shown_with_its_sibling_packages(tmp_path: Path) -> None:
    """Codex's script loads its binary from a sibling package (`@openai/codex-linux-x64`): with the CLI under /tmp
    (a clone in /tmp, an npx cache), showing only the script's folder made it fail inside the sandbox."""
    from agentqueue.sandbox.runs import programs

    assert any(tmp_path.resolve().is_relative_to(private) for private in bwrap.PRIVATE)
    modules = tmp_path / "node" / "node_modules"
    script = modules / "@openai" / "codex" / "bin" / "codex.js"
    script.parent.mkdir(parents=True)
    script.write_text("")
    (modules / "@openai" / "codex-linux-x64").mkdir()
    (modules / ".bin").mkdir()
    (modules / ".bin" / "codex").symlink_to(script)
    shown = programs({"PATH": ""}, str(modules / ".bin" / "codex"))
    assert modules.resolve() in shown
    assert all(not path.is_relative_to(modules.resolve()) or path == modules.resolve() for path in shown)


def test_a_script_the_runs_command_names_is_shown_but_not_one_an_agent_names(tmp_path: Path) -> None:
    """`python /tmp/agent/main.py` registered as an agent: the script's folder is shown read-only inside the private
    /tmp (else the run fails with "can't open file"). Only the run's own argv does that: an agent's terminal command
    passes no files, so it cannot uncover the host's /tmp by naming one."""
    from agentqueue.sandbox.runs import programs

    script = tmp_path / "agent" / "main.py"
    script.parent.mkdir()
    script.write_text("")
    assert script.parent.resolve() in programs({"PATH": ""}, sys.executable, [str(script), "--flag", "relative.py"])
    assert script.parent.resolve() not in programs({"PATH": ""}, sys.executable)
    assert script.parent.resolve() not in programs({"PATH": ""}, sys.executable, [str(tmp_path / "missing.py")])


def test_agentqueues_own_package_is_shown_when_its_checkout_lies_in_a_private_folder(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """An editable install from a checkout under /tmp (the fast loop from a clone there): the relay and the plugin
    run from the checkout's package folder, not the venv, and a private /tmp hid it ("can't open file
    .../sandbox/inner.py", every run failed). Here the folder the package is in stands in for /tmp."""
    import agentqueue
    from agentqueue.sandbox import bwrap
    from agentqueue.sandbox.runs import programs

    package = Path(agentqueue.__file__).resolve().parent
    monkeypatch.setattr(bwrap, "PRIVATE", (package.parent,))
    shown = programs({"PATH": ""}, None)
    assert package in shown
    assert package.parent not in shown  # the package, not the whole checkout (its tests, .cache, .venv's siblings)


def test_a_codex_run_cannot_plant_an_exec_policy_rule(services: Services, tmp_path: Path) -> None:
    """Codex's state is the run's own copy (sandbox/cli_homes.py): writable and gone after the run, seeded with the
    person's rules, which stay read-only: an `allow` rule there would let the run's commands pass without asking
    AgentQueue's policy (tests/test_permissions_codex.py). The person's ~/.codex and $CODEX_HOME are never bound."""
    home, codex_home = tmp_path / "person", tmp_path / "codex-home"
    (codex_home / "rules").mkdir(parents=True)
    (codex_home / "rules" / "mine.rules").write_text("the person's\n")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "CODEX_HOME": str(codex_home)}
    work = tmp_path / "work"
    work.mkdir()
    rules = services.sandbox.rules_for(work, None, preset="standard", agent_type="codex", env=env)
    assert home / ".codex" not in rules.writable and codex_home not in rules.writable
    argv = ["/bin/sh", "-c", "echo state > $CODEX_HOME/state.txt; cat $CODEX_HOME/rules/mine.rules; "
                             "echo x > $CODEX_HOME/rules/a.rules; echo done"]
    with services.sandbox.contained(argv, env, rules, lambda *_: None) as (inner, inner_env):
        run_home = Path(inner_env["CODEX_HOME"])
        done = subprocess.run(inner, cwd=work, env=inner_env, capture_output=True, text=True, timeout=30)
        assert (run_home / "state.txt").read_text() == "state\n"
    assert run_home != codex_home and not run_home.exists()  # thrown away with the run
    assert done.stdout.split() == ["the", "person's", "done"] and "Read-only file system" in done.stderr, done
    assert sorted(p.name for p in (codex_home / "rules").iterdir()) == ["mine.rules"]
    assert not (codex_home / "state.txt").exists()


def test_a_run_cannot_plant_a_skill_in_the_persons_cli_state(services: Services, tmp_path: Path) -> None:
    """Claude Code's state is the run's own copy (CLAUDE_CONFIG_DIR): a skill, a hook or a CLAUDE.md written there
    steers no later session of the person's (issue 24: `agentqueue install --skill --user` is the person's to run)."""
    home = tmp_path / "person"
    (home / ".claude" / "skills").mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}
    work = tmp_path / "work"
    work.mkdir()
    rules = services.sandbox.rules_for(work, None, preset="standard", agent_type="claude-code", env=env)
    assert home / ".claude" not in rules.writable
    argv = ["/bin/sh", "-c", "echo state > $CLAUDE_CONFIG_DIR/state.txt; mkdir -p $CLAUDE_CONFIG_DIR/skills/x; "
                             "echo planted > ~/.claude/skills/SKILL.md; echo done"]
    with services.sandbox.contained(argv, env, rules, lambda *_: None) as (inner, inner_env):
        done = subprocess.run(inner, cwd=work, env=inner_env, capture_output=True, text=True, timeout=30)
        assert (Path(inner_env["CLAUDE_CONFIG_DIR"]) / "state.txt").read_text() == "state\n"  # the CLI's own state
    assert done.stdout.strip() == "done", done
    assert list((home / ".claude" / "skills").iterdir()) == [] and not (home / ".claude" / "state.txt").exists()
