"""Token-level sampling for one step, vectorised over every token of the step.

For each sampled token the model's next-token distribution is `C` candidates with
logits `beta * z + conf * [1, 0, ...]` (z standard normal), sorted, holding mass
`1 - tail`, plus `tail` spread evenly over the other `vocab_size - C` ids. A token is
drawn from it; its logprob is the sampler logprob `ls`. Tokens that continue a
generation's repeated motif or its constant (degenerate) answer take the top candidate.
Tool output spliced into a completion is not sampled: NaN logprobs, no top-k row.

Candidate ids are built around the sampled id with distinct offsets (multiples of
`vocab_size // (2C + 1)` plus a jitter), so each top-k row holds distinct ids and
contains the sampled id at its rank.

The trainer logprob `lt = min(ls + noise, 0)`: noise is N(0, kl_sd) plus, on a share
`out_frac` of the unlikely tokens (ls < -1), a deviation of about +4 nats (the trainer
much surer than the sampler) that makes the importance weights heavy-tailed. Logprobs
are rounded to LOGPROB_DECIMALS so that metrics computed here equal metrics recomputed
from the JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LOGPROB_DECIMALS = 5
N_CANDIDATES = 16


@dataclass(frozen=True, slots=True)
class TokenArrays:
    ids_T: np.ndarray  # int64
    ls_T: np.ndarray  # float64, NaN where not sampled
    lt_T: np.ndarray  # float64, NaN where not sampled
    top_ids_TK: np.ndarray | None  # int64 (T, K)
    top_lp_TK: np.ndarray | None  # float64 (T, K)


def sample_tokens(
    rng: np.random.Generator,
    *,
    gen_T: np.ndarray,
    pos_T: np.ndarray,
    sampled_T: np.ndarray,
    forced_T: np.ndarray,
    forced_id_T: np.ndarray,
    conf: float,
    beta: float,
    tail: float,
    kl_sd: float,
    out_frac: float,
    vocab_size: int,
    topk: int | None,
) -> TokenArrays:
    """Sample the tokens of a step.

    `forced_T` marks tokens whose id is imposed (`forced_id_T`: motif or constant
    answer); they take the top candidate. `gen_T`/`pos_T` are unused here beyond
    shape checks but document the layout (concatenated generations).
    """
    n = gen_T.size
    c = max(N_CANDIDATES, topk or 0)
    if n == 0:
        empty_f = np.zeros(0)
        k = topk or 0
        top = (np.zeros((0, k), np.int64), np.zeros((0, k))) if topk else (None, None)
        return TokenArrays(np.zeros(0, np.int64), empty_f, empty_f.copy(), *top)
    assert pos_T.size == n

    logits = rng.standard_normal((n, c)) * beta
    logits[:, 0] += conf
    logits = -np.sort(-logits, axis=1)
    logits -= logits.max(axis=1, keepdims=True)
    log_z = np.log(np.exp(logits).sum(axis=1, keepdims=True))
    lp = logits - log_z + np.log1p(-tail)  # (n, c), descending

    u = rng.random(n)
    in_tail = (u < tail) & ~forced_T
    cdf = np.cumsum(np.exp(lp), axis=1) / (1.0 - tail)
    rank = np.minimum((cdf < rng.random(n)[:, None]).sum(axis=1), c - 1)
    rank[forced_T] = 0

    fresh = rng.integers(0, vocab_size, n)
    ids = np.where(forced_T, forced_id_T, fresh).astype(np.int64)
    tail_lp = np.log(tail / (vocab_size - c)) if tail > 0 else -np.inf
    ls = np.where(in_tail, tail_lp, lp[np.arange(n), rank])
    ls = np.round(ls, LOGPROB_DECIMALS) + 0.0
    ls[~sampled_T] = np.nan

    noise = rng.normal(0.0, kl_sd, n) if kl_sd > 0 else np.zeros(n)
    if out_frac > 0:
        hit = (rng.random(n) < out_frac) & (ls < -1.0)
        noise = np.where(hit, np.abs(rng.normal(4.0, 0.5, n)), noise)
    lt = np.round(np.minimum(ls + noise, 0.0), LOGPROB_DECIMALS) + 0.0

    top_ids = top_lp = None
    if topk:
        s = vocab_size // (2 * c + 1)
        j = np.arange(topk)[None, :]
        jitter = rng.integers(1, s, (n, topk))
        # Sampled id at its rank, others at distinct offsets around it.
        rel = np.where(in_tail[:, None], j + 1, j - rank[:, None])
        offs = rel * s + np.where(rel == 0, 0, jitter)
        top_ids = (ids[:, None] + offs) % vocab_size
        top_lp = np.round(lp[:, :topk], LOGPROB_DECIMALS) + 0.0
    return TokenArrays(ids, ls, lt, top_ids, top_lp)
