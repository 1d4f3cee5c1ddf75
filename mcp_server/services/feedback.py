"""Request changes: a reviewer's comment on a task (or a line of its diff) that requeues it on the same branch.

Every comment is kept with its task (time, author, file:line) and goes into the prompt of every later
run of the task, after its description. The rerun works in the task's branch, so the earlier commits
are there; a task whose branch was merged already starts it again from the current default branch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from ..store.db import Store, now_iso
from . import send_backs
from .errors import ConflictError, InvalidInputError
from .limits import MAX_COUNT, check_path, check_range
from .task_states import CLAIMED, QUEUED, REVIEWABLE, ordered
from .tasks import Tasks

Author = Literal["board", "mcp"]
MAX_COMMENT = 10_000  # characters: many comments still fit one prompt passed as one argument (128 KiB)
PROMPT_COMMENTS = 20  # the newest comments a prompt carries; older ones are counted, not repeated
QUEUE_AUTHOR = "merge_queue"  # the author of what the merge queue tells an agent it sent work back to


@dataclass(frozen=True)
class Comment:
    comment: str
    author: str
    created_at: str
    file: str | None = None
    line: int | None = None

    def where(self) -> str:
        if not self.file:
            return ""
        return f"{self.file}:{self.line}" if self.line is not None else self.file


@dataclass(frozen=True)
class ChangesRequested:
    task_id: str
    previous_status: str
    status: str  # READY, or DEFINED while a dependency is not COMPLETED
    branch: str | None
    branch_restarted: bool  # the branch was merged already: the rerun starts it again from the default branch
    comments: int  # all comments the task has now
    message: str


class Feedback:
    def __init__(self, store: Store, tasks: Tasks) -> None:
        self.store = store
        self.tasks = tasks

    def comments(self, task_id: str) -> list[Comment]:
        """A task's comments, oldest first."""
        self.tasks.require(task_id)
        return [Comment(r["comment"], r["author"], r["created_at"], r["file"], r["line"]) for r in self.store.all(
            "SELECT comment, author, created_at, file, line FROM task_feedback WHERE task_id = ? ORDER BY id",
            (task_id,))]

    def failed_check(self, task_id: str) -> str | None:
        """The output of the checks that failed on the task's newest checked work, when its next run must still fix it
        and what the merge queue last told it does not carry it (services/send_backs.py)."""
        return send_backs.failed_check(self.store, task_id)

    def request_changes(self, task_id: str, comment: str, file: str | None = None, line: int | None = None,
                        author: Author = "mcp") -> ChangesRequested:
        """Record `comment` (on `file`, at `line` when given) and requeue the task on its branch."""
        text = _check(comment, file, line, author)
        row = self.tasks.require(task_id)
        status = row["status"]
        if status not in REVIEWABLE:
            raise ConflictError(_refusal(task_id, status))
        merged = status == "COMPLETED" and bool(row["landed_sha"] or row["pr_url"])
        new = self.tasks.entry_status(task_id)
        fields: dict[str, Any] = {"retry_count": 0, "assigned_agent": None, "resume_after": None}
        if merged:  # the old work is in the default branch: the rerun starts its branch again from there
            fields |= {"base_sha": None, "landed_sha": None, "branch": None}
        if status != "AWAITING_APPROVAL":  # a merged or closed PR: the rerun opens a new one (an open PR is updated)
            fields["pr_url"] = None
        stamp = now_iso()
        with self.store.transaction() as db:
            db["task_feedback"].insert({
                "task_id": task_id, "project_id": row["project_id"], "comment": text,
                "file": file.strip() if file else None, "line": line, "author": author, "from_status": status,
                "created_at": stamp})
            self.tasks.move(row, new, "changes_requested", fields)
            self.store.add_event("task.changes_requested", project_id=row["project_id"], task_id=task_id,
                                 payload={"from": status, "to": new, "author": author, "comment": text[:200],
                                          "file": file, "line": line, "branch_restarted": merged})
            count = int(db.execute("SELECT count(*) FROM task_feedback WHERE task_id = ?", (task_id,)).fetchone()[0])
        return ChangesRequested(task_id, status, new, row["branch"], merged, count,
                                _message(task_id, new, row["branch"], merged, row["repo_id"]))


