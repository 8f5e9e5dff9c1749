"""CompletionAgg: lengths, truncation, repetition, distinct completions, merges."""

from __future__ import annotations

import hashlib
import pickle
import random
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlstream.metrics.completions import (
    CompletionAgg,
    completion_hash,
    distinct_per_generation,
    ngram_hashes,
)
from tests.metrics.merging import assert_identical, merge_tree, split_plans


def build(seqs: list[list[int]], tasks: list[str] | None = None, ngram: int = 4, truncated=None):
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    tokens = np.array([t for s in seqs for t in s], dtype=np.int64)
    offsets = np.cumsum([0, *lengths]).astype(np.int64)
    trunc = np.zeros(len(seqs), dtype=bool) if truncated is None else np.array(truncated)
    return CompletionAgg.from_arrays(lengths, trunc, tokens, offsets, tasks, ngram=ngram)


def ref_repetition(seqs: list[list[int]], n: int) -> float | None:
    reps = []
    for s in seqs:
        grams = [tuple(s[i : i + n]) for i in range(len(s) - n + 1)]
        if grams:
            reps.append(1 - len(set(grams)) / len(grams))
    return sum(reps) / len(reps) if reps else None


def test_repetition_hand_example() -> None:
    out = build([[1, 2, 3, 4, 1, 2, 3, 4]], ngram=4).finalize()
    assert out["repetition"] == pytest.approx(0.2)  # 5 n-grams, 4 distinct


def test_repetition_ignores_windows_across_generations_and_short_ones() -> None:
    # Windows crossing the boundary would repeat [1, 1]; inside each generation
    # there is exactly one bigram, so no repetition.
    out = build([[1, 1], [1, 1], [7]], ngram=2).finalize()
    assert out["repetition"] == 0.0
    agg = build([[1, 1], [1, 1], [7]], ngram=2)
    assert agg.n_rep == 2  # [7] is shorter than the n-gram
    assert build([[5, 5, 5, 5, 5]], ngram=1).finalize()["repetition"] == pytest.approx(0.8)
    assert build([[1, 2, 3]], ngram=4).finalize()["repetition"] is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 3), max_size=12), max_size=8),
    st.integers(1, 5),
)
def test_repetition_matches_reference(seqs, n) -> None:
    got = build(seqs, ngram=n).finalize()["repetition"]
    want = ref_repetition(seqs, n)
    assert got == (None if want is None else pytest.approx(want, rel=1e-12, abs=1e-15))


def test_lengths_and_truncation() -> None:
    out = build([[1] * 3, [2] * 10, [3] * 5, []], truncated=[False, True, False, False]).finalize()
    assert out["completions"] == 4
    assert out["completion_len_mean"] == pytest.approx(4.5)
    assert out["completion_len_p50"] == float(np.percentile([3, 10, 5, 0], 50))
    assert out["completion_len_p95"] == float(np.percentile([3, 10, 5, 0], 95))
    assert out["completion_len_max"] == 10
    assert out["truncated_frac"] == 0.25


def test_distinct_completions_and_task_share() -> None:
    seqs = [[5, 6], [5, 6], [7], [5, 6]]
    out = build(seqs, tasks=["a", "b", "c", "a"]).finalize()
    assert out["distinct_completions"] == pytest.approx(2 / 4)
    # [5, 6] answers tasks a and b out of {a, b, c}.
    assert out["top_completion_task_share"] == pytest.approx(2 / 3)
    no_tasks = build(seqs).finalize()
    assert no_tasks["distinct_completions"] == pytest.approx(2 / 4)
    assert no_tasks["top_completion_task_share"] == 1.0  # one "" task


def test_without_tokens_only_lengths() -> None:
    agg = CompletionAgg.from_arrays(np.array([4, 6]), np.array([True, True]))
    out = agg.finalize()
    assert out["completions"] == 2 and out["truncated_frac"] == 1.0
    assert out["repetition"] is None
    assert out["distinct_completions"] is None
    assert out["top_completion_task_share"] is None
    empty = CompletionAgg.empty().finalize()
    assert empty["completions"] == 0
    assert all(v is None for k, v in empty.items() if k != "completions")
    with pytest.raises(ValueError, match="offsets_G1"):
        CompletionAgg.from_arrays(np.array([1]), np.array([False]), np.array([3]))


