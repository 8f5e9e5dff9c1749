"""The pipeline as plain functions and folds: work units, run state, rows, commits.

Nothing here imports Ray. `rlstream.runtime` wraps these pieces in actors; the
in-process runner (`rlstream.pipeline.local`) runs the very same code for tests.
"""
