"""Agents run below the daemon's CPU priority ([engine] agent_nice), their whole session, sandbox included; and the
sandbox still gives nothing inside a controlling terminal, now that the session is the caller's."""

from __future__ import annotations

import os
import pty
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from agentqueue.engine import runner
from agentqueue.engine.adapters.base import RunSpec
from agentqueue.engine.adapters.command import CommandParser
from agentqueue.engine.runner import RunHandle, run_agent
from agentqueue.engine.watchdog import WatchdogLimits
from agentqueue.services import Services
from agentqueue.services.cpu_priority import _own_autogroup_nice
from agentqueue.settings import ConfigError, load

from .engine_runs import engine_for, run_until
from .git_fixtures import git, git_env  # noqa: F401  (git_env: fixture)
from .slowdown import scaled

# The agent waits a moment (the engine lowers its session just after it starts), then writes down where it runs.
PROBE = textwrap.dedent("""
    import pathlib, time
    time.sleep(0.3)
    stat = pathlib.Path("/proc/self/stat").read_text()
    group = pathlib.Path("/proc/self/autogroup")
    pathlib.Path("priority.txt").write_text(stat[stat.rindex(")") + 2:].split()[16] + "\\n"
                                            + (group.read_text() if group.exists() else "none\\n"))
""")


def niceness_of(autogroup_line: str) -> int:
    return int(autogroup_line.rsplit("nice", 1)[1])


@pytest.mark.anyio
async def test_an_agents_session_runs_below_the_daemon(services: Services, git_env: Path) -> None:  # noqa: F811
    services.projects.create("Demo")
    services.repos.add("demo", "init", name="app")
    services.agents.create("prober", "command", command=shlex.join([sys.executable, "-c", PROBE]))
    task = services.tasks.create("demo", "Probe", "write priority.txt", repo_id="app")
    engine = engine_for(services)
    await run_until(engine, lambda: services.tasks.get(task.id).status in ("COMPLETED", "BLOCKED"), timeout=60)
    assert services.tasks.get(task.id).status == "COMPLETED"
    nice, group = git(services.repos.get("app").checkout_path, "show", "main:priority.txt").splitlines()
    assert int(nice) == min(os.getpriority(os.PRIO_PROCESS, 0) + 10, 19)
    if group != "none":  # a kernel with autogroups: the agent's whole session weighs less than the daemon's
        assert niceness_of(group) == min(_own_autogroup_nice() + 10, 19), group


