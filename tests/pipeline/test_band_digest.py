"""The band digest equals its definition, recomputed here from every `cohorts` row.

Definition (docs/schema.md, `band_digest`): per (cohort, figure), the newest version of
each step's band (largest n, then newest as_of, then commit_seq); the smallest power
of two `width` whose bins cover the banded steps in at most 256 bins; per bin, the
band of its first banded step. Bands arrive out of order and are written again with
more runs, or again with fewer (a stale copy), across commits, maintenance passes and
a compaction the digest did not follow.
"""

from __future__ import annotations

import random

from deltalake import DeltaTable

from rlstream.fleet.read import out_sink, read_bands, read_table
from rlstream.sinks.band_digest import BAND_DIGEST_TABLE
from rlstream.sinks.cohorts import cohorts_table
from rlstream.sinks.maintain import MaintenanceConfig, maintain


def reference(out: str) -> dict:
    newest: dict[tuple, dict] = {}
    for r in read_table(out, "cohorts").to_pylist():
        k = (r["cohort"], r["figure"], r["step"])
        rank = (r["n"], r["as_of"], r["commit_seq"])
        if k not in newest or rank > newest[k][0]:
            newest[k] = (rank, r)
    groups: dict[tuple, list[dict]] = {}
    for (c, f, _), (_, r) in sorted(newest.items()):
        groups.setdefault((c, f), []).append(r)
    want: dict = {}
    for (c, f), rows in groups.items():
        first, last = rows[0]["step"], rows[-1]["step"]
        w = 1
        while last // w - first // w + 1 > 256:
            w *= 2
        kept: dict[int, dict] = {}
        for r in rows:
            kept.setdefault(r["step"] // w, r)
        keep = list(kept.values())
        want.setdefault(c, {})[f] = {
            k: [r[k] for r in keep] for k in ("step", "n", "p10", "p50", "p90", "median", "mad")
        }
    return want


def commit(sink, rng: random.Random, seq: int, steps: list[int]) -> None:
    rows = []
    for s in steps:
        for cohort in ("a", "b"):
            for figure in ("reward_mean", "mismatch_kl"):
                rows.append(
                    {
                        "cohort": cohort,
                        "figure": figure,
                        "step": s,
                        "n": rng.randint(1, 4),
                        "p10": rng.random(),
                        "p50": rng.random(),
                        "p90": 1 + rng.random(),
                        "median": rng.random(),
                        "mad": rng.random(),
                        "run_id": "r",
                        "as_of": 1.8e9 + rng.choice([0, seq]),
                        "commit_seq": seq,
                    }
                )
    sink.append("cohorts", cohorts_table(rows), {f"c{seq}": 1})


def test_band_digest_follows_rewrites_passes_and_compactions(tmp_path):
    out = str(tmp_path / "out")
    sink = out_sink(out, retention_seconds=0)
    rng = random.Random(11)
    seq = 0

    def commits(n: int, lo: int, hi: int) -> None:
        nonlocal seq
        for _ in range(n):
            seq += 1
            commit(sink, rng, seq, rng.sample(range(lo, hi), 40))

    commits(5, 0, 200)  # short: width 1, every step's newest band
    assert read_bands(out) == reference(out)
    assert read_bands(out)["a"]["reward_mean"]["step"] == sorted(
        {r["step"] for r in read_table(out, "cohorts").to_pylist()}
    )
    maintain(sink, MaintenanceConfig())
    assert read_bands(out) == reference(out)
    commits(20, 0, 3000)  # rewrites of old steps, new early and late steps
    assert read_bands(out) == reference(out)
    version = DeltaTable(sink.uri(BAND_DIGEST_TABLE)).version()
    maintain(sink, MaintenanceConfig())
    assert DeltaTable(sink.uri(BAND_DIGEST_TABLE)).version() > version
    assert read_bands(out) == reference(out)
    commits(6, 0, 6000)
    DeltaTable(sink.uri("cohorts")).optimize.compact()  # covered rows, new file names
    got = read_bands(out)
    assert got == reference(out)
    assert len(got["b"]["mismatch_kl"]["step"]) <= 256
    assert read_bands(out, ["b"]) == {"b": got["b"]}
    maintain(sink, MaintenanceConfig())
    assert read_bands(out) == reference(out)


def test_the_width_follows_the_highest_step_not_the_kept_ones(tmp_path):
    """Steps 1, 2 and 4-257 need width 2 (257 // 2 - 1 // 2 + 1 = 129 bins); the last
    kept step is 256, which alone would need width 1. A band for step 3 arriving after
    a pass must not be kept at the narrower width."""
    out = str(tmp_path / "out")
    sink = out_sink(out, retention_seconds=0)
    rng = random.Random(2)
    commit(sink, rng, 1, [1, 2, *range(4, 258)])
    maintain(sink, MaintenanceConfig())
    commit(sink, rng, 2, [3])
    got = read_bands(out)
    assert got == reference(out)
    assert 3 not in got["a"]["reward_mean"]["step"] and 2 in got["a"]["reward_mean"]["step"]
    maintain(sink, MaintenanceConfig())
    assert read_bands(out) == reference(out)
