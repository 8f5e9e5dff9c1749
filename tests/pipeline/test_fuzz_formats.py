"""Fuzzed run files never crash the pipeline (docs/runtime.md, "What rlstream reads").

For every format (Loops, tinker, verl, prime-rl, TRL) one file of a small valid run is
replaced by a Hypothesis-made variant of itself: random bytes, a truncation, deep
nesting, huge numbers, wrong types, duplicated keys, NaN/Infinity. `analyze` must
return, OUT's tables must read back, and the run must end in rows or quarantine rows
(or, when the file made the folder no run at all, the command's clear error):
every quarantine row names a file and a reason, and a run left without a single step
row has quarantine rows saying why (nothing is dropped silently). Examples per format:
8, or RLSTREAM_FUZZ_EXAMPLES for a longer local run."""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlstream.config import PipelineConfig
from rlstream.errors import NoDataError
from rlstream.io.storage import Storage
from rlstream.pipeline.discover import find_runs
from rlstream.pipeline.local import analyze_local, runs_or_fail
from tests.outputs import out_sql
from tests.pipeline.runfiles import write_run

FORMATS = ("loops", "tinker", "verl", "prime-rl", "trl")

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """One small valid run of each format."""
    from tests.formats.trainer_runs import sim_runs, trainer_run

    base = tmp_path_factory.mktemp("fuzz")
    src = sim_runs(base / "sim", steps=2)
    out = {"loops": write_run(base / "loops", "run-a", steps=2)}
    for fmt in FORMATS[1:]:
        out[fmt] = trainer_run(src, base / fmt / "r", fmt)
    return out


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _mutate_json(data: bytes, rng: random.Random, how: str, value: object) -> bytes:
    """One line (or the whole file) of JSON changed as `how` says; bytes that are not
    JSON get the change appended as a line of their own."""
    lines = _lines(data)
    idx = [i for i, ln in enumerate(lines) if ln.strip()]
    i = rng.choice(idx) if idx else 0
    try:
        obj = json.loads(lines[i] if len(idx) > 1 else data)
        whole = len(idx) <= 1
    except (ValueError, IndexError):
        return data + b"\n" + json.dumps({"step": value}).encode() + b"\n"
    target = obj
    while isinstance(target, dict) and target and rng.random() < 0.6:
        k = rng.choice(sorted(target))
        if not isinstance(target[k], (dict, list)):
            break
        target = target[k] if isinstance(target[k], dict) else target
        if isinstance(target, list):
            break
    if not isinstance(target, dict) or not target:
        text = json.dumps(value)
    else:
        key = rng.choice(sorted(target))
        if how == "wrong_type":
            target[key] = value
            text = json.dumps(obj)
        else:
            token = {
                "huge": "1" + "0" * 400,
                "huge_float": "1e400",
                "nan": rng.choice(["NaN", "Infinity", "-Infinity"]),
            }.get(how)
            if how == "duplicate":
                text = json.dumps(obj)
                text = (
                    text[:-1] + f", {json.dumps(key)}: {json.dumps(value)}}}"
                    if text.endswith("}")
                    else text
                )
            else:
                target[key] = "@@TOKEN@@"
                text = json.dumps(obj).replace('"@@TOKEN@@"', token or "0")
    if whole:
        return text.encode()
    lines[i] = text.encode()
    return b"\n".join(lines)


@st.composite
def mutations(draw):
    how = draw(
        st.sampled_from(
            ["bytes", "truncate", "nesting", "huge", "huge_float", "wrong_type", "duplicate", "nan"]
        )
    )
    return how, draw(st.integers(0, 2**32)), draw(st.binary(max_size=200)), draw(JSON_VALUES)


def _apply(data: bytes, how: str, seed: int, blob: bytes, value: object) -> bytes:
    rng = random.Random(seed)
    if how == "bytes":
        return blob
    if how == "truncate":
        return data[: rng.randrange(len(data) + 1)]
    if how == "nesting":  # the whole file, or one more line
        depth = rng.choice([64, 1000, 100_000])
        nest = (
            b'{"a":' * depth + b"1" + b"}" * depth
            if rng.random() < 0.5
            else b"[" * depth + b"]" * depth
        )
        return nest if rng.random() < 0.5 else data + b"\n" + nest + b"\n"
    return _mutate_json(data, rng, how, value)


def _files(run: Path) -> list[Path]:
    return sorted(p for p in run.rglob("*") if p.is_file())


@pytest.mark.parametrize("fmt", FORMATS)
@settings(
    max_examples=int(os.environ.get("RLSTREAM_FUZZ_EXAMPLES", "8")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(pick=st.integers(0, 10**6), mutation=mutations())
def test_a_fuzzed_file_ends_in_rows_or_quarantine_rows(runs, fmt, pick, mutation):
    work = Path(tempfile.mkdtemp(prefix="fuzz-", dir=runs[fmt].parent.parent))
    try:
        root = work / "root"
        run = root / runs[fmt].name
        shutil.copytree(runs[fmt], run)
        files = _files(run)
        victim = files[pick % len(files)]
        victim.write_bytes(_apply(victim.read_bytes(), *mutation))
        out = work / "out"
        if not find_runs(Storage.for_url(str(root)), str(root)):
            # No longer a run of any format (e.g. its one telltale file emptied): the
            # command says so and exits non-zero, writing nothing.
            with pytest.raises(NoDataError):
                runs_or_fail([str(root)], str(out), PipelineConfig())
            return
        analyze_local([str(root)], str(out), PipelineConfig(fsync=False))  # must not raise
        steps = out_sql(out, "select count(*) from steps")[0][0] if (out / "steps").exists() else 0
        rows = (
            out_sql(out, "select file, reason from quarantine")
            if (out / "quarantine").exists()
            else []
        )
        assert steps + len(rows) > 0
        assert all(f and r for f, r in rows)
        if steps == 0:  # nothing read: the rows say why
            assert rows
    finally:
        shutil.rmtree(work, ignore_errors=True)
