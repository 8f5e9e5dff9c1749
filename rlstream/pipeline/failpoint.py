"""Failpoints for crash tests: die at a named point of the commit protocol.

`RLSTREAM_FAILPOINT=<name>:<n>` in the environment makes the n-th time this process
reaches `failpoint("<name>")` end it at once with `os._exit(137)` (no cleanup, no
flush: as a SIGKILL would). Unset, a failpoint costs one dict lookup.

Points (rlstream.pipeline.commit): `after_append` (one table's append of a commit
landed, the next table and every resume state of the commit not yet), `after_state`
(a run's resume state was written, the next run's not yet).
"""

from __future__ import annotations

import os
from collections import Counter

_counts: Counter[str] = Counter()


def _target() -> tuple[str, int] | None:
    spec = os.environ.get("RLSTREAM_FAILPOINT")
    if not spec:
        return None
    name, _, n = spec.partition(":")
    return name, int(n or 1)


def failpoint(name: str) -> None:
    target = _target()
    if target is None or target[0] != name:
        return
    _counts[name] += 1
    if _counts[name] == target[1]:
        os._exit(137)
