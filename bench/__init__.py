"""Benchmarks: speed (`python -m bench batch|live|all [--quick]`) and detector quality
(`python -m bench.detectors`). Never timed tests: see bench/README.md."""
