"""What the command line's subcommands share: options turned into typed configs
(`pipeline_config`, `runtime_config`, `maintenance_config`, `storage_options`), the
shared argument groups (`common`, `retention`), the input checks made before anything
starts (`check_inputs` for ROOTs and OUT of analyze/watch, `checked_out` for the OUT
of status/report/compact; both raise `InputError`, exit status 2), the argparse
types that refuse a bad number or path as a usage error (`positive_int`, `port`,
`seconds`, `new_dir`, `html_file`, ...), and the closing report of analyze/watch
(`finish`: what was written and rejected, and the exit code).
"""

from __future__ import annotations

import argparse
import json

from rlstream.config import PipelineConfig
from rlstream.errors import ConfigError


def _number(text: str, kind: type, least: float, strict: bool, what: str):
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if value != value or (value <= least if strict else value < least):  # NaN too
        bound = f"> {least:g}" if strict else f">= {least:g}"
        raise argparse.ArgumentTypeError(f"must be {bound} (got {text})")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1."""
    return _number(text, int, 1, False, "a whole number")


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number >= 0."""
    return _number(text, int, 0, False, "a whole number")


def seconds(text: str) -> float:
    """An argparse type: a number of seconds > 0."""
    return _number(text, float, 0, True, "a number of seconds")


def seconds_or_zero(text: str) -> float:
    """An argparse type: a number of seconds >= 0."""
    return _number(text, float, 0, False, "a number of seconds")


def port(text: str) -> int:
    """An argparse type: a TCP port, 0-65535 (0: any free port)."""
    value = _number(text, int, 0, False, "a port number")
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a port in 0-65535 (got {text})")
    return value


def new_dir(text: str) -> str:
    """An argparse type: a folder that does not exist yet or is empty (so everything
    in it afterwards was written by the command)."""
    import os

    if os.path.isdir(text):
        if os.listdir(text):
            raise argparse.ArgumentTypeError(
                f"{text} already holds files; give an empty or new folder"
            )
    elif os.path.lexists(text):
        raise argparse.ArgumentTypeError(f"{text} is a file; give an empty or new folder")
    return text


def html_file(text: str) -> str:
    """An argparse type: a file that can be written in a folder that exists."""
    import os

    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(
            f"{text} is a folder; give a file name such as report.html"
        )
    parent = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(parent):
        raise argparse.ArgumentTypeError(
            f"folder {parent} does not exist; create it or write the report elsewhere"
        )
    if not os.access(parent, os.W_OK):
        raise argparse.ArgumentTypeError(
            f"folder {parent} cannot be written; write the report elsewhere"
        )
    return text


def storage_options(text: str | None) -> dict:
    if not text:
        return {}
    try:
        opts = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"--storage-options is not JSON: {e}") from e
    if not isinstance(opts, dict):
        raise ConfigError("--storage-options must be a JSON object")
    return opts


def pipeline_config(args: argparse.Namespace) -> PipelineConfig:
    kw: dict = {"storage_options": storage_options(getattr(args, "storage_options", None))}
    if getattr(args, "poll", None) is not None:
        kw["poll_seconds"] = args.poll
    if getattr(args, "commit_every", None) is not None:
        kw["commit_seconds"] = args.commit_every
    if getattr(args, "reset_run", None):
        kw["reset_runs"] = tuple(args.reset_run)
    kw.update(retention_kw(args))
    if getattr(args, "format", None) is not None:
        kw["input_format"] = args.format
    kw.update(limits_kw(args))
    kw["samples"] = samples_settings(args)
    return PipelineConfig(**kw)


def limits_kw(args: argparse.Namespace) -> dict:
    """`[limits]` of the `--rules` file, each overridden by its flag when given."""
    kw: dict = {}
    if getattr(args, "rules", None):
        from rlstream.health import load_rules

        limits = load_rules(args.rules).limits
        kw = {"max_file_bytes": limits.max_file_bytes, "max_tokens_slack": limits.max_tokens_slack}
    for name in ("max_file_bytes", "max_tokens_slack"):
        if getattr(args, name, None) is not None:
            kw[name] = getattr(args, name)
    return kw


