"""Peer bands and the `unlike_peers` verdict: pure functions over plain floats.

- ``band(values)``: n, p10, p50, p90 (linear interpolation), median and MAD (scaled
  by 1.4826) of one figure across a cohort's runs at one step.
- ``judge(values, peers, cfg, active, hysteresis, noise)``: the `unlike_peers` verdict
  of one run at one step, from its smoothed figures and each peer's (figure -> list of
  the peers' smoothed values). The run is unlike its peers when one figure lies more
  than ``k`` robust deviations from the peers' median, the deviation being
  ``max(1.4826 * MAD, noise, mad_floor * |median|, abs_floor)``, where ``noise`` (per
  figure, optional) is the standard error of the difference the runs' own step-to-step
  noise explains (few peers give a MAD that can be small by chance); while the finding is active
  ``k`` relaxes by ``hysteresis``. None when no figure has ``min_peers`` peers (the
  finding's state is then left as it is).
- ``advance_peers(state, verdict, cfg, step, time)``: folds a verdict into the run's
  health state (in place: pass a copy) with the alert lifecycle every finding uses
  (``health.engine``); returns the transitions.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rlstream.health import stats
from rlstream.health.config_peers import UnlikePeers
from rlstream.health.engine import _advance
from rlstream.health.state import FIRING, PENDING, HealthState, Transition
from rlstream.health.verdict import Verdict

CODE = "unlike_peers"


def band(values: Sequence[float]) -> dict[str, float | int | None]:
    """The band of one figure over a cohort at one step (empty input: n = 0, nulls)."""
    if not values:
        return {"n": 0, "p10": None, "p50": None, "p90": None, "median": None, "mad": None}
    arr = np.asarray(values, dtype=np.float64)
    p10, p50, p90 = (float(x) for x in np.percentile(arr, [10, 50, 90]))
    return {
        "n": len(values),
        "p10": p10,
        "p50": p50,
        "p90": p90,
        "median": stats.median(values),
        "mad": stats.mad(values),
    }


def judge(
    values: dict[str, float],
    peers: dict[str, list[float]],
    cfg: UnlikePeers,
    active: bool = False,
    hysteresis: float = 0.8,
    noise: dict[str, float] | None = None,
) -> Verdict | None:
    """The `unlike_peers` verdict at one step (see the module docstring)."""
    k = cfg.k * (hysteresis if active else 1.0)
    worst: tuple[float, str, float, float, float, int] | None = None
    judged = False
    for fig, x in values.items():
        ps = peers.get(fig) or []
        if len(ps) < cfg.min_peers:
            continue
        judged = True
        med = stats.median(ps)
        assert med is not None
        extra = (noise or {}).get(fig, 0.0)
        dev = max(stats.mad(ps) or 0.0, extra, cfg.mad_floor * abs(med), cfg.abs_floor)
        score = abs(x - med) / dev
        if worst is None or score > worst[0]:
            worst = (score, fig, x, med, dev, len(ps))
    if not judged or worst is None:
        return None
    score, fig, x, med, dev, n = worst
    if score <= k:
        return Verdict(False)
    lo, hi = med - k * dev, med + k * dev
    return Verdict(
        True,
        f"{fig} {x:.4g} vs its {n} peers' median {med:.4g} (band {lo:.4g} to {hi:.4g}, "
        f"{score:.1f} robust deviations): compare this run with its siblings "
        f"(rlstream compare) for what differs",
    )


def active(state: HealthState) -> bool:
    a = state.alerts.get(CODE)
    return a is not None and a.state in (PENDING, FIRING)


def advance_peers(
    state: HealthState, verdict: Verdict, cfg: UnlikePeers, step: int, time: float | None
) -> list[Transition]:
    """Fold one verdict into ``state`` (in place); the transitions."""
    return _advance(state, CODE, verdict, cfg, step, time)  # type: ignore[arg-type]
