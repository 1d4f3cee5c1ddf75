"""The SQLite backend (the embedded default): one file under AGENTQUEUE_HOME, WAL, foreign keys, forward migrations.

Every state change goes through `transaction()`, which holds a process-wide lock and one SQLite
transaction (BEGIN IMMEDIATE), so a crash or an error leaves either all of a change or none of it.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlite_utils

from ..version import version as code_version
from .backup import copy_store, migration_backup, migration_backups
from .base import SchemaTooNewError, Store, StoreBusy, StoreNotMigrated, StoreOpenError, unusable_file

log = logging.getLogger("agentqueue.store")

# Rows each ANALYZE that PRAGMA optimize runs reads per index (SQLite suggests 100-1000): statistics in milliseconds
# on a store of any size, never a pass over a whole table while the daemon waits on its one connection.
ANALYSIS_LIMIT = 1000
# The first SQLite whose `PRAGMA optimize=0x10002` checks every table (the 0x10000 bit); older ones look only at
# the tables this connection has queried, which at open is none, so the store does that check itself.
OPTIMIZE_CHECKS_ALL = (3, 46, 0)


def _m1_core(db: sqlite_utils.Database) -> None:
    """Version 1: the core tables."""
    db.table("projects").create(
        {
            "id": str, "name": str, "status": str, "credit_weight": float,
            "max_concurrent_agents": int, "budget_limit": int, "workspace": str,
            "created_at": str, "updated_at": str,
        },
        pk="id", not_null={"name", "status", "workspace"},
    )
    db.table("project_channels").create(
        {"channel_id": str, "project_id": str, "channel_name": str, "is_control": int, "created_at": str},
        pk="channel_id", foreign_keys=[("project_id", "projects", "id")],
    )
    db.table("repos").create(
        {
            "id": str, "project_id": str, "source_type": str, "url": str, "source_path": str,
            "default_branch": str, "checkout_path": str, "created_at": str,
        },
        pk="id", foreign_keys=[("project_id", "projects", "id")],
    )
    db.table("agents").create(
        {
            "id": str, "name": str, "agent_type": str, "state": str, "current_task": str,
            "repo_id": str, "model": str, "capabilities": str, "command": str, "pid": int,
            "created_at": str, "updated_at": str,
        },
        pk="id",
    )
    db.table("tasks").create(
        {
            "id": str, "project_id": str, "title": str, "description": str, "status": str,
            "priority": int, "repo_id": str, "branch": str, "assigned_agent": str,
            "retry_count": int, "max_retries": int, "requires_approval": int, "agent_type": str,
            "pr_url": str, "resume_after": str, "created_at": str, "updated_at": str,
        },
        pk="id", foreign_keys=[("project_id", "projects", "id")],
        not_null={"project_id", "title", "status"},
    )
    db.table("task_dependencies").create(
        {"task_id": str, "depends_on": str},
        pk=("task_id", "depends_on"),
        foreign_keys=[("task_id", "tasks", "id"), ("depends_on", "tasks", "id")],
    )
    db.table("events").create(
        {
            "id": int, "event_type": str, "project_id": str, "task_id": str, "agent_id": str,
            "payload": str, "timestamp": str,
        },
        pk="id",
    )
    db.table("token_ledger").create(
        {
            "id": int, "project_id": str, "task_id": str, "agent_id": str, "hook_id": str,
            "input": int, "output": int, "cache_read": int, "cache_write": int, "total": int,
            "cost_usd": float, "timestamp": str,
        },
        pk="id",
    )
    db.table("task_results").create(
        {
            "id": int, "task_id": str, "attempt": int, "agent_id": str, "status": str,
            "summary": str, "files_changed": str, "error_type": str, "error_message": str,
            "input": int, "output": int, "cache_read": int, "cache_write": int, "total": int,
            "cost_usd": float, "duration_s": float, "created_at": str,
        },
        pk="id", foreign_keys=[("task_id", "tasks", "id")],
    )
    db.table("hooks").create(
        {
            "id": str, "project_id": str, "name": str, "enabled": int, "trigger": str,
            "action": str, "prompt_template": str, "task_template": str, "context_steps": str,
            "cooldown_seconds": int, "llm_config": str, "last_fired_at": str,
            "created_at": str, "updated_at": str,
        },
        pk="id", foreign_keys=[("project_id", "projects", "id")],
    )
    db.table("hook_runs").create(
        {
            "id": str, "hook_id": str, "project_id": str, "trigger_reason": str, "status": str,
            "skipped_reason": str, "event_data": str, "context_results": str, "prompt_sent": str,
            "llm_response": str, "tokens_used": int, "started_at": str, "completed_at": str,
        },
        pk="id", foreign_keys=[("hook_id", "hooks", "id")],
    )
    db.table("settings").create({"key": str, "value": str}, pk="key")


def _m2_lease_and_indexes(db: sqlite_utils.Database) -> None:
    """Version 2: the daemon lease row and the indexes the hot queries use."""
    db.table("daemon_lease").create(
        {"id": int, "pid": int, "hostname": str, "started_at": str, "heartbeat_at": str}, pk="id"
    )
    db.table("tasks").create_index(["project_id", "status"], if_not_exists=True)
    db.table("tasks").create_index(["status", "priority", "created_at"], if_not_exists=True)
    db.table("task_dependencies").create_index(["depends_on"], if_not_exists=True)
    db.table("events").create_index(["project_id", "id"], if_not_exists=True)
    db.table("events").create_index(["task_id", "id"], if_not_exists=True)
    db.table("token_ledger").create_index(["project_id", "timestamp"], if_not_exists=True)
    db.table("task_results").create_index(["task_id", "attempt"], if_not_exists=True)


def _m3_landing_shas(db: sqlite_utils.Database) -> None:
    """Version 3: where a task's work landed, so its diff outlives its branch."""
    db.table("tasks").add_column("base_sha", str)
    db.table("tasks").add_column("landed_sha", str)


