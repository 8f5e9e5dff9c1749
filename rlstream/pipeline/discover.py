"""Finding runs: a run is a folder one of the formats recognises, anywhere under a ROOT.

`check_root(storage, root)` says, before anything starts, whether a ROOT named on the
command line is a folder this process can list (an `InputError` naming the path and
what to do if not); `find_runs` then lists the runs under it. A folder holding run.json
is a Loops run (the run.json stats of one level go out together); any other folder is
listed once and offered to the readers in `rlstream.formats.FORMATS` order
(docs/formats.md). With a forced format only that reader is asked. A folder recognised
as a run is not descended into. A folder whose databases hold several runs (Trackio,
MLflow SQLite: the format's `members`) gives one run URL per member,
`<folder>/<db>#<run>` (`rlstream.pipeline.records`).
"""

from __future__ import annotations

import logging
import os

from rlstream.errors import InputError
from rlstream.formats import FORMATS
from rlstream.io.storage import Storage
from rlstream.pipeline.records import member_url

RUN_JSON = "run.json"

log = logging.getLogger("rlstream")


def normalize_root(url: str) -> str:
    """Local roots become absolute paths so a run's URL is stable across restarts."""
    if "://" in url and not url.startswith("file://"):
        return url.rstrip("/")
    return os.path.abspath(url.removeprefix("file://"))


def probe_folder(storage: Storage, url: str) -> str | None:
    """None if `url` is a folder (or, on object storage, a bucket or a prefix holding
    objects) that this process can list; otherwise why not, as a short phrase."""
    path = storage.strip(url).rstrip("/")
    if storage.is_local:
        if not os.path.exists(path):
            return "does not exist"
        if not os.path.isdir(path):
            return "is a file, not a folder"
        if not os.access(path, os.R_OK | os.X_OK):
            return "cannot be read (permission denied)"
        return None
    bucket = path.split("/", 1)[0]
    try:
        fs = storage.fs
        if not fs.exists(bucket):
            return f"does not exist (no bucket {bucket!r})"
        if bucket != path and not fs.isdir(path):
            return (
                "is a file, not a folder"
                if fs.exists(path)
                else "does not exist (no object under that prefix)"
            )
    except PermissionError as e:
        return f"cannot be read (access denied: {e})"
    except Exception as e:  # an endpoint or credentials problem: say what it was
        return f"cannot be read ({type(e).__name__}: {e})"
    return None


def check_root(storage: Storage, root: str, fmt: str | None = None) -> None:
    """Raise `InputError` unless `root` is a folder that can be listed for runs, or a
    run's file (`file_runs`)."""
    why = probe_folder(storage, normalize_root(root))
    if why == "is a file, not a folder":
        file_runs(storage, normalize_root(root), fmt)
        return
    if why is not None:
        raise InputError(
            f"ROOT {root} {why}: give a folder (or URL) holding run folders (docs/formats.md)"
        )


def detect_other(
    storage: Storage, url: str, forced: str | None = None, names: frozenset[str] | None = None
) -> str | None:
    """The non-Loops format of the folder at `url`, or None (Loops is found by its
    run.json, `detect_format` or `find_runs`). `names`: the folder's listing, when the
    caller has it."""
    if forced == "loops":
        return None
    return _detect(storage, url, forced, names)[0]


def _detect(
    storage: Storage, url: str, forced: str | None, names: frozenset[str] | None
) -> tuple[str | None, list[str] | None]:
    """(format of the folder, its store members or None when the folder is the run)."""
    from rlstream.pipeline.records import members, split_member
    from rlstream.pipeline.streams import listing, peeker

    m = split_member(url)
    if m is not None:  # a store member: its folder's format, if that holds the member
        name, found = _detect(storage, m[0], forced, None)
        return (name, None) if found and m[1] in found else (None, None)
    names = listing(storage, url) if names is None else names
    if not names:
        return None, None
    peek = peeker(storage, url)
    for name, fmt in FORMATS.items():
        if name != "loops" and forced in (None, name) and fmt.detect(names, peek):
            found = members(storage, url, fmt, names)
            if found is None or found:
                return name, found
    return None, None


def detect_run(
    storage: Storage, url: str, forced: str | None = None
) -> tuple[str | None, frozenset[str] | None]:
    """(format of the run folder at `url` or None when it is not a run, its listing).
    One listing answers both (it shows run.json), so adding a run costs no run.json
    stat and the reader's `identity` gets the same listing; with `forced` "loops",
    one run.json stat and no listing (None)."""
    from rlstream.pipeline.streams import listing

    if forced == "loops":
        return detect_format(storage, url, forced), None
    names = listing(storage, url)
    if forced is None and RUN_JSON in names:
        return "loops", names
    return detect_other(storage, url, forced, names), names


