"""Engine invariants over random configurations, and scenario knobs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from rlstream.simulate import SCENARIOS, SimConfig
from rlstream.simulate.config import plan_run
from rlstream.simulate.engine import RunEngine
from rlstream.simulate.scenarios import build_knobs
from rlstream.simulate.stats import step_metrics

REASONS = {
    None,
    "no_variance",
    "group_too_small",
    "rollout_failed/timeout",
    "rollout_failed/sandbox_error",
    "grading_failed/timeout",
    "grading_failed/parse_error",
    "unversioned",
    "stale",
}


@settings(max_examples=25, deadline=None)
@given(
    scenario=st.sampled_from(SCENARIOS),
    seed=st.integers(0, 10_000),
    groups=st.integers(1, 5),
    group_size=st.integers(2, 6),
    tokens=st.floats(2.0, 200.0),
    mode=st.sampled_from(["sync", "async"]),
    topk=st.one_of(st.none(), st.integers(1, 20)),
    agent=st.booleans(),
)
def test_engine_invariants(scenario, seed, groups, group_size, tokens, mode, topk, agent) -> None:
    cfg = SimConfig(
        runs=1, steps=12, scenarios=(scenario,), seed=seed, groups=groups,
        group_size=group_size, tokens=tokens, mode=mode, topk=topk, agent=agent,
    )  # fmt: skip
    plan = plan_run(cfg, 0)
    engine = RunEngine(plan)
    for t in range(min(plan.steps, engine.last_step + 1)):
        sd = engine.step(t)
        a = len(sd.attempt_ids)
        assert a == groups * plan.group_size
        assert set(sd.discard_A) <= REASONS
        assert np.array_equal(sd.trained_A, np.array([d is None for d in sd.discard_A]))
        r = sd.reward_A
        assert np.all(np.isnan(r) | ((r >= 0) & (r <= 1)))
        lag = t - sd.policy_version_A[sd.policy_version_A >= 0]
        assert lag.min(initial=0) >= 0
        if plan.mode == "sync":
            assert np.all(lag == 0)
        assert sd.att_gen_A1[-1] == sd.completion_len_N.size
        assert sd.gen_tok_N1[-1] == sd.tokens.ids_T.size == sd.sampled_T.size
        assert np.all((sd.tokens.ids_T >= 0) & (sd.tokens.ids_T < plan.vocab_size))
        assert np.all(sd.completion_len_N >= 1) and np.all(sd.completion_len_N <= plan.max_tokens)
        ls = sd.tokens.ls_T
        assert np.array_equal(np.isnan(ls), ~sd.sampled_T)
        assert np.all(ls[sd.sampled_T] <= 0) and np.all(sd.tokens.lt_T[sd.sampled_T] <= 0)
        turns = np.array([m["turns"] for m in sd.metadata_A])
        assert np.array_equal(np.diff(sd.att_gen_A1), turns)
        assert np.all(turns <= plan.max_turns)
        m = step_metrics(sd)
        if "train/mismatch_ess" in m:
            assert 0 < m["train/mismatch_ess"] <= 1 + 1e-12
        if topk:
            assert sd.tokens.top_ids_TK.shape == (ls.size, topk)


def _knobs(scenario: str):
    plan = plan_run(SimConfig(runs=1, steps=50, scenarios=(scenario,), seed=4), 0)
    return plan, build_knobs(plan, np.random.default_rng(0))


def test_heldout_gap_knobs_diverge() -> None:
    plan, k = _knobs("heldout_gap")
    t0 = plan.onset
    assert k.skill[-1] - k.skill[t0] > 1.5
    assert k.heldout_skill[-1] < k.heldout_skill[t0] - 0.5


def test_noisy_reward_and_stalled_knobs() -> None:
    plan, k = _knobs("noisy_reward")
    # Batch-level grader inconsistency: each step's pass logits shift at random.
    assert k.shift_sd[: plan.onset].max() <= 0.15 + 1e-9 and k.shift_sd[-1] > 4.5
    assert abs(k.skill[-1] - k.skill[plan.onset]) < 0.5  # learning stops: a flat trend
    plan, k = _knobs("stalled")
    assert k.stop == plan.onset


def test_onsets_are_seeded_and_near_forty_percent() -> None:
    onsets = [
        plan_run(SimConfig(runs=1, steps=100, scenarios=("low_ess",), seed=s), 0).onset
        for s in range(30)
    ]
    assert all(32 <= o <= 48 for o in onsets) and len(set(onsets)) > 5
    again = plan_run(SimConfig(runs=1, steps=100, scenarios=("low_ess",), seed=3), 0).onset
    assert again == onsets[3]


def _easy_rows(plan, steps: int) -> list[dict]:
    """The step rows the health rules read for a tasks_too_easy run's first steps, from
    the simulated trainer's own metrics (`step_metrics`)."""
    engine, out = RunEngine(plan), []
    for t in range(steps):
        m = step_metrics(engine.step(t))
        nv, small = m["discard/groups/no_variance"], m.get("discard/groups/group_too_small", 0)
        out.append({
            "step": t, "groups": plan.groups, "groups_no_variance": nv,
            "groups_trained": plan.groups - nv - small,
            "reward_mean_with_unusable": m["reward/mean_with_unusable"],
        })  # fmt: skip
    return out


