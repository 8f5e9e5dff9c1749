"""Usage errors at the edge: a bad number, port, path or cluster address is one line
and exit 2 before anything starts (no Ray, nothing written). Ray-free."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from rlstream.cli import main
from rlstream.errors import EXIT_USAGE
from rlstream.runtime.cluster import RayConfig, check_reachable


@pytest.fixture
def root(tmp_path) -> Path:
    r = tmp_path / "runs"
    r.mkdir()
    return r


def _error(capsys) -> str:
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("rlstream: error: ")
    return line


def _closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- a cluster address where nothing listens -------------------------------------------


@pytest.mark.parametrize("command", ["analyze", "watch"])
def test_unreachable_ray_address_fails_fast(command, root, tmp_path, capsys, no_ray, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    address = f"127.0.0.1:{_closed_port()}"
    out = tmp_path / "out"
    argv = [command, str(root), "--out", str(out), "--ray-address", address]
    assert main(argv) == EXIT_USAGE
    line = _error(capsys)
    assert line.startswith(f"rlstream: error: cannot reach a Ray cluster at {address} ")
    assert "(from --ray-address): Connection refused; start it" in line
    assert "fix --ray-address, or unset it to run on a private local Ray" in line
    assert not out.exists()


def test_unreachable_ray_address_from_the_environment(root, tmp_path, capsys, no_ray, monkeypatch):
    address = f"127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("RAY_ADDRESS", address)
    assert main(["watch", str(root), "--out", str(tmp_path / "o")]) == EXIT_USAGE
    line = _error(capsys)
    assert f"cannot reach a Ray cluster at {address} (from RAY_ADDRESS)" in line
    assert "fix RAY_ADDRESS" in line


def test_a_listening_address_passes_and_others_are_left_to_ray(monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        check_reachable(RayConfig(address=f"127.0.0.1:{s.getsockname()[1]}"))
        check_reachable(RayConfig(address=f"ray://127.0.0.1:{s.getsockname()[1]}"))

    def no_socket(*a, **k):
        raise AssertionError("connected")

    monkeypatch.setattr(socket, "create_connection", no_socket)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for address in (None, "auto", "local"):
        check_reachable(RayConfig(address=address))


def test_join_failure_is_an_error_not_a_traceback(monkeypatch):
    """`ray.init` refusing an address (`auto` with no cluster) is a `ClusterError`."""
    import ray

    from rlstream.errors import ClusterError
    from rlstream.runtime.cluster import connect

    def refuse(**k):
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(ClusterError, match=r"^cannot join a Ray cluster at auto \(from "):
        connect(RayConfig(address="auto"))


# -- numbers and ports: argparse types, exit 2 ------------------------------------------


def _usage(capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("command", "option", "value", "says"),
    [
        ("watch", "--poll", "-1", "must be > 0 (got -1)"),
        ("watch", "--poll", "0", "must be > 0 (got 0)"),
        ("watch", "--commit-every", "-1", "must be >= 0 (got -1)"),
        ("watch", "--maintain-every", "-3", "must be >= 0 (got -3)"),
        ("watch", "--metrics-port", "99999", "must be a port in 0-65535 (got 99999)"),
        ("watch", "--metrics-port", "-1", "must be >= 0 (got -1)"),
        ("watch", "--metrics-port", "http", "'http' is not a port number"),
        ("analyze", "--workers", "0", "must be >= 1 (got 0)"),
        ("watch", "--tailers", "-2", "must be >= 1 (got -2)"),
    ],
)
def test_bad_numbers_of_analyze_and_watch(command, option, value, says, root, tmp_path, capsys):
    out = tmp_path / "out"
    line = _usage(capsys, [command, str(root), "--out", str(out), option, value])
    assert line == f"rlstream {command}: error: argument {option}: {says}"
    assert not out.exists()


def test_zero_stays_valid_where_it_means_something(root):
    from rlstream.cli import build_parser

    args = build_parser().parse_args(
        ["watch", str(root), "--out", "o", "--maintain-every", "0", "--commit-every", "0"]
    )
    assert (args.maintain_every, args.commit_every) == (0.0, 0.0)
    assert (
        build_parser().parse_args(["watch", "r", "--out", "o", "--metrics-port", "0"]).metrics_port
        == 0
    )


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--interval", "-1", "must be > 0 (got -1)"),
        ("--interval", "0", "must be > 0 (got 0)"),
        ("--count", "0", "must be >= 1 (got 0)"),
    ],
)
def test_bad_numbers_of_status_follow(option, value, says, tmp_path, capsys):
    line = _usage(capsys, ["status", str(tmp_path), "--follow", option, value])
    assert line == f"rlstream status: error: argument {option}: {says}"


def test_report_into_a_missing_folder(tmp_path, capsys):
    target = tmp_path / "nodir" / "x.html"
    line = _usage(capsys, ["report", str(tmp_path), "-o", str(target)])
    assert line == (
        f"rlstream report: error: argument -o/--output: folder {tmp_path / 'nodir'} does not "
        "exist; create it or write the report elsewhere"
    )
    assert not (tmp_path / "nodir").exists()


def test_report_onto_a_folder(tmp_path, capsys):
    line = _usage(capsys, ["report", str(tmp_path), "-o", str(tmp_path)])
    assert line == (
        f"rlstream report: error: argument -o/--output: {tmp_path} is a folder; "
        "give a file name such as report.html"
    )
