"""Token-level sampler/trainer mismatch and entropy: a mergeable aggregate.

Contract
--------
``TokenAgg.from_arrays(ls_T, lt_T, offsets_G1, trains_G)`` reduces one batch of
concatenated generations (one step's, or any subset of it) to sums, counts, maxima
and log-sum-exp terms. ``merge`` is associative and commutative up to float rounding
and returns a new object; ``finalize`` turns the state into plain Python numbers.

Definitions (DESIGN.md section 3). T, the trained set, holds the tokens of generations
whose attempt trained (``trains_G``) where both the sampler logprob ``ls`` and the
trainer logprob ``lt`` are finite (NaN marks a null logprob). On T:

- ``d = clip(lt - ls, -20, 20)`` and ``w = exp(d)``;
- k3 = ``exp(d) - 1 - d`` (``mismatch_kl``, its max ``mismatch_kl_max``);
- k1 = ``ls - lt`` and k2 = ``(ls - lt)^2 / 2`` use the *unclamped* difference: they
  are plain moments of the log-ratio and the clamp only exists to keep exponentials
  finite, so k3, w and the ESS figures are the only ones computed from ``d``;
- ``mismatch_ess = (Σw)^2 / (|T| Σw^2)``, evaluated as
  ``exp(2 lse(d) - lse(2d) - ln|T|)`` so nothing overflows;
- ``mismatch_ess_seq``: the same with one weight per trained generation,
  ``log W_g = Σ d`` over the generation's tokens in T (generations with no token in T
  carry no weight).

The entropy estimate ``-mean(ls)`` uses every token with a finite ``ls``, trained or
not: it describes the sampling policy.

Every mean is None when its count is 0, never 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Self

import numpy as np

CLAMP = 20.0
_NEG_INF = float("-inf")


def logsumexp(x: np.ndarray) -> float:
    """log(Σ exp(x)) without overflow; -inf for an empty array."""
    if x.size == 0:
        return _NEG_INF
    m = float(np.max(x))
    if not math.isfinite(m):
        return m
    return m + math.log(float(np.sum(np.exp(x - m))))


def _logaddexp(a: float, b: float) -> float:
    return float(np.logaddexp(a, b))


def generation_ids(offsets_G1: np.ndarray, n_tokens: int) -> np.ndarray:
    """Generation index of every token, validating the offsets against ``n_tokens``."""
    offsets = np.asarray(offsets_G1, dtype=np.int64)
    if offsets.ndim != 1 or offsets.size == 0:
        raise ValueError("offsets_G1 must be a 1-D array of length G + 1 (at least [0])")
    lengths = np.diff(offsets)
    if offsets[0] != 0 or offsets[-1] != n_tokens or (lengths < 0).any():
        raise ValueError(
            f"offsets_G1 must start at 0, be non-decreasing and end at the token count "
            f"{n_tokens}; got first={int(offsets[0])}, last={int(offsets[-1])}"
        )
    return np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)


@dataclass(slots=True)
class TokenAgg:
    """Mergeable sums over the trained tokens T and the sampled tokens of a batch."""

    n_trained: int = 0
    sum_k3: float = 0.0
    sum_k1: float = 0.0
    sum_k2: float = 0.0
    max_k3: float = _NEG_INF
    max_w: float = 0.0  # exp(max d); 0 is neutral for a max over positive weights
    n_gt2: int = 0
    lse_d: float = _NEG_INF
    lse_2d: float = _NEG_INF
    n_seq: int = 0
    lse_W: float = _NEG_INF
    lse_2W: float = _NEG_INF
    n_sampled: int = 0
    sum_neg_ls: float = 0.0

    @classmethod
    def empty(cls) -> Self:
        return cls()

    @classmethod
    def from_arrays(
        cls,
        ls_T: np.ndarray,
        lt_T: np.ndarray,
        offsets_G1: np.ndarray,
        trains_G: np.ndarray,
    ) -> Self:
        ls = np.asarray(ls_T, dtype=np.float64)
        lt = np.asarray(lt_T, dtype=np.float64)
        trains = np.asarray(trains_G, dtype=bool)
        if ls.shape != lt.shape or ls.ndim != 1:
            raise ValueError(
                f"ls_T and lt_T must be 1-D of equal length; got {ls.shape}, {lt.shape}"
            )
        gen_T = generation_ids(offsets_G1, ls.size)
        if trains.shape != (np.asarray(offsets_G1).size - 1,):
            raise ValueError(f"trains_G must have one entry per generation; got {trains.shape}")

        sampled = np.isfinite(ls)
        in_T = trains[gen_T] & sampled & np.isfinite(lt)
        ls_t, lt_t, gen_t = ls[in_T], lt[in_T], gen_T[in_T]

        raw = ls_t - lt_t
        d = np.clip(lt_t - ls_t, -CLAMP, CLAMP)
        w = np.exp(d)
        # expm1 keeps k3 accurate near d = 0; the max makes k3 >= 0 a guarantee rather
        # than a property of the platform expm1 (it never fires with glibc).
        k3 = np.maximum(np.expm1(d) - d, 0.0)

        has_tok = np.bincount(gen_t, minlength=trains.size) > 0
        log_w_g = np.bincount(gen_t, weights=d, minlength=trains.size)[has_tok]

        n = int(d.size)
        return cls(
            n_trained=n,
            sum_k3=float(np.sum(k3)),
            sum_k1=float(np.sum(raw)),
            sum_k2=float(np.sum(raw * raw) / 2.0),
            max_k3=float(np.max(k3)) if n else _NEG_INF,
            max_w=float(np.exp(np.max(d))) if n else 0.0,
            n_gt2=int(np.count_nonzero(w > 2.0)),
            lse_d=logsumexp(d),
            lse_2d=logsumexp(2.0 * d),
            n_seq=int(log_w_g.size),
            lse_W=logsumexp(log_w_g),
            lse_2W=logsumexp(2.0 * log_w_g),
            n_sampled=int(np.count_nonzero(sampled)),
            sum_neg_ls=float(-np.sum(ls[sampled])),
        )

    def merge(self, other: Self) -> Self:
        return type(self)(
            n_trained=self.n_trained + other.n_trained,
            sum_k3=self.sum_k3 + other.sum_k3,
            sum_k1=self.sum_k1 + other.sum_k1,
            sum_k2=self.sum_k2 + other.sum_k2,
            max_k3=max(self.max_k3, other.max_k3),
            max_w=max(self.max_w, other.max_w),
            n_gt2=self.n_gt2 + other.n_gt2,
            lse_d=_logaddexp(self.lse_d, other.lse_d),
            lse_2d=_logaddexp(self.lse_2d, other.lse_2d),
            n_seq=self.n_seq + other.n_seq,
            lse_W=_logaddexp(self.lse_W, other.lse_W),
            lse_2W=_logaddexp(self.lse_2W, other.lse_2W),
            n_sampled=self.n_sampled + other.n_sampled,
            sum_neg_ls=self.sum_neg_ls + other.sum_neg_ls,
        )

    @staticmethod
    def columns() -> tuple[tuple[str, type], ...]:
        """finalize() keys in order, with the Python type of a non-None value."""
        return (
            ("trained_tokens", int),
            ("sampled_tokens", int),
            ("mismatch_kl", float),
            ("mismatch_k1", float),
            ("mismatch_k2", float),
            ("mismatch_kl_max", float),
            ("mismatch_ess", float),
            ("mismatch_ess_seq", float),
            ("is_ratio_max", float),
            ("is_frac_gt_2", float),
            ("entropy_estimate", float),
        )

    def finalize(self) -> dict[str, Any]:
        n = self.n_trained
        out: dict[str, Any] = {
            "trained_tokens": n,
            "sampled_tokens": self.n_sampled,
            "mismatch_kl": None,
            "mismatch_k1": None,
            "mismatch_k2": None,
            "mismatch_kl_max": None,
            "mismatch_ess": None,
            "mismatch_ess_seq": None,
            "is_ratio_max": None,
            "is_frac_gt_2": None,
            "entropy_estimate": None,
        }
        if n:
            out["mismatch_kl"] = self.sum_k3 / n
            out["mismatch_k1"] = self.sum_k1 / n
            out["mismatch_k2"] = self.sum_k2 / n
            out["mismatch_kl_max"] = self.max_k3
            out["mismatch_ess"] = _ess(self.lse_d, self.lse_2d, n)
            out["is_ratio_max"] = self.max_w
            out["is_frac_gt_2"] = self.n_gt2 / n
        if self.n_seq:
            out["mismatch_ess_seq"] = _ess(self.lse_W, self.lse_2W, self.n_seq)
        if self.n_sampled:
            out["entropy_estimate"] = self.sum_neg_ls / self.n_sampled
        return out


def _ess(lse_w: float, lse_2w: float, n: int) -> float:
    # Cauchy-Schwarz bounds the exact value to [1/n, 1]; min() only removes rounding
    # excess, e.g. exp(1e-16) when all weights are equal.
    return min(1.0, math.exp(2.0 * lse_w - lse_2w - math.log(n)))
