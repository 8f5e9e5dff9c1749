"""Sinks: Parquet tables under OUT, written atomically with deterministic names."""