def test_completion_hash_is_stable_blake2b_of_le_int64() -> None:
    expected = int.from_bytes(
        hashlib.blake2b(struct.pack("<3q", 1, 2, 3), digest_size=8).digest(), "little"
    )
    assert completion_hash(np.array([1, 2, 3], dtype=np.int32)) == expected
    assert completion_hash(np.array([1, 2, 3])) != completion_hash(np.array([3, 2, 1]))


def agg_of(gens: list[tuple[list[int], str, bool]], ngram: int = 2) -> CompletionAgg:
    return build(
        [g[0] for g in gens], [g[1] for g in gens], ngram=ngram, truncated=[g[2] for g in gens]
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(st.integers(0, 3), max_size=8), st.sampled_from("abcd"), st.booleans()),
        max_size=12,
    ),
    st.integers(1, 4),
    st.data(),
)
def test_any_split_any_merge_tree_is_exactly_the_whole(gens, ngram, data) -> None:
    shards, shape, rnd = data.draw(split_plans(len(gens)))
    aggs = [agg_of([gens[i] for i in s], ngram) for s in shards]
    merged = merge_tree(aggs, CompletionAgg.empty(), shape, rnd)
    assert_identical(merged.finalize(), agg_of(gens, ngram).finalize())


def test_many_generations_split_like_live_polls_are_bit_identical() -> None:
    # > 256 generations cross the dedup blocks; live polls put each generation in a
    # different block position than the batch run does.
    rng = np.random.default_rng(3)
    gens = [
        (list(rng.integers(0, 4, rng.integers(0, 60))), f"t{rng.integers(0, 50)}", bool(b))
        for b in rng.random(900) < 0.1
    ]
    whole = agg_of(gens, 3).finalize()
    polls, i = [], 0
    while i < len(gens):
        j = i + int(rng.integers(1, 40))
        polls.append(agg_of(gens[i:j], 3))
        i = j
    for shape in ("left", "right", "balanced"):
        assert_identical(
            merge_tree(polls, CompletionAgg.empty(), shape, random.Random(0)).finalize(), whole
        )


def test_distinct_counts_do_not_depend_on_the_batch() -> None:
    rng = np.random.default_rng(4)
    seqs = [rng.integers(0, 3, rng.integers(0, 30)) for _ in range(700)]

    def distinct(part: list[np.ndarray]) -> np.ndarray:
        offsets = np.cumsum([0, *map(len, part)]).astype(np.int64)
        toks = np.concatenate([*part, np.zeros(0, np.int64)])
        gen, h = ngram_hashes(toks, offsets, 2)
        return distinct_per_generation(gen, h, len(part))

    whole = distinct(seqs)
    assert np.array_equal(np.concatenate([distinct(seqs[:5]), distinct(seqs[5:])]), whole)
    want = [len({tuple(s[i : i + 2]) for i in range(len(s) - 1)}) for s in seqs]
    assert whole.tolist() == want


def test_merge_does_not_mutate_and_pickles() -> None:
    a = build([[1, 2]], tasks=["x"])
    b = build([[1, 2]], tasks=["y"])
    m = a.merge(b)
    assert m.hashes[completion_hash(np.array([1, 2]))] == {"x", "y"}
    assert a.hashes[completion_hash(np.array([1, 2]))] == {"x"}
    m2 = pickle.loads(pickle.dumps(m))
    assert m2.finalize() == m.finalize()
    assert m2.hashes == m.hashes


