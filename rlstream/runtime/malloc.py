"""glibc malloc settings for the processes that aggregate token arrays.

Every unit allocates and frees numpy arrays of 0.1-10 MB. By default glibc serves
such blocks with a fresh mmap once they pass its (adaptive) mmap threshold and gives
the top of the heap back to the kernel past its trim threshold, so the pages of
nearly every array are faulted in and zeroed again. On the benchmark archive (22.5 M
tokens, in-process) that was 516k minor page faults and 1.7 s of system time in 7.1 s;
with the thresholds below, 14k faults and 0.5 s, for 17 MiB more peak RSS
(bench/README.md). Freed memory up to `trim` stays with the process for reuse.
"""

from __future__ import annotations

import ctypes
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def keep_heap(mmap: int = 64 << 20, trim: int = 128 << 20) -> bool:
    """Raise glibc's mmap and trim thresholds for this process; False where there is
    no glibc `mallopt` to do it (macOS, musl), which changes nothing else."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return mallopt(_M_MMAP_THRESHOLD, mmap) == 1 and mallopt(_M_TRIM_THRESHOLD, trim) == 1
