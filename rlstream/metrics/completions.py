"""Completion lengths, truncation, repetition and distinct answers: a mergeable aggregate.

Contract
--------
``CompletionAgg.from_arrays(completion_len_G, truncated_G, tokens_T, offsets_G1,
task_ids_G, ngram, attempt_G)`` reduces a batch of generations (all of them, trained
or not). ``attempt_G`` (non-decreasing ints: the generations of one attempt are
contiguous) says which generations make one attempt, the model calls of one
multi-turn agent; without it every generation is its own attempt. The output judged
for collapse is the attempt's (docs/health.md, "Multi-turn attempts"): short turns
alike across tasks ("Running the tests now." and the same call) are not answers.

- lengths: an exact ``CountHistogram`` of ``completion_len_G`` (per generation);
  ``n_truncated``.
- repetition (needs tokens): for each attempt with at least one n-gram,
  ``rep_a = 1 - distinct n-grams / total n-grams`` over its generations, where a
  generation whose tokens equal an earlier generation of the same attempt (a fixed
  action done again) adds no n-grams. N-grams are hashed to uint64 in one vectorised
  pass over the concatenated tokens (positions whose window would cross into the next
  generation are dropped); distinct (attempt, hash's top 56 bits) pairs are counted
  by a hash table's bucket counts, the pairs sharing a bucket by one sort of a packed
  uint64 key per block of 256 attempts (8 bits of local attempt id, the hash's top 56
  bits). A hash collision could merge two n-grams of one attempt; at
  the sizes of an attempt the odds are negligible, and since the block size is fixed
  they do not depend on how many attempts the batch holds.
- distinct completions (needs tokens): one blake2b-64 hash per generation of its
  token ids as little-endian int64 (deterministic across processes, unlike
  ``hash()``); an attempt of one generation is that hash, an attempt of several the
  blake2b-64 of its generations' hashes in order. Kept as ``hash -> set of task ids``
  (the attempt's first generation's task; ``""`` when task ids are absent) plus
  ``n_hashed`` (attempts).

``finalize`` keys: see ``CompletionAgg.columns()``. ``top_completion_task_share`` is
the largest share of the distinct tasks seen that share one attempt output (one answer
fitting many tasks hints at hard-coding). Undefined figures are None.

Exactness: an attempt is the atomic unit (a batch never splits one) and every
per-attempt figure depends on that attempt alone. Lengths, counts, hashes and sets
merge exactly; ``sum_rep`` is an exact sum (``rlstream.metrics.exact``) of the
``rep_a``. So ``merge`` is exactly associative and commutative and ``finalize`` is the
same, bit for bit, whatever the split of the attempts into batches and the merge order
or tree.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np

from rlstream.metrics.exact import Exact, add, fixed_sum, ratio
from rlstream.metrics.quantiles import CountHistogram
from rlstream.metrics.tokens import generation_ids

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_PRIME = np.uint64(0x100000001B3)
_BLOCK_BITS = 8  # generations are deduplicated in blocks of 2**8 = 256


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser over a uint64 array (wrapping arithmetic)."""
    x = x + _GOLDEN  # a new array; the rest works in place on it
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


def ngram_hashes(
    tokens_T: np.ndarray, offsets_G1: np.ndarray, ngram: int
) -> tuple[np.ndarray, np.ndarray]:
    """(generation id, uint64 hash) of every n-gram lying inside one generation."""
    tokens = np.asarray(tokens_T, dtype=np.int64)
    gen_T = generation_ids(offsets_G1, tokens.size)
    n_pos = tokens.size - ngram + 1
    if n_pos <= 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint64)
    # A window starting at i stays inside its generation iff token i + ngram - 1
    # belongs to the same generation.
    valid = gen_T[:n_pos] == gen_T[ngram - 1 :]
    mixed = _mix64(tokens.view(np.uint64))
    h = mixed[:n_pos].copy()
    for j in range(1, ngram):  # loop over the n-gram width, not over tokens
        h *= _PRIME
        h ^= mixed[j : j + n_pos]
    return gen_T[:n_pos][valid], _mix64(h[valid])


