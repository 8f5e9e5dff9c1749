"""The run engine: one step of a simulated GRPO-style trainer at a time.

`RunEngine(plan).step(t)` returns a `StepData`: the step's attempts (in the order
they finish), their generations and every token, all as numpy arrays, plus the
heartbeats, held-out evaluation and extra keys of that step. The engine holds the
run's only mutable state (its random stream, the attempt sequence number and the
streak of unusable groups); everything else comes from the plan and its knobs.

Per step: `groups` tasks are drawn from the run's task pool, each gets `group_size`
attempts. Pass probability is `sigmoid(skill + shift - difficulty)`, lowered sharply
for attempts that ran out of turns or tokens. Rewards are binary or partial (k/4).
In agent mode (`plan.agent`) the turns are laid out as a coding agent's (agent.py).
Attempt-level failures (rollout_failed/*, grading_failed/*: reward null) and
`unversioned` attempts leave their group; then a group is `stale` (async lag beyond
training.max_steps_off_policy), `group_too_small` (fewer than 2 usable attempts or
more than training.max_group_losses lost), `no_variance` (all usable rewards equal),
or trained. Like a trainer that would abort, the engine never lets the streak of
unusable groups reach training.max_consecutive_unusable_groups while a group can be
rescued: at the limit, a no_variance group gets one reward flipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rlstream.simulate import agent
from rlstream.simulate.config import STREAM_CONTENT, RunPlan
from rlstream.simulate.scenarios import Knobs, build_knobs
from rlstream.simulate.tokens import TokenArrays, sample_tokens

STREAM_KNOBS = 3
N_TASKS = 512
N_EVAL = 128
MOTIF = 4
ROLLOUT_FAIL_KINDS = ("timeout", "sandbox_error")
GRADING_FAIL_KINDS = ("timeout", "parse_error")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


@dataclass(frozen=True, slots=True)
class StepData:
    """One step. Attempt arrays (`_A`) are in finish order; generations (`_N`) are
    grouped by attempt in that order, `att_gen_A1` giving each attempt's slice;
    tokens (`_T`) are concatenated generations, `gen_tok_N1` giving offsets."""

    step: int
    duration: float
    attempt_ids: list[str]
    group_A: np.ndarray
    group_ids: list[str]
    task_ids: list[str]
    policy_version_A: np.ndarray  # -1: unversioned
    reward_A: np.ndarray  # NaN: failed
    trained_A: np.ndarray
    discard_A: list[str | None]
    metadata_A: list[dict]
    finish_A: np.ndarray  # fraction of the step window
    group_done_G: np.ndarray
    att_gen_A1: np.ndarray
    gen_attempt_N: np.ndarray
    gen_index_N: np.ndarray
    prompt_len_N: np.ndarray
    completion_len_N: np.ndarray
    stop_reason_N: list[str]
    gen_tok_N1: np.ndarray
    sampled_T: np.ndarray
    tokens: TokenArrays
    heartbeats: list[tuple[float, int]]
    eval_heldout: float | None
    extra: dict[str, float] = field(default_factory=dict)
    reporting_bug: bool = False
    hack_p: float = 0.0
    """P(a passing attempt's text shows a shortcut), `Knobs.hack`."""
    note_A: list[str] | None = None
    """Text appended to an attempt's last completion ("" for none): the learning
    trainer's loophole shows there."""


class RunEngine:
    """Generates the steps of one run, in order."""

    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        self.knobs: Knobs = build_knobs(
            plan, np.random.default_rng([plan.seed, plan.index, STREAM_KNOBS])
        )
        rng = np.random.default_rng([plan.seed, plan.index, STREAM_CONTENT])
        self.rng = rng
        p = plan.params
        self.task_diff = rng.normal(0.0, p["diff_sd"], N_TASKS)
        self.task_prompt = rng.integers(60, 600, N_TASKS)
        self.eval_diff = rng.normal(0.0, p["diff_sd"], N_EVAL)
        # The hard-coded answer: about as long as a normal completion, so length stays put.
        const_len = max(8, round(plan.tokens * rng.uniform(0.6, 1.0)))
        self.const_ids = rng.integers(0, plan.vocab_size, const_len)
        self.seq = 0
        self.streak = 0

    @property
    def last_step(self) -> int:
        """Steps [0, last_step) complete; at `stop` the run stalls mid-step."""
        return self.knobs.stop

    def step(self, t: int) -> StepData:
        plan, k, rng = self.plan, self.knobs, self.rng
        G, N = plan.groups, plan.group_size
        A = G * N
        MT = plan.max_turns
        group_A = np.repeat(np.arange(G), N)

        tasks = rng.choice(N_TASKS, G, replace=False)
        d_A = (self.task_diff[tasks] + k.diff_mean[t])[group_A]
        if plan.mode == "async":
            lag_G = np.minimum(rng.poisson(k.lag_scale[t], G), t)
        else:
            lag_G = np.zeros(G, dtype=np.int64)
        stale_G = lag_G > plan.max_steps_off_policy
        pv_A = t - lag_G[group_A]
        unversioned_A = rng.random(A) < plan.params["unversioned"]
        pv_A[unversioned_A] = -1

        u = rng.random(A)
        rfail_A = u < k.fail_rollout[t]
        gfail_A = ~rfail_A & (u < k.fail_rollout[t] + k.fail_grading[t])
        kind_u = rng.random(A)
        degen_A = rng.random(A) < k.degen[t]

        # Turns and lengths: the first truncated turn ends the attempt.
        raw = rng.geometric(1.0 - k.turn_p[t], A) if MT > 1 else np.ones(A, np.int64)
        median = plan.tokens * k.len_mult[t]
        len_AM = np.maximum(
            np.rint(np.exp(rng.normal(np.log(median), plan.params["len_sigma"], (A, MT)))), 1
        ).astype(np.int64)
        capped = len_AM >= plan.max_tokens
        len_AM = np.minimum(len_AM, plan.max_tokens)
        if plan.agent:  # fixed actions around the written turns (agent.py)
            n_turns, out_A = agent.agent_turns(raw, MT)
            n_turns[degen_A], out_A[degen_A] = agent.DEGENERATE_TURNS, False
            grid = agent.action_grid(n_turns, ~out_A, MT)
            len_AM = np.where(grid >= 0, agent.action_lengths(grid), len_AM)
            capped &= (grid < 0) & ~degen_A[:, None]
        else:
            n_turns, out_A = np.minimum(raw, MT), raw > MT
            grid = np.full((A, MT), agent.FREE, np.int64)
        first_cap = np.where(capped.any(axis=1), capped.argmax(axis=1), MT)
        cut = first_cap < n_turns
        turns_A = np.where(cut, first_cap + 1, n_turns)
        term_A = np.where(cut, "length", np.where(out_A, "max_turns", "stop")).astype(object)
        if not plan.agent:
            turns_A[degen_A] = 1
        term_A[degen_A] = "stop"
        len_AM[degen_A, int(plan.agent)] = self.const_ids.size
        ran_out_A = (term_A == "length") | (term_A == "max_turns")

        # Rewards.
        shift = rng.normal(0.0, k.shift_sd[t])
        p_A = _sigmoid(k.skill[t] + shift - d_A)
        p_A = np.where(ran_out_A, 0.15 * p_A, p_A)
        if plan.params["partial"]:
            r_A = rng.binomial(4, p_A) / 4.0
        else:
            r_A = (rng.random(A) < p_A).astype(np.float64)
        collapse_G = rng.random(G) < k.collapse[t]
        r_A = np.where(collapse_G[group_A], r_A[group_A * N], r_A)
        flip_A = rng.random(A) < k.flip[t]
        r_A = np.where(flip_A, 1.0 - r_A, r_A)
        r_A[degen_A] = 1.0
        r_A[rfail_A | gfail_A] = np.nan

        discard, trained_A = self._decide_groups(r_A, rfail_A, gfail_A, kind_u, pv_A, stale_G)

        # Generations, per attempt then turn (still in group-major attempt order).
        resp = rng.integers(16, 160, (A, MT))
        prompt0 = self.task_prompt[tasks][group_A]
        before = np.cumsum(len_AM + resp, axis=1) - (len_AM + resp)
        prompt = prompt0[:, None] + before
        gmask = np.arange(MT)[None, :] < turns_A[:, None]
        n_gen_A = gmask.sum(axis=1)
        last_stop = np.where(
            term_A == "length", "length", np.where(term_A == "max_turns", "tool_call", "stop")
        )
        term_A[rfail_A] = "error"

        # Spliced tool output inside a completion (multi-turn runs only).
        gen_len = len_AM[gmask]
        n_gen = gen_len.size
        gen_att = np.nonzero(gmask)[0]
        span_on = (MT > 1) & (gen_len >= 12) & ~degen_A[gen_att] & (rng.random(n_gen) < 0.2)
        span_on &= grid[gmask] < 0  # no tool output inside a fixed action
        hi = np.minimum(24, gen_len // 2)
        span_len = 4 + (rng.random(n_gen) * (hi - 3)).astype(np.int64)
        span_start = 1 + (rng.random(n_gen) * np.maximum(gen_len - span_len - 1, 1)).astype(
            np.int64
        )
        spans_A = np.bincount(gen_att, weights=span_on, minlength=A).astype(np.int64)
        tool_calls_A = turns_A - 1 + (term_A == "max_turns") + spans_A

        passed_A = r_A >= 1.0
        metadata = []
        for a in range(A):
            m = {
                "turns": int(turns_A[a]),
                "termination_reason": str(term_A[a]),
                "tool_calls": int(tool_calls_A[a]),
            }
            if not np.isnan(r_A[a]):
                m["passed_tests"] = bool(passed_A[a])
            metadata.append(m)

        # Finish order: reorder attempts, then lay out generations and tokens.
        finish = rng.uniform(0.05, 0.9, A)
        order = np.argsort(finish, kind="stable")
        group_done = np.zeros(G)
        np.maximum.at(group_done, group_A, finish + 0.002)

        gen_in_att_order = np.concatenate(
            [np.flatnonzero(gmask[a]) + a * MT for a in order]
        )  # flat (attempt, turn) indices in new attempt order
        flat_len = len_AM.reshape(-1)[gen_in_att_order]
        gen_att_orig = gen_in_att_order // MT
        gen_turn = gen_in_att_order % MT
        # Map generations' span draws (drawn in group-major order) to the new order.
        flat_pos = np.full(A * MT, -1, np.int64)
        flat_pos[np.flatnonzero(gmask.reshape(-1))] = np.arange(n_gen)
        src = flat_pos[gen_in_att_order]
        span_on, span_len, span_start = span_on[src], span_len[src], span_start[src]

        stop_reason = np.where(
            gen_turn < turns_A[gen_att_orig] - 1, "tool_call", last_stop[gen_att_orig]
        ).tolist()
        gen_tok = np.zeros(n_gen + 1, np.int64)
        np.cumsum(flat_len, out=gen_tok[1:])
        n_tok = int(gen_tok[-1])
        gen_T = np.repeat(np.arange(n_gen), flat_len)
        pos_T = np.arange(n_tok) - gen_tok[gen_T]
        diff = np.zeros(n_tok + 1, np.int64)
        on = np.flatnonzero(span_on)
        np.add.at(diff, gen_tok[on] + span_start[on], 1)
        np.add.at(diff, gen_tok[on] + span_start[on] + span_len[on], -1)
        sampled_T = np.cumsum(diff[:-1]) == 0

        action_T = grid.reshape(-1)[gen_in_att_order][gen_T]
        degen_T = degen_A[gen_att_orig][gen_T] & (action_T < 0)
        motif = rng.integers(0, plan.vocab_size, (n_gen, MOTIF))
        rep_T = sampled_T & (rng.random(n_tok) < k.rep[t])
        forced_T = rep_T | degen_T | (action_T >= 0)
        forced_id_T = np.where(
            degen_T,
            self.const_ids[np.minimum(pos_T, self.const_ids.size - 1)],
            motif[gen_T, pos_T % MOTIF],
        )
        forced_id_T = np.where(action_T >= 0, agent.action_tokens(action_T, pos_T), forced_id_T)
        tokens = sample_tokens(
            rng,
            gen_T=gen_T,
            pos_T=pos_T,
            sampled_T=sampled_T,
            forced_T=forced_T,
            forced_id_T=forced_id_T,
            conf=float(k.conf[t]),
            beta=float(k.beta[t]),
            tail=float(k.tail[t]),
            kl_sd=float(k.kl_sd[t]),
            out_frac=float(k.out_frac[t]),
            vocab_size=plan.vocab_size,
            topk=plan.topk,
        )

        duration = (plan.params["base_seconds"] + 0.04 * n_tok) * float(
            np.exp(rng.normal(0.0, 0.12))
        )
        heartbeats = []
        if plan.progress_every_seconds:
            n_hb = int(duration // plan.progress_every_seconds)
            for h in range(1, n_hb + 1):
                frac = h * plan.progress_every_seconds / duration
                heartbeats.append((frac, int((group_done <= frac).sum())))
        eval_heldout = None
        if t % plan.eval_every == 0:
            pe = _sigmoid(k.heldout_skill[t] - self.eval_diff)
            eval_heldout = float((rng.random(N_EVAL) < pe).mean())
        extra = {}
        if rng.random() < plan.params["unknown_key_p"]:
            extra["optim/grad_norm"] = round(float(np.exp(rng.normal(-0.5, 0.4))), 6)

        ids = [f"a{self.seq + i:08d}" for i in range(A)]
        self.seq += A
        att_gen = np.zeros(A + 1, np.int64)
        np.cumsum(n_gen_A[order], out=att_gen[1:])
        gen_attempt = np.repeat(np.arange(A), n_gen_A[order])
        return StepData(
            step=t,
            duration=duration,
            attempt_ids=ids,
            group_A=group_A[order],
            group_ids=[f"g{t:05d}-{g:03d}" for g in range(G)],
            task_ids=[f"t{int(x):05d}" for x in tasks],
            policy_version_A=pv_A[order],
            reward_A=r_A[order],
            trained_A=trained_A[order],
            discard_A=[discard[i] for i in order],
            metadata_A=[metadata[i] for i in order],
            finish_A=finish[order],
            group_done_G=group_done,
            att_gen_A1=att_gen,
            gen_attempt_N=gen_attempt,
            gen_index_N=gen_turn,
            prompt_len_N=prompt.reshape(-1)[gen_in_att_order],
            completion_len_N=flat_len,
            stop_reason_N=stop_reason,
            gen_tok_N1=gen_tok,
            sampled_T=sampled_T,
            tokens=tokens,
            heartbeats=heartbeats,
            eval_heldout=eval_heldout,
            extra=extra,
            reporting_bug=bool(k.bug[t]),
            hack_p=float(k.hack[t]),
        )

    def _decide_groups(
        self,
        r_A: np.ndarray,
        rfail_A: np.ndarray,
        gfail_A: np.ndarray,
        kind_u: np.ndarray,
        pv_A: np.ndarray,
        stale_G: np.ndarray,
    ) -> tuple[list[str | None], np.ndarray]:
        """Discard reasons and the trained mask; may flip one reward (streak guard)."""
        plan = self.plan
        N = plan.group_size
        A = r_A.size
        reason: list[str | None] = [None] * A
        for a in range(A):
            if rfail_A[a]:
                reason[a] = "rollout_failed/" + ROLLOUT_FAIL_KINDS[int(kind_u[a] < 0.6)]
            elif gfail_A[a]:
                reason[a] = "grading_failed/" + GRADING_FAIL_KINDS[int(kind_u[a] < 0.5)]
            elif pv_A[a] < 0:
                reason[a] = "unversioned"
        trained = np.zeros(A, dtype=bool)
        for g in range(plan.groups):
            members = range(g * N, (g + 1) * N)
            usable = [a for a in members if reason[a] is None]
            lost = N - len(usable)
            if stale_G[g]:
                verdict = "stale"
            elif len(usable) < 2 or lost > plan.max_group_losses:
                verdict = "group_too_small"
            elif np.all(r_A[usable] == r_A[usable[0]]):
                verdict = "no_variance"
                if self.streak + 1 >= plan.max_consecutive_unusable_groups:
                    a0 = usable[0]
                    r_A[a0] = 1.0 - r_A[a0] if r_A[a0] != 0.5 else 0.75
                    verdict = None
            else:
                verdict = None
            for a in usable:
                reason[a] = verdict
            trained[usable] = verdict is None
            self.streak = self.streak + 1 if verdict is not None else 0
        return reason, trained
