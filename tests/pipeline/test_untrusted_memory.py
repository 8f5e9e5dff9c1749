"""Memory is bounded by the file, not by what it holds: a transcript of ~300 MB (one
generation of 11.5 M tokens), read with the per-file limit set above it, is decoded
and aggregated within `DECODE_FACTOR` times its size of peak RSS over the process's
own baseline, measured in a subprocess of the test (docs/runtime.md, "Limits")."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from rlstream.io.window import DECODE_FACTOR
from tests.outputs import out_sql
from tests.pipeline.runfiles import write_run

TOKENS = 11_500_000


def _huge_transcript(run: Path, n: int) -> Path:
    """One generation of `n` tokens, written without building it in memory."""
    path = run / "transcripts" / "huge.json"
    head = {"attempt_id": "huge", "group_id": "g1-0", "task_id": "t0", "step": 1}
    with open(path, "wb") as f:
        f.write(json.dumps({**head, "trains": True, "trace": "full"})[:-1].encode())
        f.write(b', "generations": [{"index": 0, "policy_version": 1, "prompt_len": 3, ')
        f.write(b'"completion_len": %d, "stop_reason": "length", ' % n)
        for key, value in (
            (b"completion_tokens", b"31337"),
            (b"sampler_logprobs", b"-0.693147"),
            (b"trainer_logprobs", b"-0.702412"),
        ):
            f.write(b'"%s": [' % key + (value + b",") * (n - 1) + value + b"], ")
        f.write(b'"index2": 0}]}')
    return path


CHILD = textwrap.dedent(
    """
    import resource, sys
    from rlstream.config import PipelineConfig
    from rlstream.pipeline.local import analyze_local
    from rlstream.pipeline.verdicts import health_hooks
    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    health_hooks()
    base = peak()
    analyze_local([sys.argv[1]], sys.argv[2], PipelineConfig(max_file_bytes=1 << 30))
    print(base, peak())
    """
)


def test_a_300_mb_transcript_costs_a_bounded_multiple_of_its_size(tmp_path):
    run = write_run(tmp_path / "runs", steps=3)
    size = _huge_transcript(run, TOKENS).stat().st_size
    assert size > 280 << 20
    out = tmp_path / "out"
    got = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "runs"), str(out)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    base, peak = map(int, got.stdout.split()[-2:])
    assert peak - base <= DECODE_FACTOR * size, (peak - base) / size
    # ...and the transcript was read, not refused: its tokens are in its step's row.
    assert out_sql(out, "select count(*) from quarantine where reason <> 'late'") == [(0,)]
    assert out_sql(out, "select transcripts from steps where step = 1") == [(5,)]