def test_repetition_many_generations_matches_reference() -> None:
    # Thousands of generations put the generation id in many high bits of the sort key.
    rng = np.random.default_rng(7)
    seqs = [list(rng.integers(0, 3, rng.integers(0, 15))) for _ in range(3000)]
    got = build(seqs, ngram=3).finalize()["repetition"]
    assert got == pytest.approx(ref_repetition(seqs, 3), rel=1e-12)


# -- multi-turn attempts (docs/health.md, "Multi-turn attempts") ----------------------


def build_attempts(attempts: list[tuple[list[list[int]], str]], ngram: int = 2):
    """An aggregate of attempts, each (its generations, its task)."""
    seqs = [g for gens, _ in attempts for g in gens]
    tasks = [task for gens, task in attempts for _ in gens]
    att = np.array([a for a, (gens, _) in enumerate(attempts) for _ in gens], dtype=np.int64)
    lengths = np.array([len(s) for s in seqs], dtype=np.int64)
    tokens = np.array([t for s in seqs for t in s], dtype=np.int64)
    offsets = np.cumsum([0, *lengths]).astype(np.int64)
    return CompletionAgg.from_arrays(
        lengths, np.zeros(len(seqs), bool), tokens, offsets, tasks, ngram=ngram, attempt_G=att
    )


def ref_attempts(attempts: list[tuple[list[list[int]], str]], n: int) -> dict:
    """The docs' figures, recomputed: an attempt's output is its generations in order;
    its repetition counts the n-grams inside each of its generations, a generation
    equal to an earlier one of the attempt left out."""
    reps, outputs = [], {}
    for gens, task in attempts:
        kept = [g for i, g in enumerate(gens) if g not in gens[:i]]
        grams = [tuple(g[i : i + n]) for g in kept for i in range(len(g) - n + 1)]
        if grams:
            reps.append(1 - len(set(grams)) / len(grams))
        outputs.setdefault(tuple(tuple(g) for g in gens), set()).add(task)
    tasks = {task for _, task in attempts}
    return {
        "repetition": sum(reps) / len(reps) if reps else None,
        "distinct_completions": len(outputs) / len(attempts) if attempts else None,
        "top_completion_task_share": (
            max(len(v) for v in outputs.values()) / len(tasks) if outputs else None
        ),
    }


RUN_TESTS = [901, 902, 903, 904, 905]  # "Running the tests now." + run_tests()
FINISH = [951, 952, 953]


def test_identical_tool_turns_across_tasks_are_not_one_answer() -> None:
    # Four tasks, each attempt: its own solution, the same test call twice, finish.
    attempts = [
        ([[10 + t, 20 + t, 30 + t, 40 + t], RUN_TESTS, RUN_TESTS, FINISH], f"t{t}")
        for t in range(4)
    ]
    out = build_attempts(attempts).finalize()
    assert out["completions"] == 16  # lengths still count every generation
    assert out["distinct_completions"] == 1.0
    assert out["top_completion_task_share"] == 0.25
    # solution 3 bigrams + tests 4 + finish 2 (the second test run adds none): no repeat.
    assert out["repetition"] == 0.0
    # Judged per generation, the same turns were one completion for every task.
    flat = build(
        [g for gens, _ in attempts for g in gens], [t for _, t in attempts for _ in range(4)]
    )
    assert flat.finalize()["top_completion_task_share"] == 1.0


def test_one_answer_across_tasks_is_still_one_output() -> None:
    hack = [7, 7, 8, 9]
    attempts = [([RUN_TESTS, hack, RUN_TESTS, FINISH], f"t{t}") for t in range(3)]
    attempts.append(([RUN_TESTS, [1, 2, 3], RUN_TESTS, FINISH], "t3"))
    out = build_attempts(attempts).finalize()
    assert out["top_completion_task_share"] == 0.75
    assert out["distinct_completions"] == 0.5
    # hack bigrams (7,7),(7,8),(8,9) + tests 4 + finish 2 = 9 n-grams, all distinct.
    assert out["repetition"] == 0.0