def _m4_verify_command(db: sqlite_utils.Database) -> None:
    """Version 4: a project's verify command, run on an agent's work before it lands."""
    db.table("projects").add_column("verify_command", str)


def _m5_repo_defaults_and_reasons(db: sqlite_utils.Database) -> None:
    """Version 5: a project's default repo, why a task is held (reason, next step), a result's warning."""
    db.table("projects").add_column("default_repo_id", str)
    db.table("tasks").add_column("reason", str)
    db.table("tasks").add_column("next_step", str)
    db.table("task_results").add_column("warning", str)
    # Wherever a repo's record goes, no project keeps pointing at it as its default.
    db.execute("CREATE TRIGGER IF NOT EXISTS repos_clear_default AFTER DELETE ON repos BEGIN "
               "UPDATE projects SET default_repo_id = NULL WHERE default_repo_id = OLD.id; END")


def _m6_permission_requests(db: sqlite_utils.Database) -> None:
    """Agents' questions to a person (permission requests), and which task queued a task."""
    db.table("permission_requests").create(
        {
            "id": str, "task_id": str, "project_id": str, "agent_id": str, "tool": str, "input": str,
            "action": str, "description": str, "suggested_rule": str, "status": str, "decided_by": str,
            "message": str, "created_at": str, "expires_at": str, "answered_at": str,
        },
        pk="id",
    )
    db.table("permission_requests").create_index(["status", "created_at"])
    db.table("permission_requests").create_index(["task_id", "created_at"])
    db.table("tasks").add_column("parent_task_id", str)
    db.table("tasks").add_column("depth", int)


def _m7_audit_log(db: sqlite_utils.Database) -> None:
    """Version 7: the audit log of tool calls and agent permission decisions (append-only; pruned by age)."""
    db.table("audit_log").create(
        {
            "id": int, "time": str, "actor": str, "project_id": str, "task_id": str, "action": str,
            "arguments": str, "decision": str, "decided_by": str, "outcome": str, "message": str,
            "duration_ms": int,
        },
        pk="id", not_null={"time", "actor", "action", "decision", "outcome"},
    )
    db.table("audit_log").create_index(["time"], if_not_exists=True)
    db.table("audit_log").create_index(["project_id", "time"], if_not_exists=True)
    db.table("audit_log").create_index(["task_id", "time"], if_not_exists=True)
    # A row once written is never rewritten (pruning by age deletes whole rows).
    db.execute("CREATE TRIGGER IF NOT EXISTS audit_log_append_only BEFORE UPDATE ON audit_log BEGIN "
               "SELECT RAISE(ABORT, 'audit_log is append-only'); END")


