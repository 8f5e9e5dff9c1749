"""Shared fixtures: a hand-written run builder. Ray and S3 fixtures live beside the
tests that need them (tests/runtime/conftest.py)."""
