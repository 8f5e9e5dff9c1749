"""Configs of cohorts and of the `unlike_peers` finding (tables `[cohorts]` and
`[unlike_peers]` of the rules TOML). Frozen dataclasses; every field's docstring is
rendered into docs/health.md "Defaults" by `rlstream.health.reference`.

`UnlikePeers` has the four fields of every rule config (`config.RuleConfig`) itself, so
this module does not import `config` (which imports it).
List-valued keys are comma-separated strings (the rules TOML holds scalars only).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlstream.errors import ConfigError


@dataclass(frozen=True)
class CohortsConfig:
    """How runs are grouped into cohorts (docs/health.md "Cohorts")."""

    explicit_keys: str = "experiment,cohort,tags"
    """Config keys (dotted paths into run.json `config`) that name a run's cohort
    outright; the first one present wins (a list value is joined with `+`)."""
    ignore_keys: str = (
        "seed,run_name,name,run_id,id,output,output_dir,out_dir,output_path,log_dir,log_path,"
        "logging_dir,checkpoint_dir,save_dir,wandb,project,tags,experiment,cohort"
    )
    """Keys left out of the config fingerprint because they vary within a sweep: a bare
    name is dropped at any depth (but inside the `keep_under` sections), a dotted path
    only there."""
    keep_under: str = (
        "model,policy,actor,critic,reference,ref,reward_model,tokenizer,base_model,"
        "dataset,data,env,environment,task,tasks,grader"
    )
    """Config sections that say what is trained and on what (the model, the data, the
    grader): inside them a bare name of `ignore_keys` is kept, because there a `name`
    or an `id` is the model's or the dataset's, and runs of two models are not peers.
    A dotted path of `ignore_keys` is dropped even there."""


@dataclass(frozen=True)
class UnlikePeers:
    """A run's figure leaves its cohort's band: its rolling median is more than `k`
    robust deviations from its peers' median at the same step, with at least
    `min_peers` other runs of the cohort there. The deviation is the largest of 1.4826
    x the MAD of the peers' rolling medians, the standard error of the difference that
    the runs' own step-to-step noise explains, `mad_floor` x the peers' median and
    `abs_floor`."""

    enabled: bool = True
    """Evaluate this rule at all."""
    severity: str = "warning"
    """Severity of the finding: info, warning or critical."""
    for_steps: int = 10
    """Judged steps the condition must hold (pending) before the finding fires."""
    clear_steps: int = 10
    """Consecutive clear judged steps before a firing finding resolves."""
    k: float = 6.0
    """Robust deviations beyond the peers' median that count as leaving the band."""
    mad_floor: float = 0.1
    """Least robust deviation, as a fraction of the absolute peers' median: siblings that agree
    closely do not make every small difference an outlier."""
    abs_floor: float = 1e-9
    """Least robust deviation in the figure's own unit (figures near zero)."""
    min_peers: int = 3
    """Other runs of the cohort that must have the step for it to be judged."""
    smooth_steps: int = 10
    """Each run's figure is the median over this many steps ending at the judged one."""
    wait_steps: int = 50
    """A step is judged once every other run of the cohort has reached it or finished,
    but for runs more than this many steps behind the judged run's latest final step
    (started later): those are not waited for."""
    window_steps: int = 200
    """Recent final steps of each run kept for its cohort (bands and judging): a run
    more than this many steps behind its siblings is judged with fewer peers."""
    figures: str = (
        "reward_mean,reward_group_std_mean,mismatch_kl,entropy_estimate,"
        "truncated_frac,completion_len_mean"
    )
    """step-row figures that get bands in OUT/cohorts and are judged (comma-separated)."""

    def __post_init__(self) -> None:
        if min(self.min_peers, self.smooth_steps, self.wait_steps) < 1 or self.k <= 0:
            raise ConfigError("[unlike_peers] min_peers, smooth_steps, wait_steps >= 1; k > 0")
        if self.window_steps < self.smooth_steps:
            raise ConfigError(
                f"[unlike_peers] window_steps ({self.window_steps}) must be >= smooth_steps "
                f"({self.smooth_steps})"
            )
        if not split_keys(self.figures):
            raise ConfigError("[unlike_peers] figures: name at least one steps column")


def split_keys(value: str) -> tuple[str, ...]:
    """The names of a comma-separated key list, stripped, empty ones dropped."""
    return tuple(k.strip() for k in value.split(",") if k.strip())