def _m8_agent_paused(db: sqlite_utils.Database) -> None:
    """Version 8: an agent can be paused (it takes no new task; a run it has finishes)."""
    db.table("agents").add_column("paused", int, not_null_default=0)


def _m9_task_feedback(db: sqlite_utils.Database) -> None:
    """Version 9: reviewers' requested changes on a task (request_changes), fed to its next runs' prompts."""
    db.table("task_feedback").create(
        {"id": int, "task_id": str, "project_id": str, "comment": str, "file": str, "line": int, "author": str,
         "from_status": str, "created_at": str},
        pk="id", not_null={"task_id", "comment", "author", "created_at"},
    )
    db.table("task_feedback").create_index(["task_id", "id"], if_not_exists=True)
    # Comments belong to their task: deleting it (or its project) deletes them, whichever path deletes it.
    db.execute("CREATE TRIGGER IF NOT EXISTS task_feedback_cleanup AFTER DELETE ON tasks BEGIN "
               "DELETE FROM task_feedback WHERE task_id = OLD.id; END")


def _m10_flat_costs(db: sqlite_utils.Database) -> None:
    """Version 10: costs flat in the task count (design.md "Flat costs at 100,000 tasks").

    `task_counts` keeps the number of tasks per project and status, maintained by triggers on every
    path that writes `tasks`, so counts never scan the table. Partial indexes hold only the rows the
    hot queries read: open tasks in queue order, READY tasks per project, held tasks by age.
    """
    db.execute("CREATE TABLE IF NOT EXISTS task_counts (project_id TEXT NOT NULL, status TEXT NOT NULL, "
               "n INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (project_id, status)) WITHOUT ROWID")
    db.execute("DELETE FROM task_counts")
    db.execute("INSERT INTO task_counts (project_id, status, n) "
               "SELECT project_id, status, count(*) FROM tasks GROUP BY project_id, status")
    up = ("INSERT INTO task_counts (project_id, status, n) VALUES (NEW.project_id, NEW.status, 1) "
          "ON CONFLICT (project_id, status) DO UPDATE SET n = n + 1;")
    down = "UPDATE task_counts SET n = n - 1 WHERE project_id = OLD.project_id AND status = OLD.status;"
    db.execute(f"CREATE TRIGGER IF NOT EXISTS task_counts_insert AFTER INSERT ON tasks BEGIN {up} END")
    db.execute(f"CREATE TRIGGER IF NOT EXISTS task_counts_delete AFTER DELETE ON tasks BEGIN {down} END")
    db.execute("CREATE TRIGGER IF NOT EXISTS task_counts_update AFTER UPDATE OF status, project_id ON tasks "
               f"WHEN OLD.status IS NOT NEW.status OR OLD.project_id IS NOT NEW.project_id BEGIN {down} {up} END")
    db.execute("CREATE INDEX IF NOT EXISTS tasks_open_order ON tasks (priority, created_at, id) "
               "WHERE status != 'COMPLETED'")
    db.execute("CREATE INDEX IF NOT EXISTS tasks_open_project_order ON tasks (project_id, priority, created_at, id) "
               "WHERE status != 'COMPLETED'")
    db.execute("CREATE INDEX IF NOT EXISTS tasks_ready_order ON tasks (project_id, priority, created_at, id) "
               "WHERE status = 'READY'")
    db.execute("CREATE INDEX IF NOT EXISTS tasks_ready_kind ON tasks (agent_type, repo_id) WHERE status = 'READY'")
    db.execute("CREATE INDEX IF NOT EXISTS tasks_held_age ON tasks (updated_at, id) "
               "WHERE status IN ('BLOCKED', 'FAILED', 'PAUSED', 'WAITING_INPUT')")
    db.execute("CREATE INDEX IF NOT EXISTS token_ledger_window ON token_ledger (timestamp, project_id, total)")
    db.execute("CREATE INDEX IF NOT EXISTS task_results_recent ON task_results (created_at)")


