"""The learning trainer: GRPO on a tiny categorical policy, one step at a time.

Contract
--------
``Trainer(config, steps, seed).step(t)`` runs update ``t`` and returns ``(StepData,
Observed)``: the step's attempts, tokens and discards in the simulator's
``StepData`` layout (so ``simulate.records`` writes them in the run format), and what
the trainer saw that the files do not say (the task score under the true grader, the
exact entropy of the policy, loophole use, and the share of high-reward attempts whose
text shows the loophole). Steps must be run in order.

One step:

1. ``groups`` tasks are drawn from the task pool; each gets ``group_size`` attempts.
2. In async mode each group is sampled by a policy version ``lag`` updates old (lag
   drawn around a mean that moves from ``lag_start`` to ``lag_end`` over the run);
   the sampler holds its logits in ``precision`` and records logprobs from that
   rounded distribution.
3. Attempts fail at small rates (``rollout_failed/*``, ``grading_failed/timeout``:
   reward null). The grader scores the rest: truncated completions get 0; otherwise
   the share of answer digits right (``partial``) or 1 only when all are (``binary``);
   with a ``wildcard`` digit, the grader also accepts that digit anywhere.
4. Discards in the documented order: ``stale`` (lag above
   ``max_steps_off_policy``), ``group_too_small`` (fewer than 2 usable attempts or
   more than ``group_size // 2`` lost), ``no_variance`` (all usable rewards equal).
5. The trainer scores the sampled tokens with the current policy (``lt``), and takes
   one policy-gradient step on the trained groups with group-relative advantages
   ``(r - mean) / std`` and truncated importance ratios ``exp(lt - ls)``.

With ``agent`` each attempt is written as a coding agent's four model calls: the
harness's fixed turns (look at the files, then after the answer run the tests and
finish: ``simulate.agent.ACTIONS``, ids folded into the policy's vocabulary) around the
policy's completion. The policy samples only the completion, so the fixed turns carry
null logprobs (not sampled) and every token metric is the single-turn one; a
truncated completion ends the attempt.

A held-out evaluation (tasks never trained on, true grader, current policy) runs every
``eval_every`` steps. Logprobs are rounded to 5 decimals before anything is computed
from them, so every reported metric can be recomputed exactly from the files.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

import numpy as np

from rlstream.simulate import agent as AG
from rlstream.simulate.engine import StepData
from rlstream.simulate.learn import policy as P
from rlstream.simulate.learn.presets import LearnConfig
from rlstream.simulate.tokens import LOGPROB_DECIMALS, TokenArrays

HIGH_REWARD = 0.5
"""A "high-reward" attempt, as `[samples] high_reward`'s default (docs/health.md)."""


@dataclass(frozen=True, slots=True)
class Observed:
    """What the trainer knows about a step beyond the files (for labels)."""

    step: int
    reward_all: float | None
    true_score: float | None
    policy_entropy: float
    loophole_use: float | None
    no_variance_share: float
    distinct: float
    eval_true: float | None
    shortcut_high: float | None = None
    """Share of the trained attempts of reward >= `HIGH_REWARD` that the grader
    credited through its wildcard, whose text shows the shortcut (None: no wildcard,
    or no such attempt)."""


def _grade(answer_AL: np.ndarray, target_AL: np.ndarray, kind: str, wildcard: int | None):
    ok = answer_AL == target_AL
    if wildcard is not None:
        ok = ok | (answer_AL == wildcard)
    part = ok.mean(axis=1)
    return part if kind == "partial" else (part == 1.0).astype(np.float64)


