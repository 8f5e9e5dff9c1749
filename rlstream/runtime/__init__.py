"""The Ray runtime: thin actor shells around the pipeline's plain functions.

- `cluster`: join a cluster (`--ray-address` / RAY_ADDRESS) or start a private one.
- `actors`: `Worker` (reads and aggregates units) and `Tailer` (owns a shard of runs).
- `driver`: discovery, the poll/commit loop, progress, clean shutdown.
"""
