"""Shared fixtures: the session-scoped local Ray
(`ray_session`) that tests/runtime and tests/fleet share: one cluster per session,
stopped at its end and its temp folder removed; nothing else on the machine is
touched (no `ray stop`); and `no_ray`, which fails a test that starts or joins Ray. The moto
S3 server lives in tests/runtime/conftest.py."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest


@pytest.fixture
def no_ray(monkeypatch):
    """Fail the test if anything tries to start or join Ray (usage and input errors
    are told before Ray starts)."""
    import rlstream.runtime.cluster as cluster
    import rlstream.runtime.driver as driver  # before the patch: it binds `connect` at import

    def refuse(*a, **k):
        raise AssertionError("Ray was started before the options and inputs were checked")

    monkeypatch.setattr(cluster, "connect", refuse)
    monkeypatch.setattr(driver, "connect", refuse)


@pytest.fixture(scope="session")
def ray_session():
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    tmp = tempfile.mkdtemp(prefix="rlt", dir="/tmp")
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        _temp_dir=tmp,
        log_to_driver=False,
    )
    yield ray
    ray.shutdown()
    # Nothing left behind: the session's Ray temp folder goes with it.
    shutil.rmtree(tmp, ignore_errors=True)
    assert not os.path.exists(tmp), f"Ray temp folder {tmp} left behind"
