"""Kernel throughput: tokens per CPU second of the per-unit work of `analyze`.

`python -m bench.kernel ROOT TOKENS [--json FILE]` runs `analyze_local` on ROOT (into a
temp OUT) with the executor's `execute` (read a unit's files, decode, aggregate: what a
worker does with a unit) timed by process CPU time around each call, and prints
`TOKENS / those CPU seconds`. Imports, planning, folding, health rules and commits are
left out. Run as its own process, so that with PYTHONPATH set to another revision's
package first (`bench batch --baseline DIR`) it measures that revision.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def measure(root: str, tokens: float) -> dict[str, float]:
    import rlstream.pipeline.local as local
    from rlstream.pipeline.local import analyze_local

    spent = [0.0, 0]
    inner = local.execute

    def timed(unit, storage):
        t = time.process_time()
        try:
            return inner(unit, storage)
        finally:
            spent[0] += time.process_time() - t
            spent[1] += 1

    local.execute = timed
    out = tempfile.mkdtemp(prefix="rls-kernel-")
    try:
        analyze_local([root], out)
    finally:
        local.execute = inner
        shutil.rmtree(out, ignore_errors=True)
    return {"cpu_s": spent[0], "units": spent[1], "tokens_per_cpu_s": tokens / spent[0]}


def figures(root: Path, tokens: float, env: dict, baseline: str | None = None) -> dict:
    """The kernel figure of this tree and, with `baseline`, of that one (each in its
    own process, PYTHONPATH first to the revision measured); printed and returned."""
    out: dict = {}
    for name, path in (("rlstream", None), ("before", baseline)):
        if name == "before" and not path:
            continue
        run_env = {**env, "PYTHONPATH": f"{path}:{env['PYTHONPATH']}"} if path else env
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            cmd = [sys.executable, "-m", "bench.kernel", str(root), str(tokens), "--json", f.name]
            subprocess.run(cmd, env=run_env, check=True, capture_output=True)
            out[name] = json.loads(Path(f.name).read_text())
    said = [f"{n} {r['tokens_per_cpu_s'] / 1e6:.2f} M" for n, r in out.items()]
    ratio = ""
    if "before" in out:
        x = out["rlstream"]["tokens_per_cpu_s"] / out["before"]["tokens_per_cpu_s"]
        out["ratio_vs_before"] = x
        ratio = f"; {x:.2f}x the baseline's (target >= 2x)"
    print(f"  kernel tokens per CPU s (units' work, bench/kernel.py): {', '.join(said)}{ratio}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root")
    ap.add_argument("tokens", type=float)
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args()
    r = measure(args.root, args.tokens)
    print(
        f"kernel: {r['tokens_per_cpu_s'] / 1e6:.2f} M tokens per CPU s "
        f"({r['cpu_s']:.2f} CPU s in {r['units']} units)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f)


if __name__ == "__main__":
    main()