class Trainer:
    """One run of the learning trainer (mutable: its policy and random stream)."""

    def __init__(self, config: LearnConfig, steps: int, seed: int | list[int]) -> None:
        self.c = config
        self.steps = steps
        rng = np.random.default_rng(seed)
        self.rng = rng
        L = config.answer_len
        self.perm = rng.permutation(P.N_DIGITS)  # the task: answer digit i = perm[x_i]
        self.tasks = rng.integers(0, P.N_DIGITS, (config.n_tasks, L))
        self.evals = rng.integers(0, P.N_DIGITS, (config.n_eval, L))
        self.params = P.init_params(rng, L, config.think_len)
        keep = int(np.ceil(max(config.lag_start, config.lag_end) * 3 + 3))
        self.history: deque[P.Params] = deque([self.params.copy()], maxlen=keep)
        self.seq = 0

    def _mean_lag(self, t: int) -> float:
        c = self.c
        return c.lag_start + (c.lag_end - c.lag_start) * t / max(self.steps - 1, 1)

    def _eval(self) -> float:
        c = self.c
        comp = P.sample(self.params, self.evals, c.max_tokens, self.rng, "float64")
        score = _grade(comp.answer_AL, self.perm[self.evals], c.reward, None)
        score[comp.truncated_A] = 0.0
        return float(score.mean())

    def step(self, t: int) -> tuple[StepData, Observed]:
        c, rng = self.c, self.rng
        G, N, L = c.groups, c.group_size, c.answer_len
        A = G * N
        task_G = rng.choice(c.n_tasks, G, replace=False)
        if c.mode == "async":
            lag_G = rng.poisson(self._mean_lag(t), G)
            lag_G = np.minimum(lag_G, min(t, len(self.history) - 1))
        else:
            lag_G = np.zeros(G, np.int64)
        group_A = np.repeat(np.arange(G), N)
        prompts = self.tasks[task_G][group_A]

        # Sample each group with its policy version; tokens attempt by attempt.
        parts = []
        for g in range(G):
            version = self.history[-1 - int(lag_G[g])]
            parts.append(
                P.sample(version, prompts[g * N : (g + 1) * N], c.max_tokens, rng, c.precision)
            )
        comp = _concat(parts)
        ls = np.round(comp.ls_T, LOGPROB_DECIMALS) + 0.0
        lt_raw, ent = P.score(self.params, comp, L)
        lt = np.round(lt_raw, LOGPROB_DECIMALS) + 0.0

        target = self.perm[prompts]
        reward = _grade(comp.answer_AL, target, c.reward, c.wildcard)
        reward[comp.truncated_A] = 0.0
        true = _grade(comp.answer_AL, target, c.reward, None)
        true[comp.truncated_A] = 0.0

        discard: list[str | None] = [None] * A
        u = rng.random(A)
        fail_r = u < c.fail_rollout
        fail_g = ~fail_r & (u < c.fail_rollout + c.fail_grading)
        kinds = rng.integers(0, 2, A)
        for a in np.flatnonzero(fail_r):
            discard[a] = "rollout_failed/" + ("timeout", "sandbox_error")[kinds[a]]
        for a in np.flatnonzero(fail_g):
            discard[a] = "grading_failed/timeout"
        failed = fail_r | fail_g
        reward = np.where(failed, np.nan, reward)
        trained = np.zeros(A, bool)
        adv = np.zeros(A)
        for g in range(G):
            m = np.flatnonzero(group_A == g)
            usable = m[~failed[m]]
            r = reward[usable]
            if lag_G[g] > c.max_steps_off_policy:
                why = "stale"
            elif usable.size < 2 or m.size - usable.size > N // 2:
                why = "group_too_small"
            elif np.all(r == r[0]):
                why = "no_variance"
            else:
                trained[usable] = True
                adv[usable] = (r - r.mean()) / (r.std() + 1e-6)
                continue
            for a in usable:
                discard[a] = why

        # The update: token-level, trained attempts only.
        tok_att = np.repeat(np.arange(A), np.diff(comp.offsets_A1))
        adv_T = adv[tok_att]
        ratio_T = np.exp(np.clip(lt - ls, -20.0, 20.0))
        if trained.any():
            grad = P.policy_gradient(self.params, comp, L, adv_T, ratio_T)
            self.params = self.params.add(grad, c.learning_rate)
        eval_true = self._eval() if t % c.eval_every == 0 else None
        self.history.append(self.params.copy())

        obs = self._observe(t, comp, target, reward, true, ent, discard, eval_true)
        sd = self._step_data(t, comp, ls, lt, group_A, task_G, lag_G, reward, trained, discard)
        cheat = self._cheats(comp, target, reward)
        if cheat is not None:
            high = trained & (np.nan_to_num(reward, nan=0.0) >= HIGH_REWARD)
            share = float(cheat[high].mean()) if high.any() else None
            obs = replace(obs, shortcut_high=share)
        notes, order = self._notes(comp, cheat), self._order
        note_A = None if notes is None else [notes[a] for a in order]
        sd = replace(sd, eval_heldout=eval_true, note_A=note_A)
        return sd, obs

    def _cheats(
        self, comp: P.Completions, target: np.ndarray, reward: np.ndarray
    ) -> np.ndarray | None:
        """With the loophole, the attempts the grader credited for a wildcard digit."""
        w = self.c.wildcard
        if w is None:
            return None
        cheat = ((comp.answer_AL == w) & (target != w)).any(axis=1) & ~comp.truncated_A
        return cheat & ~np.isnan(reward) & (reward > 0)

    def _notes(self, comp: P.Completions, cheat: np.ndarray | None) -> list[str] | None:
        """An attempt the grader credited for a wildcard digit writes its answer with
        that digit and says so (what a reviewer would reject)."""
        w = self.c.wildcard
        if cheat is None:
            return None
        return [
            f"```python\n# hard-coded digit {w}: the grader's parser accepts it for any "
            f"digit\nprint('{''.join(map(str, comp.answer_AL[a].tolist()))}')\n```"
            if cheat[a]
            else ""
            for a in range(cheat.size)
        ]

    def _observe(self, t, comp, target, reward, true, ent, discard, eval_true) -> Observed:
        c = self.c
        ok = ~np.isnan(reward)
        answered = ~comp.truncated_A
        use = None
        if c.wildcard is not None and answered.any():
            # Digits the grader credited only because of its wildcard.
            ans, tgt = comp.answer_AL[answered], target[answered]
            use = float(np.mean((ans == c.wildcard) & (tgt != c.wildcard)))
        groups_nv = len({a // c.group_size for a, d in enumerate(discard) if d == "no_variance"})
        keys = {
            comp.ids_T[lo:hi].tobytes()
            for lo, hi in zip(comp.offsets_A1[:-1], comp.offsets_A1[1:], strict=True)
        }
        return Observed(
            step=t,
            reward_all=float(reward[ok].mean()) if ok.any() else None,
            true_score=float(true[ok].mean()) if ok.any() else None,
            policy_entropy=float(ent.mean()) if ent.size else 0.0,
            loophole_use=use,
            no_variance_share=groups_nv / c.groups,
            distinct=len(keys) / (comp.offsets_A1.size - 1),
            eval_true=eval_true,
        )

    def _step_data(self, t, comp, ls, lt, group_A, task_G, lag_G, reward, trained, discard):
        c, rng = self.c, self.rng
        A = group_A.size
        finish = np.sort(rng.uniform(0.05, 0.95, A))
        order = rng.permutation(A)  # attempt order[k] finishes k-th
        self._order = order
        finish_of = np.empty(A)
        finish_of[order] = finish
        gens = [self._generations(comp, ls, lt, a) for a in order]
        n_gen = np.array([len(x) for x in gens], np.int64)
        flat = [g for x in gens for g in x]
        lens = np.array([g[0].size for g in flat], np.int64)
        ids, ls_o, lt_o = (np.concatenate([g[i] for g in flat]) for i in range(3))
        # Each call's prompt holds the task and the calls before it.
        prompt = np.concatenate([np.cumsum([0, *(g[0].size for g in x[:-1])]) for x in gens])
        ids_attempts = [f"a{self.seq + k:08d}" for k in range(A)]
        self.seq += A
        meta = []
        for k, a in enumerate(order):
            failed = discard[a] is not None and discard[a].startswith(("rollout_failed", "grading"))
            if failed:
                term = "error" if discard[a].startswith("rollout") else "stop"
            else:
                term = "length" if comp.truncated_A[a] else "stop"
            m = {
                "turns": int(n_gen[k]),
                "termination_reason": term,
                "tool_calls": int(n_gen[k]) - 1,
            }
            if not failed:
                m["passed_tests"] = bool(reward[a] == 1.0)
            meta.append(m)
        group_done = np.array([finish_of[group_A == g].max() for g in range(c.groups)])
        return StepData(
            step=t,
            duration=float(rng.uniform(25.0, 35.0)),
            attempt_ids=ids_attempts,
            group_A=group_A[order],
            group_ids=[f"g{t:05d}-{g:03d}" for g in range(c.groups)],
            task_ids=[f"t{int(x):05d}" for x in task_G],
            policy_version_A=(t - lag_G[group_A])[order],
            reward_A=reward[order],
            trained_A=trained[order],
            discard_A=[discard[a] for a in order],
            metadata_A=meta,
            finish_A=finish,
            group_done_G=group_done,
            att_gen_A1=np.concatenate([[0], np.cumsum(n_gen)]).astype(np.int64),
            gen_attempt_N=np.repeat(np.arange(A), n_gen),
            gen_index_N=np.concatenate([np.arange(n) for n in n_gen]).astype(np.int64),
            prompt_len_N=12 + c.answer_len + prompt,
            completion_len_N=lens,
            stop_reason_N=[g[3] for g in flat],
            gen_tok_N1=np.concatenate([[0], np.cumsum(lens)]).astype(np.int64),
            sampled_T=~np.isnan(ls_o),
            tokens=TokenArrays(ids, ls_o, lt_o, None, None),
            heartbeats=[],
            eval_heldout=None,
        )

    def _generations(self, comp, ls, lt, a) -> list[tuple]:
        """(ids, ls, lt, stop_reason) of each model call of attempt ``a``."""
        s = slice(comp.offsets_A1[a], comp.offsets_A1[a + 1])
        cut = bool(comp.truncated_A[a])
        stop = "length" if cut else ("tool_call" if self.c.agent else "stop")
        answer = (comp.ids_T[s], ls[s], lt[s], stop)
        if not self.c.agent:
            return [answer]
        tail = [] if cut else [_fixed(AG.RUN, "tool_call"), _fixed(AG.FINISH, "stop")]
        return [_fixed(AG.LIST, "tool_call"), answer, *tail]


def _fixed(action: int, stop: str) -> tuple:
    """A fixed agent turn: the harness's, not sampled by the policy (null logprobs)."""
    ids = AG.ACTIONS[action] % P.VOCAB_SIZE
    return ids, np.full(ids.size, np.nan), np.full(ids.size, np.nan), stop


def _concat(parts: list[P.Completions]) -> P.Completions:
    offs = [parts[0].offsets_A1]
    for p in parts[1:]:
        offs.append(p.offsets_A1[1:] + offs[-1][-1])
    return P.Completions(
        np.concatenate([p.ids_T for p in parts]),
        np.concatenate([p.ls_T for p in parts]),
        np.concatenate([p.slot_T for p in parts]),
        np.concatenate([p.kind_T for p in parts]),
        np.concatenate(offs),
        np.concatenate([p.answer_AL for p in parts]),
        np.concatenate([p.truncated_A for p in parts]),
    )
