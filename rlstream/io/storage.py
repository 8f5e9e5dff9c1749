"""Storage: a tiny, pickle-safe protocol over local disk and fsspec filesystems.

`Storage` keeps configuration only (the URL scheme and fsspec storage options) and opens
its filesystem lazily in whichever process uses it, so it can be sent to Ray actors.
Local paths use `os` directly (cheaper than fsspec's local layer, and it exposes the
inode that cursors use to detect replacement). Object stores go through fsspec; for S3
listings are never cached, because a grown object must show its new size and ETag.

Paths given to the methods are full URLs or local paths, as returned by `join`.

Round trips: on an object store each request waits a first-byte latency (10-50 ms on
S3), so the batch methods keep many requests in flight on fsspec's event loop:
`read_many` (whole files, yielded in the order given, bytes in flight bounded by
`read_inflight_bytes`, see `rlstream.io.window`) and `stat_many`. On local disk they
are plain loops (a read there costs microseconds and threads would only add work).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import stat as statmod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlstream.errors import FileTooLarge, StorageError, UnsafeFile
from rlstream.io.localfs import (
    OUTSIDE,
    dotdot,
    inside,
    link_inside,
    open_regular,
    read_whole,
    write_atomic_local,
)
from rlstream.io.s3 import POOL_CONNECTIONS, list_after, list_stats, object_size, open_s3
from rlstream.io.s3read import read_many_s3

READ_CONCURRENCY = POOL_CONNECTIONS
"""Requests in flight per process in `read_many` and `stat_many`: the size of the S3
connection pool (aiobotocore's default, 10, would queue the rest)."""

DEFAULT_INFLIGHT_BYTES = 64 << 20
"""`read_many`'s default bound on bytes in flight (PipelineConfig.read_inflight_bytes)."""

DEFAULT_MAX_FILE_BYTES = 64 << 20
"""Largest whole file `read` takes (PipelineConfig.max_file_bytes)."""


@dataclass(frozen=True, slots=True)
class FileStat:
    """What identifies one version of a file: its size plus an ETag, mtime or inode."""

    size: int
    etag: str | None = None
    mtime: float | None = None
    inode: int | None = None


def _file_stat(info: dict[str, Any]) -> FileStat | None:
    """A FileStat from an fsspec `info` dict (None for a directory)."""
    if info.get("type") == "directory":
        return None
    etag = info.get("ETag") or info.get("etag")
    return FileStat(size=int(info["size"]), etag=str(etag).strip('"') if etag else None)


def split_protocol(url: str) -> tuple[str, str]:
    """Return (protocol, rest); local paths (and file://) give ("file", path)."""
    if "://" in url:
        proto, rest = url.split("://", 1)
        if proto in ("file", "local"):
            return "file", rest
        return proto, rest
    return "file", url


@dataclass(frozen=True)
class Storage:
    """Read and write files under one protocol. Pickle-safe: holds no connection."""

    protocol: str = "file"
    options: tuple[tuple[str, Any], ...] = ()
    read_inflight_bytes: int = DEFAULT_INFLIGHT_BYTES
    """Bound on the bytes `read_many` holds in flight (read ahead, not yet consumed)."""
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    """Largest whole file `read` and `read_many` take on local disk (`FileTooLarge`
    beyond it, told from the open file's size before any byte is read; on S3 from the
    listing's size, before the GET)."""
    roots: tuple[str, ...] = ()
    """Real locations of the local ROOTs read through this storage: a file whose real
    location lies outside all of them is not opened (`rlstream.io.localfs`). Empty: no
    such check (OUT's storage)."""
    _fs: Any = field(default=None, compare=False, repr=False)

    @staticmethod
    def for_url(
        url: str,
        options: dict[str, Any] | None = None,
        read_inflight_bytes: int = DEFAULT_INFLIGHT_BYTES,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        roots: tuple[str, ...] = (),
    ) -> Storage:
        proto, _ = split_protocol(url)
        opts = tuple(sorted((options or {}).items()))
        return Storage(proto, opts, read_inflight_bytes, max_file_bytes, roots)

    def __getstate__(self) -> dict[str, Any]:
        return {
            "protocol": self.protocol,
            "options": self.options,
            "read_inflight_bytes": self.read_inflight_bytes,
            "max_file_bytes": self.max_file_bytes,
            "roots": self.roots,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "protocol", state["protocol"])
        object.__setattr__(self, "options", state["options"])
        object.__setattr__(
            self, "read_inflight_bytes", state.get("read_inflight_bytes", DEFAULT_INFLIGHT_BYTES)
        )
        object.__setattr__(
            self, "max_file_bytes", state.get("max_file_bytes", DEFAULT_MAX_FILE_BYTES)
        )
        object.__setattr__(self, "roots", state.get("roots", ()))
        object.__setattr__(self, "_fs", None)

    @property
    def is_local(self) -> bool:
        return self.protocol == "file"

    @property
    def fs(self) -> Any:
        """The fsspec filesystem, opened on first use in this process."""
        if self._fs is None:
            if self.protocol in ("s3", "s3a"):
                fs = open_s3(self.protocol, dict(self.options))
            else:
                import fsspec

                fs = fsspec.filesystem(self.protocol, **dict(self.options))
            object.__setattr__(self, "_fs", fs)
        return self._fs

    # -- paths ---------------------------------------------------------------------
    def strip(self, url: str) -> str:
        return split_protocol(url)[1]

    def url(self, path: str) -> str:
        return path if self.is_local else f"{self.protocol}://{path}"

    @staticmethod
    def join(base: str, *parts: str) -> str:
        out = base.rstrip("/")
        for p in parts:
            out = f"{out}/{p.strip('/')}"
        return out

    # -- reading -------------------------------------------------------------------
    def stat(self, url: str) -> FileStat | None:
        """The file's identity, or None when it does not exist (locally: nor when it is
        a symbolic link or a special file, which rlstream never opens)."""
        path = self.strip(url)
        if self.is_local:
            # lstat: a symbolic link or a special file is not a file of the run (it is
            # never opened, see `open_regular`), so it has no stat either.
            try:
                st = os.lstat(path)
            except (FileNotFoundError, NotADirectoryError):
                return None
            if not statmod.S_ISREG(st.st_mode) or dotdot(path) is not None:
                return None
            return FileStat(size=st.st_size, mtime=st.st_mtime, inode=st.st_ino)
        try:
            info = self.fs.info(path)
        except FileNotFoundError:
            return None
        return _file_stat(info)

    def unsafe(self, url: str) -> str | None:
        """Why a path that exists is not opened (a `..` in it; locally a symbolic link,
        a special file, or a real location outside every ROOT), or None. Lets a caller
        told "no such file" by `stat` say the truth instead."""
        path = self.strip(url)
        if dotdot(path) is not None:
            return dotdot(path)
        if not self.is_local:
            return None
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if statmod.S_ISLNK(st.st_mode):
            return "a symbolic link"
        if not (statmod.S_ISREG(st.st_mode) or statmod.S_ISDIR(st.st_mode)):
            return "a special file (FIFO, socket or device)"
        if self.roots and not inside(os.path.realpath(path), self.roots):
            return OUTSIDE
        return None

    def _too_large(self, path: str, size: int) -> None:
        if size > self.max_file_bytes:
            raise FileTooLarge(path, f"{size} bytes, above the limit of {self.max_file_bytes}")

    def read(self, url: str) -> bytes:
        """A whole file; `UnsafeFile` for a path rlstream does not open, `FileTooLarge`
        above `max_file_bytes` (told from the descriptor, or on S3 from a listing of
        the key, before the GET)."""
        path = self.strip(url)
        if dotdot(path) is not None:
            raise UnsafeFile(path, dotdot(path) or "")
        if self.is_local:
            fd = open_regular(path, self.roots)
            return read_whole(fd, lambda size: self._too_large(path, size))
        if self.protocol in ("s3", "s3a"):
            size = object_size(self.fs, path)
            if size is None:
                raise FileNotFoundError(path)
        else:
            size = int(self.fs.info(path)["size"])
        self._too_large(path, size)
        return self.fs.cat_file(path, **self._whole_get)

    @property
    def _whole_get(self) -> dict[str, Any]:
        """s3fs reads a whole object with a HEAD (its size, to split large objects into
        parallel ranges) then a GET: two round trips. One GET will do for files of a
        run (transcripts, run.json: small objects)."""
        return {"max_concurrency": 1} if self.protocol in ("s3", "s3a") else {}

    def read_many(self, urls: Sequence[str]) -> Iterator[tuple[str, bytes | UnsafeFile | None]]:
        """Whole files, yielded as `(url, bytes)` in the order of `urls`; `None` for a
        file that does not exist, the `UnsafeFile` error for a path not opened (a link,
        a special file, outside ROOT, a `..`) and `FileTooLarge` for one above
        `max_file_bytes`, never fetched. Other errors are raised (after the retries of
        the filesystem's client: S3 throttling, `SlowDown`/503, is retried with backoff).

        On S3 the sizes come first from one listing per folder; up to
        `READ_CONCURRENCY` reads then run at once on s3fs's event loop, each counted at
        its decoded cost (`rlstream.io.window.DECODE_FACTOR` times its listed size) so
        that the reads in flight stay within `read_inflight_bytes`. Elsewhere the files
        are read one after the other.
        """
        if self.protocol not in ("s3", "s3a") or not getattr(self.fs, "async_impl", False):
            for url in urls:
                try:
                    yield url, self.read(url)
                except FileNotFoundError:
                    yield url, None
                except UnsafeFile as e:
                    yield url, e
            return
        yield from read_many_s3(self, urls)

    def stat_many(self, urls: Sequence[str]) -> list[FileStat | None]:
        """`stat` of each URL, in order; concurrent on an async filesystem (one round
        trip for all of them instead of one each)."""
        if self.is_local or not getattr(self.fs, "async_impl", False):
            return [self.stat(u) for u in urls]
        import asyncio

        from fsspec.asyn import sync

        fs = self.fs

        async def all_infos() -> list[Any]:
            return await asyncio.gather(
                *(fs._info(self.strip(u)) for u in urls), return_exceptions=True
            )

        out: list[FileStat | None] = []
        for info in sync(fs.loop, all_infos):
            if isinstance(info, FileNotFoundError):
                out.append(None)
            elif isinstance(info, BaseException):
                raise info
            else:
                out.append(_file_stat(info))
        return out

    def stat_files(self, folder: str, names: Sequence[str]) -> list[FileStat | None]:
        """`stat` of each of `names` directly under `folder`, in order. On S3 one
        listing of the folder answers them all (one request instead of one each);
        elsewhere `stat_many`."""
        if self.protocol not in ("s3", "s3a"):
            return self.stat_many([Storage.join(folder, n) for n in names])
        got = list_stats(self.fs, self.strip(folder).rstrip("/"), list(names))
        return [FileStat(*got[n]) if n in got else None for n in names]

    def read_range(self, url: str, start: int, end: int) -> bytes:
        """Bytes [start, end); empty when the range is empty (never a request then)."""
        if end <= start:
            return b""
        path = self.strip(url)
        if dotdot(path) is not None:
            raise UnsafeFile(path, dotdot(path) or "")
        if self.is_local:
            with open(open_regular(path, self.roots), "rb") as f:
                f.seek(start)
                return f.read(end - start)
        return self.fs.cat_file(path, start=start, end=end)

    def exists(self, url: str) -> bool:
        path = self.strip(url)
        if self.is_local:
            return os.path.exists(path)
        return self.fs.exists(path)

    def list_names(self, url: str, start_after: str | None = None) -> list[str]:
        """Sorted base names of the files directly under `url` ([] if it is missing).

        With `start_after`, only names sorting after it; on S3 this is a
        ListObjectsV2 StartAfter request, so the cost is O(new names).
        """
        path = self.strip(url).rstrip("/")
        if self.is_local and start_after is not None:
            # Sort every name in C, then stat only those after the mark.
            try:
                names = sorted(os.listdir(path))
            except (FileNotFoundError, NotADirectoryError):
                return []
            after = names[bisect.bisect_right(names, start_after) :]
            return [n for n in after if os.path.isfile(os.path.join(path, n))]
        if self.is_local:
            try:
                with os.scandir(path) as it:
                    names = [e.name for e in it if e.is_file()]
            except (FileNotFoundError, NotADirectoryError):
                return []
            names.sort()
            return names
        if self.protocol in ("s3", "s3a") and start_after is not None:
            return list_after(self.fs, path, start_after)
        try:
            entries = self.fs.ls(path, detail=True)
        except FileNotFoundError:
            return []
        names = sorted(
            e["name"].rstrip("/").rsplit("/", 1)[-1] for e in entries if e.get("type") == "file"
        )
        if start_after is not None:
            names = [n for n in names if n > start_after]
        return names

    def list_dirs(self, url: str, links: bool = False) -> list[str]:
        """Sorted base names of the sub-folders directly under `url`. Locally a link to
        a folder counts only when its target lies inside `url` (W&B's `latest-run`), or
        with `links` always (a run's step folders: what is reached through one that
        leads out of ROOT is listed, then refused file by file when opened)."""
        path = self.strip(url).rstrip("/")
        if self.is_local:
            try:
                with os.scandir(path) as it:
                    return sorted(
                        e.name for e in it if e.is_dir() and (links or link_inside(e, path))
                    )
            except (FileNotFoundError, NotADirectoryError):
                return []
        try:
            entries = self.fs.ls(path, detail=True)
        except FileNotFoundError:
            return []
        return sorted(
            e["name"].rstrip("/").rsplit("/", 1)[-1]
            for e in entries
            if e.get("type") == "directory"
        )

    # -- writing -------------------------------------------------------------------
    def write_atomic(self, url: str, data: bytes, fsync: bool = True) -> None:
        """Write a whole file so readers see the old or the new bytes, never a mix.

        Local: temp file in the same folder, fsync (unless `fsync=False`: then atomic
        across process crashes but not power loss), rename. Object stores: one PUT.
        """
        path = self.strip(url)
        if self.is_local:
            write_atomic_local(path, data, fsync)
            return
        try:
            self.fs.pipe_file(path, data)
        except OSError as e:  # pragma: no cover - depends on the store
            raise StorageError(f"could not write {url}: {e}") from e

    def remove(self, url: str) -> None:
        path = self.strip(url)
        if self.is_local:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(path)

    def makedirs(self, url: str) -> None:
        if self.is_local:
            os.makedirs(self.strip(url), exist_ok=True)
