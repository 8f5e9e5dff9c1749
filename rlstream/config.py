"""Typed, frozen configuration of the pipeline, with its one source of defaults.

The CLI parses options at the edge and builds a `PipelineConfig`; everything below
takes the config object, never raw options or environment variables.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlstream.metrics.scanners import SamplesConfig


@dataclass(frozen=True)
class PipelineConfig:
    """How runs are read, when step rows become final, how often state is committed."""

    poll_seconds: float = 1.0
    """Seconds between polls of every run's files (watch)."""
    commit_seconds: float = 2.0
    """Seconds between commits of outputs and resume states (watch)."""
    watermark_lag_steps: int = 1
    """A step's row is final once the line of a step this much later has been read..."""
    watermark_settle_seconds: float = 0.5
    """...or once its own line was read this long ago (in practice: by the next poll):
    data of the step written just after its line (buffered writes) still counts, and a
    run whose steps take minutes is not a whole step behind."""
    idle_final_seconds: float = 600.0
    """A run with no new bytes for this long has all its pending steps finalized."""
    idle_backoff_seconds: float = 30.0
    """A run with no new bytes for this long is polled less often (`idle_poll_every`)."""
    idle_poll_every: int = 5
    """An idle run is polled once every this many polls (staggered across runs)."""
    transcripts_per_unit: int = 256
    """Transcript files per work unit handed to a worker. Each unit costs a Ray task
    round trip; 256 instead of 64 took a third off the tailers' CPU in a batch of
    25,600 transcripts (bench/README.md). A worker's peak memory for a unit is about
    53 bytes per token: 256 transcripts of 16k tokens is ~220 MB (docs/deploy.md)."""
    max_inflight_units: int = 16
    """Work units in flight at once per tailer (backpressure)."""
    read_inflight_bytes: int = 64 << 20
    """Bytes a worker holds in flight while reading a unit's transcripts from an object
    store: up to 64 reads run at once (each costs a first-byte round trip, 10-50 ms on
    S3), as long as the reads held (read ahead, not yet parsed) and running, each
    counted at its decoded cost (`rlstream.io.window.DECODE_FACTOR` times its size, taken
    from the listing before the GET), stay within this. Smaller: less memory, fewer
    reads overlapped; one read is always allowed. Local disk reads serially."""
    max_file_bytes: int = 64 << 20
    """Largest whole file read (a transcript, a per-step file, run.json; on S3 told
    from the listing before the GET; `[limits]` of the rules file, `--max-file-bytes`):
    a larger one gets a quarantine row `file_too_large` with its size and is not read.
    Decoding a file costs several times its size, so this bounds a worker's memory
    whatever a run folder holds; a long agent transcript with full traces (100k tokens
    with ids, both logprobs and text) is a few MB, one with top-20 logprobs tens of MB."""
    max_tokens_slack: int = 0
    """Tokens a generation may have above its run's own `sampling.max_tokens` (where the
    run's config gives it) before it is quarantined as `exceeds_max_tokens`: a longer
    one contradicts the run's sampler and is not trusted."""
    full_relist_every: int = 30
    """Polls between full relists of a run's transcripts (on object stores; a local
    listing is always full): they find names that arrived below the window."""
    transcript_window: int = 256
    """Consumed transcript names kept above the run's name watermark: a transcript may
    appear this many names out of write order and still be read (docs/run-format.md)."""
    fsync: bool = True
    """fsync every resume state on local disk before its rename, so a
    commit survives power loss. Off: still atomic across process crashes (kill -9)."""
    commit_threads: int = 8
    """Threads writing runs' resume states in parallel at a commit."""
    analyze_chunk_runs: int = 8
    """`analyze` reads this many runs of a tailer's shard at a time, commits them and
    drops their state, so memory is bounded by the chunk, not by the archive."""
    retention_seconds: int = 300
    """OUT's tables keep removed files and log entries this long before maintenance
    deletes them (Delta table properties set when a table is created): far longer than
    any read of `status` or `report`, short enough that OUT stays small."""
    reset_runs: tuple[str, ...] = ()
    """run_ids whose resume state is moved aside and whose rows are deleted, so they
    are read again from the start (`--reset-run`)."""
    storage_options: dict[str, Any] = field(default_factory=dict)
    """fsspec options for every ROOT and OUT URL (e.g. endpoint_url, key, secret)."""
    input_format: str | None = None
    """Read every run as this format (`rlstream.formats.FORMATS`); None detects each
    run's format from its files (docs/formats.md)."""
    samples: SamplesConfig = field(default_factory=SamplesConfig)
    """Kept samples and transcript scanners (rules file `[samples]`, `--samples-top`)."""
