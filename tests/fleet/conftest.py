"""A small analyzed fleet for the fleet-view tests, with one hostile run.

`fleet_out` simulates four runs (healthy, entropy_collapse, mismatch_kl_rising,
degenerate_outputs; the same plans as `rlstream demo`'s first four), rewrites the
degenerate one so that its run_id, completion texts, metadata labels and a discard
reason carry HTML and script, and analyzes them in-process (no Ray) into OUT.
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
