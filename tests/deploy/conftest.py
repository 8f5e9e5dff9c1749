"""The two-node local Ray cluster of the multinode tests: one per test module."""

from __future__ import annotations

import pytest

from tests.deploy.localcluster import LocalCluster


@pytest.fixture(scope="module")
def cluster():
    c = LocalCluster(cpus_per_node=1).start()
    try:
        yield c
    finally:
        c.stop()
    assert c.alive() == [], "processes of the test cluster outlived stop()"