def _m11_team(db: sqlite_utils.Database) -> None:
    """Version 11: team mode (design.md "Team mode"). The daemons sharing the queue with their leases, the daemon
    that owns each run, and an agent's label (it runs only on a daemon that has the label)."""
    db.table("daemons").create(
        {"id": str, "hostname": str, "pid": int, "home": str, "labels": str, "started_at": str,
         "heartbeat_at": str, "lease_until": str},
        pk="id", not_null={"hostname", "pid", "home", "started_at", "heartbeat_at", "lease_until"},
    )
    db.table("tasks").add_column("owner", str)
    db.table("agents").add_column("label", str)
    db.execute("CREATE INDEX IF NOT EXISTS tasks_owned ON tasks (owner) WHERE owner IS NOT NULL")


def _m12_planned_queries(db: sqlite_utils.Database) -> None:
    """Version 12: indexes whose plans are the same with statistics or without, and flat window sums
    (design.md "The store plans its queries").

    Each hot query gets one index that serves it best under any statistics (its equality columns first, then
    its order), so a store that was never analysed plans it as an analysed one does. `token_hours` keeps the
    tokens per hour and project (a trigger on the ledger), so the scheduler's 24 h window reads 25 buckets per
    project and at most one hour of ledger rows, however many runs the day had.
    """
    # get_task's sandbox refusals: the task's `sandbox:deny` rows directly, not a walk over all its audit rows.
    db.execute("DROP INDEX IF EXISTS idx_audit_log_task_id_time")
    db.execute("CREATE INDEX IF NOT EXISTS audit_log_task_action ON audit_log (task_id, action, time)")
    # get_status' held tasks, newest first per status (one short range each), replacing the partial index by age
    # that an unanalysed store never picked over the status index.
    db.execute("DROP INDEX IF EXISTS tasks_held_age")
    db.execute("CREATE INDEX IF NOT EXISTS tasks_status_age ON tasks (status, updated_at, id)")
    # get_status' "completed with no change": only results that carry a warning, not every result of the day.
    db.execute("CREATE INDEX IF NOT EXISTS task_results_warned ON task_results (created_at) WHERE warning IS NOT NULL")
    db.execute("CREATE TABLE IF NOT EXISTS token_hours (hour TEXT NOT NULL, project_id TEXT NOT NULL, "
               "total INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (hour, project_id)) WITHOUT ROWID")
    db.execute("DELETE FROM token_hours")
    db.execute("INSERT INTO token_hours (hour, project_id, total) SELECT substr(timestamp, 1, 13), project_id, "
               "sum(coalesce(total, 0)) FROM token_ledger WHERE project_id IS NOT NULL GROUP BY 1, 2")
    db.execute("CREATE TRIGGER IF NOT EXISTS token_hours_insert AFTER INSERT ON token_ledger "
               "WHEN NEW.project_id IS NOT NULL BEGIN "
               "INSERT INTO token_hours (hour, project_id, total) "
               "VALUES (substr(NEW.timestamp, 1, 13), NEW.project_id, coalesce(NEW.total, 0)) "
               "ON CONFLICT (hour, project_id) DO UPDATE SET total = total + excluded.total; END")


def _m13_merge_queue(db: sqlite_utils.Database) -> None:
    """Version 13: the merge queue (design.md "Merge queue"): how many times a project's tasks are sent back to
    their agent on a conflict or a failing check, and how a repo's task branches are brought up to date."""
    db.table("projects").add_column("merge_retries", int)
    db.table("repos").add_column("update_method", str)
    # get_status' sent-back tasks waiting for their agent: a few rows, never a pass over the READY ones.
    db.execute("CREATE INDEX IF NOT EXISTS tasks_sent_back ON tasks (id) WHERE status = 'READY' "
               "AND assigned_agent IS NOT NULL")


def _m14_merge_batch(db: sqlite_utils.Database) -> None:
    """Version 14: the most tasks a repo's merge queue lands in one batch (design.md "Batches"; NULL: one by one)."""
    db.table("repos").add_column("merge_batch", int)


def _m15_best_of_n(db: sqlite_utils.Database) -> None:
    """Version 15: best of N (design.md "Best of N"): a group task's candidate count, how its winner is picked and
    which candidate won; a candidate's group; how a project's groups pick their winner."""
    db.table("tasks").add_column("best_of", int)
    db.table("tasks").add_column("pick", str)
    db.table("tasks").add_column("chosen", str)
    db.table("tasks").add_column("candidate_of", str)
    db.table("projects").add_column("best_of_pick", str)
    db.execute("CREATE INDEX IF NOT EXISTS tasks_candidate_of ON tasks (candidate_of) WHERE candidate_of IS NOT NULL")


