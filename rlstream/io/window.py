"""Many reads in flight, results in order, bytes in flight bounded.

`read_window(submit, items, max_bytes, max_requests)` starts reads of `items` through
`submit(item) -> Future[bytes]` ahead of the consumer and yields `(item, bytes | error)`
in the order of `items`, whatever order the reads finish in: a fold over the results
is the fold of a serial read.

The bound: a new read starts only while the bytes held (finished reads not yet
consumed) plus the reads still running, each counted at the largest size seen so far
(`first_guess` before any has finished), stay within `max_bytes`, and fewer than
`max_requests` are running. One read is always allowed, so a file larger than the
budget is still read, alone. With `max_bytes` smaller than any file the reads are
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


def _held(f: Future[bytes], guess: int) -> int:
    if not f.done() or f.cancelled():
        return guess
    if f.exception() is not None:
        return 0
    return len(f.result())


def read_window(
    submit: Callable[[T], Future[bytes]],
    items: Iterable[T],
    max_bytes: int,
    max_requests: int,
    first_guess: int = FIRST_GUESS,
) -> Iterator[tuple[T, bytes | BaseException]]:
    """Yields `(item, data or the read's exception)` in the order of `items`."""
    todo = iter(items)
    window: deque[tuple[T, Future[bytes]]] = deque()
    largest = 0
    more = True
    try:
        while True:
            while more and len(window) < max(1, max_requests):
                guess = largest or first_guess
                if window and sum(_held(f, guess) for _, f in window) + guess > max_bytes:
                    break
                item = next(todo, _END)
                if item is _END:
                    more = False
                    break
                window.append((item, submit(item)))  # type: ignore[arg-type]
            if not window:
                return
            item, fut = window.popleft()
            try:
                data = fut.result()
            except Exception as e:  # handed to the consumer, in the item's place
                yield item, e
                continue
            largest = max(largest, len(data))
            yield item, data
    finally:
        for _, f in window:
            f.cancel()


_END = object()
