"""A tiny categorical policy: sampling token by token, logprobs, GRPO gradient.

Contract
--------
A completion is a free-form "thinking" part followed by an answer:

- thinking tokens (ids ``1..N_THINK``) are drawn from a bigram table
  ``think[prev]`` (row 0 is the start of the completion) until the policy emits
  ``STOP`` (id 0), which belongs to the completion;
- then ``answer_len`` digits (ids ``DIGIT0 + d``, d in 0..9), digit i drawn from
  ``ans[x_i] + pos[i]`` where x is the task's prompt (one digit per answer position).

The grader never reads the thinking, so its tokens get no consistent gradient: they
drift as GRPO's advantages push them at random, the way filler text does in a language
model. A completion that has not produced its whole answer by ``max_tokens`` is
truncated there.

``sample(params, prompts, ...)`` draws completions with logits rounded to the
sampler's precision (``float16`` or ``bfloat16``), and returns each token's logprob
under that rounded distribution. ``score(params, ...)`` gives the same tokens' logprobs
and the exact entropy of each position's distribution under a policy in float64 (the
trainer). ``policy_gradient`` is the gradient of the truncated-importance-weighted
policy-gradient objective, token-level mean, for given per-token advantages.
Everything is vectorised over the attempts of a step; the loop runs over positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STOP = 0
N_THINK = 16
DIGIT0 = N_THINK + 1
N_DIGITS = 10
VOCAB_SIZE = 32
IS_CAP = 2.0
"""Importance weights are truncated at this value (truncated importance sampling)."""


@dataclass(frozen=True, slots=True)
class Params:
    """Logit tables. ``think``: (N_THINK+1, N_THINK+1), rows = previous token (0 =
    start), columns = STOP then the thinking tokens. ``ans``: (N_DIGITS, N_DIGITS),
    rows = prompt digit. ``pos``: (answer_len, N_DIGITS)."""

    think: np.ndarray
    ans: np.ndarray
    pos: np.ndarray

    def copy(self) -> Params:
        return Params(self.think.copy(), self.ans.copy(), self.pos.copy())

    def add(self, g: Params, lr: float) -> Params:
        return Params(self.think + lr * g.think, self.ans + lr * g.ans, self.pos + lr * g.pos)


def init_params(rng: np.random.Generator, answer_len: int, think_len: float) -> Params:
    """Near-uniform tables; the STOP logit is set so thinking lasts about
    ``think_len`` tokens."""
    think = rng.normal(0.0, 0.3, (N_THINK + 1, N_THINK + 1))
    think[:, 0] += np.log(N_THINK / max(think_len - 1.0, 0.5))
    ans = rng.normal(0.0, 0.3, (N_DIGITS, N_DIGITS))
    pos = rng.normal(0.0, 0.3, (answer_len, N_DIGITS))
    return Params(think, ans, pos)


def _round(x: np.ndarray, precision: str) -> np.ndarray:
    """Logits as the sampler holds them."""
    if precision == "float16":
        return x.astype(np.float16).astype(np.float64)
    if precision == "bfloat16":
        # Keep the top 7 explicit mantissa bits of the float32 representation.
        b = x.astype(np.float32).view(np.uint32)
        b = (b + 0x8000) & np.uint32(0xFFFF0000)
        return b.view(np.float32).astype(np.float64)
    return x


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


@dataclass(frozen=True, slots=True)
class Completions:
    """Per-attempt completions, tokens concatenated (``offsets_A1`` slices them)."""

    ids_T: np.ndarray  # token ids
    ls_T: np.ndarray  # sampler logprobs (rounded precision)
    slot_T: np.ndarray  # the context row of each token (see ``_context``)
    kind_T: np.ndarray  # 0: thinking (incl. STOP), 1: answer digit
    offsets_A1: np.ndarray
    answer_AL: np.ndarray  # digits answered, -1 where missing (truncated)
    truncated_A: np.ndarray


def sample(
    p: Params,
    prompts_AL: np.ndarray,
    max_tokens: int,
    rng: np.random.Generator,
    precision: str,
) -> Completions:
    """Draw one completion per prompt row from the sampler's copy of the policy."""
    A, L = prompts_AL.shape
    max_think = max_tokens  # thinking may run to the cap (the completion is then truncated)
    think_logp = _log_softmax(_round(p.think, precision))
    prev = np.zeros(A, np.int64)
    alive = np.ones(A, bool)
    stop_at = np.full(A, -1, np.int64)
    th_ids = np.zeros((A, max_think), np.int64)
    th_lp = np.zeros((A, max_think))
    th_prev = np.zeros((A, max_think), np.int64)
    for j in range(max_think):
        lp = think_logp[prev]
        u = rng.random(A)[:, None]
        tok = np.minimum((np.cumsum(np.exp(lp), axis=1) < u).sum(axis=1), N_THINK)
        th_ids[:, j], th_lp[:, j] = tok, lp[np.arange(A), tok]
        th_prev[:, j] = prev
        just = alive & (tok == STOP)
        stop_at[just] = j
        alive &= tok != STOP
        prev = tok
        if not alive.any():
            break
    ans_lp = _log_softmax(_round(p.ans[prompts_AL] + p.pos[None, :, :], precision))  # (A,L,D)
    u = rng.random((A, L))[..., None]
    digits = np.minimum((np.cumsum(np.exp(ans_lp), axis=2) < u).sum(axis=2), N_DIGITS - 1)
    d_lp = np.take_along_axis(ans_lp, digits[..., None], axis=2)[..., 0]

    ids, ls, slot, kind, lens = [], [], [], [], []
    answer = np.full((A, L), -1, np.int64)
    truncated = np.zeros(A, bool)
    for a in range(A):
        s = int(stop_at[a])
        n_think = max_tokens if s < 0 else s + 1
        n_think = min(n_think, max_tokens)
        n_ans = max(0, min(L, max_tokens - n_think))
        ids.append(th_ids[a, :n_think])
        ls.append(th_lp[a, :n_think])
        slot.append(th_prev[a, :n_think])
        kind.append(np.zeros(n_think, np.int8))
        if s >= 0 and n_ans > 0:
            ids.append(DIGIT0 + digits[a, :n_ans])
            ls.append(d_lp[a, :n_ans])
            # Answer context: prompt digit and position, packed as x * L + i.
            slot.append(prompts_AL[a, :n_ans] * L + np.arange(n_ans))
            kind.append(np.ones(n_ans, np.int8))
        if s >= 0 and n_ans == L:
            answer[a] = digits[a]
        else:
            truncated[a] = True
            n_ans = n_ans if s >= 0 else 0
        lens.append(n_think + n_ans)
    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    return Completions(
        np.concatenate(ids),
        np.concatenate(ls),
        np.concatenate(slot),
        np.concatenate(kind),
        offsets,
        answer,
        truncated,
    )


