"""A deterministic 'watch' for crash tests, in one process and without Ray.

    python -m tests.pipeline.staged SRC ROOT OUT STAGES [cohorts]

copies the finished runs under SRC into ROOT stage by stage (stage k adds every
record of the steps below 2k: transcripts first, then the JSONL lines, appended, so a
rerun after a crash appends only what is missing), and after each stage polls and
commits a `RunGroup` on OUT at the fixed clock 1000 + k. Then a final poll and
commit. With RLSTREAM_FAILPOINT set it dies where told (rlstream.pipeline.failpoint);
run again with the same arguments it resumes from OUT. With `cohorts`, the group
runs the health hooks with every run in one cohort (bands and `unlike_peers`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from rlstream.config import PipelineConfig
from rlstream.pipeline.local import build_group, local_executor


def _append_missing(path: Path, data: bytes) -> None:
    have = path.stat().st_size if path.exists() else 0
    if have < len(data):
        with open(path, "ab") as f:
            f.write(data[have:])


def stage(src: Path, root: Path, upto: int) -> None:
    for run in sorted(p for p in src.iterdir() if p.is_dir()):
        dst = root / run.name
        (dst / "transcripts").mkdir(parents=True, exist_ok=True)
        if not (dst / "run.json").exists():
            shutil.copyfile(run / "run.json", dst / "run.json")
        for t in sorted((run / "transcripts").iterdir()):
            if json.loads(t.read_bytes())["step"] < upto and not (dst / t.name).exists():
                shutil.copyfile(t, dst / "transcripts" / t.name)
        for name in ("rollouts.jsonl", "steps.jsonl"):
            lines = (run / name).read_bytes().splitlines(keepends=True)
            keep = [ln for ln in lines if json.loads(ln).get("step", -1) < upto]
            _append_missing(dst / name, b"".join(keep))


def main(src: str, root: str, out: str, stages: str, *opts: str) -> None:
    cfg = PipelineConfig(commit_threads=1)
    hooks = {}
    if "cohorts" in opts:
        from rlstream.health import DEFAULT_RULES
        from rlstream.pipeline.verdicts import health_hooks

        hooks = health_hooks(DEFAULT_RULES, (("all", "*"),))
    group = None
    for k in range(1, int(stages) + 1):
        stage(Path(src), Path(root), 2 * k)
        if group is None:
            group = build_group([root], out, cfg, **hooks)
        for url in sorted(p.as_posix() for p in Path(root).iterdir()):
            group.add_run(url)
        group.poll(local_executor(group.storage), now=1000.0 + k)
        group.commit(now=1000.0 + k)
    assert group is not None
    group.poll(local_executor(group.storage), now=2000.0, final=True)
    group.commit(now=2000.0)


REPO = Path(__file__).resolve().parents[2]


def run_staged(
    src: Path,
    root: Path,
    out: Path,
    failpoint: str | None = None,
    stages: int = 4,
    cohorts: bool = False,
) -> int:
    """This module as a subprocess (dying at `failpoint`, if given); its exit code."""
    env = {k: v for k, v in os.environ.items() if k != "RLSTREAM_FAILPOINT"}
    if failpoint:
        env["RLSTREAM_FAILPOINT"] = failpoint
    cmd = [sys.executable, "-m", "tests.pipeline.staged", str(src), str(root), str(out)]
    cmd += [str(stages), *(["cohorts"] if cohorts else [])]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, timeout=300).returncode


if __name__ == "__main__":
    main(*sys.argv[1:])
