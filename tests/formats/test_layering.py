"""`rlstream.formats` parses and nothing else: no pipeline, no metric kernels, no I/O
libraries; every module states its contract in a docstring and stays under 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import rlstream.formats

PKG_DIR = Path(rlstream.formats.__file__).parent
ALLOWED = ("rlstream.formats",)
FORBIDDEN = {"ray", "fsspec", "s3fs", "boto3"}


def test_readers_import_only_formats_modules():
    files = sorted(PKG_DIR.glob("*.py"))
    assert {f.name for f in files} >= {"base.py", "loops.py", "tinker.py", "verl.py", "trl.py"}
    for path in files:
        text = path.read_text()
        tree = ast.parse(text, filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"
                if name.startswith("rlstream"):
                    assert name.startswith(ALLOWED), f"{path.name} imports {name}"
        assert ast.get_docstring(tree), f"{path.name} lacks a contract docstring"
        assert len(text.splitlines()) <= 400, f"{path.name} is over 400 lines"


def test_the_pipeline_names_no_format():
    """Every format, Loops included, goes through `Format`: the pipeline reads what a
    format can do from its attributes, never from its name (no string constant in
    rlstream/pipeline is a format's name)."""
    from rlstream.formats import FORMATS

    names = set(FORMATS)
    found = []
    for path in sorted((PKG_DIR.parent / "pipeline").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{path.name}:{node.lineno}: {node.value!r}")
    assert found == []
    assert len(names) == 10 and "loops" in names  # the check looks for real names