def distinct_per_generation(gen: np.ndarray, h: np.ndarray, n_gen: int) -> np.ndarray:
    """Number of distinct hashes of each generation (or attempt), from (id, hash) pairs.

    Two pairs are the same when their ids are equal and so are their hashes' top 56
    bits. ``gen`` must be non-decreasing (as ``ngram_hashes`` returns it). Each pair
    first goes to one bucket of a table of at least 4 per pair, chosen by the pair
    alone: a pair alone in its bucket has no equal and counts once with no sort (most
    of them, unless the text repeats itself). The rest, all copies of any pair among
    them, are counted by ``_sorted_distinct``. Only two n-grams of the same generation
    can collide, with odds about m^2 / 2^57 for m n-grams: negligible, and the same
    whichever batch the generation came in.
    """
    out = np.zeros(n_gen, dtype=np.int64)
    if not gen.size:
        return out
    top = h >> np.uint64(_BLOCK_BITS)
    bits = max(10, int(gen.size).bit_length() + 2)
    bucket = gen.astype(np.uint64)
    bucket *= _GOLDEN
    bucket += top
    bucket &= np.uint64((1 << bits) - 1)
    bucket = bucket.view(np.int64)  # below 2**bits: the same values, no copy
    alone = np.bincount(bucket, minlength=1 << bits)[bucket] == 1
    out += np.bincount(gen[alone], minlength=n_gen)
    rest = ~alone
    if rest.any():
        out += _sorted_distinct(gen[rest], top[rest], n_gen)
    return out


def _sorted_distinct(gen: np.ndarray, top: np.ndarray, n_gen: int) -> np.ndarray:
    """Distinct (id, 56-bit hash) pairs per id, by sorting: ids are taken in blocks of
    256, the local id going into the top 8 bits of one uint64 sort key and the hash
    filling the rest, so a single np.sort per block groups the pairs (much faster
    than a lexsort)."""
    out = np.zeros(n_gen, dtype=np.int64)
    shift = np.uint64(64 - _BLOCK_BITS)
    block = 1 << _BLOCK_BITS
    bounds = np.searchsorted(gen, np.arange(0, n_gen + block, block))
    for b, (lo, hi) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)):
        if lo == hi:
            continue
        first = b * block
        local = (gen[lo:hi] - first).astype(np.uint64)
        key = (local << shift) | top[lo:hi]
        key.sort()
        new = np.ones(key.size, dtype=bool)
        np.not_equal(key[1:], key[:-1], out=new[1:])
        counts = np.bincount((key[new] >> shift).astype(np.int64), minlength=block)
        stop = min(first + block, n_gen)
        out[first:stop] = counts[: stop - first]
    return out


def completion_hash(tokens: np.ndarray) -> int:
    """Deterministic 64-bit hash of one completion's token ids."""
    data = np.ascontiguousarray(tokens, dtype="<i8").tobytes()
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


def _generation_hashes(tokens: np.ndarray, offsets: np.ndarray) -> list[int]:
    """``completion_hash`` of every generation, over slices of one little-endian buffer
    (one conversion for the batch, not one array and bytes object per generation)."""
    view = memoryview(np.ascontiguousarray(tokens, dtype="<i8").tobytes())
    bounds = (offsets * 8).tolist()
    return [
        int.from_bytes(hashlib.blake2b(view[a:b], digest_size=8).digest(), "little")
        for a, b in itertools.pairwise(bounds)
    ]


def attempt_hash(generation_hashes: list[int]) -> int:
    """Deterministic 64-bit hash of one attempt's output: its generations in order (one
    generation: that generation's ``completion_hash``)."""
    if len(generation_hashes) == 1:
        return generation_hashes[0]
    data = b"".join(h.to_bytes(8, "little") for h in generation_hashes)
    digest = hashlib.blake2b(data, digest_size=8, person=b"attempt").digest()
    return int.from_bytes(digest, "little")


def attempt_index(attempt_G: np.ndarray | None, n_gen: int) -> np.ndarray:
    """Attempt index 0..A-1 of every generation (each its own attempt without
    ``attempt_G``); ``attempt_G`` must be non-decreasing."""
    if attempt_G is None:
        return np.arange(n_gen, dtype=np.int64)
    att = np.asarray(attempt_G, dtype=np.int64)
    if att.shape != (n_gen,):
        raise ValueError(f"attempt_G has shape {att.shape} for {n_gen} generations")
    if att.size and (np.diff(att) < 0).any():
        raise ValueError("attempt_G must be non-decreasing (an attempt's generations together)")
    if not att.size:
        return att
    return np.concatenate([[0], np.cumsum(np.diff(att) != 0)]).astype(np.int64)