@pytest.mark.anyio
async def test_a_session_the_kernel_says_to_lower_later_is_lowered_by_the_watchdog(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without CAP_SYS_ADMIN the kernel takes one autogroup change in 0.1 s (EAGAIN): the run tries again."""
    tries: list[int] = []

    def busy_once(pid: int, by: int) -> bool:
        tries.append(by)
        return len(tries) > 1
    monkeypatch.setattr(runner, "lower_autogroup", busy_once)
    spec = RunSpec(argv=["/bin/sh", "-c", "sleep 0.5"], stdin=None)
    result = await run_agent(spec, tmp_path, CommandParser(), RunHandle(), tmp_path / "run.log", WatchdogLimits(),
                             nice=7)
    assert result.status == "completed"
    assert tries == [7, 7]  # refused at the start, done at the watchdog's next look, then left alone


@pytest.mark.anyio
async def test_agent_nice_zero_leaves_the_run_as_the_daemon(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[int] = []
    monkeypatch.setattr(runner, "lower_autogroup", lambda pid, by: called.append(by) or True)
    spec = RunSpec(argv=["/bin/sh", "-c", "cat /proc/self/stat > stat.txt"], stdin=None)
    await run_agent(spec, tmp_path, CommandParser(), RunHandle(), tmp_path / "run.log", WatchdogLimits(), nice=0)
    stat = (tmp_path / "stat.txt").read_text()
    assert called == [] and int(stat[stat.rindex(")") + 2:].split()[16]) == os.getpriority(os.PRIO_PROCESS, 0)


def test_agent_nice_is_a_niceness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    assert load(home).engine["agent_nice"] == 10
    monkeypatch.setenv("AGENTQUEUE_AGENT_NICE", "0")
    assert load(home).engine["agent_nice"] == 0
    for bad in ("20", "-1", "low"):
        monkeypatch.setenv("AGENTQUEUE_AGENT_NICE", bad)
        with pytest.raises(ConfigError, match="AGENTQUEUE_AGENT_NICE"):
            load(home)


# Run in a child that has a controlling terminal (a pty), as `agentqueue serve` started in a terminal has: the same
# sandboxed probe through each way AgentQueue starts one, and once through a plain spawn in the daemon's session.
CHILD = textwrap.dedent("""
    import os, subprocess, sys
    from pathlib import Path
    import anyio
    from agentqueue.engine.adapters.base import RunSpec
    from agentqueue.engine.adapters.command import CommandParser
    from agentqueue.engine.runner import RunHandle, run_agent
    from agentqueue.engine.watchdog import WatchdogLimits
    from agentqueue.services import Services
    from agentqueue.services.capped import run_capped

    home, work, out = map(Path, sys.argv[1:4])
    probe = ["/bin/sh", "-c", "if (exec 3</dev/tty) 2>/dev/null; then echo TTY; else echo NOTTY; fi"]
    svc = Services(home)
    seen = {"daemon": "TTY" if os.open("/dev/tty", os.O_RDONLY) >= 0 else "NOTTY"}
    with svc.sandbox.around(probe, dict(os.environ), work, None, preset="standard", actor="test") as (argv, env):
        seen["plain spawn"] = subprocess.run(argv, env=env, cwd=work, capture_output=True, text=True).stdout.strip()
        seen["run_capped"] = run_capped(argv, work, 30, 1000, 1000, env=env)[1].kept.decode().strip()
        result = anyio.run(lambda: run_agent(RunSpec(argv=argv, stdin=None), work, CommandParser(), RunHandle(),
                                             work / "run.log", WatchdogLimits(), env=env, nice=0))
        seen["run_agent"] = (result.summary or "").strip()
    out.write_text(repr(seen))
""")


def test_nothing_in_the_sandbox_has_a_controlling_terminal_when_the_daemon_has_one(services: Services,
                                                                                   tmp_path: Path) -> None:
    work, out = tmp_path / "work", tmp_path / "seen.txt"
    work.mkdir()
    services.close()
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session leader whose controlling terminal is the pty
        os.execv(sys.executable, [sys.executable, "-c", CHILD, str(services.home), str(work), str(out)])
    output = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, output.decode(errors="replace")
    seen = eval(out.read_text())  # noqa: S307  (our own repr of a dict of strings)
    # The check can fail: the daemon has a terminal, and a sandbox started in its session would reach it.
    assert seen["daemon"] == "TTY" and seen["plain spawn"] == "TTY", seen
    assert seen["run_capped"] == "NOTTY" and seen["run_agent"] == "NOTTY", seen


def test_the_relay_starts_without_the_stdlib_modules_that_cost_its_start(tmp_path: Path) -> None:
    """The relay inside every allowlist sandbox imports only C modules: socket, threading and signal (their enums)
    cost ~10 ms of CPU and of every run's start."""
    from agentqueue.sandbox import bwrap

    code = (f"import sys; sys.argv = ['inner.py']; exec(open({str(bwrap.INNER)!r}).read().split('if __name__')[0]); "
            "print(sorted(m for m in ('socket', 'threading', 'signal', 'enum', 'selectors') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.anyio
async def test_a_cancelled_run_leaves_nothing_of_its_sandbox_running(services: Services, tmp_path: Path) -> None:
    """A run cancelled from outside (a shutdown past its grace) kills its whole group: bubblewrap's init of the run's
    PID namespace outlives its parent otherwise (it ignores the parent's death), with the agent under it."""
    from .processes import group_alive, in_group

    work = tmp_path / "work"
    work.mkdir()
    handle = RunHandle()
    agent = [sys.executable, "-c", "import time; time.sleep(60)  # agent-asleep"]
    with services.sandbox.around(agent, dict(os.environ), work, None, preset="standard", actor="test") as (argv, env):
        async with anyio.create_task_group() as tg:
            async def cancel_when_running() -> None:
                while handle.pid is None or not group_alive(handle.pid) or not in_group(handle.pid, b"agent-asleep"):
                    await anyio.sleep(0.05)  # until the sandbox is up and the agent sleeping in it
                tg.cancel_scope.cancel()
            tg.start_soon(cancel_when_running)
            await run_agent(RunSpec(argv=argv, stdin=None), work, CommandParser(), handle, tmp_path / "run.log",
                            WatchdogLimits(), env=env, nice=10)
    assert handle.pid is not None
    with anyio.move_on_after(scaled(2)):
        while group_alive(handle.pid):
            await anyio.sleep(0.05)
    assert not group_alive(handle.pid)
