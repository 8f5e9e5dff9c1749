"""Connecting to Ray: an existing cluster, or a private local one (the default).

With no address (neither `--ray-address` nor RAY_ADDRESS) a private local Ray is
started with a short temp dir (AF_UNIX paths are limited to 107 bytes) and no
dashboard. AWS_* variables of this process are passed to every worker as a
runtime_env, so workers on other nodes read object storage with the same
credentials and endpoint.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass

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


def disconnect() -> None:
    """Shut down the Ray this process started and remove its temp dir."""
    import shutil

    import ray

    ray.shutdown()
    while _TEMP_DIRS:
        shutil.rmtree(_TEMP_DIRS.pop(), ignore_errors=True)


def connect(cfg: RayConfig) -> bool:
    """Initialise Ray unless already initialised; returns True if this call started it."""
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
        tmp = tempfile.mkdtemp(prefix="rls", dir="/tmp")
        _TEMP_DIRS.append(tmp)
        log.info("starting a private local Ray (temp dir %s)", tmp)
        ray.init(
            address="local",
            num_cpus=cfg.num_cpus,
            include_dashboard=False,
            _temp_dir=tmp,
            runtime_env=runtime_env,
            logging_level=logging.WARNING,
            log_to_driver=False,
        )
    return True


def cluster_cpus() -> int:
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))
