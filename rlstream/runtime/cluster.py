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
    return not (cfg.address or os.environ.get("RAY_ADDRESS"))


def connect(cfg: RayConfig) -> bool:
    """Initialise Ray unless already initialised (start a private Ray or join a
    cluster); returns True if this call initialised it. `private_ray()` tells which."""
    import ray

    if ray.is_initialized():
        return False
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    address = cfg.address or os.environ.get("RAY_ADDRESS")
    runtime_env = {"env_vars": forwarded_env()} if forwarded_env() else None
    if address:
        log.info("joining Ray cluster at %s", address)
        ray.init(address=address, runtime_env=runtime_env, logging_level=logging.WARNING)
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
