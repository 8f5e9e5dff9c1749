"""Measured quality of the health rules on a labelled, simulated scenario suite.

    python -m bench.detectors --seeds 101 102 103 104 105 --healthy 20 --steps 300
    python -m bench.detectors --format tinker ...   (each run written as that trainer does)
    python -m bench.detectors --cohorts --seeds 801 802 803 804   (unlike_peers: bench/cohorts.py)

For each seed the simulator writes one run per scenario (every finding code plus
`healthy`) and `--healthy` extra healthy runs of varied difficulty, group size, noise
and mode (half sync, half async). The in-process pipeline (`analyze_local`) turns the
run directories into step rows; the rows are folded through the health engine in step
order, with ``check_time`` called at each row's time (and, for runs that stopped,
at later times up to where the run would have ended) so `stalled` is judged too.

Reported per code (a run "fires" a code when the code reaches `firing`):

- recall: share of runs of that scenario where the code fired at or after onset;
- firing at or after onset: the same, also counting a run where the code was already
  firing when the onset step was folded (a firing that began early and held through
  the onset: the run showed the condition before its label said so);
- precision: of all runs where the code fired (after onset, in its own scenario; at
  any step elsewhere), the share that were runs of that scenario;
- lead: median steps from onset to the first firing;
- false alarms per healthy run: warning-or-critical firing episodes in healthy runs
  (all 300 steps), counted per run and averaged.

`--learn` scores the learning trainer's runs instead (`rlstream simulate --learn`):
per seed, `--per-scenario` runs of each pathological preset (lr_too_high, loophole,
too_hard, stale_sampler) and `--healthy` healthy runs (half sync, half async). Each
run is scored as the code its observed label expects (labels.json); a run whose
preset's pathology did not happen is not scored and is counted apart. A run whose
text showed the loophole in more than 2 % of a step's high-reward attempts (the
label's `also_expected`: every loophole run whose grader credited a wildcard answer)
is also a case of transcript_hack_flags, with that step as its onset.

`--agent` simulates the scripted runs in multi-turn agent mode (`rlstream simulate
--agent`): attempts of 4 to 8 generations around fixed tool-call turns.

With `--format NAME` each simulated run is rewritten the way that trainer writes it
(`rlstream simulate --format`, docs/formats.md) before the analysis; a code whose
figures never appear in its scenario's runs is reported as not evaluable, and so is a
scenario's code when the format's files never carry that scenario's cause
(`SCENARIO_EVIDENCE`: out_of_room's turn-limit endings, stale_rollouts' off-policy
limit or stale drops, metric_disagreement's bugged figures beside recomputed ones,
stalled's expected end).

Tune on one set of seeds, report on another (`--seeds`). The suite is sized to run in
about ten minutes on 2 idle cores with `--tokens 24 --groups 4 --group-size 4` (the
defaults). `--cache DIR` keeps each batch's analyzed rows, keyed by the batch and the
simulator source it depends on, so rule changes re-score in seconds and a changed
scenario re-simulates only the suites.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import pickle
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.scoring import (  # noqa: F401  (re-exported: the scoring is part of this bench)
    FALSE_ALARM_TARGET,
    RECALL_TARGET,
    RunResult,
    evaluate,
    report,
)
from rlstream.health import (
    CODES,
    DEFAULT_RULES,
    load_rules,
)
from rlstream.health.evaluable import config_figures, not_evaluable, row_figures
from rlstream.health.figures import extract
from rlstream.health.verdict import cfg_get
from rlstream.simulate.learn.observe import EXPECTED
from rlstream.simulate.trainers import FORMATS

LEARN_PATHOLOGIES = tuple(EXPECTED)

Rows = list[dict[str, Any]]


def _max_turns_seen(rows: Rows, config: dict[str, Any]) -> bool:
    return any("max_turns_rate" in extract(r) for r in rows)


def _staleness_seen(rows: Rows, config: dict[str, Any]) -> bool:
    limit = cfg_get(config, "training.max_steps_off_policy")
    return limit is not None or any("stale_rate" in extract(r) for r in rows)


def _end_known(rows: Rows, config: dict[str, Any]) -> bool:
    return cfg_get(config, "training.max_steps") is not None


def _bug_pair_seen(rows: Rows, config: dict[str, Any]) -> bool:
    return any(
        r.get(f"reported_{name}") is not None and r.get(name) is not None
        for r in rows
        for name in ("mismatch_kl", "reward_mean")
    )


SCENARIO_EVIDENCE: dict[str, tuple[Callable[[Rows, dict[str, Any]], bool], str]] = {
    "out_of_room": (
        _max_turns_seen,
        "its attempts run out of turns (truncation barely moves), and the format's files "
        "record no attempt's ending at max_turns",
    ),
    "stale_rollouts": (
        _staleness_seen,
        "its lag climbs to the off-policy limit, and the format's files name no limit "
        "and log no stale drops (prime-rl cancels a group past max_off_policy_steps in "
        "flight and never logs it)",
    ),
    "stalled": (
        _end_known,
        "the bench replays the files after the fact: a run that stopped writing is "
        "stalled only if its files say it should have gone on (training.max_steps or an "
        "end marker), and prime-rl's name neither (a watcher judges it by the clock)",
    ),
    "metric_disagreement": (
        _bug_pair_seen,
        "its trainer's bug is in the reported KL (a sign-flipped k1) and in the "
        "trained-only reward mean, and the format's files give no recomputed figure "
        "beside either",
    ),
}
"""Scenarios whose simulated cause shows in some figures only: on a format whose files
never carry them, the scenario's own code is not evaluable there (docs/health.md, "Per
format"), even where the rule could fire on other figures."""


