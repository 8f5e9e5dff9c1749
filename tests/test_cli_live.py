"""Usage errors of the live options: `watch --notify` with a URL that is not
http(s), `--ui-port` beside a different `--metrics-port`, a busy `--ui-port`: one
line and exit 2 before Ray starts. Ray-free."""

from __future__ import annotations

import socket

import pytest

from rlstream.cli import main
from rlstream.errors import EXIT_USAGE


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "runs"
    r.mkdir()
    return r


def _error(capsys) -> str:
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("rlstream: error: ")
    return line


def test_notify_needs_an_http_url(root, tmp_path, capsys, no_ray):
    argv = ["watch", str(root), "--out", str(tmp_path / "o"), "--notify", "ftp://x/y"]
    assert main(argv) == EXIT_USAGE
    assert "--notify 'ftp://x/y' is not an http(s) URL" in _error(capsys)


def test_ui_port_serves_metrics_too(root, tmp_path, capsys, no_ray):
    argv = ["watch", str(root), "--out", str(tmp_path / "o"), "--ui-port", "0"]
    assert main([*argv, "--metrics-port", "9"]) == EXIT_USAGE
    assert "--ui-port serves /metrics too" in _error(capsys)


def test_busy_ui_port(root, tmp_path, capsys, no_ray):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        busy = s.getsockname()[1]
        argv = ["watch", str(root), "--out", str(tmp_path / "o"), "--ui-port", str(busy)]
        assert main(argv) == EXIT_USAGE
    line = _error(capsys)
    assert f"cannot serve pages on 127.0.0.1:{busy}" in line and "choose another --ui-port" in line