def _check(comment: str, file: str | None, line: int | None, author: str) -> str:
    text = comment.strip()
    if not text:
        raise InvalidInputError("comment is empty. Say what the agent should change, e.g. 'Handle an empty list'.")
    if len(text) > MAX_COMMENT:
        raise InvalidInputError(f"comment is {len(text)} characters; the limit is {MAX_COMMENT}. Shorten it, or "
                                "split it into several comments.")
    if "\0" in text:
        raise InvalidInputError("comment contains a NUL byte (\\0). Remove it.")
    if file is not None:
        if not file.strip():
            raise InvalidInputError("file is empty. Give a path from the task's diff, or leave it out.")
        check_path("file", file)
    if line is not None:
        if file is None:
            raise InvalidInputError("line needs a file. Give the file the line is in, or leave line out.")
        check_range("line", line, 1, MAX_COUNT)
    if author not in ("board", "mcp"):
        raise InvalidInputError(f"Unknown author {author!r}. Use 'board' or 'mcp'.")
    return text


def _refusal(task_id: str, status: str) -> str:
    allowed = ", ".join(ordered(REVIEWABLE))
    if status in CLAIMED:
        step = f"stop_task {task_id} first (its branch keeps the work), then request_changes."
    elif status in QUEUED:
        step = f"it has not run since; edit_task {task_id} to change its description instead."
    else:  # PAUSED: it resumes by itself
        step = f"stop_task {task_id} first, then request_changes."
    return f"Task '{task_id}' is {status}; changes can be requested only on {allowed} tasks: {step}"


def _message(task_id: str, status: str, branch: str | None, merged: bool, repo_id: str | None) -> str:
    queued = "queued to run again" if status == "READY" else "queued; it runs again when its dependencies complete"
    if repo_id is None:
        return f"Task '{task_id}' is {queued} in the project workspace, with your comment in its prompt."
    if not branch:
        return f"Task '{task_id}' is {queued} with your comment in its prompt (it has no branch yet)."
    if merged:
        return (f"Task '{task_id}' is {queued} with your comment in its prompt. Its branch '{branch}' was merged "
                "already, so the rerun starts again from the current default branch (which has the earlier work), "
                f"on a new branch '{branch}-2' if '{branch}' is still there and the default branch lacks its commits "
                "(a squash-merged PR).")
    return f"Task '{task_id}' is {queued} on its branch '{branch}' (its earlier commits stay) with your comment."


def prompt_section(comments: list[Comment], failed_check: str | None = None) -> str:
    """The part of a run's prompt that carries the reviewer's comments, then why the merge queue sent the work back
    when that is the newest thing said about it, then the output of the checks that failed on the task's newest
    checked work when the run must still fix it and nothing above carries it (`failed_check`,
    services/send_backs.py: a conflict came after it, or the run was retried for it); '' when there is none."""
    review = [c for c in comments if c.author != QUEUE_AUTHOR]
    sent_back = comments[-1] if comments and comments[-1].author == QUEUE_AUTHOR else None
    text = _review_section(review)
    if sent_back is not None:
        text += ("\n" if text else "") + "## Sent back by the merge queue\n" + sent_back.comment.rstrip() + "\n"
    if failed_check and failed_check.strip():
        fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", failed_check)), default=0) + 1)
        text += (("\n" if text else "") + "## The checks failed on your last checked work\n"
                 "The repository's checks failed on this task's work the last time they ran on it, and they have not "
                 "passed since. Fix that too before you end your run (run the check yourself to see):\n"
                 f"{fence}\n{failed_check.strip()}\n{fence}\n")
    return text


def _review_section(comments: list[Comment]) -> str:
    if not comments:
        return ""
    shown = comments[-PROMPT_COMMENTS:]
    lines = ["## Changes requested by the reviewer",
             "An earlier run of this task was reviewed. Your earlier work is in this worktree (its commits are on "
             "this branch): keep what is right and make these changes, newest last:"]
    if len(comments) > len(shown):
        lines.append(f"({len(comments) - len(shown)} earlier comment(s) not repeated here.)")
    for c in shown:
        where = f" on {c.where()}" if c.file else ""
        body = c.comment.replace("\n", "\n  ")
        lines.append(f"- [{c.created_at[:16].replace('T', ' ')}{where}] {body}")
    return "\n".join(lines) + "\n"
