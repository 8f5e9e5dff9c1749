"""What to do about a finding, by code: one sentence shown beside its evidence.

`advice(code)` is the text the live pages (rlstream.fleet.pages) and the messages of
`watch --notify` (rlstream.fleet.notify) show under a finding's message (its
evidence: the figures and the step). The conditions behind each code are in
docs/health.md; this is only the first thing to check.
"""

from __future__ import annotations

ADVICE = {
    "no_learning_signal": "every group scores alike: check the grader and the task mix, "
    "or raise the group size",
    "tasks_too_hard": "almost no attempt succeeds: use easier tasks or a curriculum, or "
    "check the grader",
    "tasks_too_easy": "almost every attempt succeeds: use harder tasks",
    "tasks_mastered": "the tasks are solved, unless reward_too_fast or "
    "transcript_hack_flags stands beside it (then read the transcripts first): stop the "
    "run or move to harder tasks",
    "unusable_groups_streak": "the trainer will soon skip for want of usable groups: "
    "check rollout failures, the grader and the task mix",
    "rollout_failure_burst": "rollouts are failing: check the environment and the sampler's logs",
    "grading_failure_burst": "grading is failing: check the grader's logs and timeouts",
    "out_of_room": "attempts hit the turn or token limit: raise the limit or shorten the task",
    "mismatch_kl_rising": "sampler and trainer disagree: check weight sync, precision and "
    "the sampler's version",
    "low_ess": "importance weights are degenerate: check the sampler/trainer mismatch and "
    "off-policy lag",
    "stale_rollouts": "rollouts come from old policies: add sampler capacity or lower "
    "max_steps_off_policy",
    "reward_too_fast": "reward rose faster than learning explains: read transcripts for a "
    "reward hack",
    "degenerate_outputs": "one answer for many tasks: read the example completions for a "
    "hack or a collapse",
    "entropy_collapse": "the policy stopped exploring: lower the learning rate, add an "
    "entropy bonus or KL penalty",
    "entropy_too_high": "the policy grows random: lower the learning rate or check the "
    "sampling temperature",
    "length_explosion": "completions grow toward the cap: check for rambling or a length reward",
    "length_collapse": "completions shrank: check for a shortcut answer",
    "noisy_reward": "reward is noisier than sampling explains: check the grader for randomness",
    "heldout_gap": "training reward rises but held-out does not: overfitting or a hack; "
    "compare transcripts",
    "metric_disagreement": "a trainer's figure differs from the recomputed one: check how "
    "the trainer defines it",
    "stalled": "no new step: check that the trainer is alive",
    "unlike_peers": "the run departs from its cohort: compare its config and seed with "
    "its siblings",
}


def advice(code: str | None) -> str:
    """The advice for a finding code ('' for an unknown code)."""
    return ADVICE.get(code or "", "")
