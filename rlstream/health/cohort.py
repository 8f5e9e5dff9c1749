"""A run's cohort: which runs are its peers. Pure functions, no I/O.

``cohort_of(run_id, run_url, config, cfg, rules)`` returns, in this order:

1. the value of the first of ``cfg.explicit_keys`` present in the run's config
   (``config.experiment``, ``config.cohort``, ``config.tags``; a list is joined with
   ``+``);
2. else the name of the first ``--cohort NAME=GLOB`` rule whose glob matches the run's
   id or its URL (``fnmatch``; ``*`` crosses ``/``);
3. else ``cfg-`` and a 10-hex-digit hash of the config with the keys that vary within
   a sweep (``cfg.ignore_keys``: seeds, run names, output paths) left out, so repeats
   and seeds of one recipe share a cohort and any other difference (a learning rate, a
   grader, the model: names inside ``cfg.keep_under`` sections are kept) makes another
   one.

``parse_cohort_rules(["NAME=GLOB", ...])`` checks the command line's rules.
"""

from __future__ import annotations

import fnmatch
import hashlib
from collections.abc import Sequence
from typing import Any

import orjson

from rlstream.errors import ConfigError
from rlstream.health.config_peers import CohortsConfig, split_keys

DEFAULT_COHORTS = CohortsConfig()

CohortRules = tuple[tuple[str, str], ...]
"""(cohort name, glob) pairs from ``--cohort NAME=GLOB``, in command-line order."""


def parse_cohort_rules(specs: Sequence[str]) -> CohortRules:
    """``NAME=GLOB`` strings as rules; ``ConfigError`` for a malformed one."""
    out = []
    for spec in specs:
        name, sep, glob = spec.partition("=")
        if not sep or not name.strip() or not glob.strip():
            raise ConfigError(
                f"--cohort {spec!r}: expected NAME=GLOB, e.g. --cohort baseline='sweep-a/*'"
            )
        out.append((name.strip(), glob.strip()))
    return tuple(out)


def _get(config: dict[str, Any], path: str) -> Any:
    cur: Any = config
    for part in path.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _explicit(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, list):
        parts = [str(v).strip() for v in value if isinstance(v, (str, int, float))]
        parts = [p for p in parts if p]
        return "+".join(parts) or None
    return None


def _strip(
    obj: Any, names: frozenset[str], paths: frozenset[str], keep: frozenset[str], at: str = ""
) -> Any:
    """`obj` without the bare `names` (but below a `keep` section) and dotted `paths`."""
    if not isinstance(obj, dict):
        return obj
    out = {}
    for k, v in obj.items():
        path = f"{at}.{k}" if at else str(k)
        if k in names or path in paths:
            continue
        inner = frozenset() if k in keep else names  # a model's own name is kept
        out[str(k)] = _strip(v, inner, paths, keep, path)
    return out


def fingerprint(config: dict[str, Any], cfg: CohortsConfig = DEFAULT_COHORTS) -> str:
    """``cfg-`` + a hash of the config without ``cfg.ignore_keys`` (bare names kept
    inside the ``cfg.keep_under`` sections: what is trained, on what)."""
    keys = split_keys(cfg.ignore_keys)
    names = frozenset(k for k in keys if "." not in k)
    paths = frozenset(k for k in keys if "." in k)
    keep = frozenset(split_keys(cfg.keep_under))
    body = orjson.dumps(
        _strip(config, names, paths, keep), option=orjson.OPT_SORT_KEYS, default=str
    )
    return "cfg-" + hashlib.blake2b(body, digest_size=5).hexdigest()


def cohort_of(
    run_id: str,
    run_url: str,
    config: dict[str, Any],
    cfg: CohortsConfig = DEFAULT_COHORTS,
    rules: CohortRules = (),
) -> str:
    """The run's cohort (see the module docstring for the order)."""
    for key in split_keys(cfg.explicit_keys):
        name = _explicit(_get(config, key))
        if name is not None:
            return name
    for name, glob in rules:
        if fnmatch.fnmatchcase(run_id, glob) or fnmatch.fnmatchcase(run_url.rstrip("/"), glob):
            return name
        if fnmatch.fnmatchcase(run_url.rstrip("/"), f"*/{glob.lstrip('/')}"):
            return name
    return fingerprint(config, cfg)
