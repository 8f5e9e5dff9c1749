"""Finding runs: a run is a folder one of the formats recognises, anywhere under a ROOT.

A folder holding run.json is a Loops run (one stat); any other folder is listed once
and offered to the readers in `rlstream.formats.FORMATS` order (docs/formats.md).
With a forced format only that reader is asked. A folder recognised as a run is not
descended into.
"""

from __future__ import annotations

import logging
import os

from rlstream.formats import FORMATS
from rlstream.io.storage import Storage

RUN_JSON = "run.json"

log = logging.getLogger("rlstream")


def normalize_root(url: str) -> str:
    """Local roots become absolute paths so a run's URL is stable across restarts."""
    if "://" in url and not url.startswith("file://"):
        return url.rstrip("/")
    return os.path.abspath(url.removeprefix("file://"))


def detect_format(storage: Storage, url: str, forced: str | None = None) -> str | None:
    """The format of the run folder at `url`, or None when it is not a run."""
    from rlstream.pipeline.streams import listing, peeker

    if forced in (None, "loops") and storage.stat(Storage.join(url, RUN_JSON)) is not None:
        return "loops"
    if forced == "loops":
        return None
    names = listing(storage, url)
    if not names:
        return None
    peek = peeker(storage, url)
    for name, fmt in FORMATS.items():
        if name != "loops" and forced in (None, name) and fmt.detect(names, peek):
            return name
    return None


def find_runs(storage: Storage, root: str, max_depth: int = 4, fmt: str | None = None) -> list[str]:
    """URLs of every run folder under `root` (the root itself may be a run), sorted."""
    root = normalize_root(root)
    found: list[str] = []

    def walk(url: str, depth: int) -> None:
        if detect_format(storage, url, fmt) is not None:
            found.append(url)
            return
        if depth >= max_depth:
            return
        for name in storage.list_dirs(url):
            if not name.startswith((".", "_")):
                walk(Storage.join(url, name), depth + 1)

    walk(root, 0)
    if not found:
        what = f"no {fmt} runs" if fmt else "no runs"
        log.warning(
            "%s under %s (docs/formats.md says what each format's run folder holds)%s",
            what,
            root,
            "" if storage.exists(root) else "; that path does not exist",
        )
    return sorted(found)