def samples_settings(args: argparse.Namespace):
    """Kept samples and scanners: the rules file's `[samples]`, then `--samples-top`."""
    import dataclasses
    import tomllib

    from rlstream.metrics.scanners import SamplesConfig, samples_config

    cfg = SamplesConfig()
    path = getattr(args, "rules", None)
    if path:
        try:
            with open(path, "rb") as fh:
                table = tomllib.load(fh).get("samples")
        except (OSError, tomllib.TOMLDecodeError):
            table = None  # the health rules' loader reports an unreadable file
        if table is not None:
            try:
                cfg = samples_config(table)
            except ValueError as e:
                raise ConfigError(f"rules file {path}: [samples] {e}") from e
    top = getattr(args, "samples_top", None)
    return dataclasses.replace(cfg, top=top) if top is not None else cfg


def format_names() -> list[str]:
    from rlstream.formats import FORMATS

    return list(FORMATS)


def retention_kw(args: argparse.Namespace) -> dict:
    if getattr(args, "retention", None) is None:
        return {}
    if args.retention < 0:
        raise ConfigError("--retention must be >= 0 seconds")
    return {"retention_seconds": int(args.retention)}


def maintenance_config(args: argparse.Namespace):
    from rlstream.sinks.maintain import MaintenanceConfig

    kw: dict = {}
    if getattr(args, "maintain_every", None) is not None:
        kw["every_seconds"] = args.maintain_every
    return MaintenanceConfig(**kw)


