"""Token-level sampler/trainer mismatch and entropy: a mergeable aggregate.

Contract
--------
``TokenAgg.from_arrays(ls_T, lt_T, offsets_G1, trains_G, ent_T=None)`` reduces one batch of
concatenated generations (one step's, or any subset of it) to counts, maxima, exact
sums and one log-weight per trained generation. ``merge`` returns a new object and is
exactly associative and commutative: ``finalize`` returns the same values, bit for
bit, whatever the split of a step's generations into batches and whatever the merge
order or tree (a generation is the atomic unit and is never split).

Definitions (DESIGN.md section 3). T, the trained set, holds the tokens of generations
whose attempt trained (``trains_G``) where both the sampler logprob ``ls`` and the
trainer logprob ``lt`` are finite (NaN marks a null logprob). On T:

- ``d = clip(lt - ls, -20, 20)`` and ``w = exp(d)``;
- k3 = ``exp(d) - 1 - d`` (``mismatch_kl``, its max ``mismatch_kl_max``);
- k1 = ``ls - lt`` and k2 = ``(ls - lt)^2 / 2`` use the *unclamped* difference: they
  are plain moments of the log-ratio and the clamp only exists to keep exponentials
  finite, so k3, w and the ESS figures are the only ones computed from ``d``;
- ``mismatch_ess = (Σw)^2 / (|T| Σw^2)``. With d clamped, w lies in [e^-20, e^20]
  and w^2 in [e^-40, e^40], so no log space is needed: Σw and Σw^2 are kept as exact
  sums and the ratio is evaluated exactly from them, then rounded once;
- ``mismatch_ess_seq``: the same with one weight per trained generation,
  ``log W_g = Σ d`` over the generation's tokens in T (generations with no token in T
  carry no weight). ``log W_g`` can reach ±20 × length, so the state keeps the sorted
  ``log W_g`` values and ``finalize`` evaluates the ratio with every weight scaled by
  ``exp(-max log W)``.

The entropy estimate describes the sampling policy: the mean over every token, trained
or not, of the trainer's exact entropy of the token's distribution where the format
gives it (``ent_T``, NaN where absent: prime-rl's token exports), else of ``-ls`` (an
unbiased one-sample estimate) where ``ls`` is finite. ``entropy_exact_frac`` is the
share of those tokens whose value is the exact one.

Exactness: every per-token quantity is first summed per generation (``np.add.reduceat``
over the generation's own tokens, so the partial depends on nothing else in the
batch), then the per-generation partials are summed exactly (``rlstream.metrics.exact``)
into integers that merge by integer addition. A mean is that exact sum divided by the
count, rounded once. Maxima and counts are exact anyway. (Bit-identity holds for one
numpy build on one platform: another libm may round exp differently.)

Every mean is None when its count is 0, never 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np

from rlstream.metrics.exact import FRAC_BITS, Exact, add, fixed_sum, ratio, segment_sums

CLAMP = 20.0
_NEG_INF = float("-inf")


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


def _empty_f64() -> np.ndarray:
    return np.zeros(0, dtype=np.float64)


def _counts_per_generation(mask_T: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    # One reduceat over the mask's bytes: ~10x a cumsum of the whole mask.
    # Runs are contiguous and cover the mask, so reducing from each non-empty run's
    # start to the next one's counts exactly that run.
    starts = offsets[:-1]
    nonempty = starts != offsets[1:]
    counts = np.zeros(starts.size, dtype=np.int64)
    if nonempty.any():
        counts[nonempty] = np.add.reduceat(mask_T.view(np.uint8), starts[nonempty], dtype=np.int64)
    return counts


def _ess(sum_w: Exact, sum_w2: Exact, n: int) -> float:
    """(Σw)^2 / (n Σw^2) from exact sums, rounded once; capped at 1.

    Cauchy-Schwarz bounds the value to [1/n, 1] for exact squares; the state sums the
    rounded squares, so min() removes the rare excess of one ulp.
    """
    if isinstance(sum_w, float) or isinstance(sum_w2, float):
        return math.nan  # unreachable with clamped weights: kept for totality
    return min(1.0, (sum_w * sum_w) / ((int(n) * sum_w2) << FRAC_BITS))


@dataclass(slots=True, eq=False)
class TokenAgg:
    """Mergeable exact sums over the trained tokens T and the sampled tokens of a batch.

    ``sum_*`` fields are ``rlstream.metrics.exact`` integers (units of 2**-1074);
    ``sum_k2`` holds Σ(ls - lt)^2, halved at ``finalize``. ``log_w_g`` is sorted.
    """

    n_trained: int = 0
    sum_k3: Exact = 0
    sum_k1: Exact = 0
    sum_k2: Exact = 0
    max_k3: float = _NEG_INF
    max_d: float = _NEG_INF  # is_ratio_max = exp(max d)
    n_gt2: int = 0
    sum_w: Exact = 0
    sum_w2: Exact = 0
    log_w_g: np.ndarray = field(default_factory=_empty_f64)
    n_sampled: int = 0
    """Tokens with a finite ``ls``."""
    sum_neg_ls: Exact = 0
    """Σ -ls over the tokens with a finite ``ls`` and no exact entropy."""
    n_exact: int = 0
    """Tokens with a finite exact entropy..."""
    sum_exact: Exact = 0
    """...its sum..."""
    n_exact_sampled: int = 0
    """...and how many of them also have a finite ``ls`` (counted in ``n_sampled``)."""

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
        ent_T: np.ndarray | None = None,
    ) -> Self:
        ls = np.asarray(ls_T, dtype=np.float64)
        lt = np.asarray(lt_T, dtype=np.float64)
        trains = np.asarray(trains_G, dtype=bool)
        if ls.shape != lt.shape or ls.ndim != 1:
            raise ValueError(
                f"ls_T and lt_T must be 1-D of equal length; got {ls.shape}, {lt.shape}"
            )
        gen_T = generation_ids(offsets_G1, ls.size)
        offsets = np.asarray(offsets_G1, dtype=np.int64)
        if trains.shape != (offsets.size - 1,):
            raise ValueError(f"trains_G must have one entry per generation; got {trains.shape}")

        sampled = np.isfinite(ls)
        in_T = trains[gen_T] & sampled & np.isfinite(lt)
        # Boolean indexing keeps token order, so each generation's tokens in T stay one
        # contiguous run: per-generation sums see only that generation's values.
        if in_T.all():  # the common batch: no copy, counts are the lengths
            n_T_g = np.diff(offsets)
            ls_t, lt_t = ls, lt
        else:
            n_T_g = _counts_per_generation(in_T, offsets)
            ls_t, lt_t = ls[in_T], lt[in_T]

        raw = ls_t - lt_t
        d = np.clip(lt_t - ls_t, -CLAMP, CLAMP)
        w = np.exp(d)
        # expm1 keeps k3 accurate near d = 0; the max makes k3 >= 0 a guarantee rather
        # than a property of the platform expm1 (it never fires with glibc).
        k3 = np.maximum(np.expm1(d) - d, 0.0)

        def total(values: np.ndarray) -> Exact:
            return fixed_sum(segment_sums(values, n_T_g))

        n = int(d.size)
        exact = np.zeros(ls.size, dtype=bool)
        ent = None
        if ent_T is not None:
            ent = np.asarray(ent_T, dtype=np.float64)
            if ent.shape != ls.shape:
                raise ValueError(f"ent_T must have one entry per token; got {ent.shape}")
            exact = np.isfinite(ent)
        estimated = sampled & ~exact
        neg_ls = -ls[estimated]
        return cls(
            n_trained=n,
            sum_k3=total(k3),
            sum_k1=total(raw),
            sum_k2=total(raw * raw),
            max_k3=float(np.max(k3)) if n else _NEG_INF,
            max_d=float(np.max(d)) if n else _NEG_INF,
            n_gt2=int(np.count_nonzero(w > 2.0)),
            sum_w=total(w),
            sum_w2=total(w * w),
            log_w_g=np.sort(segment_sums(d, n_T_g)),
            n_sampled=int(np.count_nonzero(sampled)),
            sum_neg_ls=fixed_sum(segment_sums(neg_ls, _counts_per_generation(estimated, offsets))),
            n_exact=int(np.count_nonzero(exact)),
            sum_exact=0
            if ent is None
            else fixed_sum(segment_sums(ent[exact], _counts_per_generation(exact, offsets))),
            n_exact_sampled=int(np.count_nonzero(exact & sampled)),
        )

    def merge(self, other: Self) -> Self:
        return type(self)(
            n_trained=self.n_trained + other.n_trained,
            sum_k3=add(self.sum_k3, other.sum_k3),
            sum_k1=add(self.sum_k1, other.sum_k1),
            sum_k2=add(self.sum_k2, other.sum_k2),
            max_k3=max(self.max_k3, other.max_k3),
            max_d=max(self.max_d, other.max_d),
            n_gt2=self.n_gt2 + other.n_gt2,
            sum_w=add(self.sum_w, other.sum_w),
            sum_w2=add(self.sum_w2, other.sum_w2),
            log_w_g=np.sort(np.concatenate([self.log_w_g, other.log_w_g])),
            n_sampled=self.n_sampled + other.n_sampled,
            sum_neg_ls=add(self.sum_neg_ls, other.sum_neg_ls),
            n_exact=self.n_exact + other.n_exact,
            sum_exact=add(self.sum_exact, other.sum_exact),
            n_exact_sampled=self.n_exact_sampled + other.n_exact_sampled,
        )

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(
            np.array_equal(getattr(self, f), getattr(other, f))
            if f == "log_w_g"
            else getattr(self, f) == getattr(other, f)
            for f in self.__slots__
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, like a dataclass with eq

    @property
    def n_seq(self) -> int:
        """Trained generations with at least one token in T."""
        return int(self.log_w_g.size)

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
            ("entropy_exact_frac", float),
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
            "entropy_exact_frac": None,
        }
        if n:
            out["mismatch_kl"] = ratio(self.sum_k3, n)
            out["mismatch_k1"] = ratio(self.sum_k1, n)
            out["mismatch_k2"] = ratio(self.sum_k2, 2 * n)
            out["mismatch_kl_max"] = self.max_k3
            out["mismatch_ess"] = _ess(self.sum_w, self.sum_w2, n)
            out["is_ratio_max"] = math.exp(self.max_d)
            out["is_frac_gt_2"] = self.n_gt2 / n
        if self.log_w_g.size:
            # ESS is scale-free: divide every W_g by the largest one (exactly 1 after
            # scaling) so nothing overflows. The sorted multiset makes this canonical.
            x = np.exp(self.log_w_g - self.log_w_g[-1])
            out["mismatch_ess_seq"] = _ess(fixed_sum(x), fixed_sum(x * x), self.n_seq)
        n_ent = self.n_exact + self.n_sampled - self.n_exact_sampled
        if n_ent:
            out["entropy_estimate"] = ratio(add(self.sum_exact, self.sum_neg_ls), n_ent)
            out["entropy_exact_frac"] = self.n_exact / n_ent
        return out
