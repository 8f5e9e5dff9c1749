"""The probe diff (`fleet.sample_diff`): a known word diff, hostile text escaped, and
the default pick (the run's first probe task, its earliest and newest kept steps)."""

from __future__ import annotations

import re

from rlstream.fleet.sample_diff import (
    NO_PROBE,
    probe_pick,
    probe_section,
    probe_steps,
    word_diff,
)

HOSTILE = '<script>alert("x")</script><img src=x onerror=1>'


def _unmark(html: str) -> str:
    return re.sub(r"</?(ins|del)>", "", html)


def test_a_known_word_diff():
    left, right = word_diff("the cat sat on the mat", "the dog sat on the mat today")
    assert left == "the <del>cat</del> sat on the mat"
    assert right == "the <ins>dog</ins> sat on the mat <ins>today</ins>"
    left, right = word_diff("a b c", "a c")
    assert (left, right) == ("a <del>b</del> c", "a c")
    assert word_diff("same words", "same  words") == ("same words", "same words")


def test_hostile_text_is_escaped_on_both_sides():
    left, right = word_diff(f"keep {HOSTILE}", f"keep {HOSTILE} & more")
    for side in (left, right):
        assert "<script" not in side and "<img" not in side
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;img" in side
    assert right.endswith("<ins>&amp; more</ins>")
    # only the marks are tags: what is left is the escaped text, words joined by spaces
    assert (
        _unmark(left)
        == "keep &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;img src=x onerror=1&gt;"
    )


def _row(task, step, text, kept=("probe",), attempt="a0", reward=0.5):
    return {"task_id": task, "step": step, "returned": text, "kept": list(kept),
            "attempt_id": attempt, "reward": reward}  # fmt: skip


def test_default_pick_is_the_first_probe_task_earliest_and_newest_step():
    rows = [
        _row("t9", 3, "x"),  # kept at one step only: not a candidate
        _row("t2", 5, "x"), _row("t2", 9, "y"), _row("t2", 7, "z"),
        _row("t1", 4, "u"), _row("t1", 12, "v"),
        _row("t0", 1, "top only", kept=("top",)), _row("t0", 2, "top", kept=("top",)),
    ]  # fmt: skip
    steps = probe_steps(rows)
    assert steps == {"t9": [3], "t2": [5, 7, 9], "t1": [4, 12]}
    assert probe_pick(steps) == ("t1", 4, 12)  # kept earliest among the >= 2 steps
    assert probe_pick(steps, "t2") == ("t2", 5, 9)
    assert probe_pick(steps, "t2", 7, 5) == ("t2", 7, 5)
    assert probe_pick(steps, "t2", 6, 99) == ("t2", 5, 9)  # unkept steps: the default
    assert probe_pick(steps, "nope") == ("t1", 4, 12)
    assert probe_pick({"t9": [3]}) is None
    html = probe_section(rows, "t2", 7, 9)
    assert "Probe task t2: step 7 and step 9" in html
    assert '<td class="probe-a"><del>z</del></td>' in html
    assert '<td class="probe-b"><ins>y</ins></td>' in html
    assert probe_section([_row("t9", 3, "x")]) == NO_PROBE


def test_probe_section_escapes_task_ids_and_inline_styles_only_when_asked():
    rows = [_row(HOSTILE, 1, "old"), _row(HOSTILE, 2, "new")]
    html = probe_section(rows)
    assert "<script" not in html and "&lt;script&gt;" in html and "style=" not in html
    assert 'style="background:#fde0dc"' in probe_section(rows, inline=True)
