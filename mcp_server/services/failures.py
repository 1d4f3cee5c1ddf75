"""How an agent run can fail, and what the user should do about each kind."""

from __future__ import annotations

# error_type -> (label, suggested fix). The engine records error_type on each task result.
FAILURE_KINDS: dict[str, tuple[str, str]] = {
    "auth": ("Authentication error",
             "The agent CLI is not logged in or its API key is wrong: run `claude login` (or set "
             "ANTHROPIC_API_KEY / OPENAI_API_KEY / GEMINI_API_KEY for the daemon), then restart_task."),
    "rate_limit": ("Rate limited",
                   "The model API is rate-limiting; the task resumes by itself after a backoff. "
                   "Lower max_concurrent_agents if it keeps happening."),
    "quota": ("Quota exhausted",
              "The account's usage quota is used up; wait for it to reset or raise the limit, then restart_task."),
    "prompt_too_long": ("Prompt too long",
                        "The task description plus context is over the model's window: split the task "
                        "into smaller tasks or trim the description, then restart_task."),
    "max_turns": ("Turn limit reached",
                  "The agent ran out of turns before finishing: split the task, or make the "
                  "description more specific, then restart_task."),
    "timeout": ("Timed out", "The run exceeded its wall-clock limit: split the task or raise the timeout, then restart_task."),
    "stalled": ("Stalled", "The agent produced no output for too long and was killed; check the task log, then restart_task."),
    "loop": ("Loop detected",
             "The agent repeated the same tool call many times and was killed; make the task more "
             "specific (what done looks like), then restart_task."),
    "killed": ("Stopped", "The run was stopped (stop_task or shutdown); restart_task runs it again."),
    "crashed": ("Agent crashed", "The agent CLI exited without a result; read the task log and get_task_result, then restart_task."),
    "merge_conflict": ("Merge conflict",
                       "The task's branch conflicts with the default branch; resolve it with merge_branch "
                       "in the repo, or restart_task to redo the work on a fresh branch."),
    "verify_failed": ("Verification failed", "The project's verify command failed on the agent's work; read the log, then restart_task."),
}


def describe_failure(error_type: str | None, error_message: str | None) -> tuple[str, str]:
    """(error_type label, suggested_fix) for a recorded failure."""
    if error_type in FAILURE_KINDS:
        return FAILURE_KINDS[error_type]
    if not error_type and not error_message:
        return "Unknown error", "No error was recorded; read the task log (agentqueue://tasks/{id}/log)."
    return error_type or "Unexpected error", "Read the task log (agentqueue://tasks/{id}/log) and the daemon log under $AGENTQUEUE_HOME/logs."
