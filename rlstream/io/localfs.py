"""What a local file of a run must be before rlstream opens it, and where it must be.

Run folders are untrusted input (docs/runtime.md, "What rlstream reads"):

- `open_regular(path, roots)`: a read-only descriptor of a regular file, never through
  a symbolic link as its last component (O_NOFOLLOW), never of a FIFO, socket or device
  (O_NONBLOCK, then the type checked on the descriptor), and, when `roots` are given,
  only when the file's real location (the descriptor's own path, from
  /proc/self/fd, else the real path of its folder) lies inside one of them: a linked
  *folder* inside a run that leads out of ROOT is caught too, after the open and before
  any byte is read; and only when the file is on the same mount as its ROOT (the mount
  ids of /proc/self/fdinfo): a folder from elsewhere bind-mounted inside a run shows a
  path inside ROOT, but its mount says where it comes from. Refusals raise
  `UnsafeFile` with the reason, never any byte. On Linux 5.6+ a file under a ROOT is
  first opened in one call that asks the kernel for all of it (`openat2` beneath the
  ROOT's folder: no absolute or escaping link, no mount crossed, no link as the last
  component); only when that refuses or is unavailable do the checks above run, and
  they say why (or open what is allowed, such as an absolute link that stays inside).
- `dotdot(path)`: the reason a path (or an object key) with a `..` component is
  refused, or None.
- `write_atomic_local(path, data)`: a whole file replaced atomically (temp, fsync, rename).
- `link_inside(entry, folder)`: whether a folder link found by a listing stays inside
  its folder (discovery follows only those).
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat as statmod
import sys
import tempfile
from collections.abc import Callable, Sequence

from rlstream.errors import UnsafeFile

OUTSIDE = "outside ROOT (reached through a linked folder)"
"""The reason of a file refused because its real location is not under any ROOT."""


MOUNTED = "on another mount than its ROOT (a folder mounted inside ROOT)"
"""The reason of a file refused because it lies on a mount inside ROOT."""

_ROOT_MOUNTS: dict[str, int | None] = {}
_ROOT_FDS: dict[str, int] = {}

_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_SYS_OPENAT2 = 437  # the same number on every Linux architecture
_RESOLVE_BENEATH_ONLY = 0x01 | 0x02 | 0x08  # RESOLVE_NO_XDEV | _NO_MAGICLINKS | _BENEATH


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


def _openat2() -> object | None:
    """libc's `syscall`, set up for openat2, or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_long
    fn.argtypes = (
        ctypes.c_long,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.POINTER(_OpenHow),
        ctypes.c_size_t,
    )
    return fn


_SYSCALL = _openat2()
_HOW = _OpenHow(_OPEN_FLAGS, 0, _RESOLVE_BENEATH_ONLY)
_HOW_REF, _HOW_SIZE = ctypes.byref(_HOW), ctypes.sizeof(_HOW)


def _root_fd(root: str) -> int:
    """A descriptor of a ROOT folder (O_PATH), once per process."""
    fd = _ROOT_FDS.get(root)
    if fd is None:
        fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        _ROOT_FDS[root] = fd
    return fd


def _open_beneath(path: str, roots: Sequence[str]) -> int | None:
    """`path` opened beneath its ROOT in one kernel call (`openat2` with
    RESOLVE_BENEATH | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS, O_NOFOLLOW): a
    descriptor only the full checks would also give, or None when the kernel refused
    (a link, another mount, a missing file) or cannot do it: the full checks decide."""
    global _SYSCALL
    if _SYSCALL is None:
        return None
    for root in roots:
        if path.startswith(root.rstrip("/") + "/"):
            rel = path[len(root.rstrip("/")) + 1 :]
            break
    else:
        return None
    try:
        dirfd = _root_fd(root)
    except OSError:
        return None
    fd = _SYSCALL(_SYS_OPENAT2, dirfd, rel.encode(), _HOW_REF, _HOW_SIZE)
    if fd >= 0:
        return int(fd)
    if ctypes.get_errno() in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
        _SYSCALL = None  # an older kernel or a sandbox without it: the checks alone
    return None


