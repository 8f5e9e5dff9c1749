"""The pipeline in this process: no Ray. Used by unit tests and as the reference.

`analyze_local` reads every run to the end of what exists, finalizes every step,
commits, and returns the runs' states: the reference the tests compare every run
path against. `local_executor` is the plain in-process executor. The commands
(`analyze --in-process` included) run the same `RunGroup` code through the driver
loop (`rlstream.runtime.driver`), whose executors are in `rlstream.runtime.executors`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from rlstream.config import PipelineConfig
from rlstream.io.storage import Storage
from rlstream.pipeline.commit import open_sink
from rlstream.pipeline.discover import find_runs, normalize_root
from rlstream.pipeline.outcome import Outcome
from rlstream.pipeline.runner import RunGroup
from rlstream.pipeline.state import RunState, summary
from rlstream.pipeline.work import Unit, UnitResult, execute
from rlstream.sinks.maintain import MaintenanceConfig, maintain


def local_executor(storage: Storage):
    def run(units: list[Unit]) -> Iterator[UnitResult]:
        for u in units:
            yield execute(u, storage)

    return run


def input_storage(
    roots: Sequence[str],
    options: dict[str, Any],
    read_inflight_bytes: int | None = None,
    max_file_bytes: int | None = None,
) -> Storage:
    """One `Storage` for every ROOT; they must share a protocol. Locally it holds the
    ROOTs' real locations: no file whose real location lies outside them is opened."""
    from rlstream.io.localfs import real_roots

    extra: dict[str, Any] = {}
    if read_inflight_bytes is not None:
        extra["read_inflight_bytes"] = read_inflight_bytes
    if max_file_bytes is not None:
        extra["max_file_bytes"] = max_file_bytes
    local = [normalize_root(r) for r in roots if "://" not in normalize_root(r)]
    if local:
        extra["roots"] = real_roots(local)
    stores = {Storage.for_url(normalize_root(r), options, **extra) for r in roots}
    protocols = {s.protocol for s in stores}
    if len(protocols) != 1:
        from rlstream.errors import ConfigError

        raise ConfigError(
            f"all ROOTs must use one storage protocol, got {sorted(protocols)}; "
            "run one rlstream process per protocol"
        )
    return next(iter(stores))


def runs_or_fail(roots: Sequence[str], out: str, cfg: PipelineConfig) -> tuple[Storage, list[str]]:
    """The input storage and every run under ROOTS (in order); `NoDataError` when there
    is none, before anything is started or written."""
    from rlstream.errors import NoDataError

    storage = input_storage(
        [normalize_root(r) for r in roots],
        cfg.storage_options,
        cfg.read_inflight_bytes,
        cfg.max_file_bytes,
    )
    urls = [u for r in roots for u in find_runs(storage, normalize_root(r), fmt=cfg.input_format)]
    if not urls:
        raise NoDataError(
            f"no runs under {', '.join(roots)} (a run is a Loops folder holding run.json "
            "or a trainer output folder, docs/formats.md); "
            f"nothing was written to {out}"
        )
    return storage, urls


def build_group(roots: Sequence[str], out: str, cfg: PipelineConfig, **hooks: Any) -> RunGroup:
    """A RunGroup over every run found under `roots`, writing under `out`."""
    group, urls = _group_and_runs(roots, out, cfg, **hooks)
    for url in urls:
        group.add_run(url)
    return group


def _group_and_runs(
    roots: Sequence[str], out: str, cfg: PipelineConfig, **hooks: Any
) -> tuple[RunGroup, list[str]]:
    storage = input_storage(roots, cfg.storage_options, cfg.read_inflight_bytes, cfg.max_file_bytes)
    sink = open_sink(out, cfg)
    urls = [u for root in roots for u in find_runs(storage, root, fmt=cfg.input_format)]
    return RunGroup(storage, sink, cfg, **hooks), urls


def analyze_local(
    roots: Sequence[str],
    out: str,
    cfg: PipelineConfig | None = None,
    outcome: Outcome | None = None,
    maintenance: MaintenanceConfig | None = None,
    **hooks: Any,
) -> list[RunState]:
    """Analyze every run under `roots` to the end of what exists; write under `out`.
    Returns the final run states, sorted by run_id (kept in memory: for tests and
    small inputs; the Ray runtime returns summaries only). `outcome`, if given, is
    told what was read, written and rejected. Ends with one maintenance pass over OUT
    (rlstream.sinks.maintain)."""
    cfg = cfg or PipelineConfig()
    if not hooks:
        from rlstream.pipeline.verdicts import health_hooks

        hooks = health_hooks()
    group, urls = _group_and_runs(roots, out, cfg, **hooks)
    states = sorted(group.analyze(urls, local_executor(group.storage)), key=lambda s: s.run_id)
    maintain(group.sink, maintenance)
    if outcome is not None:
        outcome.add_tally(group.tally())
        outcome.add_summaries([summary(s) for s in states])
    return states
