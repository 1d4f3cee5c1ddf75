"""Every text that says why a task stopped and what to do: the failure kinds of a run, and the
reason and next step a task carries while it is BLOCKED, FAILED or PAUSED. One module, so the
wording stays consistent across get_task, get_agent_error, get_status and the daemon log."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .task_states import EXPLAINED

# Failures a retry cannot fix: the task is BLOCKED after the first such run.
NOT_RETRIED = ("auth", "prompt_too_long", "repo_config")
# Reasons that are not a failed run (get_agent_error reports these rather than the last run's error).
MOVE_CODES = ("stopped", "set_task_status", "merge_conflict", "merge_failed", "pr_closed", "ambiguous_repo",
              "workspace_failed", "sandbox_unavailable")

# config.toml is read again within a second of an edit (settings_reload.py): no restart, which would stop every run.
RELOADED = "(the daemon reads the edit within a second: no restart needed)"
CONFIG_HINT = f"under [agent_env] in $AGENTQUEUE_HOME/config.toml {RELOADED}"
LOGIN = {
    "claude-code": "run `claude auth login` as the user the daemon runs as, or set ANTHROPIC_API_KEY",
    "codex": "run `codex login` as the user the daemon runs as, or set OPENAI_API_KEY",
    "gemini": "run `gemini` once as the user the daemon runs as and sign in, or set GEMINI_API_KEY",
}
ANY_LOGIN = ("log the agent CLI in as the user the daemon runs as (`claude auth login`, `codex login`, or `gemini`), "
             "or set its API key (ANTHROPIC_API_KEY, OPENAI_API_KEY or GEMINI_API_KEY)")

# error_type -> (label, suggested fix). The engine records error_type on each task result.
FAILURE_KINDS: dict[str, tuple[str, str]] = {
    "auth": ("Authentication error",
             f"The agent CLI is not logged in or its API key is wrong: {ANY_LOGIN} {CONFIG_HINT}. Its agent kind is "
             "parked: it resumes by itself once a login check passes, or with `agentqueue resume` (a task held "
             "BLOCKED for it needs restart_task)."),
    "rate_limit": ("Rate limited",
                   "The model API is rate-limiting; the agent kind is parked and its tasks resume by themselves at "
                   "the limit's reset time or after a backoff. Lower max_concurrent_agents if it keeps happening."),
    "quota": ("Quota exhausted",
              "The account's usage quota is used up; the agent kind is parked until it resets (or a backoff) and "
              "resumes by itself, `agentqueue resume` tries sooner; raise the limit if it keeps happening."),
    "prompt_too_long": ("Prompt too long",
                        "The task description plus context is over the model's window: split the task "
                        "into smaller tasks or trim the description (edit_task), then restart_task."),
    "max_turns": ("Turn limit reached",
                  "The agent ran out of turns before finishing: split the task, or make the "
                  "description more specific, then restart_task."),
    "timeout": ("Timed out",
                "The run exceeded its wall-clock limit: split the task or raise the timeout, then restart_task."),
    "stalled": ("Stalled",
                "The agent produced no output for too long and was killed; check the task log, then restart_task."),
    "loop": ("Loop detected",
             "The agent repeated the same tool call many times and was killed; make the task more "
             "specific (what done looks like), then restart_task."),
    "killed": ("Stopped", "The run was stopped (stop_task or shutdown); restart_task runs it again."),
    "lease_lost": ("Taken over", "Its daemon lost its lease and another daemon of the team runs the task now."),
    "crashed": ("Agent crashed",
                "The agent CLI exited without a result; read the task log and get_task_result, then restart_task."),
    "recovered": ("Interrupted", "AgentQueue stopped while the agent ran; its work so far is kept on the task "
                                 "branch. restart_task runs it again."),
    "merge_conflict": ("Merge conflict",
                       "The task's branch conflicts with the default branch; merge it yourself in the repo "
                       "(git merge, resolve, commit), then skip_task."),
    "merge_failed": ("Merge failed", "The work could not be merged into the default branch; the reason says why."),
    "verify_failed": ("Verification failed",
                      "The project's verify command failed on the agent's work; read the log, then restart_task."),
    "pr_closed": ("Pull request closed", "The task's PR was closed unmerged; restart_task or skip_task."),
    "repo_config": ("Bad .agentqueue.toml",
                    "The repository's .agentqueue.toml or .worktreeinclude on its default branch cannot be used; fix "
                    "what the error names there (commit it to the default branch), then restart_task."),
    "setup_failed": ("Setup failed",
                     "The repository's setup command (.agentqueue.toml) failed in the task's new worktree, so no agent "
                     "ran; read the task log, fix the command or what it needs, then restart_task."),
    "stopped": ("Stopped", "stop_task held it; restart_task puts it back in the queue."),
    "set_task_status": ("Status set by hand", "set_task_status set it; restart_task puts it back in the queue."),
    "ambiguous_repo": ("No repo chosen",
                       "The project has several repos and no default; edit_task repo_id, then restart_task."),
    "workspace_failed": ("No workspace", "The task's git worktree could not be made; the reason says why."),
    "sandbox_unavailable": ("No sandbox", "No OS sandbox could start, so no agent ran (fail closed); install "
                                          "bubblewrap, or set [sandbox] required = false, then restart_task."),
}


def describe_failure(error_type: str | None, error_message: str | None) -> tuple[str, str]:
    """(error_type label, suggested_fix) for a recorded failure."""
    if error_type in FAILURE_KINDS:
        return FAILURE_KINDS[error_type]
    if not error_type and not error_message:
        return "Unknown error", "No error was recorded; read the task log (agentqueue://tasks/{id}/log)."
    return error_type or "Unexpected error", ("Read the task log (agentqueue://tasks/{id}/log) and the daemon log "
                                              "under $AGENTQUEUE_HOME/logs.")


@dataclass(frozen=True)
class Reason:
    reason: str
    next_step: str


def error_report(row: Mapping[str, Any], result: Mapping[str, Any] | None, held_code: str | None) -> dict[str, Any]:
    """get_agent_error's answer: from the task's row, its last result (status, summary, error_type, error_message;
    None when no run recorded one) and the reason code of the move that held it (when it is held with a reason)."""
    task_id = row["id"]
    info: dict[str, Any] = {
        "task_id": task_id, "status": row["status"],
        "retries": f"{row['retry_count']} / {row['max_retries']}",
    }
    if row["status"] in EXPLAINED and row["reason"]:
        # The task's own reason wins: a run can succeed and its task still be held (a merge refused).
        summary = ((result["summary"] or "")[:1000] or None) if result else None
        if result is not None and result["status"] == "failed" and held_code not in MOVE_CODES:
            label = describe_failure(result["error_type"], result["error_message"])[0]
            return {**info, "error_type": label, "error_message": (result["error_message"] or "")[:2000],
                    "suggested_fix": row["next_step"], "agent_summary": summary}
        label = FAILURE_KINDS[held_code][0] if held_code in FAILURE_KINDS else row["status"].capitalize()
        return {**info, "error_type": label, "error_message": row["reason"], "suggested_fix": row["next_step"],
                "agent_summary": summary}
    if result is None:
        return {**info, "error_type": None, "error_message": None, "suggested_fix": None,
                "agent_summary": None, "message": "No result recorded yet: no agent has run this task."}
    if result["status"] == "completed" and not result["error_message"]:
        return {**info, "error_type": None, "error_message": None, "suggested_fix": None,
                "agent_summary": result["summary"],
                "message": "The last run succeeded; there is no error to report."}
    label, fix = describe_failure(result["error_type"], result["error_message"])
    return {**info, "error_type": label, "error_message": (result["error_message"] or "")[:2000],
            "suggested_fix": fix.replace("{id}", task_id), "agent_summary": (result["summary"] or "")[:1000] or None}


def _short(text: Any, limit: int = 300) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _names(items: Any, limit: int = 5) -> str:
    items = list(items or [])
    shown = ", ".join(str(i) for i in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _sentence(text: str) -> str:
    return text if text.endswith((".", "!", "?", "…")) else text + "."


def _run_failed(code: str, d: Mapping[str, Any]) -> Reason:
    label, fix = describe_failure(code, d.get("error_message"))
    message = _short(d.get("error_message"))
    return Reason(_sentence(f"The run failed ({label})" + (f": {message}" if message else "")),
                  fix.replace("restart_task", f"restart_task {d['task_id']}").replace("{id}", d["task_id"]))


def _max_retries(d: Mapping[str, Any]) -> Reason:
    kind = d.get("error_type") or "crashed"
    label, fix = describe_failure(kind, d.get("error_message"))
    runs = d.get("runs")
    message = _short(d.get("error_message"))
    head = (f"It failed {runs} time{'s' if runs != 1 else ''} and has no retries left "
            f"(max_retries={d.get('max_retries')})") if runs else "Its retries are used up"
    return Reason(_sentence(f"{head}; the last error: {label}" + (f": {message}" if message else "")),
                  fix.replace("restart_task", f"restart_task {d['task_id']}").replace("{id}", d["task_id"]))


def _auth(d: Mapping[str, Any]) -> Reason:
    message = _short(d.get("error_message"))
    login = LOGIN.get(d.get("agent_type") or "", ANY_LOGIN)
    return Reason(
        _sentence("The agent could not authenticate with the model API, so it was not retried"
                  + (f": {message}" if message else "")),
        f"Log in: {login} {CONFIG_HINT}. Then restart_task {d['task_id']}.")


def _prompt_too_long(d: Mapping[str, Any]) -> Reason:
    message = _short(d.get("error_message"))
    return Reason(
        _sentence("The prompt is over the model's context window, so it was not retried"
                  + (f": {message}" if message else "")),
        f"Split the task into smaller tasks or shorten its description (edit_task {d['task_id']}), "
        f"then restart_task {d['task_id']}.")


def _paused(kind: str, d: Mapping[str, Any]) -> Reason:
    when = d.get("resume_after") or "after a backoff"
    message = _short(d.get("error_message"), 200)
    what = "The model API is rate-limiting" if kind == "rate_limit" else "The account's usage quota is used up"
    return Reason(
        _sentence(f"{what}" + (f" ({message})" if message else "") + f"; it resumes by itself at {when}"),
        f"Nothing to do: after the backoff it starts again at {when}; restart_task {d['task_id']} starts it sooner. "
        + ("Lower max_concurrent_agents if it keeps happening." if kind == "rate_limit"
           else "Raise the account's limit if it keeps happening."))


def _merge_conflict(d: Mapping[str, Any]) -> Reason:
    branch, default = d.get("branch"), d.get("default_branch") or "the default branch"
    files = _names(d.get("conflicts")) or "some files"
    # Why the merge queue sent it back no more (a cap it reached: engine/merge_queue.py), when that is why.
    refusal = f" It is not sent back again: {d['refusal']}." if d.get("refusal") else ""
    return Reason(
        f"Its branch '{branch}' conflicts with '{default}' of repo '{d.get('repo_id')}' in {files}; "
        f"the merge was aborted and the branch kept with the work.{refusal}",
        f"Merge '{branch}' into '{default}' yourself in {d.get('checkout')} (git merge {branch}, resolve {files}, "
        f"commit), then skip_task {d['task_id']} so its dependents run.")


def _merge_failed(d: Mapping[str, Any]) -> Reason:
    branch, default, checkout = d.get("branch"), d.get("default_branch") or "the default branch", d.get("checkout")
    dirty = d.get("dirty") or []
    if dirty:
        files = _names(dirty)
        return Reason(
            f"Its work is committed on branch '{branch}', but '{default}' in {checkout} could not be moved to it: "
            f"that checkout has uncommitted changes to {files}.",
            f"Commit or stash your changes to {files} in {checkout} (git commit, or git stash), "
            f"then restart_task {d['task_id']} to run it again and land its work.")
    return Reason(
        _sentence(f"Its work on branch '{branch}' could not be merged into '{default}' of repo "
                  f"'{d.get('repo_id')}': {_short(d.get('error'))}"),
        f"Fix what the error names in {checkout} (the branch keeps the work), then restart_task {d['task_id']}.")


def _ambiguous(d: Mapping[str, Any]) -> Reason:
    repos = _names(d.get("repos"), 10)
    return Reason(
        f"Project '{d.get('project_id')}' has several repos ({repos}) and no default, and the task names none, "
        "so AgentQueue cannot tell where to run it.",
        f"edit_task {d['task_id']} repo_id=<one of {repos}> (or edit_project default_repo_id=<repo>), "
        f"then restart_task {d['task_id']}.")


def _none_passed(d: Mapping[str, Any]) -> Reason:
    said = "; ".join(f"{c['task_id']}" + (f" ({c['agent_id']})" if c.get("agent_id") else "")
                     + f": {_short(c.get('reason'))}" for c in d.get("candidates") or [])
    return Reason(
        _sentence(f"None of its candidates passed the checks: {said}"),
        f"Each candidate's branch is kept (get_task {d['task_id']} lists them, get_task_diff shows one). "
        f"restart_task {d['task_id']} runs them again; delete_task on a candidate discards it and its branch.")


_EXPLAIN: dict[str, Callable[[Mapping[str, Any]], Reason]] = {
    "policy_denied": lambda d: Reason(
        f"{d['error']}",
        f"Change the policy (get_policy, edit_policy) or the agent, then restart_task {d['task_id']}."),
    "permission_request": lambda d: Reason(
        f"The agent asks to run {d['action']}" + (f" ({d['description']})" if d.get("description") else "")
        + f"; it waits for a person (request {d['request_id']}, "
        + ("its timeout starts when a notification reaches someone)." if d.get("told_first")
           else f"until {d['expires_at']})."),
        f"answer_request request_id={d['request_id']} decision=allow or deny (remember=true keeps the answer as a "
        "rule for this project); " + ("unanswered, it is denied once its timeout after the notification runs out."
                                      if d.get("told_first") else f"unanswered by {d['expires_at']} it is denied.")),
    "stopped": lambda d: Reason(f"Stopped with stop_task (it was {d.get('from')}).",
                                f"restart_task {d['task_id']} puts it back in the queue; skip_task {d['task_id']} "
                                "marks it done so its dependents run."),
    "set_task_status": lambda d: Reason(f"Set to {d.get('status')} with set_task_status (it was {d.get('from')}).",
                                        f"restart_task {d['task_id']} puts it back in the queue."),
    "max_retries": _max_retries,
    "auth": _auth,
    "prompt_too_long": _prompt_too_long,
    "merge_conflict": _merge_conflict,
    "merge_failed": _merge_failed,
    "pr_closed": lambda d: Reason(f"Its pull request {d.get('pr_url')} was closed without being merged.",
                                  f"restart_task {d['task_id']} to do the work again, or skip_task {d['task_id']} "
                                  "if it is not needed."),
    "ambiguous_repo": _ambiguous,
    "candidate_failed": lambda d: Reason(
        _sentence(f"As a candidate of task {d.get('group')} its work did not pass: {_short(d.get('error'))}"),
        f"Its branch is kept for review. The group picks among its other candidates; restart_task {d['task_id']} "
        f"runs this one again, delete_task {d['task_id']} discards it and its branch."),
    "none_passed": _none_passed,
    "workspace_failed": lambda d: Reason(
        _sentence(f"Its git worktree could not be made, so no agent ran: {_short(d.get('error'))}"),
        f"Fix what the error names (list_repos shows where each repo should be), then restart_task {d['task_id']}."),
    "sandbox_unavailable": lambda d: Reason(
        _sentence(f"No agent ran: {_short(d.get('error'))}"),
        f"Install bubblewrap (`sudo apt-get install bubblewrap`), or set `[sandbox] required = false` in "
        f"$AGENTQUEUE_HOME/config.toml {RELOADED}; then restart_task {d['task_id']}."),
    "recovered": lambda d: _run_failed("recovered", d),
    "shutdown": lambda d: _run_failed("recovered", d),
}


def explain(code: str, status: str, details: Mapping[str, Any]) -> Reason:
    """The reason and next step of a task entering BLOCKED, FAILED or PAUSED for `code`.

    `details` always holds `task_id`, `from` and `status`; the rest depends on the code (the
    error of the run, the branch and files of a merge, the resume time of a pause…)."""
    d = {**details, "status": status}
    if status == "PAUSED" and code in ("rate_limit", "quota"):
        return _paused(code, d)
    if code in _EXPLAIN:
        return _EXPLAIN[code](d)
    if code in FAILURE_KINDS or d.get("error_message"):
        return _run_failed(code, d)
    return Reason(f"It is {status} ({code}).",
                  f"get_agent_error {d['task_id']} and the task log (agentqueue://tasks/{d['task_id']}/log) say more; "
                  f"restart_task {d['task_id']} runs it again.")


def move_note(code: str, status: str, details: Mapping[str, Any]) -> str:
    """A few words on a move into any other status, for the event and the daemon log line."""
    if status == "ASSIGNED" and details.get("agent_id"):
        return f"claimed by {details['agent_id']}"
    if status == "IN_PROGRESS" and code == "agent_started":
        return f"on branch {details['branch']}" if details.get("branch") else "in the project workspace"
    if status == "COMPLETED" and code == "merged":
        if not details.get("repo_id"):
            return "done in the project workspace"
        count = details.get("files", 0)
        batch = f" in a batch of {details['batch']}" if details.get("batch") else ""  # the merge queue's batches
        return (f"merged {count} file{'s' if count != 1 else ''} into {details.get('default_branch')} of "
                f"{details['repo_id']}{batch}")
    if status == "AWAITING_APPROVAL":
        return f"PR {details['pr_url']}" if details.get("pr_url") else "waiting for approve_task"
    if status == "READY" and code == "no_room":
        what = "landing" if details.get("failed") == "merge_failed" else "making its worktree"
        return f"back in the queue: AgentQueue's home ran out of disk space while {what}; it runs once there is room"
    if status == "READY" and code == "retry":
        return f"retry {details.get('retry')} of {details.get('max_retries')}"
    return code
