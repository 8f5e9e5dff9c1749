"""MLflow's file store: `mlruns/<experiment>/<run>/metrics/<key>` (lines
`timestamp_ms value step`, appended), `params/<name>` (the value) and `meta.yaml`.

`read_metric_file(key, data, start, final)`: `data` is the file from byte `start`;
complete lines become rows `{"step", "time", key: value}` (MLflow writes `nan`,
`inf`, `-inf` as Python prints them); a partial last line is left for later (with
`final`, it is reported `truncated`); a malformed line is a `TrackerError` at its
offset. `run_meta(data)` gives the run id, name and experiment from `meta.yaml`.
"""

from __future__ import annotations

from typing import Any

from rlstream.formats.trackers.common import Read, TrackerError


def read_metric_file(key: str, data: bytes, start: int = 0, final: bool = False) -> Read:
    rows, errors = [], []
    i = 0
    while True:
        end = data.find(b"\n", i)
        if end < 0:
            break
        line = data[i:end].strip()
        if line:
            try:
                ts, value, *rest = line.split()
                rows.append(
                    {
                        "step": int(rest[0]) if rest else 0,
                        "time": int(ts) / 1000.0,
                        key: float(value),
                    }
                )
            except (ValueError, IndexError):
                errors.append(TrackerError(start + i, "bad_record", f"metric line {line[:80]!r}"))
        i = end + 1
    if final and i < len(data):
        errors.append(
            TrackerError(start + i, "truncated", f"{len(data) - i} bytes without a newline")
        )
        i = len(data)
    return Read(rows, start + i, errors)


def run_meta(data: bytes) -> dict[str, Any]:
    import yaml  # only identity needs it

    doc = yaml.safe_load(data) or {}
    return {
        "run_id": doc.get("run_id"),
        "name": doc.get("run_name"),
        "experiment_id": str(doc.get("experiment_id")),
        "start_time": doc.get("start_time"),
    }
