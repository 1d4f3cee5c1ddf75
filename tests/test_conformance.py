"""The official MCP conformance suite (`@modelcontextprotocol/conformance`) against the real daemon's HTTP.

Only the scenarios that make sense for a server that is not the suite's fixture server run here; the rest
need tools/resources/prompts named `test_*` / `test://...`, or capabilities AgentQueue does not declare
(logging, completions), where "Method not found" is the correct answer.

The suite has no option for request headers, and the daemon requires a bearer token, so the token is added
by a Node preload (`NODE_OPTIONS=--import`): it installs an undici global dispatcher that adds
`Authorization`, which covers both the SDK transport's `fetch` and the suite's raw `fetch`/`undici.request`.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentqueue import daemon


ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE = ROOT / ".cache" / "conformance" / "node_modules" / ".bin" / "conformance"
NODE22_BIN = ROOT / ".cache" / "node22" / "node_modules"
TOKEN = "conformance-test-token"

SCENARIOS = [
    "server-initialize",
    "ping",
    "tools-list",
    "resources-list",
    "prompts-list",
    "resources-subscribe",
    "resources-unsubscribe",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",  # with the token sent, the 4xx it checks is the Host check (421), not a 401
]

AUTH_PRELOAD = """\
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
const token = process.env.CONFORMANCE_BEARER_TOKEN;
if (token) {
  const req = createRequire(pathToFileURL(process.argv[1]).href);  // the suite's own undici
  const { Agent, setGlobalDispatcher } = await import(pathToFileURL(req.resolve("undici")).href);
  const addAuth = (dispatch) => (opts, handler) => {
    const h = opts.headers;
    const headers = Array.isArray(h) ? [...h, "authorization", `Bearer ${token}`]
                                     : { ...(h ?? {}), authorization: `Bearer ${token}` };
    return dispatch({ ...opts, headers }, handler);
  };
  setGlobalDispatcher(new Agent().compose(addAuth));
}
"""


def _node22() -> str | None:
    """A Node >= 22 binary: .cache/node22 (where .ci/run installs it) first, then PATH."""
    candidates = sorted(NODE22_BIN.glob("node-linux-*/bin/node")) + [Path(p) for p in [shutil.which("node")] if p]
    for node in candidates:
        try:
            out = subprocess.run([str(node), "--version"], capture_output=True, text=True, timeout=30).stdout
        except OSError:
            continue
        match = re.match(r"v(\d+)\.", out.strip())
        if match and int(match.group(1)) >= 22:
            return str(node)
    return None


NODE = _node22()
# One worker runs the module, so its scenarios share one daemon (module-scoped `daemon_url`).
pytestmark = [pytest.mark.daemon, pytest.mark.integration, pytest.mark.xdist_group("conformance"),
              pytest.mark.skipif(not (CONFORMANCE.exists() and os.access(CONFORMANCE, os.X_OK)),
                                 reason="conformance suite not installed in .cache/conformance (.ci/run installs it)"),
              pytest.mark.skipif(NODE is None, reason="the conformance suite needs Node >= 22")]


@pytest.fixture(scope="module")
def daemon_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    home = tmp_path_factory.mktemp("conformance") / "home"
    env = {**os.environ, "AGENTQUEUE_HOME": str(home), "AGENTQUEUE_TOKEN": TOKEN}
    proc = subprocess.Popen([sys.executable, "-m", "agentqueue", "serve", "--port", "0"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        info = None
        while time.monotonic() < deadline and proc.poll() is None:
            info = daemon.read_daemon_info(home)
            if info and info.get("http_url") and info.get("pid") == proc.pid:
                break
            time.sleep(0.1)
        assert info and info.get("http_url"), \
            f"daemon did not start: {proc.stderr.read() if proc.poll() is not None else 'timeout'}"
        # The suite's dns-rebinding-protection scenario needs a localhost URL.
        yield info["http_url"].replace("127.0.0.1", "localhost", 1)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="module")
def preload(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("conformance-preload") / "auth-preload.mjs"
    path.write_text(AUTH_PRELOAD)
    return path


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_conformance_scenario(daemon_url: str, preload: Path, tmp_path: Path, scenario: str) -> None:
    env = {**os.environ, "PATH": f"{Path(NODE).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "NODE_OPTIONS": f"--import {preload.as_uri()}", "CONFORMANCE_BEARER_TOKEN": TOKEN, "NO_COLOR": "1"}
    done = subprocess.run([str(CONFORMANCE), "server", "--url", daemon_url, "--scenario", scenario,
                           "-o", str(tmp_path / "results")],
                          env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"{scenario} failed (exit {done.returncode}):\n{done.stdout}\n{done.stderr}"