def read_whole(fd: int, check: Callable[[int], None]) -> bytes:
    """Every byte of the open file `fd` to its end (as `open(fd).read()`, without the
    file objects), after `check(size)` of its size; `fd` is closed."""
    try:
        size = os.fstat(fd).st_size
        check(size)
        parts = [os.read(fd, size + 1)]
        while parts[-1]:  # the file grew since its fstat: read on to its end
            parts.append(os.read(fd, 1 << 16))
        return parts[0] if len(parts) <= 2 else b"".join(parts)
    finally:
        os.close(fd)


def dotdot(path: str) -> str | None:
    """Why `path` is refused for its `..` component (local or object key), or None."""
    return "a '..' in its path" if ".." in path.replace("\\", "/").split("/") else None


def real_roots(roots: Sequence[str]) -> tuple[str, ...]:
    """The real locations (links resolved) of local ROOT folders."""
    return tuple(sorted({os.path.realpath(r) for r in roots}))


def inside(real: str, roots: Sequence[str]) -> bool:
    """True when the real path `real` is one of `roots` or lies below one."""
    return any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots)


def _fd_path(fd: int, path: str) -> str:
    """The real path of an open descriptor (the kernel's answer when /proc exists,
    else the real path of the file's folder joined with its name)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        folder, name = os.path.split(os.path.abspath(path))
        return os.path.join(os.path.realpath(folder), name)


def _mount_id(fd: int) -> int | None:
    """The mount id of an open descriptor (Linux /proc/self/fdinfo), or None."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", "rb") as f:
            for line in f:
                if line.startswith(b"mnt_id:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def _root_mount(root: str) -> int | None:
    """The mount id of a ROOT folder, once per process."""
    if root not in _ROOT_MOUNTS:
        try:
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            _ROOT_MOUNTS[root] = _mount_id(fd)
        finally:
            os.close(fd)
    return _ROOT_MOUNTS[root]


def _refusal(fd: int, path: str, roots: Sequence[str]) -> str | None:
    """Why the open file `fd` is refused for where it lies, or None."""
    real = _fd_path(fd, path)
    home = [r for r in roots if inside(real, [r])]
    if not home:
        return OUTSIDE
    mine, theirs = _mount_id(fd), _root_mount(max(home, key=len))
    return MOUNTED if mine is not None and theirs is not None and mine != theirs else None


def open_regular(path: str, roots: Sequence[str] = ()) -> int:
    """A read-only descriptor of the regular file at `path` (see the module docstring);
    `UnsafeFile` with no byte read when it is a link, a special file, has a `..` in its
    path, or lies outside every one of `roots` (when given)."""
    why = dotdot(path)
    if why is not None:
        raise UnsafeFile(path, why)
    fd = _open_beneath(path, roots) if roots else None
    if fd is not None:
        if statmod.S_ISREG(os.fstat(fd).st_mode):
            return fd
        os.close(fd)  # a FIFO, socket or device: the checks below say so
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UnsafeFile(path, "a symbolic link") from None
        if e.errno == errno.ENXIO:  # a socket, or a FIFO with no reader side
            raise UnsafeFile(path, "a special file") from None
        raise
    if not statmod.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        if os.path.isdir(path):
            raise IsADirectoryError(path)
        raise UnsafeFile(path, "a special file (FIFO, socket or device)")
    why = _refusal(fd, path, roots) if roots else None
    if why is not None:
        os.close(fd)
        raise UnsafeFile(path, why)
    return fd


def link_inside(entry: os.DirEntry, folder: str) -> bool:
    """True unless `entry` is a symbolic link whose target lies outside `folder`."""
    if not entry.is_symlink():
        return True
    real, base = os.path.realpath(entry.path), os.path.realpath(folder)
    return real != base and os.path.commonpath([real, base]) == base


def write_atomic_local(path: str, data: bytes, fsync: bool = True) -> None:
    """Write a whole local file so readers see the old or the new bytes, never a mix:
    a temp file in the same folder, fsync (unless `fsync=False`: then atomic across
    process crashes but not power loss), rename, and the folder fsynced."""
    folder = os.path.dirname(path) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    except FileNotFoundError:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
        if fsync:  # the rename itself must reach the disk too
            dfd = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