def test_repetition_counts_ngrams_repeated_across_an_attempts_turns() -> None:
    # Two different turns sharing the bigram (1, 2): 4 n-grams, 3 distinct.
    out = build_attempts([([[1, 2, 3], [1, 2, 4]], "t")]).finalize()
    assert out["repetition"] == pytest.approx(0.25)
    assert out["distinct_completions"] == 1.0


def test_single_generation_attempts_keep_the_generation_figures() -> None:
    seqs = [[5, 6, 5, 6, 5], [5, 6, 5, 6, 5], [1, 2, 3]]
    tasks = ["a", "b", "c"]
    per_gen = build(seqs, tasks, ngram=2).finalize()
    per_att = build_attempts([([s], t) for s, t in zip(seqs, tasks, strict=True)]).finalize()
    assert_identical(per_att, per_gen)
    assert build_attempts([([s], t) for s, t in zip(seqs, tasks, strict=True)]).hashes == (
        build(seqs, tasks, ngram=2).hashes
    )


def test_attempt_ids_must_keep_an_attempts_generations_together() -> None:
    with pytest.raises(ValueError, match="non-decreasing"):
        CompletionAgg.from_arrays(
            np.array([1, 1, 1]),
            np.zeros(3, bool),
            np.array([1, 2, 3]),
            np.array([0, 1, 2, 3]),
            None,
            attempt_G=np.array([0, 1, 0]),
        )
    with pytest.raises(ValueError, match="shape"):
        CompletionAgg.from_arrays(
            np.array([1]),
            np.zeros(1, bool),
            np.array([1]),
            np.array([0, 1]),
            None,
            attempt_G=np.array([0, 0]),
        )


attempt_st = st.tuples(
    st.lists(st.lists(st.integers(0, 3), max_size=6), min_size=1, max_size=5),
    st.sampled_from("abcd"),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(attempt_st, max_size=10), st.integers(1, 3))
def test_attempt_figures_match_reference(attempts, n) -> None:
    out = build_attempts(attempts, ngram=n).finalize()
    want = ref_attempts(attempts, n)
    for key, value in want.items():
        assert out[key] == (None if value is None else pytest.approx(value, rel=1e-12))


@settings(max_examples=100, deadline=None)
@given(st.lists(attempt_st, max_size=10), st.data())
def test_any_split_of_attempts_merges_to_the_whole(attempts, data) -> None:
    shards, shape, rnd = data.draw(split_plans(len(attempts)))
    aggs = [build_attempts([attempts[i] for i in s]) for s in shards]
    merged = merge_tree(aggs, CompletionAgg.empty(), shape, rnd)
    assert_identical(merged.finalize(), build_attempts(attempts).finalize())


def test_many_attempts_cross_the_dedup_blocks() -> None:
    rng = np.random.default_rng(11)
    attempts = [
        (
            [list(rng.integers(0, 4, rng.integers(0, 12))) for _ in range(rng.integers(1, 6))],
            f"t{rng.integers(0, 40)}",
        )
        for _ in range(700)
    ]
    out = build_attempts(attempts, ngram=3).finalize()
    want = ref_attempts([([list(map(int, g)) for g in gens], t) for gens, t in attempts], 3)
    assert out["repetition"] == pytest.approx(want["repetition"], rel=1e-12)
    assert out["distinct_completions"] == pytest.approx(want["distinct_completions"])
    assert out["top_completion_task_share"] == pytest.approx(want["top_completion_task_share"])


def test_batch_generation_hashes_equal_one_blake2b_each_lengths_0_and_1() -> None:
    from rlstream.metrics.completions import _generation_hashes

    seqs = [[], [7], [1, 2, 3], [], [2**40, -5]]
    tokens = np.array([t for s in seqs for t in s], dtype=np.int64)
    offsets = np.cumsum([0, *map(len, seqs)]).astype(np.int64)
    want = [
        int.from_bytes(
            hashlib.blake2b(struct.pack(f"<{len(s)}q", *s), digest_size=8).digest(), "little"
        )
        for s in seqs
    ]
    assert _generation_hashes(tokens, offsets) == want
