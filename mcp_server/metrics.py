"""`GET /metrics`: the queue in Prometheus text format, read from the store at scrape time.

Tasks, agents, runs, tokens, cost and hook runs come from their tables when Prometheus scrapes, so
they survive restarts and need no bookkeeping. Tool calls are the one live series: a histogram the
middleware feeds as each call ends (the audit log is pruned by age, so counts read from it would go
backwards). Everything lives in one registry per daemon; nothing is module-global.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from .store.db import Store
from .tools.registry import SPECS

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]

# Agent runs last seconds to an hour; tool calls milliseconds to a minute.
RUN_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
TOOL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TOKEN_KINDS = ("input", "output", "cache_read", "cache_write")


def _histogram_rows(store: Store, sql_from: str, value: str, label: str) -> list[dict]:
    """Per label value: count, sum and the cumulative count at each RUN_BUCKETS bound, in one query."""
    buckets = ", ".join(f"sum({value} <= {bound}) AS le_{i}" for i, bound in enumerate(RUN_BUCKETS))
    return store.all(f"SELECT {label} AS label, count(*) AS n, coalesce(sum({value}), 0) AS total, {buckets} "
                     f"{sql_from} GROUP BY {label} ORDER BY {label}")


class StoreCollector(Collector):
    """Reads the store on each scrape (a few grouped queries over indexed tables)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def collect(self) -> Iterator[Metric]:
        store = self.store
        tasks = GaugeMetricFamily("agentqueue_tasks", "Tasks by project and status.", labels=["project", "status"])
        for row in store.all("SELECT project_id, status, count(*) AS n FROM tasks GROUP BY project_id, status "
                             "ORDER BY project_id, status"):
            tasks.add_metric([row["project_id"], row["status"]], row["n"])
        yield tasks

        agents = GaugeMetricFamily("agentqueue_agents", "Registered agents by type, state and pause.",
                                   labels=["agent_type", "state", "paused"])
        for row in store.all("SELECT agent_type, state, paused, count(*) AS n FROM agents "
                             "GROUP BY agent_type, state, paused ORDER BY 1, 2, 3"):
            agents.add_metric([row["agent_type"], row["state"], "true" if row["paused"] else "false"], row["n"])
        yield agents

        # Runs: one task_results row per agent run (a deleted task takes its results with it).
        runs = CounterMetricFamily("agentqueue_runs", "Agent runs by project and outcome (completed, failed).",
                                   labels=["project", "outcome"])
        for row in store.all("SELECT coalesce(t.project_id, '') AS project, r.status, count(*) AS n "
                             "FROM task_results r LEFT JOIN tasks t ON t.id = r.task_id "
                             "GROUP BY project, r.status ORDER BY project, r.status"):
            runs.add_metric([row["project"], row["status"] or ""], row["n"])
        yield runs
        durations = HistogramMetricFamily("agentqueue_run_duration_seconds", "Wall-clock time of agent runs.",
                                          labels=["project"])
        for row in _histogram_rows(store, "FROM task_results r LEFT JOIN tasks t ON t.id = r.task_id "
                                          "WHERE r.duration_s IS NOT NULL", "r.duration_s",
                                   "coalesce(t.project_id, '')"):
            buckets = [(floatToGoString(bound), row[f"le_{i}"] or 0) for i, bound in enumerate(RUN_BUCKETS)]
            durations.add_metric([row["label"]], buckets + [("+Inf", row["n"])], sum_value=row["total"])
        yield durations

        # Tokens and cost: the ledger (agent runs and hook model calls), never deleted.
        tokens = CounterMetricFamily("agentqueue_tokens", "Model tokens by project and kind.",
                                     labels=["project", "kind"])
        cost = CounterMetricFamily("agentqueue_cost_usd", "Model cost in US dollars by project.", labels=["project"])
        sums = ", ".join(f"coalesce(sum({k}), 0) AS {k}" for k in TOKEN_KINDS)
        for row in store.all(f"SELECT coalesce(project_id, '') AS project, {sums}, coalesce(sum(cost_usd), 0) AS cost "
                             "FROM token_ledger GROUP BY project ORDER BY project"):
            for kind in TOKEN_KINDS:
                tokens.add_metric([row["project"], kind], row[kind])
            cost.add_metric([row["project"]], row["cost"])
        yield tokens
        yield cost

        hooks = CounterMetricFamily("agentqueue_hook_runs", "Finished hook runs by project and status.",
                                    labels=["project", "status"])
        running = GaugeMetricFamily("agentqueue_hook_runs_running", "Hook runs in progress.", labels=["project"])
        for row in store.all("SELECT coalesce(project_id, '') AS project, status, count(*) AS n FROM hook_runs "
                             "GROUP BY project, status ORDER BY project, status"):
            if row["status"] == "running":
                running.add_metric([row["project"]], row["n"])
            else:
                hooks.add_metric([row["project"], row["status"] or ""], row["n"])
        yield hooks
        yield running


class Metrics:
    """One daemon's registry: the store collector plus the tool-call histogram."""

    def __init__(self, store: Store) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(StoreCollector(store))
        self.tool_calls = Histogram("agentqueue_tool_call_duration_seconds",
                                    "MCP tool calls by tool and outcome (ok, error, refused), "
                                    "since the daemon started.",
                                    ["tool", "outcome"], buckets=TOOL_BUCKETS, registry=self.registry)

    def observe_tool_call(self, name: str, outcome: str, seconds: float) -> None:
        # Only known tool names become labels: a client inventing names cannot grow the series without bound.
        self.tool_calls.labels(name if name in SPECS else "(unknown)", outcome).observe(max(seconds, 0.0))

    def render(self) -> bytes:
        return generate_latest(self.registry)
