"""Many reads in flight, results in order, bytes in flight bounded.

`read_window(submit, items, max_bytes, max_requests)` starts reads of `items` through
`submit(item) -> Future[bytes]` ahead of the consumer and yields `(item, bytes | error)`
in the order of `items`, whatever order the reads finish in: a fold over the results
is the fold of a serial read.

The bound: a new read starts only while the cost of the reads held (finished, not yet
consumed) and running stays within `max_bytes`, and fewer than `max_requests` are
running. A read costs `factor` times its size (`DECODE_FACTOR` for files that are
decoded whole: what a read costs once decoded). Its size is the known one
(`size_of(item)`, e.g. from a listing) or, unknown, its bytes once finished and the
largest size seen so far while running (`first_guess` before any has finished). One
read is always allowed, so a file larger than the budget is still read, alone. With `max_bytes` smaller than any file the reads are
serial. A read's error (e.g. `FileNotFoundError`) is yielded in its place, not
raised, so one vanished file does not cost its neighbours. Reads still running when
the consumer stops early are cancelled.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")

FIRST_GUESS = 1 << 20
"""Size assumed for a running read before any read of the batch has finished."""

DECODE_FACTOR = 8
"""Bytes a whole file of a run costs once decoded, as a multiple of its size: its
bytes, the parser's working memory and the arrays kept for the step (measured on a
transcript of one long generation, docs/runtime.md "Limits")."""


def _held(f: Future[bytes], guess: int, known: int | None) -> int:
    if not f.done() or f.cancelled():
        return guess if known is None else known
    if f.exception() is not None:
        return 0
    return len(f.result())


def read_window(
    submit: Callable[[T], Future[bytes]],
    items: Iterable[T],
    max_bytes: int,
    max_requests: int,
    first_guess: int = FIRST_GUESS,
    size_of: Callable[[T], int | None] | None = None,
    factor: int = 1,
) -> Iterator[tuple[T, bytes | BaseException]]:
    """Yields `(item, data or the read's exception)` in the order of `items`."""
    todo = iter(items)
    window: deque[tuple[T, Future[bytes], int | None]] = deque()
    known: Callable[[T], int | None] = size_of or (lambda _: None)
    largest = 0
    more = True
    nxt: object = _END
    try:
        while True:
            while more and len(window) < max(1, max_requests):
                guess = largest or first_guess
                if nxt is _END:
                    nxt = next(todo, _END)
                    if nxt is _END:
                        more = False
                        break
                size = known(nxt)  # type: ignore[arg-type]
                held = sum(_held(f, guess, k) for _, f, k in window)
                if window and factor * (held + (guess if size is None else size)) > max_bytes:
                    break
                window.append((nxt, submit(nxt), size))  # type: ignore[arg-type]
                nxt = _END
            if not window:
                return
            item, fut, _ = window.popleft()
            try:
                data = fut.result()
            except Exception as e:  # handed to the consumer, in the item's place
                yield item, e
                continue
            largest = max(largest, len(data))
            yield item, data
    finally:
        for _, f, _ in window:
            f.cancel()


_END = object()