@dataclass(frozen=True)
class Batch:
    seed: int
    kind: str  # "suite" | "healthy-sync" | "healthy-async" | "learn-<preset>[-async]"
    runs: int
    steps: int
    tokens: float
    groups: int
    group_size: int
    fmt: str = "loops"
    scenarios: tuple[str, ...] = ()
    """The suite's scenarios (empty: every one)."""
    agent: bool = False

    def key(self) -> str:
        """The batch and the simulator source it depends on: changing a scenario
        re-simulates the suites; healthy batches depend on every module but only on
        the healthy part of scenarios.py (everything before ``def build_knobs``);
        learning batches also on ``simulate/learn/``, scripted ones not."""
        h = hashlib.sha1(repr(self).encode())
        sim = Path(__file__).parents[1] / "rlstream" / "simulate"
        learn = self.kind.startswith("learn-")
        for src in sorted(sim.rglob("*.py") if learn else sim.glob("*.py")):
            text = src.read_text()
            if src.name == "scenarios.py" and self.kind != "suite":
                text = text.split("\ndef build_knobs")[0]
            h.update(text.encode())
        return h.hexdigest()[:16]


@dataclass
class RunData:
    run_id: str
    scenario: str
    onset: int | None
    config: dict[str, Any]
    finished: bool
    rows: list[dict[str, Any]]
    not_evaluable: frozenset[str] = frozenset()
    also: tuple[tuple[str, int], ...] = ()  # further expected codes, each with its onset


def _learn_scenario(preset: str, codes: tuple[str, ...]) -> str:
    """A learning run is scored as the code its observed label expects; a preset whose
    pathology did not happen is neither a case nor a healthy run."""
    if codes:
        return codes[0]
    return "healthy" if preset == "healthy" else f"unobserved:{preset}"