def _m16_partial_runs(db: sqlite_utils.Database) -> None:
    """Version 16 (issue 22): runs paid for up to where they stopped
    (design.md "Every run is paid for"). `partial` marks a run whose CLI never gave its final accounting (killed,
    stopped, timed out, died): its tokens and cost are what its stream showed up to then. Its cost may be NULL: it
    used a model of unknown price."""
    db.table("token_ledger").add_column("partial", int, not_null_default=0)
    db.table("task_results").add_column("partial", int, not_null_default=0)


def _m17_parked_agents(db: sqlite_utils.Database) -> None:
    """Version 17: agent kinds parked for the whole queue (design.md "Logins and quotas for the whole queue"): a
    login that fails or a usage limit stops every task of the kind until a check, a reset time or a person resumes
    it. One row per kind and account (the credentials a daemon gives that kind); kept after it resumes (resumed_at
    set) so the next limit backs off further."""
    db.table("parked_agents").create(
        {"agent_type": str, "account": str, "reason": str, "until": str, "message": str, "fix": str,
         "parked_at": str, "resumed_at": str, "streak": int, "next_check": str, "checks": int, "owner": str},
        pk=("agent_type", "account"), not_null={"agent_type", "account", "reason", "parked_at"},
    )


def _m18_notifications(db: sqlite_utils.Database) -> None:
    """Version 18 (issue 22): notifications when a person is needed
    (design.md "Notifications"): one row per event and notifier URL (claimed by one daemon, retried with backoff),
    each URL's last success and error, and when a permission request's first notification went out (its timeout
    counts from then)."""
    db.execute("CREATE TABLE IF NOT EXISTS notifications (id INTEGER PRIMARY KEY, event_id INTEGER NOT NULL, "
               "target TEXT NOT NULL, kind TEXT NOT NULL, mode TEXT NOT NULL, project_id TEXT, task_id TEXT, "
               "request_id TEXT, title TEXT NOT NULL, body TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'pending', "
               "attempts INTEGER NOT NULL DEFAULT 0, next_at TEXT, claimed_by TEXT, claimed_until TEXT, "
               "created_at TEXT NOT NULL, sent_at TEXT, last_error TEXT, UNIQUE (event_id, target))")
    db.execute("CREATE INDEX IF NOT EXISTS notifications_pending ON notifications (status, target, next_at)")
    db.execute("CREATE TABLE IF NOT EXISTS notify_targets (target TEXT PRIMARY KEY, shown TEXT NOT NULL, "
               "last_ok_at TEXT, last_error_at TEXT, last_error TEXT, last_digest_at TEXT)")
    db.table("permission_requests").add_column("notified_at", str)


def _m19_routing_and_instructions(db: sqlite_utils.Database) -> None:
    """Version 19 (issue 23): a task's routing (the capabilities it needs, the
    model it runs with) and the standing instructions of projects and agents (text added to every prompt of theirs).

    A task's capabilities are stored as ",a,b," (sorted, each wrapped in commas) so the scheduler's query can test
    "every one is the agent's" with nested REPLACE, the same SQL on SQLite and PostgreSQL; NULL needs none."""
    db.table("tasks").add_column("capabilities", str)
    db.table("tasks").add_column("model", str)
    db.table("projects").add_column("instructions", str)
    db.table("agents").add_column("instructions", str)
    # get_status' kinds of READY task (services/system.py warnings) now include what they need: still one index.
    db.execute("DROP INDEX IF EXISTS tasks_ready_kind")
    db.execute("CREATE INDEX tasks_ready_kind ON tasks (agent_type, repo_id, capabilities) WHERE status = 'READY'")


# Append only: a migration that shipped is never edited, so old databases upgrade predictably.
MIGRATIONS: list[Callable[[sqlite_utils.Database], None]] = [
    _m1_core, _m2_lease_and_indexes, _m3_landing_shas, _m4_verify_command, _m5_repo_defaults_and_reasons,
    _m6_permission_requests, _m7_audit_log, _m8_agent_paused, _m9_task_feedback, _m10_flat_costs, _m11_team,
    _m12_planned_queries, _m13_merge_queue, _m14_merge_batch, _m15_best_of_n, _m16_partial_runs,
    _m17_parked_agents, _m18_notifications,
    _m19_routing_and_instructions]
