"""The `rlstream` command line. Options are parsed here, at the edge, into configs.

rlstream simulate ROOT [...]        write simulated run directories
rlstream analyze ROOT... --out OUT  analyze runs to the end of what exists
rlstream watch ROOT... --out OUT    keep OUT current while runs are written
rlstream status OUT                 every run of OUT, worst first (reads only OUT)
rlstream samples OUT RUN            a run's kept samples: top, bottom, flagged, probes
rlstream report OUT [-o FILE.html]  a self-contained HTML report with plots
rlstream serve OUT [--port P]       live fleet, run and compare pages (reads only OUT)
rlstream compact OUT                compact OUT's tables, checkpoint logs, vacuum
rlstream demo                       simulate live runs, watch them, write the report
rlstream --version                  the installed version

Exit status: 0 done; 1 nothing to work on (no runs) or a failure; 2 usage (a bad
option, a ROOT/OUT that does not exist, cannot be read or is not an rlstream output,
a Ray cluster address that cannot be reached; nothing is started); 3 analyze/watch wrote their tables but rejected runs
whose run.json could not be read (listed at the end, and in `status`).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Sequence

from rlstream.cli_live import add_serve, add_watch_options, cmd_serve
from rlstream.cli_support import (
    check_inputs,
    check_placement,
    checked_out,
    common,
    default_report_path,
    finish,
    html_file,
    maintenance_config,
    new_dir,
    non_negative_int,
    pipeline_config,
    port,
    positive_int,
    retention,
    retention_kw,
    rules_hooks,
    runtime_config,
    seconds,
    seconds_or_zero,
    storage_options,
)
from rlstream.errors import EXIT_FAILURE, ConfigError, RlstreamError, exit_code


def cmd_analyze(args: argparse.Namespace) -> int:
    from rlstream.pipeline.outcome import Outcome

    check_placement(args)
    cfg = pipeline_config(args)
    check_inputs(args, cfg)
    hooks = rules_hooks(args)
    outcome = Outcome()
    from rlstream.runtime.driver import run

    if args.in_process:  # no cluster address is checked: none is used
        from rlstream.runtime.driver import RuntimeConfig
        from rlstream.runtime.malloc import keep_heap

        keep_heap()  # this process is the worker (what Worker actors do, see malloc.py)
        rt = RuntimeConfig(in_process=True, maintenance=maintenance_config(args))
    else:
        rt = runtime_config(args)
    run(
        args.roots,
        args.out,
        cfg,
        rt,
        watch=False,
        progress_out=None if args.in_process else sys.stderr,  # in-process: no progress line
        hooks_factory=hooks,
        outcome=outcome,
    )
    return finish(outcome, args.out, "analyzed", cfg.storage_options)


def cmd_watch(args: argparse.Namespace) -> int:
    from rlstream.pipeline.outcome import Outcome

    check_placement(args)
    cfg = pipeline_config(args)
    check_inputs(args, cfg)
    hooks = rules_hooks(args)
    if args.in_process:  # no cluster address is checked: none is used
        from rlstream.runtime.driver import RuntimeConfig

        rt = RuntimeConfig(in_process=True, maintenance=maintenance_config(args))
    else:
        rt = runtime_config(args)
    from rlstream.cli_live import start_live
    from rlstream.runtime.driver import run

    metrics, close_live = start_live(args, cfg.storage_options)
    outcome = Outcome()
    try:
        run(
            args.roots,
            args.out,
            cfg,
            rt,
            watch=True,
            progress_out=sys.stderr,
            exit_when_finished=args.exit_when_finished,
            metrics=metrics,
            hooks_factory=hooks,
            outcome=outcome,
        )
    except KeyboardInterrupt:  # the watch loop stops cleanly itself: this was before it
        print(
            "\nrlstream: interrupted while the watch was starting or stopping; "
            f"`rlstream status {args.out}` shows what was committed",
            file=sys.stderr,
        )
        return 130
    finally:
        close_live()
    print()
    return finish(outcome, args.out, "watched", cfg.storage_options)


def cmd_status(args: argparse.Namespace) -> int:
    from rlstream.fleet.outdir import read_rejected
    from rlstream.fleet.read import read_latest
    from rlstream.fleet.status import follow

    opts = storage_options(args.storage_options)
    checked_out(args.out, opts)
    with contextlib.suppress(BrokenPipeError):  # `rlstream status OUT | head`
        shown = follow(
            lambda: read_latest(args.out, opts),
            sys.stdout,
            interval=args.interval,
            count=args.count if args.follow else 1,
            as_json=args.json,
            pretty=not args.follow,
            load_rejected=lambda: read_rejected(args.out, opts),
        )
        if not args.follow and not shown:
            print(
                f"rlstream: no runs in {args.out} yet (a watch writes them at its first commit)",
                file=sys.stderr,
            )
            return EXIT_FAILURE
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    import os

    from rlstream.errors import NoDataError
    from rlstream.fleet.outdir import read_rejected
    from rlstream.fleet.read import read_latest
    from rlstream.fleet.report import write_report
    from rlstream.pipeline.outcome import plural

    opts = storage_options(args.storage_options)
    checked_out(args.out, opts)
    rejected = len(read_rejected(args.out, opts))
    if not rejected and not read_latest(args.out, opts):
        raise NoDataError(
            f"no runs in {args.out} yet (a watch writes them at its first commit); "
            "no report written"
        )
    path = os.path.abspath(args.output or default_report_path(args.out))
    n = write_report(args.out, path, opts)
    tail = f" and {plural(rejected, 'rejected run')}" if rejected else ""
    print(f"wrote {path}: {plural(n, 'run')}{tail} from {args.out}")
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    from rlstream.fleet.read import out_sink
    from rlstream.sinks.maintain import maintain

    opts = storage_options(args.storage_options)
    checked_out(args.out, opts)
    sink = out_sink(args.out, opts, **retention_kw(args))
    report = maintain(sink, maintenance_config(args))
    for table, got in report.items():
        print(f"{table}: {got}")
    failed = [t for t, got in report.items() if isinstance(got, dict) and "error" in got]
    return EXIT_FAILURE if failed else 0


def cmd_compare(args: argparse.Namespace) -> int:
    from rlstream.fleet.compare import CompareConfig, compare_runs, print_result

    opts = storage_options(args.storage_options)
    checked_out(args.out, opts)
    given = {k: getattr(args, k) for k in ("window", "k", "sustain")}
    cfg = CompareConfig(**{k: v for k, v in given.items() if v is not None})
    if cfg.window < 2 or cfg.sustain < 1 or cfg.k <= 0:
        raise ConfigError("--window must be >= 2, --sustain >= 1 and --k > 0")
    rows = compare_runs(args.out, [args.run_a, *args.runs], cfg, opts)
    with contextlib.suppress(BrokenPipeError):
        return print_result(rows, args.run_a, cfg, args.json)
    return 0


def cmd_simulate(args: argparse.Namespace) -> int:
    from rlstream.simulate.cli import run

    return run(args)


def cmd_demo(args: argparse.Namespace) -> int:
    from rlstream.demo import run_demo

    return run_demo(args)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rlstream")
    except PackageNotFoundError:
        return "(version unknown: not installed as a package)"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="rlstream",
        description="Health analytics for many RL post-training runs, on Ray.",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--version", action="version", version=f"rlstream {_version()}")
    sub = p.add_subparsers(dest="command", required=True)

    from rlstream.simulate.cli import add_arguments

    s = sub.add_parser("simulate", help="write simulated run directories")
    add_arguments(s)
    s.set_defaults(func=cmd_simulate)

    a = sub.add_parser("analyze", help="analyze runs to the end of what exists, then exit")
    common(a)
    a.add_argument(
        "--in-process",
        action="store_true",
        help="run in this process, one core, without Ray, whatever the plan's size",
    )
    a.add_argument(
        "--processes",
        type=non_negative_int,
        metavar="N",
        help="run units in N worker processes beside this one, whatever the plan's size "
        "(0: none); default: the plan chooses, one per core when they pay (docs/runtime.md)",
    )
    a.add_argument(
        "--ray",
        action="store_true",
        help="start a private Ray at once, whatever the plan's size (default: no Ray on "
        "one machine; worker processes when the plan is large enough to pay; docs/runtime.md)",
    )
    a.add_argument(
        "--start-ray-after",
        type=float,
        metavar="SEC",
        help="start a private Ray after working alone this long, unless the archive is "
        "clearly larger (0: at once, as --ray); done sooner, it starts none (default: the "
        "plan chooses)",
    )
    a.set_defaults(func=cmd_analyze)

    w = sub.add_parser("watch", help="tail runs live and keep the tables current until Ctrl-C")
    common(w)
    w.add_argument("--poll", type=seconds, help="seconds between polls (default 1)")
    w.add_argument(
        "--commit-every",
        type=seconds_or_zero,
        help="seconds between commits (default 2; 0: after every poll)",
    )
    w.add_argument(
        "--maintain-every",
        type=seconds_or_zero,
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
        type=port,
        help="serve Prometheus metrics on this port at /metrics (0-65535; 0: any free port; "
        "docs/fleet.md)",
    )
    w.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address to bind the metrics endpoint to (default 127.0.0.1; 0.0.0.0 for all)",
    )
    add_watch_options(w)
    w.set_defaults(func=cmd_watch)

    st = sub.add_parser("status", help="every run of OUT in a table, worst first")
    st.add_argument("out", metavar="OUT", help="the output folder or URL of analyze/watch")
    st.add_argument("--follow", action="store_true", help="refresh in place until Ctrl-C")
    st.add_argument("--json", action="store_true", help="print JSON (one line per refresh)")
    st.add_argument("--interval", type=seconds, default=2.0, help="seconds between refreshes")
    st.add_argument(
        "--count", type=positive_int, help="with --follow: stop after this many refreshes"
    )
    st.add_argument("--storage-options", help="JSON object passed to fsspec for OUT")
    st.set_defaults(func=cmd_status)
    from rlstream.fleet.samples import add_parser

    add_parser(sub)

    r = sub.add_parser("report", help="write a self-contained HTML report of OUT")
    r.add_argument("out", metavar="OUT", help="the output folder or URL of analyze/watch")
    r.add_argument(
        "-o",
        "--output",
        type=html_file,
        help="HTML file to write (default: beside OUT, OUT-report.html; in the current "
        "folder when OUT is a URL)",
    )
    r.add_argument("--storage-options", help="JSON object passed to fsspec for OUT and runs")
    r.set_defaults(func=cmd_report)

    cm = sub.add_parser(
        "compare",
        help="the first step at which runs' figures diverge beyond their noise (docs/fleet.md)",
    )
    cm.add_argument("out", metavar="OUT", help="the output folder or URL of analyze/watch")
    cm.add_argument("run_a", metavar="RUN_A", help="the reference run id")
    cm.add_argument("runs", nargs="+", metavar="RUN_B", help="run ids compared with RUN_A")
    cm.add_argument("--json", action="store_true", help="print JSON")
    cm.add_argument("--window", type=int, help="steps per window (default 10)")
    cm.add_argument("--k", type=float, help="pooled deviations that diverge (default 3)")
    cm.add_argument("--sustain", type=int, help="consecutive divergent steps (default 10)")
    cm.add_argument("--storage-options", help="JSON object passed to fsspec for OUT")
    cm.set_defaults(func=cmd_compare)

    add_serve(sub, cmd_serve)

    c = sub.add_parser(
        "compact",
        help="compact OUT's tables, checkpoint their logs and vacuum old files (watch and "
        "analyze do it themselves; safe beside a running watch)",
    )
    c.add_argument("out", metavar="OUT", help="the output folder or URL of analyze/watch")
    c.add_argument("--storage-options", help="JSON object passed to fsspec for OUT")
    retention(c)
    c.set_defaults(func=cmd_compact)

    d = sub.add_parser(
        "demo", help="simulate live runs, watch them on a local Ray, write the HTML report"
    )
    d.add_argument(
        "--dir",
        type=new_dir,
        help="new or empty folder for the simulated runs, the tables and the report "
        "(default: a temp folder)",
    )
    d.add_argument(
        "--runs", type=positive_int, default=12, help="live runs to simulate (default 12)"
    )
    d.add_argument("--steps", type=positive_int, default=50, help="steps per run (default 50)")
    d.add_argument(
        "--interval", type=seconds, default=0.6, help="seconds per simulated step (default 0.6)"
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
        return exit_code(e)
    except KeyboardInterrupt:  # before a watch loop began, or during analyze
        print("\nrlstream: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
