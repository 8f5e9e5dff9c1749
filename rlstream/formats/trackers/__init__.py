"""Readers of experiment trackers' local files: TensorBoard, W&B, SwanLab, Trackio, MLflow.

The parsers (`tensorboard`, `wandb`, `swanlab`, `mlflow_files`, `sqlite_stores`) take
bytes (or, for the SQLite stores, a read-only connection the caller opened) and a
cursor, and return a `common.Read`: rows `{"step": int, "time": float | None, <key>:
float}` under the tracker's own key names, the cursor to resume from (always at a
record boundary; an incomplete tail is left for the next call), identity found on the
way, and `TrackerError`s (file offset and reason) for corrupt records that were
skipped. `keymap` maps a trainer's keys onto the canonical ones; `backends` puts the
five trackers behind `formats.base.Format` (their `Records` streams).
"""
