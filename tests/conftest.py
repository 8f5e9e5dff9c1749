"""Shared fixtures: the session-scoped local Ray
(`ray_session`) that tests/runtime and tests/fleet share: one cluster per session,
stopped at its end and its temp folder removed; nothing else on the machine is
touched (no `ray stop`); `no_ray`, which fails a test that starts or joins Ray; and one
moto S3 server for the session (`s3_server`, `s3_requests`). Each is defined here
once: a session fixture imported into a test module is a second definition, and would
start a second server that takes the session's AWS_* environment from the first."""

from __future__ import annotations

import os
import shutil
import socket
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_REQUEST_LOG: list[str] = []


@pytest.fixture
def s3_requests(s3_server):
    """A function returning the HTTP requests moto's server has logged so far, one
    string per request ("GET /bucket/key?... HTTP/1.1"); take a difference to count."""
    import re

    def requests() -> list[str]:
        with open(_REQUEST_LOG[-1], errors="replace") as f:
            return re.findall(r'"((?:GET|PUT|HEAD|POST|DELETE) [^"]*)"', f.read())

    return requests


@pytest.fixture(scope="session")
def s3_server():
    """moto's S3 server on 127.0.0.1 over real HTTP, in its own process (delta-rs talks
    to it from Rust threads: an in-process server can deadlock on the GIL); yields its
    endpoint URL and sets AWS_* for the session."""
    import shutil
    import subprocess
    import sys
    import tempfile
    import time

    port = _free_port()
    exe = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or "moto_server"
    log = tempfile.NamedTemporaryFile(prefix="moto-", suffix=".log", delete=False)  # noqa: SIM115
    _REQUEST_LOG.append(log.name)
    proc = subprocess.Popen(
        [exe, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 60
    while True:
        assert proc.poll() is None, "moto_server exited at start"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "moto_server did not listen within 60 s"
            time.sleep(0.1)
    endpoint = f"http://127.0.0.1:{port}"
    saved = {
        k: os.environ.get(k)
        for k in (
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_DEFAULT_REGION",
            "AWS_ENDPOINT_URL",
        )
    }
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=endpoint,
    )
    yield endpoint
    proc.terminate()
    proc.wait(timeout=30)
    log.close()
    os.unlink(log.name)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