def detect_format(storage: Storage, url: str, forced: str | None = None) -> str | None:
    """The format of the run folder at `url`, or None when it is not a run."""
    if forced in (None, "loops") and storage.stat(Storage.join(url, RUN_JSON)) is not None:
        return "loops"
    return detect_other(storage, url, forced)


def _is_file(storage: Storage, url: str) -> bool:
    if storage.is_local:
        return os.path.isfile(storage.strip(url))
    return storage.stat(url) is not None


def file_runs(storage: Storage, path: str, fmt: str | None = None) -> list[str]:
    """The runs a single file named as ROOT stands for: the run folder it belongs to (a
    store's file: its own runs only). A file no format reads where it is raises
    `InputError`, naming the file name a format would read it under if there is one."""
    from rlstream.pipeline.records import members
    from rlstream.pipeline.streams import listing, peeker

    folder, _, name = path.rstrip("/").rpartition("/")
    loops = fmt in (None, "loops") and name != RUN_JSON
    if loops and storage.stat(Storage.join(folder, RUN_JSON)) is not None:
        return [folder]
    names, peek = listing(storage, folder), peeker(storage, folder)
    for f in FORMATS.values():  # the format whose run this file belongs to
        if f.name == "loops" or fmt not in (None, f.name) or not f.detect(names, peek):
            continue
        found = members(storage, folder, f, names)
        own = [m for m in found or () if m.split("#", 1)[0] == name]
        if found is None or own:
            return [member_url(folder, m) for m in own] or [folder]
    peeked: list[bool] = []

    def as_expected(_: str) -> bytes | None:  # the file's bytes under the name expected
        peeked.append(True)
        return peek(name)

    for f in FORMATS.values():
        for expected in getattr(f, "run_files", ()):
            peeked.clear()  # a format that decides by the name alone tells nothing
            ok = fmt in (None, f.name) and f.detect(frozenset({expected}), as_expected)
            if ok and peeked:
                raise InputError(
                    f"ROOT {path} is a file that looks like a {f.name} {expected}, but its "
                    f"folder is not a {f.name} run: put it in a folder of its own as "
                    f"{expected} (docs/formats.md)"
                )
    raise InputError(
        f"ROOT {path} is a file no format reads on its own: give the run folder holding "
        "it (docs/formats.md lists the files each format's run folder holds)"
    )


def _real(storage: Storage, url: str) -> str:
    """Where a folder really is (links resolved) locally; the URL itself elsewhere."""
    return os.path.realpath(storage.strip(url)) if storage.is_local else url


def _links_last(storage: Storage, url: str, names: list[str]) -> list[str]:
    """`names` with the links among them last, so a run reached both through a link and
    directly keeps its own folder's URL."""
    if not storage.is_local:
        return names
    return sorted(names, key=lambda n: os.path.islink(os.path.join(storage.strip(url), n)))


def find_runs(storage: Storage, root: str, max_depth: int = 4, fmt: str | None = None) -> list[str]:
    """URLs of every run folder under `root` (the root itself may be a run, or a run's
    file: `file_runs`), sorted."""
    root = normalize_root(root)
    if _is_file(storage, root):
        return file_runs(storage, root, fmt)
    found: list[str] = []

    # Level by level: the run.json stats of a level go out together (`stat_many`: one
    # round trip on an object store, not one per folder); a folder without run.json is
    # offered to the other formats' readers before it is descended into.
    level, depth = [root], 0
    seen = {_real(storage, root)}  # a folder reached through a link too is read once
    while level:
        if fmt in (None, "loops"):
            stats = storage.stat_many([Storage.join(u, RUN_JSON) for u in level])
        else:
            stats = [None] * len(level)
        deeper: list[str] = []
        for url, st in zip(level, stats, strict=True):
            if st is not None or (
                fmt in (None, "loops") and storage.unsafe(Storage.join(url, RUN_JSON))
            ):  # a linked run.json makes a run that is rejected, saying why
                found.append(url)
            elif (other := _detect(storage, url, fmt, None))[0] is not None:
                found += [member_url(url, m) for m in other[1]] if other[1] else [url]
            elif depth < max_depth:
                for name in _links_last(storage, url, storage.list_dirs(url)):
                    sub = Storage.join(url, name)
                    real = _real(storage, sub)
                    if name.startswith((".", "_")) or real in seen:
                        continue
                    seen.add(real)
                    deeper.append(sub)
        level, depth = deeper, depth + 1
    if not found:
        what = f"no {fmt} runs" if fmt else "no runs"
        log.warning(
            "%s under %s (docs/formats.md says what each format's run folder holds)%s",
            what,
            root,
            "" if storage.exists(root) else "; that path does not exist",
        )
    return sorted(found)
