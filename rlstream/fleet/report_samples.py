"""The report's Samples section of a run: what its kept samples say (OUT/samples).

`run_samples(run, out)` reads a run's kept samples and the steps where transcript
scanners flagged at least the rule's share of the high-reward attempts (`flag_steps`:
the report and the live run page mark those on the reward chart); `samples_section(rows, flag_steps)` renders,
for one run: those steps; the newest steps' kept samples, flagged ones first, then top
and bottom by reward; and one probe task's output at its first and its newest step
side by side, with a word diff. A run without kept samples says why (its files record
no text or no rewards, or no step with text is final yet). Every string from run
data goes through `html.escape`; nothing here emits a script.
"""

from __future__ import annotations

from html import escape
from typing import Any

from rlstream.fleet.sample_diff import probe_section
from rlstream.health.thresholds_policy import TranscriptHackFlags

FLAG_SHARE = TranscriptHackFlags().share_min
"""A step is marked on the reward chart when scanners flag at least this share of its
high-reward attempts (the default `[transcript_hack_flags] share_min`)."""

NEWEST_STEPS = 2
"""Steps whose kept samples are shown (the newest)."""

_FLAG = "background:#fde0dc;color:#8a1c12;font-weight:bold;padding:0 3px"
_PRE = "white-space:pre-wrap;max-height:16em;overflow:auto;background:#f6f6f6;padding:4px"


def _e(v: Any) -> str:
    return escape("" if v is None else str(v), quote=True)


def _order(r: dict[str, Any]) -> tuple[Any, ...]:
    rank = {"top": 0, "bottom": 1, "probe": 2}
    return (not r["flags"], min(rank.get(k, 3) for k in r["kept"] or ["?"]), r["attempt_id"])


def _sample(r: dict[str, Any]) -> str:
    reward = "-" if r["reward"] is None else f"{r['reward']:.3f}"
    flags = "".join(f' <span style="{_FLAG}">{_e(f)}</span>' for f in r["flags"])
    head = (
        f"step {_e(r['step'])} · attempt {_e(r['attempt_id'])} · reward {_e(reward)} · "
        f"kept {_e(', '.join(r['kept']))} · task {_e(r['task_id'] or '-')}{flags}"
    )
    sent = (
        f'<div class="sub">sent ({_e(r["sent_bytes"])} bytes)</div>'
        f'<pre style="{_PRE}">{_e(r["sent"])}</pre>'
        if r["sent"]
        else ""
    )
    return (
        f'<details class="sample"{" open" if r["flags"] else ""}><summary>{head}</summary>'
        f"{sent}"
        f'<div class="sub">returned ({_e(r["returned_bytes"])} bytes) · '
        f"transcript {_e(r['transcript'] or '-')}</div>"
        f'<pre style="{_PRE}">{_e(r["returned"])}</pre></details>'
    )


def samples_section(
    rows: list[dict[str, Any]], flag_steps: list[int], not_evaluable: bool = True
) -> str:
    """The Samples section of one run (`rows`: its OUT/samples rows; `not_evaluable`:
    its run_health lists transcript_hack_flags as not evaluable)."""
    head = "<h3>Samples</h3>"
    if not rows:
        why = (
            "this run's files record no text, or no reward that tells high-reward "
            "attempts, so transcript_hack_flags cannot be judged"
            if not_evaluable
            else "no final step with text yet"
        )
        return head + f'<p class="sub">No kept samples: {why} (docs/schema.md, samples).</p>'
    rewarded = any(r["reward"] is not None for r in rows)
    if not rewarded:  # nothing tells a high-reward attempt: no "none flagged" claim
        flagged = (
            '<p class="sub">No kept sample has a reward: the transcripts carry none, so '
            "no sample is ranked (only flagged and probe ones are kept) and no share of "
            "high-reward attempts is known (transcript_hack_flags cannot be judged).</p>"
        )
    elif flag_steps:
        flagged = (
            f'<p class="sub">Scanners flagged the high-reward attempts at steps '
            f"{_e(_ranges(flag_steps))} (`rlstream samples OUT RUN --flagged`).</p>"
        )
    else:
        flagged = '<p class="sub">No step\'s high-reward attempts were flagged by a scanner.</p>'

    steps = sorted({r["step"] for r in rows})[-NEWEST_STEPS:]
    body = "".join(
        f"<h4>Step {_e(s)}</h4>"
        + "".join(_sample(r) for r in sorted((r for r in rows if r["step"] == s), key=_order))
        for s in reversed(steps)
    )
    return f'<div class="samples">{head}{flagged}{body}{probe_section(rows, inline=True)}</div>'


def _ranges(steps: list[int]) -> str:
    out: list[str] = []
    for s in sorted(set(steps)):
        if out and out[-1].split("-")[-1] == str(s - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{s}"
        else:
            out.append(str(s))
    return ", ".join(out)


def flag_steps(
    run_id: str, out: str, storage_options: dict[str, Any] | None, share: float = FLAG_SHARE
) -> list[int]:
    """The steps of a run where scanners flagged at least `share` of the high-reward
    attempts (`steps.flagged_high_frac`), in step order: the reward chart's flag marks
    in the report and on the live run page. Only those steps are materialised: the
    run and share filter is pushed into the scan."""
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    from rlstream.fleet.read import out_sink

    sink = out_sink(out, storage_options)
    if not sink.exists("steps"):
        return []
    ds = sink.dataset(DeltaTable(sink.uri("steps"), storage_options=sink.options))
    if "flagged_high_frac" not in ds.schema.names:
        return []
    flt = (pc.field("run_id") == run_id) & (pc.field("flagged_high_frac") >= share)
    return sorted(set(ds.to_table(columns=["step"], filter=flt).column("step").to_pylist()))


def run_samples(
    run_id: str, out: str, storage_options: dict[str, Any] | None, share: float = FLAG_SHARE
) -> tuple[list[dict[str, Any]], list[int]]:
    """One run's OUT/samples rows, and the steps where scanners flagged at least `share`
    of the high-reward attempts (`flag_steps`; read only when the run has samples)."""
    from rlstream.fleet.read import read_table

    t = read_table(out, "samples", storage_options, where=("run_id", run_id))
    rows = t.to_pylist() if t.num_rows else []
    return rows, flag_steps(run_id, out, storage_options, share) if rows else []
