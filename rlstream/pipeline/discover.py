"""Finding runs: a run is a folder one of the formats recognises, anywhere under a ROOT.

`check_root(storage, root)` says, before anything starts, whether a ROOT named on the
command line is a folder this process can list (an `InputError` naming the path and
what to do if not); `find_runs` then lists the runs under it. A folder holding a
format's identity file (`Format.run_file`: Loops' run.json) is a run of that format
(the stats of one level go out together); any other folder is listed once and offered
to the other readers in `rlstream.formats.FORMATS` order (docs/formats.md). With a forced format only that reader is asked. A folder recognised
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


def _marked(forced: str | None) -> list[tuple[str, str]]:
    """(format, its `run_file`) of the formats found by one file's stat, in detection
    order, among those `forced` allows."""
    return [
        (name, f.run_file)
        for name, f in FORMATS.items()
        if getattr(f, "run_file", None) and forced in (None, name)
    ]


def _detect(
    storage: Storage,
    url: str,
    forced: str | None,
    names: frozenset[str] | None,
    stat_too: bool = True,
) -> tuple[str | None, list[str] | None]:
    """(format of the folder from its listing, its store members or None when the
    folder is the run). Without `stat_too`, formats found by their `run_file` are not
    asked (the caller stat'ed their files)."""
    from rlstream.pipeline.records import members, split_member
    from rlstream.pipeline.streams import listing, peeker

    m = split_member(url)
    if m is not None:  # a store member: its folder's format, if that holds the member
        name, found = _detect(storage, m[0], forced, None, stat_too)
        return (name, None) if found and m[1] in found else (None, None)
    names = listing(storage, url) if names is None else names
    if not names:
        return None, None
    peek = peeker(storage, url)
    for name, fmt in FORMATS.items():
        if not stat_too and getattr(fmt, "run_file", None):
            continue
        if forced in (None, name) and fmt.detect(names, peek):
            found = members(storage, url, fmt, names)
            if found is None or found:
                return name, found
    return None, None


def detect_run(
    storage: Storage, url: str, forced: str | None = None, listed: bool = True
) -> tuple[str | None, frozenset[str] | None]:
    """(format of the run folder at `url` or None when it is not a run, its listing).
    One listing answers both (it shows an identity file such as run.json), so adding a
    run costs no stat and the reader's `identity` gets the same listing. With a forced
    format found by its `run_file`, or without `listed` when a `run_file` stat finds
    the run: that stat and no listing (None)."""
    from rlstream.pipeline.streams import listing

    marked = _marked(forced)
    name = _stat_marked(storage, url, marked) if forced is not None or not listed else None
    if name is not None or (forced is not None and marked):
        return name, None
    names = listing(storage, url)
    return _detect(storage, url, forced, names)[0], names


def _stat_marked(storage: Storage, url: str, marked: list[tuple[str, str]]) -> str | None:
    for name, run_file in marked:
        if storage.stat(Storage.join(url, run_file)) is not None:
            return name
    return None


def detect_format(storage: Storage, url: str, forced: str | None = None) -> str | None:
    """The format of the run folder at `url`, or None when it is not a run."""
    marked = _marked(forced)
    if (name := _stat_marked(storage, url, marked)) is not None:
        return name
    if forced is not None and marked:
        return None
    return _detect(storage, url, forced, None, stat_too=False)[0]


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
    for _, run_file in _marked(fmt):
        if name != run_file and storage.stat(Storage.join(folder, run_file)) is not None:
            return [folder]
    names, peek = listing(storage, folder), peeker(storage, folder)
    for f in FORMATS.values():  # the format whose run this file belongs to
        if getattr(f, "run_file", None) or fmt not in (None, f.name):
            continue
        if not f.detect(names, peek):
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

    # Level by level: the identity-file stats of a level (run.json) go out together
    # (`stat_many`: one round trip on an object store, not one per folder); a folder
    # without one is offered to the other formats' readers before it is descended into.
    level, depth = [root], 0
    seen = {_real(storage, root)}  # a folder reached through a link too is read once
    marked = [run_file for _, run_file in _marked(fmt)]
    while level:
        stats = [storage.stat_many([Storage.join(u, f) for u in level]) for f in marked]
        deeper: list[str] = []
        for i, url in enumerate(level):
            if any(st[i] is not None for st in stats) or any(
                storage.unsafe(Storage.join(url, f)) for f in marked
            ):  # a linked run.json makes a run that is rejected, saying why
                found.append(url)
            elif (other := _detect(storage, url, fmt, None, stat_too=False))[0] is not None:
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
