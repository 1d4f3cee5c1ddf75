"""Bad input for every tool: refused as a tool error that says what was wrong, and nothing written.

One table row per bad call. For each: `is_error` is true; the text names the problem (every needle
appears in it), says more than "Error executing tool X", is no internal error; and the database is
byte-for-byte what it was before the call.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from agentqueue.services import Services

from .conftest import db_snapshot, fail, ok
from .test_mcp_system import EXPECTED_TOOLS

pytestmark = pytest.mark.anyio

Case = tuple[str, dict[str, Any], list[str]]  # (label, arguments, needles the error text must contain)

HUGE = 2**63  # one past SQLite's largest integer: was "Internal error (OverflowError)"
OVER = "less than or equal"  # pydantic's words for a schema maximum

MISSING_PROJECT = ("missing project_id", {}, ["project_id", "required"])
UNKNOWN_PROJECT = ("unknown project", {"project_id": "nope"}, ["'nope' not found", "list_projects"])
MISSING_TASK = ("missing task_id", {}, ["task_id", "required"])
UNKNOWN_TASK = ("unknown task", {"task_id": "ghost-task"}, ["'ghost-task' not found", "list_tasks"])
ILL_TYPED_TASK = ("task_id not a string", {"task_id": 5}, ["task_id", "string"])

CASES: dict[str, list[Case]] = {
    # -- projects --
    "list_projects": [
        ("unknown status", {"status": "ARCHIVED"}, ["status", "ACTIVE"]),
        ("limit 0", {"limit": 0}, ["limit"]),
        ("limit over 500", {"limit": 501}, ["limit", "500"]),
        ("negative offset", {"offset": -1}, ["offset"]),
        ("offset past 2**63", {"offset": HUGE}, ["offset", OVER]),
    ],
    "create_project": [
        ("missing name", {}, ["name", "required"]),
        ("blank name", {"name": "  "}, ["name", "empty"]),
        ("name without letters", {"name": "!!!"}, ["'!!!'", "no letters or digits"]),
        ("name not a string", {"name": 42}, ["name", "string"]),
        ("credit_weight 0", {"name": "New", "credit_weight": 0}, ["credit_weight", "greater than 0"]),
        ("credit_weight not a number", {"name": "New", "credit_weight": "heavy"}, ["credit_weight"]),
        ("max_concurrent_agents 0", {"name": "New", "max_concurrent_agents": 0}, ["max_concurrent_agents"]),
        ("negative budget", {"name": "New", "budget_limit": -1}, ["budget_limit"]),
        ("duplicate", {"name": "ALPHA"}, ["'alpha' already exists"]),
        ("relative workspace", {"name": "New", "workspace": "rel/dir"}, ["workspace", "absolute"]),
        ("workspace is a file", {"name": "New", "workspace": "$file"}, ["workspace", "not a directory"]),
        ("workspace under a file", {"name": "New", "workspace": "$file/sub"}, ["workspace", "cannot be created"]),
        ("workspace in AgentQueue's home", {"name": "New", "workspace": "$home/sub"}, ["never a workspace"]),
        ("workspace name too long", {"name": "New", "workspace": "$file-dir/" + "d" * 300}, ["workspace", "too long"]),
        ("NUL in workspace", {"name": "New", "workspace": "$file-dir/a\0b"}, ["workspace", "NUL"]),
        ("max_concurrent_agents past 2**63", {"name": "New", "max_concurrent_agents": HUGE},
         ["max_concurrent_agents", OVER]),
        ("budget_limit past 2**63", {"name": "New", "budget_limit": HUGE}, ["budget_limit", OVER]),
        ("channel already taken", {"name": "Gamma", "auto_create_channels": True}, ["#gamma", "another project"]),
    ],
    "pause_project": [MISSING_PROJECT, UNKNOWN_PROJECT, ("project_id not a string", {"project_id": 7}, ["project_id"])],
    "resume_project": [MISSING_PROJECT, UNKNOWN_PROJECT],
    "edit_project": [
        MISSING_PROJECT,
        ("unknown project", {"project_id": "nope", "name": "X"}, ["'nope' not found"]),
        ("nothing to change", {"project_id": "alpha"}, ["Nothing to change", "credit_weight"]),
        ("blank name", {"project_id": "alpha", "name": ""}, ["name", "empty"]),
        ("credit_weight 0", {"project_id": "alpha", "credit_weight": 0}, ["credit_weight"]),
        ("max_concurrent_agents 0", {"project_id": "alpha", "max_concurrent_agents": 0}, ["max_concurrent_agents"]),
        ("negative budget", {"project_id": "alpha", "budget_limit": -5}, ["budget_limit"]),
        ("max_concurrent_agents past 2**63", {"project_id": "alpha", "max_concurrent_agents": HUGE},
         ["max_concurrent_agents", OVER]),
        ("budget_limit past 2**63", {"project_id": "alpha", "budget_limit": HUGE}, ["budget_limit", OVER]),
    ],
    "delete_project": [
        MISSING_PROJECT, UNKNOWN_PROJECT,
        ("task running", {"project_id": "alpha"}, ["$running", "stop_task"]),
        ("archive_channels not a bool", {"project_id": "alpha", "archive_channels": "maybe"}, ["archive_channels"]),
    ],
    "set_active_project": [
        ("unknown project", {"project_id": "nope"}, ["'nope' not found"]),
        ("project_id not a string", {"project_id": 3}, ["project_id"]),
    ],
    # -- channels --
    "set_project_channel": [
        ("missing channel_id", {"project_id": "alpha"}, ["channel_id", "required"]),
        ("missing project_id", {"channel_id": "C1"}, ["project_id", "required"]),
        ("blank channel_id", {"project_id": "alpha", "channel_id": "  "}, ["channel_id", "empty"]),
        ("unknown project", {"project_id": "nope", "channel_id": "C1"}, ["'nope' not found"]),
    ],
    "set_control_interface": [
        ("missing channel_name", {"project_id": "alpha"}, ["channel_name", "required"]),
        ("empty channel_name", {"project_id": "alpha", "channel_name": ""}, ["channel_name", "empty"]),
        ("only a '#'", {"project_id": "alpha", "channel_name": "#"}, ["channel_name", "#ops"]),
        ("unknown project", {"project_id": "nope", "channel_name": "#ops"}, ["'nope' not found"]),
    ],
    "get_project_channels": [MISSING_PROJECT, UNKNOWN_PROJECT],
    "get_project_for_channel": [
        ("missing channel_id", {}, ["channel_id", "required"]),
        ("empty channel_id", {"channel_id": ""}, ["channel_id", "empty"]),
        ("channel_id not a string", {"channel_id": ["C1"]}, ["channel_id"]),
    ],
    # -- tasks --
    "list_tasks": [
        ("unknown status", {"status": "BOGUS"}, ["BOGUS", "Valid statuses"]),
        ("unknown status in a list", {"status": ["READY", "NOPE"]}, ["NOPE"]),
        ("unknown status in a comma list", {"status": "READY,DONE"}, ["DONE"]),
        ("status not text", {"status": 5}, ["status"]),
        ("unknown project", {"project_id": "nope"}, ["'nope' not found"]),
        ("limit 0", {"limit": 0}, ["limit"]),
        ("negative offset", {"offset": -1}, ["offset"]),
        ("include_completed not a bool", {"include_completed": "maybe"}, ["include_completed"]),
        ("offset past 2**63", {"offset": HUGE}, ["offset", OVER]),
    ],
    "create_task": [
        ("missing title", {"project_id": "alpha", "description": "d"}, ["title", "required"]),
        ("missing description", {"project_id": "alpha", "title": "t"}, ["description", "required"]),
        ("blank title", {"project_id": "alpha", "title": " ", "description": "d"}, ["title", "empty"]),
        ("blank description", {"project_id": "alpha", "title": "t", "description": "\n"}, ["description", "empty"]),
        ("priority not a number", {"project_id": "alpha", "title": "t", "description": "d", "priority": "high"},
         ["priority", "integer"]),
        ("no project at all", {"title": "t", "description": "d"}, ["project_id", "set_active_project"]),
        ("unknown project", {"project_id": "nope", "title": "t", "description": "d"}, ["'nope' not found"]),
        ("unknown repo", {"project_id": "alpha", "title": "t", "description": "d", "repo_id": "nope-repo"},
         ["'nope-repo' not found", "list_repos"]),
        ("unknown dependency", {"project_id": "alpha", "title": "t", "description": "d",
                                "depends_on": ["$ready", "ghost-task"]}, ["ghost-task"]),
        ("empty dependency id", {"project_id": "alpha", "title": "t", "description": "d", "depends_on": [""]},
         ["depends_on", "empty"]),
        ("depends_on not a list", {"project_id": "alpha", "title": "t", "description": "d", "depends_on": "$ready"},
         ["depends_on", "list"]),
        ("negative max_retries", {"project_id": "alpha", "title": "t", "description": "d", "max_retries": -1},
         ["max_retries"]),
        ("priority past 2**63", {"project_id": "alpha", "title": "t", "description": "d", "priority": HUGE},
         ["priority", OVER]),
        ("max_retries past 2**63", {"project_id": "alpha", "title": "t", "description": "d", "max_retries": HUGE},
         ["max_retries", OVER]),
        ("unknown agent_type", {"project_id": "alpha", "title": "t", "description": "d", "agent_type": "robot"},
         ["agent_type", "claude-code"]),
        ("requires_approval not a bool", {"project_id": "alpha", "title": "t", "description": "d",
                                          "requires_approval": "sometimes"}, ["requires_approval"]),
    ],
    "get_task": [MISSING_TASK, UNKNOWN_TASK, ILL_TYPED_TASK],
    "edit_task": [
        MISSING_TASK,
        ("unknown task", {"task_id": "ghost-task", "priority": 1}, ["'ghost-task' not found"]),
        ("nothing to change", {"task_id": "$ready"}, ["Nothing to change"]),
        ("blank title", {"task_id": "$ready", "title": ""}, ["title", "empty"]),
        ("blank description", {"task_id": "$ready", "description": " "}, ["description", "empty"]),
        ("priority not a number", {"task_id": "$ready", "priority": "x"}, ["priority"]),
        ("priority past 2**63", {"task_id": "$ready", "priority": HUGE}, ["priority", OVER]),
        ("self dependency", {"task_id": "$ready", "depends_on": ["$ready"]}, ["$ready", "itself"]),
        ("cycle", {"task_id": "$ready", "depends_on": ["$waiting"]}, ["cycle", "$ready -> $waiting -> $ready"]),
        ("unknown dependency", {"task_id": "$waiting", "depends_on": ["ghost-task"]}, ["ghost-task"]),
    ],
    "stop_task": [
        MISSING_TASK, UNKNOWN_TASK,
        ("completed task", {"task_id": "$done"}, ["$done", "COMPLETED", "can be stopped"]),
    ],
    "restart_task": [
        MISSING_TASK, UNKNOWN_TASK,
        ("running task", {"task_id": "$running"}, ["$running", "IN_PROGRESS", "stop_task"]),
    ],
    "delete_task": [
        MISSING_TASK, UNKNOWN_TASK,
        ("running task", {"task_id": "$running"}, ["$running", "IN_PROGRESS", "stop_task"]),
    ],
    "approve_task": [
        MISSING_TASK, UNKNOWN_TASK,
        ("ready task", {"task_id": "$ready"}, ["$ready", "READY", "AWAITING_APPROVAL"]),
    ],
    "request_changes": [
        MISSING_TASK,
        ("unknown task", {"task_id": "ghost-task", "comment": "x"}, ["'ghost-task' not found", "list_tasks"]),
        ("running task", {"task_id": "$running", "comment": "x"}, ["$running", "IN_PROGRESS", "stop_task"]),
        ("ready task", {"task_id": "$ready", "comment": "x"}, ["$ready", "READY", "edit_task"]),
        ("blank comment", {"task_id": "$done", "comment": " "}, ["comment is empty"]),
        ("line without file", {"task_id": "$done", "comment": "x", "line": 2}, ["line needs a file"]),
        ("line 0", {"task_id": "$done", "comment": "x", "file": "a.py", "line": 0}, ["line", "greater than"]),
        ("comment too long", {"task_id": "$done", "comment": "x" * 10_001}, ["comment", "10000"]),
    ],
    "skip_task": [
        MISSING_TASK, UNKNOWN_TASK,
        ("ready task", {"task_id": "$ready"}, ["$ready", "READY", "BLOCKED or FAILED"]),
    ],
    "get_task_result": [MISSING_TASK, UNKNOWN_TASK, ILL_TYPED_TASK],
    "get_task_diff": [
        MISSING_TASK, UNKNOWN_TASK,
        ("no branch yet", {"task_id": "$ready"}, ["$ready", "no branch"]),
    ],
    "get_chain_health": [
        UNKNOWN_TASK,
        ("unknown project", {"project_id": "nope"}, ["'nope' not found"]),
        ILL_TYPED_TASK,
    ],
    "set_task_status": [
        ("missing status", {"task_id": "$ready"}, ["status", "required"]),
        ("missing task_id", {"status": "READY"}, ["task_id", "required"]),
        ("unknown status", {"task_id": "$ready", "status": "DONE"}, ["status", "COMPLETED"]),
        ("unknown task", {"task_id": "ghost-task", "status": "READY"}, ["'ghost-task' not found"]),
    ],
    "get_agent_error": [MISSING_TASK, UNKNOWN_TASK],
    "list_requests": [
        UNKNOWN_PROJECT,
        ("unknown status", {"status": "open"}, ["status", "pending"]),
        ("limit 0", {"limit": 0}, ["limit"]),
    ],
    "answer_request": [
        ("missing request_id", {"decision": "allow"}, ["request_id", "required"]),
        ("unknown request", {"request_id": "req-nope", "decision": "allow"}, ["'req-nope' not found"]),
        ("unknown decision", {"request_id": "req-nope", "decision": "maybe"}, ["decision", "allow"]),
        ("remember not a boolean", {"request_id": "req-nope", "decision": "deny", "remember": "often"},
         ["remember"]),
    ],
    "get_policy": [UNKNOWN_PROJECT, ("project_id not a string", {"project_id": 5}, ["project_id", "string"])],
    "edit_policy": [
        UNKNOWN_PROJECT,
        ("nothing to change", {}, ["Nothing to change", "preset"]),
        ("unknown preset", {"preset": "lenient"}, ["'lenient'", "readonly"]),
        ("rule in another syntax", {"add_rule": "run npm test"}, ["'run npm test'", "Bash(npm test:*)"]),
        ("empty parentheses", {"add_rule": "Bash()"}, ["empty parentheses"]),
        ("unknown list", {"add_rule": "Bash(make:*)", "list": "maybe"}, ["list", "allow"]),
        ("removing a rule that is not there", {"remove_rule": "Bash(make:*)"}, ["no rule", "get_policy"]),
        ("ask_timeout not a duration", {"ask_timeout": "soon"}, ["'soon'", "30m"]),
    ],
    "get_audit_log": [
        ("limit 0", {"limit": 0}, ["limit"]),
        ("unknown decision", {"decision": "maybe"}, ["'maybe'", "ask→accept"]),
        ("since_hours 0", {"since_hours": 0}, ["since_hours"]),
        ("since_hours 2**31", {"since_hours": 2**31}, ["since_hours", OVER]),
    ],
    # -- agents --
    "list_agents": [
        ("limit 0", {"limit": 0}, ["limit"]),
        ("limit not a number", {"limit": "all"}, ["limit"]),
        ("negative offset", {"offset": -1}, ["offset"]),
        ("offset past 2**63", {"offset": HUGE}, ["offset", OVER]),
    ],
    "create_agent": [
        ("missing name", {}, ["name", "required"]),
        ("blank name", {"name": " "}, ["name", "empty"]),
        ("name without letters", {"name": "???"}, ["'???'"]),
        ("unknown agent_type", {"name": "bot", "agent_type": "robot"}, ["agent_type", "codex"]),
        ("command type without command", {"name": "bot", "agent_type": "command"}, ["command", "needs"]),
        ("command on a CLI agent", {"name": "bot", "command": "./x"}, ["command", "only for agent_type"]),
        ("unknown repo", {"name": "bot", "repo_id": "nope-repo"}, ["'nope-repo' not found"]),
        ("duplicate", {"name": "Worker"}, ["'worker' already exists"]),
        ("capabilities not a list", {"name": "bot", "capabilities": "python"}, ["capabilities", "list"]),
        ("a command that is not installed", {"name": "bot", "agent_type": "command",
                                             "command": "no-such-program --flag"}, ["'no-such-program'", "executable"]),
        ("a command with broken quotes", {"name": "bot", "agent_type": "command", "command": "sh -c 'x"},
         ["quotes"]),
    ],
    "edit_agent": [
        ("missing agent_id", {"model": "opus"}, ["agent_id", "required"]),
        ("unknown agent", {"agent_id": "ghost", "model": "opus"}, ["'ghost' not found", "list_agents"]),
        ("nothing to change", {"agent_id": "worker"}, ["Nothing to change", "model"]),
        ("command on a CLI agent", {"agent_id": "worker", "command": "./x"}, ["command", "only for agent_type"]),
        ("a command that is not installed", {"agent_id": "worker", "command": "no-such-program"},
         ["'no-such-program'", "executable"]),
        ("unknown repo", {"agent_id": "worker", "repo_id": "nope-repo"}, ["'nope-repo' not found"]),
        ("capabilities not a list", {"agent_id": "worker", "capabilities": "python"}, ["capabilities", "list"]),
    ],
    "pause_agent": [
        ("missing agent_id", {}, ["agent_id", "required"]),
        ("unknown agent", {"agent_id": "ghost"}, ["'ghost' not found", "list_agents"]),
    ],
    "resume_agent": [
        ("missing agent_id", {}, ["agent_id", "required"]),
        ("unknown agent", {"agent_id": "ghost"}, ["'ghost' not found", "list_agents"]),
        ("agent_id not a string", {"agent_id": 5}, ["agent_id", "string"]),
    ],
    "delete_agent": [
        ("missing agent_id", {}, ["agent_id", "required"]),
        ("unknown agent", {"agent_id": "ghost"}, ["'ghost' not found", "list_agents"]),
    ],
    # -- system --
    "get_recent_events": [
        ("limit 0", {"limit": 0}, ["limit"]),
        ("limit over 500", {"limit": 501}, ["limit"]),
        ("limit not a number", {"limit": "ten"}, ["limit"]),
        ("task_id not a string", {"task_id": 5}, ["task_id"]),
    ],
    "get_token_usage": [
        UNKNOWN_PROJECT,
        ("unknown task", {"task_id": "ghost-task"}, ["'ghost-task' not found"]),
        ("since_hours 0", {"since_hours": 0}, ["since_hours", "greater than 0"]),
        ("negative since_hours", {"since_hours": -3}, ["since_hours"]),
        ("since_hours not a number", {"since_hours": "yesterday"}, ["since_hours"]),
        ("since_hours 2**31", {"since_hours": 2**31}, ["since_hours", OVER]),
    ],
    "orchestrator_control": [
        ("missing action", {}, ["action", "required"]),
        ("unknown action", {"action": "stop"}, ["action", "pause"]),
        ("action not a string", {"action": 1}, ["action"]),
    ],
}
NO_PARAMETERS = {"get_status"}  # nothing a caller can get wrong


@pytest.fixture
def world(services: Services, home: Path, agent_clis: dict[str, str]) -> dict[str, str]:
    """Project 'alpha' (channels C-ALPHA and #gamma), tasks ready / waiting (on ready) / running / done,
    agent 'worker', and a plain file; returns the ids the table's `$names` stand for."""
    services.projects.create("Alpha")
    services.channels.link("alpha", "C-ALPHA", "#alpha")
    services.channels.link("alpha", "#gamma", "#gamma")
    ready = services.tasks.create("alpha", "ready", "d").id
    waiting = services.tasks.create("alpha", "waiting", "d", depends_on=[ready]).id
    running = services.tasks.create("alpha", "running", "d").id
    services.tasks.set_status(running, "IN_PROGRESS")
    done = services.tasks.create("alpha", "done", "d").id
    services.tasks.set_status(done, "COMPLETED")
    services.agents.create("Worker")
    a_file = home.parent / "a-file"  # outside the home, which is never a workspace (a case of its own)
    a_file.write_text("not a directory")
    return {"ready": ready, "waiting": waiting, "running": running, "done": done, "file": str(a_file),
            "home": str(home)}


def resolve(value: Any, ids: dict[str, str]) -> Any:
    """Replace `$name` placeholders with the seeded ids."""
    if isinstance(value, str):
        return re.sub(r"\$(\w+)", lambda m: ids.get(m[1], m[0]), value)
    if isinstance(value, list):
        return [resolve(v, ids) for v in value]
    if isinstance(value, dict):
        return {k: resolve(v, ids) for k, v in value.items()}
    return value


def problems_with(tool: str, text: str, needles: list[str]) -> list[str]:
    problems = []
    detail = re.sub(rf"^Error executing tool {tool}:?", "", text).strip()
    if len(detail) < 10:
        problems.append(f"a bare error with no explanation: {text!r}")
    if "internal error" in text.lower():
        problems.append(f"an internal error: {text!r}")
    missing = [n for n in needles if n.lower() not in text.lower()]
    if missing:
        problems.append(f"text does not mention {missing}: {text!r}")
    return problems


def test_the_table_covers_every_tool():
    assert set(CASES) | NO_PARAMETERS == EXPECTED_TOOLS
    assert all(len(cases) >= 2 for cases in CASES.values())


@pytest.mark.parametrize("tool", sorted(CASES))
async def test_bad_input_is_refused_cleanly(client, services, world, tool):
    problems = []
    for label, args, needles in CASES[tool]:
        args, needles = resolve(args, world), resolve(needles, world)
        before = db_snapshot(services)
        result = await client.call_tool(tool, args)
        text = " ".join(getattr(block, "text", "") for block in result.content)
        if not result.is_error:
            problems.append(f"{label}: accepted ({result.structured_content})")
        else:
            problems += [f"{label}: {p}" for p in problems_with(tool, text, needles)]
        if db_snapshot(services) != before:
            problems.append(f"{label}: the database changed")
    assert not problems, f"{tool}:\n" + "\n".join(problems)


async def test_tools_without_parameters_have_nothing_to_get_wrong(client):
    tools = {t.name: t for t in (await client.list_tools()).tools}
    for name in NO_PARAMETERS:
        assert not tools[name].input_schema.get("properties"), name


async def test_a_refused_set_active_project_keeps_the_previous_one(client, world):
    await ok(client, "set_active_project", project_id="alpha")
    await fail(client, "set_active_project", project_id="nope")
    assert (await ok(client, "create_task", title="t", description="d"))["project_id"] == "alpha"


# -- OS and SQLite limits (issue 10): each was "Internal error … This is a bug" -------------------------
LIMIT_CASES: list[tuple[str, str, dict[str, Any], list[str]]] = [
    ("read_file", "a name past 255 bytes", {"path": "$ws/" + "x" * 300}, ["path", "too long"]),
    ("compare_specs_notes", "a specs_path past 255 bytes", {"specs_path": "$ws/" + "s" * 300}, ["path", "too long"]),
    ("read_note", "a note title past 255 characters", {"title": "n" * 300}, ["title", "at most 255"]),
    ("run_command", "a command over 128 KiB", {"command": "echo " + "a" * 140_000, "working_dir": "alpha"},
     ["command", "at most"]),
    ("create_branch", "a 1 MB branch name", {"branch_name": "b" * 1_000_000}, ["branch_name", "at most"]),
    ("git_merge", "a 1 MB branch name", {"repo_id": "code", "branch_name": "b" * 1_000_000}, ["branch_name"]),
    ("add_repo", "a 1 MB default branch", {"source": "init", "name": "r2", "default_branch": "b" * 1_000_000},
     ["default_branch", "at most"]),
    ("add_repo", "a NUL byte in a clone URL", {"source": "clone", "url": "$ws/a\0b"}, ["url", "NUL"]),
    ("create_hook", "cooldown_seconds past 2**63",
     {"name": "h", "trigger": {"type": "periodic", "interval_seconds": 60}, "action": "create_task",
      "task_template": {"title": "t", "description": "d"}, "cooldown_seconds": HUGE}, ["cooldown_seconds", OVER]),
    ("create_hook", "interval_seconds past 2**63",
     {"name": "h", "trigger": {"type": "periodic", "interval_seconds": HUGE}, "action": "create_task",
      "task_template": {"title": "t", "description": "d"}}, ["interval_seconds"]),
    ("create_hook", "a task_template priority past 2**63",
     {"name": "h", "trigger": {"type": "periodic", "interval_seconds": 60}, "action": "create_task",
      "task_template": {"title": "t", "description": "d", "priority": HUGE}}, ["task_template.priority"]),
    ("create_task", "a lone surrogate in a title", {"title": "cut \ud83d", "description": "d"}, ["title", "surrogate"]),
]


@pytest.fixture
def limits_world(services: Services, tmp_path: Path) -> dict[str, str]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    services.projects.create("Alpha", workspace=str(workspace))
    services.repos.add("alpha", "init", name="code")
    return {"ws": str(workspace)}


@pytest.mark.parametrize("tool,label,args,needles", LIMIT_CASES, ids=[f"{c[0]}-{c[1]}" for c in LIMIT_CASES])
async def test_os_limits_are_input_errors(client, services, limits_world, tool, label, args, needles):
    await ok(client, "set_active_project", project_id="alpha")
    before = db_snapshot(services)
    result = await client.call_tool(tool, resolve(args, limits_world))
    text = " ".join(getattr(block, "text", "") for block in result.content)
    assert result.is_error, f"{label}: accepted"
    assert not problems_with(tool, text, needles), problems_with(tool, text, needles)
    assert db_snapshot(services) == before


async def test_a_title_too_long_for_a_file_name_is_found_by_its_slug(client, services, limits_world):
    title = "Plan " + "é" * 130  # 135 characters, but `<title>.md` is 268 bytes: no file can have that name
    await ok(client, "write_note", project_id="alpha", title=title, content="first")
    await ok(client, "append_note", project_id="alpha", title=title, content="second")
    assert "second" in (await ok(client, "read_note", project_id="alpha", title=title))["content"]


def test_services_refuse_what_the_os_or_sqlite_cannot_take(services: Services, limits_world):
    """The same bounds hold for callers that skip the tool schemas (hooks' task templates, the CLI)."""
    from agentqueue.services.errors import InvalidInputError
    from agentqueue.services.gitops import check_ref_name

    workspace = Path(limits_world["ws"])
    refusals = {
        "priority": lambda: services.tasks.create("alpha", "t", "d", priority=HUGE),
        "max_retries": lambda: services.tasks.create("alpha", "t", "d", max_retries=HUGE),
        "max_concurrent_agents": lambda: services.projects.create("X", max_concurrent_agents=HUGE),
        "since_hours": lambda: services.usage.summary(None, None, 2.0**31),
        "128 KiB": lambda: services.files.run("echo " + "a" * 140_000, workspace),
        "NUL": lambda: services.repos.add("alpha", "clone", url=f"{workspace}/a\0b"),
        "too long": lambda: check_ref_name("b" * 1_000_000),
    }
    for needle, call in refusals.items():
        with pytest.raises(InvalidInputError, match=needle):
            call()
    with pytest.raises(InvalidInputError, match="since_hours"):
        services.audit.query(since_hours=2.0**31)


async def test_a_huge_unknown_name_is_not_echoed_back_whole(client, world):
    """A 200 kB "status" or toolset name gets the usual one-sentence refusal, not the 200 kB repeated to the model."""
    for tool, args in (("list_tasks", {"status": "x" * 200_000}), ("enable_toolsets", {"toolsets": ["y" * 200_000]})):
        text = await fail(client, tool, **args)
        assert len(text) < 1_000 and ("Unknown status" in text or "Unknown toolset" in text), text[:300]