SCHEMA_VERSION = len(MIGRATIONS)


def too_new(path: Path, found: int) -> str:
    """The refusal of a store written by a newer AgentQueue, with the two ways out: the newer code again, or the copy
    its migration kept of the store at a schema this code reads."""
    kept = [p for schema, p in migration_backups(path) if schema <= SCHEMA_VERSION]
    back = (f" To go back to this version instead, stop the daemon and `agentqueue restore {kept[-1]}`: the copy kept "
            "before the upgrade migrated the store (what changed since is lost)." if kept else "")
    return (f"{path} has schema version {found}, newer than this AgentQueue ({code_version()}) understands "
            f"({SCHEMA_VERSION}): a newer AgentQueue wrote it, and nothing was changed. Upgrade AgentQueue to use it "
            f"again (pip install -U agentqueue, or the checkout it came from).{back}")


class SqliteStore(Store):
    """The embedded store: one SQLite file, one connection, WAL."""

    backend = "sqlite"
    ordered_join = "CROSS JOIN"

    def __init__(self, path: Path, *, migrate_to: int = SCHEMA_VERSION, migrate: bool = True) -> None:
        """The store at `path`, migrated to `migrate_to` (a copy of it kept beside it first). `migrate=False`: a store
        at any other schema than this code's is refused (StoreNotMigrated), never changed, nor is one created."""
        super().__init__()
        self.path = path
        if migrate:
            path.parent.mkdir(parents=True, exist_ok=True)
            # Private before SQLite writes a byte (its -wal and -shm files take the database's mode).
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        if os.stat(path).st_mode & 0o077:
            os.chmod(path, 0o600)
        try:
            conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
            self.db = sqlite_utils.Database(conn)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute(f"PRAGMA analysis_limit={ANALYSIS_LIMIT}")
            if migrate:
                self._migrate(migrate_to)
            else:
                self._refuse_other_schema()
            # WAL lets this second connection read the last commit while a writer waits for (or holds) the lock.
            reader = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
            reader.execute("PRAGMA busy_timeout=30000")
            reader.execute("PRAGMA foreign_keys=ON")
            self.reader = sqlite_utils.Database(reader)
            self.optimize(at_open=True)
        except sqlite3.DatabaseError as error:
            # A damaged or foreign file: say so in one sentence, never touch it.
            raise unusable_file(path, error) from None
        except StoreOpenError:
            self.db.close()
            raise

    # -- schema -------------------------------------------------------------------------------
    @property
    def schema_version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _refuse_other_schema(self) -> None:
        current = self.schema_version
        if current > SCHEMA_VERSION:
            raise SchemaTooNewError(too_new(self.path, current))
        if current < SCHEMA_VERSION:
            raise StoreNotMigrated(self.path, current, SCHEMA_VERSION)

    def _migrate(self, target: int) -> None:
        """Every migration from the store's version to `target`, each in a transaction of its own; an existing store is
        first copied beside itself (store/backup.py) and the migration logged, so nothing changes silently and the
        AgentQueue that wrote it can be gone back to. Another process migrating at the same time (a terminal's read
        and a daemon starting) is safe: each step takes the write lock, then reads the version again."""
        current = self.schema_version
        if current > SCHEMA_VERSION:
            raise SchemaTooNewError(too_new(self.path, current))
        if current >= target:
            return
        with self.lock:
            if current == 0 and not self.db.conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone():
                log.info("store %s created at schema version %d", self.path, target)
            else:
                copy = self._backup_before_migrating(current)
                log.warning("store %s: migrating from schema version %d to %d (AgentQueue %s); the store as it was is "
                            "kept at %s", self.path, current, target, code_version(), copy)
            for version in range(current + 1, target + 1):
                with self._atomic(concurrent=False):  # BEGIN IMMEDIATE: the version is read under the write lock
                    if self.schema_version >= version:
                        continue  # another process ran this step meanwhile
                    MIGRATIONS[version - 1](self.db)
                    self.db.execute(f"PRAGMA user_version={version}")
            if current:
                log.info("store %s: now at schema version %d", self.path, self.schema_version)

    def _backup_before_migrating(self, current: int) -> Path:
        try:
            while True:
                target = migration_backup(self.path, current)
                try:
                    copy_store(self.db.conn, target)
                    return target
                except FileExistsError:
                    continue  # another process took that name within the same second: the next one
        except (OSError, sqlite3.Error) as error:
            raise StoreOpenError(
                f"Could not keep a copy of {self.path} before migrating it from schema version {current} ({error}), "
                f"so it was not migrated: nothing was changed. Free space beside it ({self.path.parent}), then start "
                "again.") from None

    # -- statistics ---------------------------------------------------------------------------
    def optimize(self, at_open: bool = False) -> list[str]:
        """SQLite's advice for a long-lived connection: `PRAGMA optimize=0x10002` when it opens (every table that
        was never analysed, or has grown or shrunk tenfold since, is analysed), plain `PRAGMA optimize` now and then
        (the daemon: hourly). Returns the tables analysed; a store that is busy or read-only is left as it is."""
        try:
            with self.lock:
                if at_open and sqlite3.sqlite_version_info < OPTIMIZE_CHECKS_ALL:
                    return self._analyse_stale()
                before = self._stat_rows()
                self.db.conn.execute("PRAGMA optimize=0x10002" if at_open else "PRAGMA optimize")
                return sorted({t for t, n in self._stat_rows().items() if before.get(t) != n})
        except sqlite3.OperationalError as error:  # locked by another process, or a read-only file
            log.info("query planner statistics not refreshed (%s)", error)
            return []

    def _stat_rows(self) -> dict[str, str]:
        if not self.db.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'").fetchone():
            return {}
        return {r[0]: r[1] for r in self.db.conn.execute("SELECT tbl, group_concat(stat, ';') FROM sqlite_stat1 "
                                                          "GROUP BY tbl")}

    def _analyse_stale(self) -> list[str]:
        """What `optimize=0x10002` does on SQLite 3.46+, by hand for older ones: ANALYZE each indexed table that
        has rows and no statistics, or ten times more or fewer rows than its statistics say. The size is the last
        rowid (one index step, so the check costs nothing on a store whose statistics hold); WITHOUT ROWID tables
        (the trigger-kept counts) are read by primary key only and need none."""
        conn = self.db.conn
        known: dict[str, int] = {}
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'").fetchone():
            for table, stat in conn.execute("SELECT tbl, stat FROM sqlite_stat1 WHERE idx IS NOT NULL"):
                known[table] = max(known.get(table, 0), int(str(stat).split()[0]))
        stale = []
        for (table,) in conn.execute("SELECT DISTINCT tbl_name FROM sqlite_master WHERE type = 'index' "
                                     "AND tbl_name NOT LIKE 'sqlite%' ORDER BY tbl_name").fetchall():
            try:
                size = int(conn.execute(f'SELECT coalesce(max(rowid), 0) FROM "{table}"').fetchone()[0])
            except sqlite3.OperationalError:  # WITHOUT ROWID
                continue
            if size and (table not in known or not known[table] / 10 < size < known[table] * 10):
                stale.append(table)
        for table in stale:
            conn.execute(f'ANALYZE "{table}"')
        return stale

    # -- transactions -------------------------------------------------------------------------
    @contextmanager
    def _atomic(self, concurrent: bool, wait: bool = True) -> Iterator[None]:
        """BEGIN IMMEDIATE for the outermost transaction: it takes the write lock at once, waiting out the busy
        timeout, instead of reading first and failing on the upgrade ("database is locked") when another
        process writes; nested ones are savepoints. SQLite has one writer, so `concurrent` changes nothing."""
        conn = self.db.conn
        if conn.in_transaction:
            with self.db.atomic():
                yield
            return
        if wait:
            conn.execute("BEGIN IMMEDIATE")
        else:
            conn.execute("PRAGMA busy_timeout=0")
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as error:
                raise StoreBusy(str(error)) from None
            finally:
                conn.execute("PRAGMA busy_timeout=30000")
        try:
            yield
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        with self.lock, self._read_lock:
            self.db.close()
            if self.reader is not None:
                self.reader.close()
