"""prime-rl runs: metrics.jsonl (trainer and orchestrator rows) and token exports.

Writers (PrimeIntellect-ai/prime-rl, cited in docs/formats.md):
`src/prime_rl/monitors/file.py` `FileMonitor.log_metrics` appends, line-buffered,
`json.dumps({"step": step, "time": time.time(), **metrics})` to
`<output_dir>/metrics.jsonl`, one line per call. The trainer (`trainer/rl/train.py`)
calls it several times per step: `perf/...`, `optim/...`, its tensor statistics
(`entropy/all/mean`, `mismatch_kl/all/mean`, `loss/...`), `time/...` and `system/...`
(checkpoint disk); the orchestrator (`orchestrator/orchestrator.py`:
`train/agg/{all,effective}/...`, `progress/...`, `off_policy/...`, `time/...`) once,
and its evals once per eval batch; writers interleave in either order. With
`trainer.enable_token_export=true`, `trainer/rl/token_export.py` writes
`token_exports/step_N/rank_R.jsonl`, one line per packed micro-sequence
(`schema_version`, `step`, `rank`, `micro_step`, `micro_sequence_idx`,
`export_sequence_idx`, `env_name`, `token_ids`, `position_ids`, `loss_mask`,
`advantages`, `inference_logprobs`, `trainer_logprobs`, `entropy`, ...; non-finite
floats as null), and touches `token_exports/step_N/STABLE` once every rank flushed.
The orchestrator's `FileMonitor.log_episodes` appends each arriving episode to
`rollouts/step_N/train/all/traces.jsonl` (N the batch being collected), and at ship
time the batch's trained cohort to `rollouts/step_N/train/effective/traces.jsonl`:
one `orjson` line per episode, `Episode.to_record()` of the `verifiers` library
(`verifiers/v1/episode.py`, `trace.py`: `id`, `env`, `group.id`, `run.work.{step,
policy.start, policy.end}`, `ok`, `errors`, `traces` [{`agent.name`, `nodes`
[{`sampled`, `token_ids`, `mask`, `logprobs`, ...}], `calls` [{`finish_reason`,
`usage.completion_tokens`}], `rewards` {name: {`score`, `weight`}}, `ok`,
`stop_condition`, `errors`}]).

All lines of a step are merged into one `StepRecord` (`part` "trainer" /
"orchestrator"; rows with only `eval/` keys are part "eval"): a writer's several lines
of one step merge too (`repeated_parts`; on a key two lines of one writer share, the
later line's value wins, as after a restart that logs the step again), never
quarantined as duplicates; its row is final once both writers have passed it (or its
lines settled, `watermark_settle_seconds`). A step folder of token exports is read once, after its
`STABLE` marker. Each sample of a micro-sequence (position ids restart at 0) becomes
one generation of the tokens under `loss_mask`, with sampler (`inference_logprobs`)
and trainer logprobs: the full token-level set is recomputed as for Loops. The
exports' `entropy` (the trainer's exact entropy of each token's temperature-scaled
distribution) is the entropy estimate's value for every token that has one, `-ls` only
where it is null or the field absent (`entropy_exact_frac` tells the share).
Truncation is not in the exports (the orchestrator reports it).

A step's `train/all/traces.jsonl` is read once, whole, after the step's `effective`
file exists (every `all` append of the step comes before it), by
`rlstream.formats.prime_rl_episodes` (which also reads its text, and the completions
of the attempts that did not train, so no export holds them). Each trace of an
episode is one attempt: group = `group.id` (and the agent's name), reward = the sum of
`score * weight` over its rewards, policy version = `run.work.policy.start`; a trace
(or a trace-less episode) that is not `ok` is discarded as `rollout_failed/<error
type>`, a group whose other rewards are all equal as `no_variance`, a group of one as
`group_too_small`; traces of an agent with `trainable` false (an opponent, a judge)
are not attempts. Metadata: `turns` (sampled nodes), `output_tokens` (the calls'
`usage.completion_tokens`, else the sampled tokens under `mask`), `truncated`
(verifiers' `Trace.is_truncated`: a framework-limit `stop_condition` or a last call
finished by `length`) and `termination_reason` (`stop_condition`).

Mapping (canonical key <- prime-rl key): `train/mismatch_kl` <- `mismatch_kl/all/mean`;
`sampling/entropy_estimate` <- `entropy/all/mean`; `reward/mean` <-
`train/agg/effective/<agent>/reward/mean`; `reward/mean_with_unusable` <-
`train/agg/all/<agent>/reward/mean`; `completion/truncated_frac` <-
`train/agg/effective/<agent>/is_truncated/mean`; `completion/len_mean` <-
`train/agg/effective/num_output_tokens/mean`; `freshness/lag_mean` <- `off_policy/mean`
(the `<agent>` forms only when the run has one agent); `eval/<env>` (a held-out
score) <- `eval/<env>/effective/<agent>/avg@k`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from rlstream.formats.base import RunInfo, StepFiles, Stream, Tail, first_line
from rlstream.formats.prime_rl_episodes import episodes
from rlstream.formats.records import (
    BadRecord,
    Heartbeat,
    KeyPattern,
    StepRecord,
    Transcript,
    finite_number,
    flatten,
    float_array,
    is_int,
    json_object,
    jsonl_records,
    map_keys,
    split_values,
    step_of,
)

METRICS = "metrics.jsonl"
EXPORTS = "token_exports"
STEP_DIR = re.compile(r"step_(\d+)")
RANK_FILE = re.compile(r"rank_\d+\.jsonl")
STABLE = "STABLE"
ROLLOUTS = "rollouts"
TRACES = re.compile(r"traces\.jsonl")
TRACES_ALL = "train/all"
TRACES_DONE = "train/effective/traces.jsonl"
KEYS = {
    "mismatch_kl/all/mean": "train/mismatch_kl",
    "entropy/all/mean": "sampling/entropy_estimate",
    "train/agg/effective/num_output_tokens/mean": "completion/len_mean",
    "off_policy/mean": "freshness/lag_mean",
}
AGENT_KEYS: tuple[KeyPattern, ...] = (
    (re.compile(r"train/agg/effective/[^/]+/reward/mean"), "reward/mean"),
    (re.compile(r"train/agg/all/[^/]+/reward/mean"), "reward/mean_with_unusable"),
    (re.compile(r"train/agg/effective/[^/]+/is_truncated/mean"), "completion/truncated_frac"),
    (re.compile(r"eval/([^/]+)/effective/[^/]+/avg@\d+"), r"eval/\1"),
)
EVAL_STATS = "eval_stats/"
"""prime-rl's other per-environment evaluation statistics (token counts, error and
truncation rates, pass@k: `eval/<env>/<rest>`) are not held-out scores: kept in
`reported_other` as `eval_stats/<env>/<rest>`."""
ORCHESTRATOR = ("train/", "progress/", "off_policy/", "batch/")
ENTROPY_SLACK = 1e-3
"""An exported entropy below -ENTROPY_SLACK nats is not an entropy (rounding may give
a value a hair below 0): the line is quarantined."""


class PrimeRlFormat:
    """prime-rl's output folders."""

    name = "prime-rl"
    run_files = (METRICS,)
    parts = ("trainer", "orchestrator")
    repeated_parts = ("trainer", "orchestrator", "eval")
    """Every writer appends one line per `FileMonitor.log` call: the trainer several per
    step (perf, optim, tensor stats, time, system); all of a step's lines merge."""
    unavailable: frozenset[str] = frozenset(
        {"truncated_frac", "discard_grading_failed", "discard_unversioned", "discard_stale",
         "top_completion_task_share"}
    )  # fmt: skip
    """No stop reasons in the exports; failed gradings not told apart from failed
    rollouts; and the exports' only task label is `env_name`, one per environment, so
    a share of tasks answered alike is 1 whatever the completions."""

    def detect(self, listing: frozenset[str], peek: Callable[[str], bytes | None]) -> bool:
        if METRICS not in listing:
            return False
        obj = json_object(first_line(peek(METRICS)))
        if obj is not None:
            return "step" in obj and "time" in obj and not isinstance(obj.get("data"), dict)
        return f"{EXPORTS}/" in listing or "rollouts/" in listing

    def identity(
        self, name: str, listing: frozenset[str], read: Callable[[str], bytes | None]
    ) -> RunInfo:
        return RunInfo(name, {})

    def streams(self, listing: frozenset[str]) -> tuple[Stream, ...]:
        return (
            Tail(METRICS, "steps"),
            StepFiles(EXPORTS, STEP_DIR, RANK_FILE, "generations", marker=STABLE),
            StepFiles(
                ROLLOUTS, STEP_DIR, TRACES, "rollouts", marker=TRACES_DONE, subdirs=(TRACES_ALL,)
            ),
        )

    def parse_line(self, kind: str, obj: Any) -> StepRecord | Heartbeat | dict[str, Any]:
        if not isinstance(obj, dict):
            raise BadRecord("not_an_object")
        step = step_of(obj)
        t = obj.get("time")
        time = None if t is None else finite_number(t, "time")
        rest = {k: v for k, v in obj.items() if k not in ("step", "time")}
        metrics, text = split_values(flatten(rest))
        if not metrics and not text:
            raise BadRecord("no_metrics")
        if any(k.startswith(ORCHESTRATOR) for k in metrics):
            part = "orchestrator"
        elif all(k.startswith("eval/") for k in metrics):
            part = "eval"
        else:
            part = "trainer"
        out = {
            EVAL_STATS + k[5:] if k.startswith("eval/") and "/" in k[5:] else k: v
            for k, v in map_keys(metrics, KEYS, AGENT_KEYS).items()
        }
        return StepRecord(step, time, out, text, part=part)

    def parse_file(self, kind: str, data: bytes, name: str, step: int) -> list[Any]:
        if kind == "rollouts":
            return episodes(data, name, step)
        rank = name.rsplit("/", 1)[-1].removesuffix(".jsonl")
        out: list[Any] = []
        for rec in jsonl_records(data, lambda obj: _sequence(obj, step, rank)):
            out.extend(rec if isinstance(rec, list) else [rec])
        return out

    def parse_snapshot(self, data: bytes) -> list[StepRecord]:
        return []


