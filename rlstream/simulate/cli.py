"""`rlstream simulate ROOT ...`: the CLI edge of the simulator.

The lead wires it as a subcommand: `add_arguments(subparser)` then `run(args)`.
Arguments are parsed into one `SimConfig`; `run` returns a process exit code.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial

from rlstream.simulate.config import SimConfig
from rlstream.simulate.learn import PRESETS, simulate_learn
from rlstream.simulate.scenarios import SCENARIOS
from rlstream.simulate.trainers import FORMATS, convert_tree
from rlstream.simulate.writer import simulate, simulate_live

_D = SimConfig()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("root", metavar="ROOT", help="directory to write the runs into")
    parser.add_argument(
        "--runs",
        type=int,
        default=None,
        help=f"number of runs (default: {_D.runs}, or one per --scenario given)",
    )
    parser.add_argument("--steps", type=int, default=_D.steps, help="steps per run")
    parser.add_argument(
        "--scenario",
        action="append",
        default=None,
        metavar="NAME",
        help="scenario (repeatable; runs cycle through the list; 'all' = every "
        f"scenario). Default healthy. Names: {', '.join(SCENARIOS)}",
    )
    parser.add_argument("--seed", type=int, default=_D.seed)
    parser.add_argument("--trace", choices=("full", "samples"), default=_D.trace)
    parser.add_argument("--topk", type=int, default=None, help="write top-K logprobs")
    parser.add_argument("--groups", type=int, default=_D.groups, help="groups per step")
    parser.add_argument("--group-size", type=int, default=_D.group_size)
    parser.add_argument("--tokens", type=float, default=_D.tokens, help="median completion length")
    parser.add_argument("--mode", choices=("sync", "async"), default=_D.mode)
    parser.add_argument(
        "--format",
        default="loops",
        choices=FORMATS,
        help="write the runs as this trainer writes them (docs/formats.md; default loops)",
    )
    parser.add_argument(
        "--cohort-size",
        type=int,
        default=_D.cohort_size,
        metavar="N",
        help="runs come in cohorts of N sharing one recipe, differing only in their random "
        "content, as seeds of a sweep do (default 0: every run its own recipe)",
    )
    parser.add_argument(
        "--odd-kl",
        type=float,
        default=_D.odd_kl,
        metavar="X",
        help="with --cohort-size: in every second cohort the last run's KL is X times its "
        "siblings' (unlike_peers; default 1: none)",
    )
    parser.add_argument(
        "--agent",
        action="store_true",
        help="multi-turn agent mode: 4-8 generations per attempt, the solution written "
        "between fixed tool-call turns (look at the files, run the tests, finish)",
    )
    parser.add_argument("--live", action="store_true", help="write in real time")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds per step with --live")
    parser.add_argument(
        "--learn",
        action="store_true",
        help="train the small learning trainer instead of scripting curves (with --preset)",
    )
    parser.add_argument(
        "--preset",
        default="healthy",
        metavar="NAME",
        help=f"with --learn: the trainer's configuration. Names: {', '.join(PRESETS)}",
    )


def config_from_args(args: argparse.Namespace) -> SimConfig:
    names: list[str] = []
    for name in args.scenario or ["healthy"]:
        names.extend(SCENARIOS if name == "all" else [name])
    runs = args.runs if args.runs is not None else (len(names) if args.scenario else _D.runs)
    return SimConfig(
        runs=runs,
        steps=args.steps,
        scenarios=tuple(names),
        seed=args.seed,
        trace=args.trace,
        topk=args.topk,
        groups=args.groups,
        group_size=args.group_size,
        tokens=args.tokens,
        mode=args.mode,
        cohort_size=args.cohort_size,
        odd_kl=args.odd_kl,
        agent=getattr(args, "agent", False),
    )


def _timed(write: Callable[[], list], done: str, noun: str = "run") -> int:
    """Run `write()` (it returns the labels), print `done` with the count of `noun`s
    (`{n}`: "1 run", "2 runs") and the time, or the error with exit 2."""
    from rlstream.pipeline.outcome import plural

    start = time.perf_counter()
    try:
        labels = write()
    except (FileExistsError, ValueError) as e:
        print(f"rlstream simulate: {e}", file=sys.stderr)
        return 2
    print(done.format(n=plural(len(labels), noun), took=time.perf_counter() - start))
    return 0


def run_learn(args: argparse.Namespace) -> int:
    return _timed(
        partial(
            simulate_learn,
            args.root,
            args.preset,
            runs=args.runs or 1,
            steps=args.steps,
            seed=args.seed,
            mode=args.mode,
            agent=getattr(args, "agent", False),
        ),
        f"trained {{n}} x {args.steps} steps into {args.root} "
        f"in {{took:.1f}}s (labels: {args.root}/labels.json)",
        noun=f"{args.preset} run",
    )


def run(args: argparse.Namespace) -> int:
    if getattr(args, "learn", False):
        return run_learn(args)
    try:
        config = config_from_args(args)
    except ValueError as e:
        print(f"rlstream simulate: {e}", file=sys.stderr)
        return 2
    fmt = getattr(args, "format", "loops")
    if fmt != "loops" and args.live:
        print("rlstream simulate: --live writes the loops format only", file=sys.stderr)
        return 2
    if args.live:
        write = partial(simulate_live, args.root, config, interval=args.interval)
    elif fmt != "loops":
        write = partial(_simulate_as, args.root, config, fmt)
    else:
        write = partial(simulate, args.root, config)
    return _timed(
        write,
        f"wrote {{n}} x {config.steps} steps to {args.root} in {{took:.1f}}s "
        f"(labels: {args.root}/labels.json)",
    )


def _simulate_as(root: str, config: SimConfig, fmt: str) -> list:
    """Simulate in the loops format in a scratch folder, then write each run the way
    trainer `fmt` writes it under ROOT (with labels.json)."""
    import tempfile
    from pathlib import Path

    dst = Path(root)
    if dst.exists() and any(dst.iterdir()):
        raise FileExistsError(f"{root} is not empty")
    with tempfile.TemporaryDirectory(prefix="rlstream-sim-") as tmp:
        labels = simulate(Path(tmp) / "runs", config)
        convert_tree(Path(tmp) / "runs", dst, fmt)
    return labels


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlstream simulate")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
