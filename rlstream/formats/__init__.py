"""Readers of trainers' run folders, one module per format, behind `base.Format`.

`FORMATS` names every reader in the order discovery tries them; `get_format(name)`
returns one (raising `KeyError` with the known names otherwise); `stands_in(name)` is
its `reported_stands_in` capability (`base`).
"""

from __future__ import annotations

from rlstream.formats.base import Format
from rlstream.formats.loops import LOOPS
from rlstream.formats.prime_rl import PRIME_RL
from rlstream.formats.tinker import TINKER
from rlstream.formats.trackers.backends import MLFLOW, SWANLAB, TENSORBOARD, TRACKIO, WANDB
from rlstream.formats.trl import TRL
from rlstream.formats.verl import VERL

FORMATS: dict[str, Format] = {
    f.name: f
    for f in (LOOPS, TRL, PRIME_RL, VERL, TINKER, WANDB, SWANLAB, TENSORBOARD, MLFLOW, TRACKIO)
}
"""Detection order: the first whose `detect` accepts a folder names its format."""


DEFAULT = LOOPS.name
"""The run format of docs/run-format.md: a run state's format until its reader is
known, and the reader of a folder taken as a run that no reader recognises (a run
whose run.json is a link, or vanished), so its rejection says why."""


def get_format(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise KeyError(f"unknown format {name!r}; known: {', '.join(FORMATS)}") from None


def stands_in(name: str) -> bool:
    """Whether the format's reported figures stand in for null recomputed ones at every
    step (`Format.reported_stands_in`, True unless the format says otherwise)."""
    return bool(getattr(get_format(name), "reported_stands_in", True))
