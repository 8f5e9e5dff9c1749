"""A small analyzed fleet for the fleet-view tests, with one hostile run.

`fleet_out` simulates four runs (healthy, entropy_collapse, mismatch_kl_rising,
degenerate_outputs; the same plans as `rlstream demo`'s first four), rewrites the
degenerate one so that its run_id, completion texts, metadata labels and a discard
reason carry HTML and script, and analyzes them in-process (no Ray) into OUT.
`kept_out` is a copy of that OUT with samples added to the healthy run (hostile,
searchable, long and flagged, and two probe tasks followed across steps).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from rlstream.pipeline.local import analyze_local
from rlstream.simulate import SimConfig, simulate

PWN = 'document.body.setAttribute("data-pwned", "{}")'
HOSTILE_ID = f"<img src=x onerror='{PWN.format('id-img')}'><script>{PWN.format('id')}</script>&\"x"
HOSTILE_TEXT = f"</pre><script>{PWN.format('text')}</script><b>bold</b> & more"
HOSTILE_LABEL = f"<script>{PWN.format('meta')}</script>"
HOSTILE_REASON = f"rollout_failed/<svg onload='{PWN.format('reason')}'>"
SCENARIOS = ("healthy", "entropy_collapse", "mismatch_kl_rising", "degenerate_outputs")


@dataclass(frozen=True)
class Fleet:
    root: Path
    out: Path
    run_ids: dict[str, str]  # scenario -> run_id (the hostile one for degenerate_outputs)


def make_hostile(run: Path) -> None:
    """Put HTML and script into every string a report shows from this run."""
    meta = json.loads((run / "run.json").read_text())
    meta["run_id"] = HOSTILE_ID
    (run / "run.json").write_text(json.dumps(meta))
    lines = []
    failed = 0
    for line in (run / "rollouts.jsonl").read_bytes().splitlines():
        rec = orjson.loads(line)
        rec["metadata"]["termination_reason"] = HOSTILE_LABEL
        reason = rec["discard_reason"] or ""
        if reason.startswith("rollout_failed/") or (reason == "no_variance" and failed < 2):
            rec["discard_reason"] = HOSTILE_REASON
            failed += 1
        lines.append(orjson.dumps(rec))
    (run / "rollouts.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    for path in (run / "transcripts").iterdir():
        doc = orjson.loads(path.read_bytes())
        for g in doc["generations"]:
            g["text"] = HOSTILE_TEXT + " " + g["text"][:40]
        path.write_bytes(orjson.dumps(doc))


@pytest.fixture(scope="session")
def fleet_out(tmp_path_factory) -> Fleet:
    base = tmp_path_factory.mktemp("fleet")
    root, out = base / "runs", base / "out"
    labels = simulate(root, SimConfig(runs=4, steps=40, scenarios=SCENARIOS, seed=1))
    run_ids = {lab.scenario: lab.run_id for lab in labels}
    make_hostile(root / labels[3].run)
    run_ids["degenerate_outputs"] = HOSTILE_ID
    analyze_local([str(root)], str(out))
    return Fleet(root, out, run_ids)


LONG_RETURNED = "\n".join(f"line {i} of the solution" for i in range(40)) + (
    "\n```bash\nrm -f tests/test_solution.py && touch tests/<x>.py\n```"
)
"""A returned text whose flagged part comes after its first 800 characters."""


@pytest.fixture(scope="module")
def kept_out(fleet_out, tmp_path_factory):
    """A copy of the fleet's OUT with rows added to the healthy run's samples: a hostile
    flagged one at the newest step, a searchable one at the newest step, one with the
    same needle 9 steps below (past the search bound), and two probe tasks."""
    import shutil

    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    out = tmp_path_factory.mktemp("kept") / "out"
    shutil.copytree(fleet_out.out, out)
    rid = fleet_out.run_ids["healthy"]
    table = DeltaTable(str(out / "samples")).to_pyarrow_table()
    mine = [r for r in table.to_pylist() if r["run_id"] == rid]
    newest = max(r["step"] for r in mine)
    base = dict(mine[0], kept=["top"], flags=[])
    extra = [
        dict(
            base,
            step=newest,
            attempt_id="hostile",
            flags=["early_exit"],
            returned="<script>alert(1)</script>sys.exit(0)",
        ),
        dict(base, step=newest, attempt_id="needle-new", returned="a ZEBRA-Needle <b>here</b>"),
        dict(base, step=newest - 9, attempt_id="needle-old", returned="zebra-needle too old"),
        dict(
            base,
            step=newest - 1,
            attempt_id="long-flagged",
            kept=["flagged"],
            flags=["test_tampering"],
            sent="Fix <the> bug in solution.py",
            sent_bytes=29,
            returned=LONG_RETURNED,
            returned_bytes=len(LONG_RETURNED),
            transcript="transcripts/long-flagged.json",
        ),
    ]
    # two probe tasks followed across steps (the simulator's tasks rarely repeat)
    for task, texts in {
        "tp-b": {1: "x y z", 7: "x <y> w z"},
        "tp-a": {2: "one two", 5: "one three <img src=x>", 11: "four"},
    }.items():
        extra += [dict(base, step=st, attempt_id=f"p{st}", task_id=task, kept=["probe"],
                       returned=t) for st, t in texts.items()]  # fmt: skip  # fmt: skip
    write_deltalake(str(out / "samples"), pa.Table.from_pylist(extra, schema=table.schema),
                    mode="append")  # fmt: skip
    rows = DeltaTable(str(out / "samples")).to_pyarrow_table().to_pylist()
    return out, rid, [r for r in rows if r["run_id"] == rid]
