"""The batch contenders other than rlstream: DuckDB and a plain Python script.

    python -m bench.contenders duckdb ROOT OUT.json [--threads N]
    python -m bench.contenders plain ROOT OUT.json
    python -m bench.contenders rlstream-out OUT_DIR OUT.json   # read rlstream's steps

Each computes, per (run folder, step), from ROOT/*/transcripts/*.json, the token
aggregates of DESIGN.md section 3: sampled_tokens, trained_tokens, entropy_estimate
(-mean ls over sampled tokens), mismatch_k1 (mean ls - lt), mismatch_k2 (mean
(ls - lt)^2 / 2), mismatch_kl (k3: mean exp(d) - 1 - d, d = clip(lt - ls, +-20)) and
mismatch_ess ((sum w)^2 / (|T| sum w^2), w = exp(d)), over T = tokens of attempts
that trained where both logprobs are present. Results go to OUT.json as
{"run/step": {column: value}} so the harness can check that all agree.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from pathlib import Path

COLUMNS = (
    "sampled_tokens",
    "trained_tokens",
    "entropy_estimate",
    "mismatch_k1",
    "mismatch_k2",
    "mismatch_kl",
    "mismatch_ess",
)

DUCKDB_SQL = """
WITH f AS (
  SELECT regexp_extract(filename, '([^/]+)/transcripts/[^/]+$', 1) AS run, step, trains,
         unnest(generations) AS g
  FROM read_json('{glob}', filename = true, format = 'auto',
    columns = {{step: 'BIGINT', trains: 'BOOLEAN',
               generations: 'STRUCT(sampler_logprobs DOUBLE[], trainer_logprobs DOUBLE[])[]'}})
), t AS (
  SELECT run, step, trains, unnest(g.sampler_logprobs) AS ls, unnest(g.trainer_logprobs) AS lt
  FROM f
), d AS (
  SELECT run, step, ls, lt, trains AND ls IS NOT NULL AND lt IS NOT NULL AS in_t,
         least(greatest(lt - ls, -20), 20) AS dd
  FROM t
)
SELECT run, step,
  count(ls) AS sampled_tokens,
  count(*) FILTER (WHERE in_t) AS trained_tokens,
  -avg(ls) AS entropy_estimate,
  avg(ls - lt) FILTER (WHERE in_t) AS mismatch_k1,
  avg((ls - lt) * (ls - lt)) FILTER (WHERE in_t) / 2 AS mismatch_k2,
  avg(exp(dd) - 1 - dd) FILTER (WHERE in_t) AS mismatch_kl,
  sum(exp(dd)) FILTER (WHERE in_t) ^ 2
    / (count(*) FILTER (WHERE in_t) * sum(exp(2 * dd)) FILTER (WHERE in_t)) AS mismatch_ess
FROM d GROUP BY run, step
"""


def run_duckdb(root: str, threads: int) -> dict[str, dict[str, float | None]]:
    import duckdb

    con = duckdb.connect()
    con.execute(f"PRAGMA threads={threads}")
    con.execute("PRAGMA disable_progress_bar")
    rows = con.execute(DUCKDB_SQL.format(glob=f"{root}/*/transcripts/*.json")).fetchall()
    return {f"{r[0]}/{r[1]}": dict(zip(COLUMNS, r[2:], strict=True)) for r in rows}


def run_plain(root: str) -> dict[str, dict[str, float | None]]:
    """What a person would write first: json.load each file, numpy per generation."""
    import numpy as np

    acc: dict[str, list] = {}
    for path in sorted(glob.glob(f"{root}/*/transcripts/*.json")):
        run = Path(path).parent.parent.name
        with open(path) as f:
            obj = json.load(f)
        key = f"{run}/{obj['step']}"
        a = acc.setdefault(key, [0, 0.0, 0, 0.0, 0.0, 0.0, 0.0, 0.0])
        for g in obj["generations"]:
            ls = np.asarray(g.get("sampler_logprobs") or [], dtype=np.float64)
            if not ls.size:
                continue
            sampled = np.isfinite(ls)
            a[0] += int(sampled.sum())
            a[1] += float(-ls[sampled].sum())
            lt_list = g.get("trainer_logprobs")
            if not obj["trains"] or lt_list is None:
                continue
            lt = np.asarray(lt_list, dtype=np.float64)
            m = sampled & np.isfinite(lt)
            diff = ls[m] - lt[m]
            d = np.clip(-diff, -20.0, 20.0)
            w = np.exp(d)
            a[2] += int(m.sum())
            a[3] += float(diff.sum())
            a[4] += float((diff * diff).sum())
            a[5] += float((np.expm1(d) - d).sum())
            a[6] += float(w.sum())
            a[7] += float((w * w).sum())
    out = {}
    for key, (ns, neg_ls, nt, k1, k2, k3, sw, sw2) in acc.items():
        out[key] = {
            "sampled_tokens": ns,
            "trained_tokens": nt,
            "entropy_estimate": neg_ls / ns if ns else None,
            "mismatch_k1": k1 / nt if nt else None,
            "mismatch_k2": k2 / nt / 2 if nt else None,
            "mismatch_kl": k3 / nt if nt else None,
            "mismatch_ess": sw * sw / (nt * sw2) if nt else None,
        }
    return out


def read_rlstream(out_dir: str, root: str) -> dict[str, dict[str, float | None]]:
    """rlstream's steps table, keyed like the others (run folder name, via run.json)."""
    import duckdb

    folder_of = {}
    for rj in glob.glob(f"{root}/*/run.json"):
        with open(rj) as f:
            folder_of[json.load(f)["run_id"]] = Path(rj).parent.name
    cols = ", ".join(COLUMNS)
    from rlstream.fleet.read import read_table

    steps = read_table(str(out_dir), "steps")  # noqa: F841 (read by DuckDB by name)
    rows = duckdb.sql(f"SELECT run_id, step, {cols} FROM steps").fetchall()
    return {
        f"{folder_of.get(r[0], r[0])}/{r[1]}": dict(zip(COLUMNS, r[2:], strict=True))
        for r in rows
        if r[2]  # steps with transcripts only
    }


def compare(
    ref: dict[str, dict[str, float | None]],
    other: dict[str, dict[str, float | None]],
    rel: float = 1e-9,
) -> list[str]:
    """Differences beyond `rel` (relative, or absolute near zero); [] when they agree."""
    problems = []
    if set(ref) != set(other):
        missing = sorted(set(ref) ^ set(other))[:5]
        problems.append(f"different (run, step) keys, e.g. {missing}")
    for key in sorted(set(ref) & set(other)):
        for col in COLUMNS:
            a, b = ref[key][col], other[key][col]
            if a is None or b is None:
                if a != b:
                    problems.append(f"{key} {col}: {a} vs {b}")
                continue
            if abs(a - b) > rel * max(abs(a), abs(b), 1e-6):
                problems.append(f"{key} {col}: {a!r} vs {b!r}")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.contenders")
    p.add_argument("which", choices=("duckdb", "plain", "rlstream-out"))
    p.add_argument("root")
    p.add_argument("out")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--runs-root", help="rlstream-out: the runs' ROOT (to map run ids)")
    a = p.parse_args(argv)
    if a.which == "duckdb":
        res = run_duckdb(a.root, a.threads)
    elif a.which == "plain":
        res = run_plain(a.root)
    else:
        res = read_rlstream(a.root, a.runs_root)
    with open(a.out, "w") as f:
        json.dump(res, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
