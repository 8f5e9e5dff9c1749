"""Connecting to Ray: an existing cluster, or a private local one (the default).

With no address (neither `--ray-address` nor RAY_ADDRESS) a private local Ray is
started with a short temp dir (AF_UNIX paths are limited to 107 bytes), no
dashboard and no prestarted idle workers, and stopped at once (`disconnect`).
AWS_* variables of this process are passed to every worker as a runtime_env, so
workers on other nodes read object storage with the same credentials and endpoint.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass

from rlstream.runtime import procs

log = logging.getLogger("rlstream")

_FORWARD_PREFIXES = ("AWS_",)


@dataclass(frozen=True)
class RayConfig:
    """How to reach Ray. `address` None means a private local cluster."""

    address: str | None = None
    num_cpus: int | None = None


def forwarded_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(_FORWARD_PREFIXES)}


_TEMP_DIRS: list[str] = []
TEMP_PARENT_ENV = "RLSTREAM_RAY_TMPDIR"
"""Folder in which a private Ray's temp folder is made (default /tmp: AF_UNIX socket
paths under it must stay within 107 bytes, so keep it short). `disconnect` removes it."""


def disconnect() -> None:
    """Shut down the Ray this process started and remove its temp dir.

    `ray.shutdown()` stops a private node's processes one at a time, each with a
    SIGTERM and a wait: about 1.2 s on 2 cores, for a cluster that holds nothing
    once the outputs are committed. So the driver disconnects first, then the
    node's processes and their descendants (actors, idle workers, agents) get a
    SIGKILL, the deepest first (`procs.kill_tree`). Where that cannot be done (no
    /proc, another Ray version's internals), `ray.shutdown()` does it the slow way.
    """
    import shutil

    import ray

    pids = _private_node_pids()
    if pids is None:
        ray.shutdown()
    else:
        from ray._private import worker as ray_worker

        ray_worker._global_node = None  # ray.shutdown() must not stop them itself
        try:
            ray.shutdown()
        finally:
            left = procs.kill_tree(pids)
            if left:
                log.warning("Ray processes still alive after SIGKILL: %s", left)
    while _TEMP_DIRS:
        shutil.rmtree(_TEMP_DIRS.pop(), ignore_errors=True)


def private_ray() -> bool:
    """True while this process runs a private local Ray it started (not a cluster)."""
    return bool(_TEMP_DIRS)


def _private_node_pids() -> list[int] | None:
    """Pids of the processes of the Ray node this process started, or None."""
    if not _TEMP_DIRS or not os.path.isdir("/proc"):
        return None
    try:
        from ray._private import worker as ray_worker

        node = ray_worker._global_node
        pids = [info.process.pid for infos in node.all_processes.values() for info in infos]
    except Exception:  # any surprise in Ray's internals: the slow way
        return None
    return pids or None


def starts_private(cfg: RayConfig) -> bool:
    """True when `connect(cfg)` would start a private local Ray (no address, and Ray
    not yet initialised in this process)."""
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        return False
    return address_source(cfg)[0] is None


REACH_TIMEOUT_SECONDS = 5.0
"""How long `check_reachable` waits for a cluster's address to accept a connection."""


def address_source(cfg: RayConfig) -> tuple[str | None, str]:
    """The address `connect` would join and where it came from (the option or the
    environment variable); None when it would start a private Ray."""
    if cfg.address:
        return cfg.address, "--ray-address"
    return os.environ.get("RAY_ADDRESS") or None, "RAY_ADDRESS"


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of `host:port`, `[v6]:port` or `ray://host:port`; None for an
    address Ray resolves itself (`auto`, `local`) or one without a numeric port."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or "/" in rest:
        return None
    return host.strip("[]"), int(port)


def check_reachable(cfg: RayConfig, timeout: float = REACH_TIMEOUT_SECONDS) -> None:
    """Raise `ClusterError` unless the cluster address `connect(cfg)` would join
    accepts a TCP connection within `timeout` seconds (`ray.init` waits for an
    address where nothing listens for as long as it takes). Nothing to check for a
    private Ray, `auto` or `local`."""
    import socket

    from rlstream.errors import ClusterError

    address, source = address_source(cfg)
    where = _host_port(address) if address else None
    if where is None:
        return
    try:
        socket.create_connection(where, timeout=timeout).close()
    except OSError as e:
        reason = "timed out" if isinstance(e, TimeoutError) else (e.strerror or str(e))
        raise ClusterError(
            f"cannot reach a Ray cluster at {address} (from {source}): {reason}; "
            f"start it (`ray start --head`), fix {source}, or unset it to run on a "
            "private local Ray"
        ) from e


def connect(cfg: RayConfig) -> bool:
    """Initialise Ray unless already initialised (start a private Ray or join a
    cluster); returns True if this call initialised it. `private_ray()` tells which."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    address, source = address_source(cfg)
    runtime_env = {"env_vars": forwarded_env()} if forwarded_env() else None
    if address:
        from rlstream.errors import ClusterError

        check_reachable(cfg)
        log.info("joining Ray cluster at %s", address)
        try:
            ray.init(address=address, runtime_env=runtime_env, logging_level=logging.WARNING)
        except ConnectionError as e:  # `auto` with no cluster running, for one
            raise ClusterError(
                f"cannot join a Ray cluster at {address} (from {source}): {e}"
            ) from e
    else:
        tmp = tempfile.mkdtemp(prefix="rls", dir=os.environ.get(TEMP_PARENT_ENV, "/tmp"))
        _TEMP_DIRS.append(tmp)
        log.info("starting a private local Ray (temp dir %s)", tmp)
        try:
            _init_private(tmp, cfg, runtime_env)
        except BaseException:  # Ctrl-C or a failure while starting: leave nothing behind
            disconnect()
            raise
    return True


def _init_private(tmp: str, cfg: RayConfig, runtime_env: dict | None) -> None:
    import ray

    ray.init(
        address="local",
        num_cpus=cfg.num_cpus,
        include_dashboard=False,
        _temp_dir=tmp,
        runtime_env=runtime_env,
        logging_level=logging.WARNING,
        log_to_driver=False,
        # Only actors run here, each in its own process: the idle workers Ray
        # would prestart for the first tasks only take CPU while the actors start
        # (0.9 s of 10.9 end to end on 2 cores) and while watch idles.
        _system_config={"prestart_worker_first_driver": False},
    )


def cluster_cpus() -> int:
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))