def common(p: argparse.ArgumentParser) -> None:
    p.add_argument("roots", nargs="+", metavar="ROOT", help="folder or URL holding runs")
    p.add_argument("--out", required=True, help="output folder or URL for the Delta tables")
    p.add_argument("--storage-options", help="JSON object passed to fsspec for every URL")
    p.add_argument(
        "--format",
        choices=format_names(),
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
    p.add_argument(
        "--cohort",
        action="append",
        metavar="NAME=GLOB",
        help="runs whose id or folder matches GLOB form the cohort NAME, unless their config "
        "names one (config.experiment, config.cohort, config.tags); default: a fingerprint of "
        "the config without seeds, names and paths (docs/health.md, Cohorts); repeatable",
    )
    p.add_argument(
        "--workers", type=positive_int, help="worker actors (default: the cluster's CPUs)"
    )
    p.add_argument(
        "--tailers",
        type=positive_int,
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
    p.add_argument(
        "--max-file-bytes",
        type=positive_int,
        metavar="N",
        help="largest whole run file read (a transcript, a per-step file, run.json; "
        "default 64 MiB, or [limits] of --rules): a larger one is quarantined as "
        "file_too_large, unread",
    )
    p.add_argument(
        "--max-tokens-slack",
        type=non_negative_int,
        metavar="N",
        help="tokens a generation may have above its run's sampling.max_tokens before it "
        "is quarantined as exceeds_max_tokens (default 0, or [limits] of --rules)",
    )
    p.add_argument(
        "--samples-top",
        type=int,
        metavar="K",
        help="kept samples per run and step: the K highest- and K lowest-reward trained "
        "attempts, up to K flagged ones (default 4, rules file [samples] top; docs/schema.md)",
    )
    retention(p)


def retention(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--retention",
        type=float,
        help="seconds removed files and log entries are kept before vacuum deletes them "
        "(default 300; readers that take longer than this may fail)",
    )


def check_placement(args: argparse.Namespace) -> None:
    """`ConfigError` for placement flags that contradict each other (`--in-process`,
    `--ray`, analyze's `--processes`)."""
    if args.in_process and args.ray:
        raise ConfigError("--in-process and --ray contradict each other: give one")
    if getattr(args, "processes", None) is not None and (args.ray or args.in_process):
        other = "--ray" if args.ray else "--in-process"
        raise ConfigError(f"--processes and {other} contradict each other: give one")


def runtime_config(args: argparse.Namespace):
    """The runtime's config; a cluster address (`--ray-address`, RAY_ADDRESS) must
    accept a connection within a few seconds (`ClusterError` otherwise, exit 2)."""
    from rlstream.runtime.cluster import RayConfig, check_reachable, starts_private
    from rlstream.runtime.driver import RuntimeConfig

    after = getattr(args, "start_ray_after", None)
    if after is not None and after < 0:
        raise ConfigError(f"--start-ray-after must be >= 0 seconds (got {after:g})")
    if after is None and getattr(args, "ray", False):
        after = 0.0  # --ray: a private Ray at once, whatever the plan
    ray = RayConfig(address=args.ray_address)
    check_reachable(ray)
    if getattr(args, "processes", None) is not None and not starts_private(ray):
        raise ConfigError("--processes runs units beside this process: not with a cluster")
    return RuntimeConfig(
        **({} if after is None else {"start_ray_after": after}),
        workers=args.workers,
        tailers=args.tailers,
        processes=getattr(args, "processes", None),
        ray=ray,
        maintenance=maintenance_config(args),
    )


def print_fleet(out: str, opts: dict) -> None:
    """The same table as `rlstream status OUT`: one table implementation for the CLI."""
    from rlstream.fleet.outdir import read_rejected
    from rlstream.fleet.read import read_latest
    from rlstream.fleet.status import render_table, status_rows

    print(render_table(status_rows(read_latest(out, opts)), rejected=read_rejected(out, opts)))


def check_inputs(args: argparse.Namespace, cfg: PipelineConfig) -> None:
    """Every ROOT is a folder that can be listed and OUT is not a file: checked before
    anything starts (no Ray), so a wrong path costs nothing but a one-line error."""
    import os

    from rlstream.errors import InputError
    from rlstream.pipeline.discover import check_root, normalize_root
    from rlstream.pipeline.local import input_storage

    storage = input_storage(args.roots, cfg.storage_options)
    for root in args.roots:
        check_root(storage, root, cfg.input_format)
    out = normalize_root(args.out)
    if "://" not in out and os.path.isfile(out):
        raise InputError(f"OUT {args.out} is a file: give a folder for the tables")


def finish(outcome, out: str, verb: str, opts: dict) -> int:
    """Say what the command did (from what the commits wrote) and pick the exit code."""
    from rlstream.pipeline.outcome import exit_status, lines

    print("\n".join(lines(outcome, out, verb)))
    if outcome.runs:
        print()
        print_fleet(out, opts)
    return exit_status(outcome)


def rules_hooks(args: argparse.Namespace):
    """A picklable factory of the health hooks with the `--rules` file and the
    `--cohort` rules applied (`pipeline.verdicts.HealthHooks`)."""
    from rlstream.health import DEFAULT_RULES, load_rules
    from rlstream.health.cohort import parse_cohort_rules
    from rlstream.pipeline.verdicts import HealthHooks

    rules = load_rules(args.rules) if args.rules else DEFAULT_RULES
    return HealthHooks(rules, parse_cohort_rules(getattr(args, "cohort", None) or []))


def checked_out(out: str, opts: dict) -> None:
    from rlstream.fleet.outdir import check_out
    from rlstream.io.storage import Storage
    from rlstream.pipeline.discover import normalize_root

    check_out(Storage.for_url(normalize_root(out), opts), out)


def default_report_path(out: str) -> str:
    """Beside a local OUT (`/data/out` -> `/data/out-report.html`); in the current
    folder for a URL (the report is a local file)."""
    import os

    from rlstream.pipeline.discover import normalize_root

    url = normalize_root(out)
    name = url.rstrip("/").rsplit("/", 1)[-1] or "out"
    if "://" in url:
        return os.path.abspath(f"{name}-report.html")
    return os.path.join(os.path.dirname(url), f"{name}-report.html")
