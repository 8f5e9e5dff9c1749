"""The one-call open beneath a ROOT (io/localfs.py `_open_beneath`, openat2): it opens
a plain file under ROOT and refuses (None: the full checks then decide and say why)
every file the full checks refuse, so the two always agree."""

from __future__ import annotations

import os
import re

import pytest

from rlstream.errors import UnsafeFile
from rlstream.io import localfs


def _tree(tmp_path):
    root = tmp_path / "root"
    (root / "run" / "transcripts").mkdir(parents=True)
    (root / "run" / "transcripts" / "a.json").write_text("{}")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.json").write_text("SECRET")
    os.symlink(outside / "secret.json", root / "run" / "transcripts" / "link.json")
    os.symlink(outside, root / "run" / "linked")
    (root / "run" / "inner").mkdir()
    (root / "run" / "inner" / "b.json").write_text("{}")
    os.symlink("inner", root / "run" / "alias")  # a relative link that stays inside
    os.mkfifo(root / "run" / "fifo.json")
    return str(root.resolve()), root / "run"


@pytest.mark.skipif(localfs._SYSCALL is None, reason="no openat2 here")
def test_the_kernel_opens_plain_files_and_refuses_what_the_checks_refuse(tmp_path):
    root, run = _tree(tmp_path)
    roots = (root,)
    fd = localfs._open_beneath(str(run / "transcripts" / "a.json"), roots)
    assert fd is not None and os.read(fd, 10) == b"{}"
    os.close(fd)
    fd = localfs._open_beneath(str(run / "alias" / "b.json"), roots)
    assert fd is not None  # a link inside ROOT resolves beneath it
    os.close(fd)
    refused = {
        "transcripts/link.json": "a symbolic link",
        "linked/secret.json": re.escape(localfs.OUTSIDE),
    }
    for rel, why in refused.items():
        path = str(run / rel)
        assert localfs._open_beneath(path, roots) is None
        with pytest.raises(UnsafeFile, match=why):
            localfs.open_regular(path, roots)
    with pytest.raises(UnsafeFile, match="special file"):
        localfs.open_regular(str(run / "fifo.json"), roots)
    assert localfs._open_beneath(str(tmp_path / "outside" / "secret.json"), roots) is None
    with pytest.raises(FileNotFoundError):
        localfs.open_regular(str(run / "missing.json"), roots)
    assert localfs._SYSCALL is not None  # refusals never turn the one-call open off


def test_without_openat2_the_checks_alone_give_the_same_answers(tmp_path, monkeypatch):
    root, run = _tree(tmp_path)
    monkeypatch.setattr(localfs, "_SYSCALL", None)
    fd = localfs.open_regular(str(run / "transcripts" / "a.json"), (root,))
    assert os.read(fd, 10) == b"{}"
    os.close(fd)
    with pytest.raises(UnsafeFile, match="a symbolic link"):
        localfs.open_regular(str(run / "transcripts" / "link.json"), (root,))
    with pytest.raises(UnsafeFile, match=re.escape(localfs.OUTSIDE)):
        localfs.open_regular(str(run / "linked" / "secret.json"), (root,))
