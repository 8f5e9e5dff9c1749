"""read_window: results in the order of the items whatever order reads finish in,
bytes in flight within the budget, errors in their item's place, cancel on close."""

from __future__ import annotations

import random
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from hypothesis import given, settings
from hypothesis import strategies as st

from rlstream.io.window import read_window


class Reads:
    """A `submit` whose reads finish at once (or stay pending, for `pending`), and a
    record, at every submission, of the bytes held or running that were not yet
    consumed: what the budget bounds."""

    def __init__(self, sizes: dict[str, int], pending: frozenset[str] = frozenset()) -> None:
        self.sizes = sizes
        self.pending = pending
        self.futures: dict[str, Future[bytes]] = {}
        self.consumed: set[str] = set()
        self.peak_bytes = 0
        self.peak_count = 0

    def submit(self, item: str) -> Future[bytes]:
        f: Future[bytes] = Future()
        self.futures[item] = f
        if item not in self.pending:
            self.finish(item)
        live = [i for i in self.futures if i not in self.consumed]
        self.peak_count = max(self.peak_count, len(live))
        self.peak_bytes = max(self.peak_bytes, sum(max(self.sizes[i], 0) for i in live))
        return f

    def finish(self, item: str) -> None:
        n = self.sizes[item]
        if n < 0:
            self.futures[item].set_exception(FileNotFoundError(item))
        else:
            self.futures[item].set_result(b"x" * n)


def _drain(gen, reads: Reads) -> list[tuple[str, object]]:
    out = []
    for item, data in gen:
        reads.consumed.add(item)
        out.append((item, data))
    return out


@settings(max_examples=80, deadline=None)
@given(
    size=st.integers(1, 50),
    n=st.integers(1, 30),
    budget=st.integers(1, 400),
    max_requests=st.integers(1, 8),
)
def test_bytes_and_requests_in_flight_stay_within_the_bounds(size, n, budget, max_requests):
    items = [f"t{i:03d}" for i in range(n)]
    reads = Reads(dict.fromkeys(items, size))
    got = _drain(read_window(reads.submit, items, budget, max_requests, first_guess=size), reads)
    assert [i for i, _ in got] == items
    assert all(d == b"x" * size for _, d in got)
    assert reads.peak_count <= max_requests
    assert reads.peak_bytes <= max(budget, size)  # one read is always allowed
    if budget >= 2 * size and max_requests >= 2 and n >= 2:
        assert reads.peak_count >= 2  # and it does read ahead


@settings(max_examples=30, deadline=None)
@given(sizes=st.lists(st.integers(-1, 40), min_size=1, max_size=25), seed=st.integers(0, 99))
def test_results_come_in_item_order_when_reads_finish_out_of_order(sizes, seed):
    rng = random.Random(seed)
    items = [f"t{i:03d}" for i in range(len(sizes))]
    delay = {i: rng.random() * 0.003 for i in items}

    def read(item: str) -> bytes:
        time.sleep(delay[item])
        if sizes[int(item[1:])] < 0:
            raise FileNotFoundError(item)
        return item.encode() * sizes[int(item[1:])]

    with ThreadPoolExecutor(8) as pool:
        got = list(read_window(lambda i: pool.submit(read, i), items, 10**6, 8))
    assert [i for i, _ in got] == items
    for (item, data), n in zip(got, sizes, strict=True):
        if n < 0:
            assert isinstance(data, FileNotFoundError)
        else:
            assert data == item.encode() * n


def test_a_tiny_budget_reads_one_at_a_time():
    items = [f"t{i}" for i in range(6)]
    reads = Reads(dict.fromkeys(items, 100))
    got = _drain(read_window(reads.submit, items, max_bytes=1, max_requests=64), reads)
    assert [i for i, _ in got] == items
    assert reads.peak_count == 1


def test_unknown_sizes_start_from_the_first_guess_then_the_largest_seen():
    """Before any read finished, each running read counts as `first_guess`; after,
    as the largest size seen."""
    items = ["a", "b", "c", "d", "e", "f"]
    reads = Reads(dict.fromkeys(items, 10), pending=frozenset({"a"}))
    gen = read_window(reads.submit, items, max_bytes=30, max_requests=8, first_guess=15)
    threading.Timer(0.05, reads.finish, ("a",)).start()
    assert next(gen) == ("a", b"x" * 10)
    reads.consumed.add("a")
    assert list(reads.futures) == ["a", "b"]  # 2 x 15 fit in 30 before a was seen
    rest = _drain(gen, reads)
    assert [i for i, _ in rest] == items[1:]
    assert reads.peak_bytes <= 30


def test_closing_early_cancels_running_reads():
    items = ["a", "b", "c"]
    reads = Reads(dict.fromkeys(items, 1), pending=frozenset({"b", "c"}))
    gen = read_window(reads.submit, items, max_bytes=100, max_requests=8, first_guess=1)
    assert next(gen) == ("a", b"x")
    gen.close()
    assert reads.futures["b"].cancelled() and reads.futures["c"].cancelled()


def test_a_read_error_is_yielded_in_place():
    reads = Reads({"a": 1, "b": 2})
    failed: Future[bytes] = Future()
    failed.set_exception(PermissionError("denied"))
    gen = read_window(lambda i: failed if i == "a" else reads.submit(i), ["a", "b"], 100, 8)
    item, err = next(gen)
    assert item == "a" and isinstance(err, PermissionError)
    assert next(gen) == ("b", b"xx")
    assert next(gen, None) is None


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 60), min_size=1, max_size=20),
    budget=st.integers(1, 600),
    factor=st.integers(1, 8),
)
def test_known_sizes_count_at_their_decoded_cost(sizes, budget, factor):
    """With sizes known before the reads (a listing's), the reads held or running,
    each counted at `factor` times its size, stay within the budget: several large
    files at once never add up beyond it (one read is always allowed)."""
    items = [f"t{i:03d}" for i in range(len(sizes))]
    size = dict(zip(items, sizes, strict=True))
    reads = Reads(size)
    gen = read_window(
        reads.submit, items, budget, 64, first_guess=1, size_of=size.get, factor=factor
    )
    got = _drain(gen, reads)
    assert [i for i, _ in got] == items
    assert factor * reads.peak_bytes <= max(budget, factor * max(sizes))
    if len(sizes) >= 2 and factor * (sizes[0] + sizes[1]) <= budget:
        assert reads.peak_count >= 2
