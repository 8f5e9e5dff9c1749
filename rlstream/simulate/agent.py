"""Multi-turn agent mode: attempts laid out as a coding agent's model calls.

With `SimConfig.agent` (CLI `--agent`) every attempt is 4 to 8 generations: look at
the files, then rounds of writing the solution and running the tests, then finish:

    turn 0          LIST    "Let me look at the files." + list_files()
    odd turns       model-written: the task's solution (sampled, as every turn is
                    outside agent mode)
    even turns > 0  RUN     "Running the tests now." + run_tests()
    last turn       FINISH  "Done." + finish(), when the agent stopped

An attempt with `k` rounds has `2k + 2` turns; one that would need more than
`max_turns` stops at `max_turns` (termination `max_turns`, its last turn a write).
LIST, RUN and FINISH are fixed actions: the same token ids in every attempt of every
task and run (`ACTIONS`), forced to the top candidate of the sampler, like a
well-trained agent's tool-call boilerplate. A degenerate attempt (the
`degenerate_outputs` scenario) is LIST, the constant answer, RUN, FINISH: the answer
is what collapses, the boilerplate around it is the same as a healthy attempt's.

Pure functions of their arguments; the engine draws every random number.
"""

from __future__ import annotations

import numpy as np

FREE = -1
LIST, RUN, FINISH = 0, 1, 2
# Token ids of each fixed action's text and call (below 1000: in every vocabulary the
# simulator allows).
ACTIONS: tuple[np.ndarray, ...] = tuple(
    np.random.default_rng([7, 3, i]).integers(0, 1000, n).astype(np.int64)
    for i, n in enumerate((14, 12, 6))
)
DEGENERATE_TURNS = 4


def agent_turns(rounds_A: np.ndarray, max_turns: int) -> tuple[np.ndarray, np.ndarray]:
    """(turns, whether the attempt ran out of turns) for attempts of `rounds_A` write
    and test rounds (each >= 1)."""
    want = 2 * np.asarray(rounds_A, np.int64) + 2
    return np.minimum(want, max_turns), want > max_turns


def action_grid(turns_A: np.ndarray, finished_A: np.ndarray, max_turns: int) -> np.ndarray:
    """(A, max_turns) action of each turn: LIST, RUN, FINISH or FREE (model-written).
    Columns at or beyond an attempt's turns are FREE; FINISH is the last turn of the
    attempts that `finished_A`."""
    A = turns_A.size
    col = np.arange(max_turns)[None, :]
    grid = np.full((A, max_turns), FREE, np.int64)
    grid[:, 0] = LIST
    grid[:, 2::2] = RUN
    last = col == (turns_A[:, None] - 1)
    grid = np.where(last & finished_A[:, None], FINISH, grid)
    return np.where(col < turns_A[:, None], grid, FREE)


def action_lengths(grid: np.ndarray) -> np.ndarray:
    """Token count of each fixed action in `grid` (0 where FREE)."""
    lens = np.array([a.size for a in ACTIONS], np.int64)
    return np.where(grid >= 0, lens[np.maximum(grid, 0)], 0)


def action_tokens(action_T: np.ndarray, pos_T: np.ndarray) -> np.ndarray:
    """Token id of every token of a fixed action (`action_T` >= 0) at its position; 0
    elsewhere."""
    out = np.zeros(action_T.size, np.int64)
    for i, ids in enumerate(ACTIONS):
        on = action_T == i
        out[on] = ids[np.minimum(pos_T[on], ids.size - 1)]
    return out
