"""One place opens OUT, and the fleet view reads tables only.

Every `DeltaSink` of rlstream is built by `pipeline.commit.open_sink` (a pipeline's
commits, `status`, `report`, `serve`, `compact` and the OUT check alike), and no
module of `rlstream.fleet` reads a resume state or a run's transcripts: it imports
neither the resume-state codec nor anything that parses a run's files."""

from __future__ import annotations

import ast
from pathlib import Path

import rlstream

PKG = Path(rlstream.__file__).parent


def _calls(tree: ast.AST, name: str) -> int:
    return sum(
        isinstance(n, ast.Call)
        and (getattr(n.func, "id", None) == name or getattr(n.func, "attr", None) == name)
        for n in ast.walk(tree)
    )


def test_only_open_sink_builds_a_delta_sink():
    built = {
        str(p.relative_to(PKG)): k
        for p in sorted(PKG.rglob("*.py"))
        if (k := _calls(ast.parse(p.read_text()), "DeltaSink"))
    }
    assert built == {"pipeline/commit.py": 1}


def test_the_fleet_view_reads_no_resume_state_and_no_run_file():
    banned = ("rlstream.pipeline.resume", "rlstream.formats", "rlstream.pipeline.transcripts")
    for p in sorted((PKG / "fleet").glob("*.py")):
        tree = ast.parse(p.read_text())
        for n in ast.walk(tree):
            mods = (
                [a.name for a in n.names]
                if isinstance(n, ast.Import)
                else [n.module or ""]
                if isinstance(n, ast.ImportFrom)
                else []
            )
            assert not [m for m in mods if m.startswith(banned)], f"{p.name} imports {mods}"
        for attr in ("load_state", "peek_field", "decode_state"):
            assert not _calls(tree, attr), f"{p.name} calls {attr}"
