"""Report time against history length: is `rlstream report` flat in it?

    python -m bench report [--quick] [--runs 6] [--reps 5] [--steps N] [--work DIR]

Simulates the same runs twice, with 200 and with 2,000 steps each (1 group of 2
attempts a step, 8-token completions, scenarios healthy, degenerate_outputs and
entropy_collapse, so example completions are read), analyses each into its own OUT
in this process (`analyze_local`, one maintenance pass at the end, as `analyze`
does), then times `render_report` on both OUTs, alternating, and prints the median
of each and their ratio (long / short), in wall time and in CPU time (all threads of
the process). Both OUTs are timed in the same process and
run, so the ratio holds however loaded the machine is. With `--work`, OUTs already
there are reused. With `--steps N`, a third OUT is timed too: the 2,000-step OUT with
its steps and cohort bands extended to N steps (`extend`).
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

SCENARIOS = ("healthy", "degenerate_outputs", "entropy_collapse")


def build(work: Path, runs: int, steps: int) -> Path:
    """OUT of `runs` simulated runs of `steps` steps (reused when complete)."""
    from rlstream.pipeline.local import analyze_local
    from rlstream.simulate import SimConfig, simulate

    src, out = work / f"report-src-{steps}", work / f"report-out-{steps}"
    if (out / "run_latest" / "_delta_log").exists():
        return out
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    cfg = SimConfig(runs=runs, steps=steps, groups=1, group_size=2, tokens=8, scenarios=SCENARIOS)
    simulate(src, cfg)
    analyze_local([str(src)], str(out))
    return out


def extend(work: Path, src: Path, steps: int) -> Path:
    """A copy of OUT `src` whose `steps` table holds `steps` steps per run: each run's
        rows repeated with their steps shifted, in run and step order (reused when there).
        Only the steps table is longer: the health rows, findings and transcripts are
        `src`'s. It stands for a history longer than is quick to simulate. A maintenance
    pass follows, as in a watch."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from deltalake import DeltaTable, write_deltalake

    from rlstream.fleet.read import out_sink
    from rlstream.sinks.maintain import maintain

    out = work / f"report-out-{steps}-extended"
    if (out / "steps" / "_delta_log").exists():
        return out
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(src, out)
    for table, key in (("steps", "run_id"), ("cohorts", "cohort")):
        t = DeltaTable(str(out / table)).to_pyarrow_table()
        n = pc.max(t["step"]).as_py() + 1
        i = t.schema.get_field_index("step")
        parts = [t.set_column(i, "step", pc.add(t["step"], k * n)) for k in range(-(-steps // n))]
        full = pa.concat_tables(parts).sort_by([(key, "ascending"), ("step", "ascending")])
        write_deltalake(str(out / table), full, mode="overwrite")
    maintain(out_sink(str(out)))  # as a watch's pass would: the step digest takes them in
    return out


def main(quick: bool, work: Path, runs: int = 6, reps: int = 5, longer: int | None = None) -> dict:
    from rlstream.fleet.report import render_report

    short, long = (20, 200) if quick else (200, 2000)
    if quick:
        runs, reps = 2, 1
    t0 = time.perf_counter()
    outs = {n: build(work, runs, n) for n in (short, long)}
    if longer:
        outs[longer] = extend(work, outs[long], longer)
    print(
        f"report: {runs} runs x {short} and x {long} steps built in {time.perf_counter() - t0:.0f} s"
    )
    times: dict[int, list[float]] = {n: [] for n in outs}
    cpu: dict[int, list[float]] = {n: [] for n in outs}
    for _ in range(reps):
        for n, out in outs.items():
            t, c = time.perf_counter(), time.process_time()
            html = render_report(str(out))
            times[n].append(time.perf_counter() - t)
            cpu[n].append(time.process_time() - c)
            assert html.count('<section class="run"') == runs
    med = {n: statistics.median(v) for n, v in times.items()}
    med_cpu = {n: statistics.median(v) for n, v in cpu.items()}
    res = {
        "runs": runs,
        "steps": [short, long],
        "report_s": {str(n): round(v, 4) for n, v in med.items()},
        "ratio": round(med[long] / med[short], 2),
        "ratios": {str(n): round(v / med[short], 2) for n, v in med.items()},
        "report_cpu_s": {str(n): round(v, 4) for n, v in med_cpu.items()},
        "cpu_ratio": round(med_cpu[long] / med_cpu[short], 2),
        "cpu_ratios": {str(n): round(v / med_cpu[short], 2) for n, v in med_cpu.items()},
    }
    print(f"report: median of {reps}: {res['report_s']} s; {long} / {short} steps: {res['ratio']}")
    print(
        f"report: CPU time (all threads), median of {reps}: {res['report_cpu_s']} s; "
        f"{long} / {short} steps: {res['cpu_ratio']}"
    )
    if longer:
        print(f"report: against {short} steps, wall {res['ratios']}, CPU {res['cpu_ratios']}")
    return res
