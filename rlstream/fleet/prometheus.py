"""Prometheus `/metrics` for `rlstream watch --metrics-port PORT`.

Two sources, rendered in the text exposition format (version 0.0.4):

- per-run gauges, from OUT's latest run_health rows read at scrape time (cached for
  `min_refresh_seconds`), the same rows `rlstream status` shows, and the number of
  runs rejected because their run.json could not be read;
- the pipeline's own health, pushed by the driver after every poll (`on_poll`) and
  commit (`on_commit`): files, bytes, tokens and step rows processed, quarantined and
  late records, how far the tables are behind the writers, worker and tailer restarts.

Cardinality is bounded: the only unbounded label is `run_id`, one value per run, and
at most `max_runs` runs are exported (worst first, see `status.sort_key`); the others
are counted in `rlstream_runs` and `rlstream_runs_not_exported`. `status` takes 6
values (`insufficient`: the rules cannot judge the run), `code` the finding codes, `severity` 3, `cohort` one value per cohort (at most
one per run). A run has at most 18 series plus one per firing finding. The cohort is
an info series (`rlstream_run_cohort{run_id,cohort} 1`) to join on `run_id`, and
`rlstream_run_unlike_peers{run_id,cohort}` is 1 while the run's `unlike_peers` fires. docs/fleet.md lists every series.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from rlstream.fleet.status import STATUS_ORDER, status_rows, unjudged
from rlstream.fleet.web import Served, make_handler

log = logging.getLogger("rlstream")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

RUN_GAUGES = (
    ("reward_mean", "Latest mean reward of trained attempts."),
    (
        "reward_mean_with_unusable",
        "Latest mean reward of every attempt with a reward, rejected groups included (the "
        "reward the health rules judge; the trainer's reported figure where the run's files "
        "give nothing to recompute it from).",
    ),
    (
        "reward_trend",
        "Least-squares slope per step of the reward status shows (reward_mean_with_unusable, "
        "else reward_mean) over the last 20 steps.",
    ),
    ("mismatch_kl", "Latest sampler/trainer mismatch KL (k3)."),
    ("mismatch_ess", "Latest importance-weight effective sample size (token)."),
    ("entropy_estimate", "Latest sampling entropy estimate, nats per token."),
    ("truncated_frac", "Latest share of completions stopped by the length cap."),
)

PIPELINE_COUNTERS = (
    ("files_processed_total", "transcripts", "Transcript files read."),
    ("bytes_processed_total", "bytes", "Bytes of run files read."),
    ("tokens_processed_total", "tokens", "Full-trace tokens aggregated."),
    ("records_processed_total", "records", "JSONL records and transcripts parsed."),
    ("step_rows_total", "steps_final", "Final step rows written."),
    ("quarantined_total", "quarantined", "Records rejected into quarantine/."),
    ("late_records_total", "late", "Records that arrived after their step was final."),
)

# Every metric name this module can emit (tests check the alert rules against it).
METRIC_NAMES = frozenset(
    [
        "rlstream_runs",
        "rlstream_runs_not_exported",
        "rlstream_runs_rejected",
        "rlstream_run_status",
        "rlstream_run_finished",
        "rlstream_run_judged",
        "rlstream_run_last_step",
        "rlstream_run_last_activity_timestamp_seconds",
        "rlstream_run_seconds_since_update",
        "rlstream_run_findings_firing",
        "rlstream_run_finding",
        "rlstream_run_cohort",
        "rlstream_run_unlike_peers",
        *(f"rlstream_run_{k}" for k, _ in RUN_GAUGES),
        *(f"rlstream_pipeline_{n}" for n, _, _ in PIPELINE_COUNTERS),
        "rlstream_pipeline_runs",
        "rlstream_pipeline_workers",
        "rlstream_pipeline_units_total",
        "rlstream_pipeline_pending_steps",
        "rlstream_pipeline_polls_total",
        "rlstream_pipeline_last_poll_duration_seconds",
        "rlstream_pipeline_data_age_seconds",
        "rlstream_pipeline_last_commit_timestamp_seconds",
        "rlstream_pipeline_worker_restarts_total",
        "rlstream_pipeline_tailer_restarts_total",
        "rlstream_out_read_errors_total",
    ]
)


def label_value(v: Any) -> str:
    """Escape a label value as the exposition format requires (\\, " and newline)."""
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(v: float) -> str:
    return repr(float(v)) if isinstance(v, float) else str(int(v))


class _Out:
    """Samples gathered per metric family: the text format wants every sample of a
    family in one group under its one HELP and TYPE, whatever order they are added in."""

    def __init__(self) -> None:
        self.families: dict[str, list[str]] = {}

    def add(self, name: str, kind: str, help_: str, value: Any, **labels: Any) -> None:
        if value is None:
            return
        lines = self.families.get(name)
        if lines is None:
            lines = self.families[name] = [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
        lab = ",".join(f'{k}="{label_value(v)}"' for k, v in labels.items())
        lines.append(f"{name}{{{lab}}} {_num(value)}" if lab else f"{name} {_num(value)}")

    def text(self) -> str:
        return "\n".join(line for lines in self.families.values() for line in lines) + "\n"


def render_metrics(
    latest: list[dict[str, Any]],
    pipeline: dict[str, Any],
    now: float,
    max_runs: int = 1000,
    rejected: int = 0,
) -> str:
    """The /metrics page for `latest` (run_health rows), the number of `rejected`
    runs (`fleet.outdir.read_rejected`) and the pipeline's figures."""
    o = _Out()
    rows = status_rows(latest, now)
    by_status = dict.fromkeys(STATUS_ORDER, 0)
    for r in rows:
        by_status[r["status"] or "unknown"] = by_status.get(r["status"] or "unknown", 0) + 1
    for s, n in by_status.items():
        o.add("rlstream_runs", "gauge", "Runs in OUT by status.", n, status=s)
    o.add(
        "rlstream_runs_not_exported",
        "gauge",
        "Runs left out of the per-run series by the max_runs cap (the best ones).",
        max(0, len(rows) - max_runs),
    )
    o.add(
        "rlstream_runs_rejected",
        "gauge",
        "Run folders whose run.json could not be read: not analysed, so in no other "
        "series (`rlstream status OUT` lists them and why).",
        rejected,
    )
    for r in rows[:max_runs]:
        rid = r["run_id"]
        o.add(
            "rlstream_run_status",
            "gauge",
            "1 for the run's current status (critical, stalled, warning, insufficient: "
            "the rules cannot judge it, healthy, finished: judged with no warning or "
            "critical finding ever; a finished run that had one keeps that severity).",
            1,
            run_id=rid,
            status=r["status"],
        )
        if r.get("cohort"):
            o.add(
                "rlstream_run_cohort",
                "gauge",
                "1, labelled with the run's cohort (join on run_id: group_left(cohort)).",
                1,
                run_id=rid,
                cohort=r["cohort"],
            )
            o.add(
                "rlstream_run_unlike_peers",
                "gauge",
                "1 while the run's unlike_peers finding fires (a figure outside its "
                "cohort's band), else 0.",
                int(any(f["code"] == "unlike_peers" for f in r["firing"])),
                run_id=rid,
                cohort=r["cohort"],
            )
        if r.get("judged") is not None:
            o.add(
                "rlstream_run_judged",
                "gauge",
                "1 if the rules could judge the run, 0 if not (too few rules evaluable on "
                "its files, or too few steps: `rlstream status` says what is missing), "
                "whatever its status: a finding can fire on a run not judged as a whole.",
                int(not unjudged(r)),
                run_id=rid,
            )
        o.add(
            "rlstream_run_finished",
            "gauge",
            "1 if the run finished (whatever its status).",
            int(bool(r["finished"])),
            run_id=rid,
        )
        o.add("rlstream_run_last_step", "gauge", "Highest step read.", r["last_step"], run_id=rid)
        o.add(
            "rlstream_run_last_activity_timestamp_seconds",
            "gauge",
            "Unix time of the run's last step line or heartbeat.",
            r["last_activity"],
            run_id=rid,
        )
        o.add(
            "rlstream_run_seconds_since_update",
            "gauge",
            "Seconds since the run's last step line or heartbeat, at scrape time.",
            r["seconds_since_update"],
            run_id=rid,
        )
        for key, help_ in RUN_GAUGES:
            o.add(f"rlstream_run_{key}", "gauge", help_, r.get(key), run_id=rid)
        o.add(
            "rlstream_run_findings_firing",
            "gauge",
            "Firing findings of the run.",
            len(r["firing"]),
            run_id=rid,
        )
        for f in r["firing"]:
            o.add(
                "rlstream_run_finding",
                "gauge",
                "1 per firing finding (docs/health.md codes); absent when not firing.",
                1,
                run_id=rid,
                code=f["code"],
                severity=f["severity"],
            )
    p = pipeline
    for name, key, help_ in PIPELINE_COUNTERS:
        o.add(f"rlstream_pipeline_{name}", "counter", help_, p.get(key))
    o.add("rlstream_pipeline_runs", "gauge", "Runs the watch is tailing.", p.get("runs"))
    o.add("rlstream_pipeline_workers", "gauge", "Worker actors.", p.get("workers"))
    o.add(
        "rlstream_pipeline_units_total",
        "counter",
        "Work units (byte ranges, transcript batches) executed since the watch started.",
        p.get("units"),
    )
    o.add(
        "rlstream_pipeline_pending_steps",
        "gauge",
        "Steps seen but not final yet, over all runs.",
        p.get("pending_steps"),
    )
    o.add("rlstream_pipeline_polls_total", "counter", "Polls of every run.", p.get("polls"))
    o.add(
        "rlstream_pipeline_last_poll_duration_seconds",
        "gauge",
        "Wall time of the last poll.",
        p.get("last_poll_seconds"),
    )
    started = p.get("last_poll_started")
    o.add(
        "rlstream_pipeline_data_age_seconds",
        "gauge",
        "Seconds since the start of the last completed poll: how far the tables may be "
        "behind what the writers have written.",
        None if started is None else round(now - started, 3),
    )
    o.add(
        "rlstream_pipeline_last_commit_timestamp_seconds",
        "gauge",
        "Unix time of the last commit of outputs and resume states.",
        p.get("last_commit"),
    )
    o.add(
        "rlstream_pipeline_worker_restarts_total",
        "counter",
        "Worker actors restarted by Ray (seen as a new process id).",
        p.get("worker_restarts"),
    )
    o.add(
        "rlstream_pipeline_tailer_restarts_total",
        "counter",
        "Tailer actors found dead and restored by the driver.",
        p.get("tailer_restarts"),
    )
    o.add(
        "rlstream_out_read_errors_total",
        "counter",
        "Scrapes that could not read OUT's run_health (the last good read is served).",
        p.get("out_read_errors", 0),
    )
    return o.text()


class MetricsExporter(Served):
    """Serves /metrics on host:port from a daemon thread; the driver feeds it. With
    `pages` (a `fleet.web.FleetPages`: `watch --ui-port`), the same server serves the
    live pages too."""

    def __init__(
        self,
        out: str,
        host: str = "127.0.0.1",
        port: int = 9464,
        storage_options: dict[str, Any] | None = None,
        max_runs: int = 1000,
        min_refresh_seconds: float = 1.0,
        load: Callable[[], list[dict[str, Any]]] | None = None,
        load_rejected: Callable[[], list[dict[str, Any]]] | None = None,
        pages: Any = None,
    ) -> None:
        from rlstream.fleet.outdir import read_rejected
        from rlstream.fleet.read import read_latest

        self.load = load or (lambda: read_latest(out, storage_options))
        if load_rejected is None and load is None:
            load_rejected = lambda: read_rejected(out, storage_options)  # noqa: E731
        self.load_rejected = load_rejected or (lambda: [])
        self._rejected = 0
        self.max_runs = max_runs
        self.min_refresh = min_refresh_seconds
        self.lock = threading.Lock()
        self.pipeline: dict[str, Any] = {"polls": 0, "out_read_errors": 0}
        self._latest: list[dict[str, Any]] = []
        self._loaded_at = float("-inf")
        exporter = self

        super().__init__(make_handler(pages, exporter, host), host, port)

    def start(self) -> MetricsExporter:
        super().start()
        host, port = self.address
        log.info("serving Prometheus metrics on http://%s:%d/metrics", host, port)
        return self

    # -- fed by the driver ---------------------------------------------------------
    def on_poll(self, totals: dict[str, int], started: float, seconds: float) -> None:
        """After a poll: `totals` are the tailers' running totals (runs, units, bytes,
        tokens, rows); `started` is the poll's wall-clock start."""
        with self.lock:
            p = self.pipeline
            p["polls"] += 1
            p["last_poll_started"] = started
            p["last_poll_seconds"] = round(seconds, 4)
            p["runs"] = totals.get("runs")
            p["units"] = totals.get("units")

    def on_commit(
        self,
        summaries: list[dict[str, Any]],
        now: float,
        workers: int,
        worker_restarts: int,
        tailer_restarts: int,
    ) -> None:
        """After a commit: the runs' summaries (cumulative, checkpointed counters)."""
        with self.lock:
            p = self.pipeline
            for _, key, _ in PIPELINE_COUNTERS:
                if any(key in s for s in summaries):
                    p[key] = sum(int(s.get(key) or 0) for s in summaries)
            p["pending_steps"] = sum(int(s.get("pending_steps") or 0) for s in summaries)
            p.update(
                last_commit=now,
                workers=workers,
                worker_restarts=worker_restarts,
                tailer_restarts=tailer_restarts,
            )

    # -- served --------------------------------------------------------------------
    def page(self) -> str:
        now = time.time()
        if now - self._loaded_at >= self.min_refresh:
            try:
                latest, rejected = self.load(), len(self.load_rejected())
                with self.lock:
                    self._latest, self._rejected, self._loaded_at = latest, rejected, now
            except Exception as e:  # OUT unreachable: serve the last good read
                log.warning("metrics: cannot read run_health: %s", e)
                with self.lock:
                    self.pipeline["out_read_errors"] += 1
        with self.lock:
            return render_metrics(
                self._latest, dict(self.pipeline), now, self.max_runs, self._rejected
            )