@dataclass(slots=True)
class CompletionAgg:
    """Length histogram, truncation count, repetition sums and completion hashes."""

    lengths: CountHistogram = field(default_factory=CountHistogram)
    n_truncated: int = 0
    n_rep: int = 0
    sum_rep: Exact = 0  # exact sum of rep_g (rlstream.metrics.exact)
    n_hashed: int = 0
    hashes: dict[int, set[str]] = field(default_factory=dict)

    @classmethod
    def empty(cls) -> Self:
        return cls()

    @classmethod
    def from_arrays(
        cls,
        completion_len_G: np.ndarray,
        truncated_G: np.ndarray,
        tokens_T: np.ndarray | None = None,
        offsets_G1: np.ndarray | None = None,
        task_ids_G: list[str] | None = None,
        ngram: int = 4,
        attempt_G: np.ndarray | None = None,
    ) -> Self:
        lengths = np.asarray(completion_len_G, dtype=np.int64)
        truncated = np.asarray(truncated_G, dtype=bool)
        if truncated.shape != lengths.shape:
            raise ValueError(
                f"truncated_G {truncated.shape} must match completion_len_G {lengths.shape}"
            )
        agg = cls(
            lengths=CountHistogram.from_values(lengths),
            n_truncated=int(np.count_nonzero(truncated)),
        )
        if tokens_T is None:
            return agg
        if offsets_G1 is None:
            raise ValueError("tokens_T needs offsets_G1 to split it into generations")
        if ngram < 1:
            raise ValueError(f"ngram must be >= 1; got {ngram}")
        tokens = np.asarray(tokens_T, dtype=np.int64)
        offsets = np.asarray(offsets_G1, dtype=np.int64)
        n_gen = offsets.size - 1
        if task_ids_G is not None and len(task_ids_G) != n_gen:
            raise ValueError(f"task_ids_G has {len(task_ids_G)} entries for {n_gen} generations")

        att_G = attempt_index(attempt_G, n_gen)
        n_att = int(att_G[-1]) + 1 if n_gen else 0
        gen_hash = _generation_hashes(tokens, offsets)
        repeat_G = np.zeros(n_gen, dtype=bool)  # same tokens as an earlier turn of its attempt
        if n_att == n_gen:  # one generation an attempt: nothing repeats within one
            att_hashes = [[x] for x in gen_hash]
        else:
            att_hashes = [[] for _ in range(n_att)]
            seen: set[int] = set()
            att_list = att_G.tolist()
            for g in range(n_gen):
                if g == 0 or att_list[g] != att_list[g - 1]:
                    seen = set()
                repeat_G[g] = gen_hash[g] in seen
                seen.add(gen_hash[g])
                att_hashes[att_list[g]].append(gen_hash[g])

        gen, h = ngram_hashes(tokens, offsets, ngram)
        if repeat_G.any():
            keep = ~repeat_G[gen]
            gen, h = gen[keep], h[keep]
        att = gen if n_att == n_gen else att_G[gen]
        total = np.bincount(att, minlength=n_att)
        distinct = distinct_per_generation(att, h, n_att)
        has = total > 0
        agg.n_rep = int(np.count_nonzero(has))
        agg.sum_rep = fixed_sum(1.0 - distinct[has] / total[has])

        first = np.searchsorted(att_G, np.arange(n_att)).tolist()  # each attempt's first
        hashes: dict[int, set[str]] = {}
        for a in range(n_att):
            task = task_ids_G[first[a]] if task_ids_G is not None else ""
            hashes.setdefault(attempt_hash(att_hashes[a]), set()).add(task)
        agg.n_hashed = n_att
        agg.hashes = hashes
        return agg

    def merge(self, other: Self) -> Self:
        hashes = {k: set(v) for k, v in self.hashes.items()}
        for k, v in other.hashes.items():
            hashes.setdefault(k, set()).update(v)
        return type(self)(
            lengths=self.lengths.merge(other.lengths),
            n_truncated=self.n_truncated + other.n_truncated,
            n_rep=self.n_rep + other.n_rep,
            sum_rep=add(self.sum_rep, other.sum_rep),
            n_hashed=self.n_hashed + other.n_hashed,
            hashes=hashes,
        )

    @staticmethod
    def columns() -> tuple[tuple[str, type], ...]:
        """finalize() keys in order, with the Python type of a non-None value."""
        return (
            ("completions", int),
            ("completion_len_mean", float),
            ("completion_len_p50", float),
            ("completion_len_p95", float),
            ("completion_len_max", int),
            ("truncated_frac", float),
            ("repetition", float),
            ("distinct_completions", float),
            ("top_completion_task_share", float),
        )

    def finalize(self) -> dict[str, Any]:
        n = self.lengths.count
        share = None
        if self.hashes:
            tasks = set().union(*self.hashes.values())
            share = max(len(v) for v in self.hashes.values()) / len(tasks)
        return {
            "completions": n,
            "completion_len_mean": self.lengths.mean(),
            "completion_len_p50": self.lengths.quantile(0.5),
            "completion_len_p95": self.lengths.quantile(0.95),
            "completion_len_max": self.lengths.max(),
            "truncated_frac": self.n_truncated / n if n else None,
            "repetition": ratio(self.sum_rep, self.n_rep) if self.n_rep else None,
            "distinct_completions": len(self.hashes) / self.n_hashed if self.n_hashed else None,
            "top_completion_task_share": share,
        }