def _token_logp(p: Params, c: Completions, answer_len: int) -> tuple[np.ndarray, np.ndarray]:
    """The log-distribution each sampled token was drawn from, under ``p``: rows for the
    thinking tokens (STOP and thinking ids) and rows for the answer digits, apart."""
    think = _log_softmax(p.think)[c.slot_T[c.kind_T == 0]]
    sl = c.slot_T[c.kind_T == 1]
    x, i = sl // answer_len, sl % answer_len
    ans = _log_softmax(p.ans[x] + p.pos[i])
    return think, ans


def score(p: Params, c: Completions, answer_len: int) -> tuple[np.ndarray, np.ndarray]:
    """(logprob of each sampled token, entropy of its distribution) under ``p`` in
    float64: the trainer's view."""
    think, ans = _token_logp(p, c, answer_len)
    lt = np.empty(c.ids_T.size)
    ent = np.empty(c.ids_T.size)
    m0, m1 = c.kind_T == 0, c.kind_T == 1
    lt[m0] = think[np.arange(think.shape[0]), c.ids_T[m0]]
    lt[m1] = ans[np.arange(ans.shape[0]), c.ids_T[m1] - DIGIT0]
    ent[m0] = -(np.exp(think) * think).sum(axis=1)
    ent[m1] = -(np.exp(ans) * ans).sum(axis=1)
    return lt, ent


def policy_gradient(
    p: Params, c: Completions, answer_len: int, adv_T: np.ndarray, ratio_T: np.ndarray
) -> Params:
    """Ascent direction of mean_T[min(ratio, IS_CAP) * adv * log pi(token)] over the
    tokens with non-zero advantage (token-level mean, as in DAPO)."""
    g = Params(np.zeros_like(p.think), np.zeros_like(p.ans), np.zeros_like(p.pos))
    n = int(np.count_nonzero(adv_T))
    if n == 0:
        return g
    w = np.minimum(ratio_T, IS_CAP) * adv_T / n
    think, ans = _token_logp(p, c, answer_len)
    m0, m1 = c.kind_T == 0, c.kind_T == 1
    gt = -np.exp(think) * w[m0][:, None]
    gt[np.arange(gt.shape[0]), c.ids_T[m0]] += w[m0]
    np.add.at(g.think, c.slot_T[m0], gt)
    ga = -np.exp(ans) * w[m1][:, None]
    ga[np.arange(ga.shape[0]), c.ids_T[m1] - DIGIT0] += w[m1]
    sl = c.slot_T[m1]
    np.add.at(g.ans, sl // answer_len, ga)
    np.add.at(g.pos, sl % answer_len, ga)
    return g