def test_tasks_too_easy_runs_are_too_easy_by_the_rules_definition() -> None:
    # Seed 1302's second tasks_too_easy run (index 26 of the full suite: partial
    # credit, grader flips, 4 turns) had most groups keeping a spread from the start,
    # so tasks_too_easy (most groups all-success, reward >= 0.9, at the start and now)
    # could not fire and tasks_mastered did once it learned. Its twin and runs of other
    # seeds must be too easy by that definition as well.
    from rlstream.health import DEFAULT_RULES, RunContext, findings, fold_step, new_state

    full = dict(
        runs=len(SCENARIOS) * 2, steps=120, scenarios=SCENARIOS, tokens=24.0, groups=4, group_size=4
    )
    index = SCENARIOS.index("tasks_too_easy")
    plans = [plan_run(SimConfig(seed=1302, **full), index + len(SCENARIOS))]
    plans += [plan_run(SimConfig(seed=s, **full), index) for s in (5, 6, 7)]
    assert plans[0].params["partial"] == 1.0 and plans[0].max_turns == 4
    for plan in plans:
        state = new_state(DEFAULT_RULES)
        ctx = RunContext(plan.run_id, {}, False)
        for row in _easy_rows(plan, 30):
            state, _ = fold_step(state, row, ctx, DEFAULT_RULES)
        codes = {f.code for f in findings(state) if f.state == "firing"}
        assert "tasks_too_easy" in codes, (plan.run_id, findings(state))


def test_text_level_hacking_keeps_the_honest_twins_rewards() -> None:
    """transcript_hack_flags changes only the text: its run draws every attempt's
    reward, discard and length exactly as the same plan run healthy (its twin), so the
    reward curve rises no faster, while after the onset some passing attempts' text
    shows a shortcut (`StepData.hack_p` > 0, none before it)."""
    plan = plan_run(SimConfig(runs=1, steps=40, scenarios=("transcript_hack_flags",), seed=6), 0)
    twin = replace(plan, scenario="healthy", onset=None)
    hack, honest = RunEngine(plan), RunEngine(twin)
    for t in range(plan.steps):
        a, b = hack.step(t), honest.step(t)
        assert np.array_equal(a.reward_A, b.reward_A, equal_nan=True)
        assert a.discard_A == b.discard_A
        assert np.array_equal(a.completion_len_N, b.completion_len_N)
        assert b.hack_p == 0.0 and (a.hack_p > 0) == (t >= plan.onset)