def _simulate_and_analyze(batch: Batch) -> list[RunData]:
    from rlstream.pipeline.local import analyze_local
    from rlstream.pipeline.state import is_finished
    from rlstream.simulate import SCENARIOS, SimConfig, simulate
    from rlstream.simulate.learn import simulate_learn

    if batch.kind.startswith("learn-"):
        preset = batch.kind.removeprefix("learn-").removesuffix("-async")
        mode = "async" if batch.kind.endswith("-async") else "sync"
        sim = None
    elif batch.kind == "suite":
        scen = batch.scenarios or SCENARIOS
        sim = SimConfig(
            runs=len(scen) * batch.runs,
            steps=batch.steps,
            scenarios=scen,
            seed=batch.seed,
            tokens=batch.tokens,
            groups=batch.groups,
            group_size=batch.group_size,
            agent=batch.agent,
        )
    else:
        sim = SimConfig(
            runs=batch.runs,
            steps=batch.steps,
            scenarios=("healthy",),
            seed=batch.seed + 7919 * (1 if batch.kind == "healthy-sync" else 2),
            tokens=batch.tokens,
            groups=batch.groups,
            group_size=batch.group_size,
            mode="async" if batch.kind == "healthy-async" else "sync",
            vary_healthy=True,
            agent=batch.agent,
        )
    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)

    def hook(state: Any, new: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
        rows[state.run_id].extend(new)
        return []

    with tempfile.TemporaryDirectory(prefix="rlsd-") as tmp:
        if sim is None:
            labels = simulate_learn(
                os.path.join(tmp, "runs"),
                preset,
                runs=batch.runs,
                steps=batch.steps,
                seed=batch.seed,
                mode=mode,
                agent=batch.agent,
            )
        else:
            labels = simulate(os.path.join(tmp, "runs"), sim)
        src = os.path.join(tmp, "runs")
        if batch.fmt != "loops":
            from rlstream.simulate.trainers import convert_tree

            convert_tree(Path(src), Path(tmp) / batch.fmt, batch.fmt)
            src = os.path.join(tmp, batch.fmt)
        states = analyze_local([src], os.path.join(tmp, "out"), health=hook)
    from rlstream.simulate.trainers import STEPS_FROM_ONE, reader_run_id

    by_id = {s.run_id: s for s in states}
    shift = 1 if batch.fmt in STEPS_FROM_ONE else 0  # these trainers count from 1
    out = []
    for lab in labels:
        rid = lab.run_id if batch.fmt == "loops" else reader_run_id(batch.fmt, lab.run)
        st = by_id[rid]
        rs = sorted(rows[rid], key=lambda r: r["step"])
        scenario = lab.scenario
        if sim is None:
            scenario = _learn_scenario(lab.scenario, lab.expected_codes)
        seen = config_figures(st.config).union(*(row_figures(r) for r in rs))
        onset = None if lab.onset_step is None else lab.onset_step + shift
        ne = set(not_evaluable(seen))
        if scenario in SCENARIO_EVIDENCE and not SCENARIO_EVIDENCE[scenario][0](rs, st.config):
            ne.add(scenario)
        also = tuple((c, o + shift) for c, o in lab.also)
        out.append(
            RunData(rid, scenario, onset, st.config, is_finished(st), rs, frozenset(ne), also)
        )  # fmt: skip
    return out


def load_batch(batch: Batch, cache: Path | None) -> list[RunData]:
    if cache is not None:
        path = cache / f"{batch.kind}-{batch.seed}-{batch.key()}.pkl"
        if path.exists():
            return pickle.loads(path.read_bytes())
    data = _simulate_and_analyze(batch)
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        path.write_bytes(pickle.dumps(data))
    return data


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if "--cohorts" in argv:  # unlike_peers on simulated cohorts: bench/cohorts.py
        from bench.cohorts import main as cohorts_main

        return cohorts_main([a for a in argv if a != "--cohorts"])
    p = argparse.ArgumentParser(
        prog="python -m bench.detectors", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[101, 102, 103, 104, 105])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--healthy", type=int, default=20, help="extra healthy runs per seed")
    p.add_argument("--per-scenario", type=int, default=1, help="runs of each scenario per seed")
    p.add_argument("--tokens", type=float, default=24.0)
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--rules", type=Path, default=None, help="rules TOML (default: built-in)")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--cache", type=Path, default=None, help="keep analyzed rows here")
    p.add_argument("--json", type=Path, default=None, help="also write the summary here")
    p.add_argument(
        "--learn",
        action="store_true",
        help="score the learning trainer's runs (simulate --learn presets) instead of the "
        "scripted simulator's: --per-scenario runs of each preset, --healthy healthy runs",
    )
    p.add_argument(
        "--format",
        default="loops",
        choices=FORMATS,
        help="write the simulated runs as this trainer does before analysing them",
    )
    p.add_argument(
        "--scenarios",
        nargs="+",
        default=(),
        metavar="NAME",
        help="only these scenarios in the suite, or with --learn these presets (default: every one)",
    )
    p.add_argument(
        "--agent",
        action="store_true",
        help="simulate in multi-turn agent mode (simulate --agent): every scripted run's "
        "attempts are 4-8 generations between fixed tool-call turns",
    )
    args = p.parse_args(argv)
    cfg = load_rules(args.rules) if args.rules else DEFAULT_RULES

    learn_presets = [p for p in LEARN_PATHOLOGIES if not args.scenarios or p in args.scenarios]
    batches = []
    for seed in args.seeds:
        common = dict(
            steps=args.steps,
            tokens=args.tokens,
            groups=args.groups,
            group_size=args.group_size,
            fmt=args.format,
            agent=args.agent,
        )
        half = args.healthy // 2
        if args.learn:
            batches.extend(
                Batch(seed, f"learn-{p}", args.per_scenario, **common) for p in learn_presets
            )
            if half:
                batches.append(Batch(seed, "learn-healthy", half, **common))
            if args.healthy - half:
                batches.append(Batch(seed, "learn-healthy-async", args.healthy - half, **common))
            continue
        scen = tuple(args.scenarios)
        batches.append(Batch(seed, "suite", args.per_scenario, **common, scenarios=scen))
        if half:
            batches.append(Batch(seed, "healthy-sync", half, **common))
        if args.healthy - half:
            batches.append(Batch(seed, "healthy-async", args.healthy - half, **common))
    t0 = time.time()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        loaded = list(pool.map(load_batch, batches, [args.cache] * len(batches)))
    t1 = time.time()
    runs = [r for b in loaded for r in b]
    results = [evaluate(r, cfg) for r in runs]
    t2 = time.time()
    # unlike_peers judges a run against its cohort: measured by --cohorts (bench/cohorts.py).
    per_run = tuple(c for c in CODES if c != "unlike_peers")
    learn_codes = (*(EXPECTED[p] for p in learn_presets), "transcript_hack_flags")
    codes = learn_codes if args.learn else per_run
    table, summary = report(results, args.steps, codes)
    print(
        ("learning trainer, " if args.learn else "scripted simulator, ")
        + ("agent mode, " if args.agent else "")
        + f"format {args.format}, seeds {args.seeds}: {len(runs)} runs of {args.steps} steps "
        f"(simulate + analyze {t1 - t0:.0f} s, rules {t2 - t1:.1f} s)\n"
    )
    print(table)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
