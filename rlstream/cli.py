"""The `rlstream` command line. Options are parsed here, at the edge, into configs.

rlstream simulate ROOT [...]        write simulated run directories
rlstream analyze ROOT... --out OUT  analyze runs to the end of what exists
rlstream watch ROOT... --out OUT    keep OUT current while runs are written
rlstream status OUT                 every run of OUT, worst first (reads only OUT)
rlstream report OUT -o FILE.html    a self-contained HTML report with plots
rlstream compact OUT                compact OUT's tables, checkpoint logs, vacuum
rlstream demo                       simulate live runs, watch them, write the report
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Sequence

from rlstream.config import PipelineConfig
from rlstream.errors import RlstreamError


def _storage_options(text: str | None) -> dict:
    if not text:
        return {}
    try:
        opts = json.loads(text)
    except json.JSONDecodeError as e:
        raise RlstreamError(f"--storage-options is not JSON: {e}") from e
    if not isinstance(opts, dict):
        raise RlstreamError("--storage-options must be a JSON object")
    return opts


def _pipeline_config(args: argparse.Namespace) -> PipelineConfig:
    kw: dict = {"storage_options": _storage_options(getattr(args, "storage_options", None))}
    if getattr(args, "poll", None) is not None:
        kw["poll_seconds"] = args.poll
    if getattr(args, "commit_every", None) is not None:
        kw["commit_seconds"] = args.commit_every
    if getattr(args, "reset_run", None):
        kw["reset_runs"] = tuple(args.reset_run)
    kw.update(_retention_kw(args))
    if getattr(args, "format", None) is not None:
        kw["input_format"] = args.format
    return PipelineConfig(**kw)


def _format_names() -> list[str]:
    from rlstream.formats import FORMATS

    return list(FORMATS)


def _retention_kw(args: argparse.Namespace) -> dict:
    if getattr(args, "retention", None) is None:
        return {}
    if args.retention < 0:
        raise RlstreamError("--retention must be >= 0 seconds")
    return {"retention_seconds": int(args.retention)}


def _maintenance_config(args: argparse.Namespace):
    from rlstream.sinks.maintain import MaintenanceConfig

    kw: dict = {}
    if getattr(args, "maintain_every", None) is not None:
        kw["every_seconds"] = args.maintain_every
    return MaintenanceConfig(**kw)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("roots", nargs="+", metavar="ROOT", help="folder or URL holding runs")
    p.add_argument("--out", required=True, help="output folder or URL for the Delta tables")
    p.add_argument("--storage-options", help="JSON object passed to fsspec for every URL")
    p.add_argument(
        "--format",
        choices=_format_names(),
        help="read every run as this trainer's format (default: detect each run's format; "
        "docs/formats.md)",
    )
    p.add_argument(
        "--ray-address",
        help="join this Ray cluster (default: RAY_ADDRESS, else a private local Ray)",
    )
    p.add_argument(
        "--rules", metavar="FILE", help="TOML file overriding health rule settings (docs/health.md)"
    )
    p.add_argument("--workers", type=int, help="worker actors (default: the cluster's CPUs)")
    p.add_argument(
        "--tailers",
        type=int,
        help="tailer actors owning shards of runs (default: watch, as many as workers; "
        "analyze, one per 8 workers; at most 4)",
    )
    p.add_argument(
        "--reset-run",
        action="append",
        metavar="RUN_ID",
        help="read this run again from the start: its resume state is moved aside and its "
        "rows deleted (a corrupt or unreadable resume state); repeatable",
    )
    _retention(p)


def _retention(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--retention",
        type=float,
        help="seconds removed files and log entries are kept before vacuum deletes them "
        "(default 300; readers that take longer than this may fail)",
    )


def _runtime_config(args: argparse.Namespace):
    from rlstream.runtime.cluster import RayConfig
    from rlstream.runtime.driver import RuntimeConfig

    return RuntimeConfig(
        workers=args.workers,
        tailers=args.tailers,
        ray=RayConfig(address=args.ray_address),
        maintenance=_maintenance_config(args),
    )


def _print_fleet(out: str, opts: dict) -> None:
    """The same table as `rlstream status OUT`: one table implementation for the CLI."""
    from rlstream.fleet.read import read_latest
    from rlstream.fleet.status import render_table, status_rows

    print(render_table(status_rows(read_latest(out, opts))))


def _health_hooks(args: argparse.Namespace):
    """A picklable factory of the health hook with the `--rules` file applied."""
    import functools

    from rlstream.health import DEFAULT_RULES, load_rules
    from rlstream.pipeline.verdicts import health_hooks

    rules = load_rules(args.rules) if args.rules else DEFAULT_RULES
    return functools.partial(health_hooks, rules)


def cmd_analyze(args: argparse.Namespace) -> int:
    cfg = _pipeline_config(args)
    hooks = _health_hooks(args)
    if args.in_process:
        from rlstream.pipeline.local import analyze_local
        from rlstream.runtime.malloc import keep_heap

        keep_heap()  # this process is the worker (what Worker actors do, see malloc.py)
        summaries = analyze_local(
            args.roots, args.out, cfg, maintenance=_maintenance_config(args), **hooks()
        )
    else:
        from rlstream.runtime.driver import run

        summaries = run(
            args.roots,
            args.out,
            cfg,
            _runtime_config(args),
            watch=False,
            progress_out=sys.stderr,
            hooks_factory=hooks,
        )
    print(f"analyzed {len(summaries)} runs; tables under {args.out}")
    _print_fleet(args.out, cfg.storage_options)
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    from rlstream.runtime.driver import run

    cfg = _pipeline_config(args)
    metrics = None
    if args.metrics_port is not None:
        from rlstream.fleet.prometheus import MetricsExporter

        try:
            metrics = MetricsExporter(
                args.out, args.metrics_host, args.metrics_port, cfg.storage_options
            ).start()
        except OSError as e:
            raise RlstreamError(
                f"cannot serve metrics on {args.metrics_host}:{args.metrics_port}: {e}; "
                "choose another --metrics-port"
            ) from e
    try:
        summaries = run(
            args.roots,
            args.out,
            cfg,
            _runtime_config(args),
            watch=True,
            progress_out=sys.stderr,
            exit_when_finished=args.exit_when_finished,
            metrics=metrics,
            hooks_factory=_health_hooks(args),
        )
    finally:
        if metrics is not None:
            metrics.close()
    print(f"\nwatched {len(summaries)} runs; tables under {args.out}")
    _print_fleet(args.out, cfg.storage_options)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    from rlstream.fleet.read import read_latest
    from rlstream.fleet.status import follow

    opts = _storage_options(args.storage_options)
    with contextlib.suppress(BrokenPipeError):  # `rlstream status OUT | head`
        follow(
            lambda: read_latest(args.out, opts),
            sys.stdout,
            interval=args.interval,
            count=args.count if args.follow else 1,
            as_json=args.json,
            pretty=not args.follow,
        )
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from rlstream.fleet.report import write_report

    n = write_report(args.out, args.output, _storage_options(args.storage_options))
    print(f"wrote {args.output}: {n} runs from {args.out}")
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    from rlstream.fleet.read import out_sink
    from rlstream.sinks.maintain import maintain

    sink = out_sink(args.out, _storage_options(args.storage_options), **_retention_kw(args))
    if not sink.exists("run_health") and not sink.exists("steps"):
        raise RlstreamError(f"{args.out} holds no rlstream tables (no steps or run_health)")
    report = maintain(sink, _maintenance_config(args))
    for table, got in report.items():
        print(f"{table}: {got}")
    failed = [t for t, got in report.items() if isinstance(got, dict) and "error" in got]
    return 1 if failed else 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from rlstream.simulate.cli import run

    return run(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from rlstream.demo import run_demo

    return run_demo(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rlstream",
        description="Health analytics for many RL post-training runs, on Ray.",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

    from rlstream.simulate.cli import add_arguments

    s = sub.add_parser("simulate", help="write simulated run directories")
    add_arguments(s)
    s.set_defaults(func=cmd_simulate)

    a = sub.add_parser("analyze", help="analyze runs to the end of what exists, then exit")
    _common(a)
    a.add_argument(
        "--in-process",
        action="store_true",
        help="run in this process, one core, without Ray (small archives, debugging)",
    )
    a.set_defaults(func=cmd_analyze)

    w = sub.add_parser("watch", help="tail runs live and keep the tables current until Ctrl-C")
    _common(w)
    w.add_argument("--poll", type=float, help="seconds between polls (default 1)")
    w.add_argument("--commit-every", type=float, help="seconds between commits (default 2)")
    w.add_argument(
        "--maintain-every",
        type=float,
        help="seconds between maintenance passes over OUT (compaction, log checkpoints, "
        "vacuum; default 120, 0 turns them off)",
    )
    w.add_argument(
        "--exit-when-finished",
        action="store_true",
        help="stop once every run is finished and final (for scripts and tests)",
    )
    w.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus metrics on this port at /metrics (docs/fleet.md)",
    )
    w.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address to bind the metrics endpoint to (default 127.0.0.1; 0.0.0.0 for all)",
    )
    w.set_defaults(func=cmd_watch)

    st = sub.add_parser("status", help="every run of OUT in a table, worst first")
    st.add_argument("out", metavar="OUT", help="the output folder or URL of analyze/watch")
    st.add_argument("--follow", action="store_true", help="refresh in place until Ctrl-C")
    st.add_argument("--json", action="store_true", help="print JSON (one line per refresh)")
    st.add_argument("--interval", type=float, default=2.0, help="seconds between refreshes")
    st.add_argument("--count", type=int, help="with --follow: stop after this many refreshes")
    st.add_argument("--storage-options", help="JSON object passed to fsspec for OUT")
    st.set_defaults(func=cmd_status)

    r = sub.add_parser("report", help="write a self-contained HTML report of OUT")
    r.add_argument("out", metavar="OUT", help="the output folder or URL of analyze/watch")
    r.add_argument("-o", "--output", default="report.html", help="HTML file to write")
    r.add_argument("--storage-options", help="JSON object passed to fsspec for OUT and runs")
    r.set_defaults(func=cmd_report)

    c = sub.add_parser(
        "compact",
        help="compact OUT's tables, checkpoint their logs and vacuum old files (watch and "
        "analyze do it themselves; safe beside a running watch)",
    )
    c.add_argument("out", metavar="OUT", help="the output folder or URL of analyze/watch")
    c.add_argument("--storage-options", help="JSON object passed to fsspec for OUT")
    _retention(c)
    c.set_defaults(func=cmd_compact)

    d = sub.add_parser(
        "demo", help="simulate live runs, watch them on a local Ray, write the HTML report"
    )
    d.add_argument("--dir", help="folder for the simulated runs and the tables (default: temp)")
    d.add_argument("--runs", type=int, default=12, help="live runs to simulate (default 12)")
    d.add_argument("--steps", type=int, default=50, help="steps per run (default 50)")
    d.add_argument(
        "--interval", type=float, default=0.6, help="seconds per simulated step (default 0.6)"
    )
    d.set_defaults(func=cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.func(args)
    except RlstreamError as e:
        print(f"rlstream: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
