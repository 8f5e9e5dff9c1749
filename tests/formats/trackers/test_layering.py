"""`rlstream.formats.trackers` parses and nothing else: it imports only rlstream.formats
modules, no storage or Ray libraries (sqlite3 is the one way into a SQLite file), and
each module has a contract docstring and stays under 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import rlstream.formats.trackers

PKG = Path(rlstream.formats.trackers.__file__).parent
FORBIDDEN = {
    "ray",
    "fsspec",
    "s3fs",
    "boto3",
    "wandb",
    "tensorboard",
    "tensorboardX",
    "swanlab",
    "trackio",
    "mlflow",
}


def test_tracker_readers_are_pure_parsers():
    files = sorted(PKG.glob("*.py"))
    assert {f.name for f in files} >= {
        "tensorboard.py",
        "wandb.py",
        "swanlab.py",
        "sqlite_stores.py",
        "mlflow_files.py",
    }
    for path in files:
        tree = ast.parse(path.read_text())
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
                    assert name.startswith("rlstream.formats"), f"{path.name} imports {name}"
        assert ast.get_docstring(tree), f"{path.name} lacks a contract docstring"
        assert len(path.read_text().splitlines()) <= 400
