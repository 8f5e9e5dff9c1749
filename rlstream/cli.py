"""The `rlstream` command line. Options are parsed here, at the edge, into configs.

    rlstream simulate ROOT [...]        write simulated run directories
    rlstream analyze ROOT... --out OUT  analyze runs to the end of what exists
    rlstream demo                       simulate a few runs, analyze, print a table
"""

from __future__ import annotations

import argparse
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
    kw = {"storage_options": _storage_options(getattr(args, "storage_options", None))}
    if getattr(args, "poll", None) is not None:
        kw["poll_seconds"] = args.poll
    return PipelineConfig(**kw)


def cmd_analyze(args: argparse.Namespace) -> int:
    from rlstream.pipeline.local import analyze_local
    from rlstream.report import print_runs

    states = analyze_local(args.roots, args.out, _pipeline_config(args))
    print(f"analyzed {len(states)} runs; tables under {args.out}")
    print_runs(states, sys.stdout)
    return 0


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
    a.add_argument("roots", nargs="+", metavar="ROOT", help="folder or URL holding runs")
    a.add_argument("--out", required=True, help="output folder or URL for the Parquet tables")
    a.add_argument("--storage-options", help="JSON object passed to fsspec for every URL")
    a.set_defaults(func=cmd_analyze)

    d = sub.add_parser("demo", help="simulate a few runs, analyze them, print a table")
    d.add_argument("--dir", help="folder for the simulated runs and the tables (default: temp)")
    d.add_argument("--runs", type=int, default=6)
    d.add_argument("--steps", type=int, default=40)
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