_SEQ_FIELDS = ("token_ids", "position_ids", "loss_mask", "inference_logprobs", "trainer_logprobs")


def _sequence(obj: Any, step: int, rank: str) -> list[Transcript]:
    """One exported micro-sequence: a transcript per packed sample."""
    if not isinstance(obj, dict):
        raise BadRecord("not_an_object")
    if step_of(obj) != step:
        raise BadRecord("step_mismatch")
    idx = obj.get("export_sequence_idx")
    if not is_int(idx):
        raise BadRecord("invalid_field:export_sequence_idx")
    for k in _SEQ_FIELDS:
        if not isinstance(obj.get(k), list):
            raise BadRecord(f"missing_field:{k}" if k not in obj else f"invalid_field:{k}")
    n = len(obj["token_ids"])
    toks, pos, mask = obj["token_ids"], obj["position_ids"], obj["loss_mask"]
    if len(pos) != n or len(mask) != n:
        raise BadRecord("length_mismatch:position_ids")
    if not all(is_int(x) for x in toks) or not all(is_int(x) for x in pos):
        raise BadRecord("invalid_field:token_ids")
    if not all(isinstance(x, bool) for x in mask):
        raise BadRecord("invalid_field:loss_mask")
    ls = float_array(obj["inference_logprobs"], n, "inference_logprobs")
    lt = float_array(obj["trainer_logprobs"], n, "trainer_logprobs")
    ent = None
    if obj.get("entropy") is not None:
        ent = float_array(obj["entropy"], n, "entropy")
        if (ent < -ENTROPY_SLACK).any():
            raise BadRecord("invalid_field:entropy")
    tok = np.asarray(toks, dtype=np.int64) if n else np.empty(0, np.int64)
    m = np.asarray(mask, dtype=bool) if n else np.empty(0, bool)
    p = np.asarray(pos, dtype=np.int64) if n else np.empty(0, np.int64)
    starts = [0, *np.flatnonzero(p[1:] == 0) + 1] if n else []
    env = obj.get("env_name") if isinstance(obj.get("env_name"), str) else ""
    out = []
    for j, a in enumerate(starts):
        b = starts[j + 1] if j + 1 < len(starts) else n
        sel = np.flatnonzero(m[a:b]) + a
        if sel.size == 0:
            continue
        aid = f"{step}-{rank}-{idx}-{j}"
        out.append(
            Transcript(
                aid,
                env,
                step,
                True,
                "full",
                [int(sel.size)],
                [False],
                [ls[sel]],
                [lt[sel]],
                [tok[sel]],
                None,
                None,
                ent=None if ent is None else [ent[sel]],
            )
        )
    return out


PRIME_RL = PrimeRlFormat()
