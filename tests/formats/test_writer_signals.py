"""Signals the simulated trainers' files must carry for the rules to see them, read
back by the readers: tinker-cookbook's async staleness bound (`rl/train.py`
`Config.async_config`), the logged groups' text in tinker's `train_logtree.json`,
and a prime-rl episode that ran out of turns (verifiers' `stop_condition`)."""

from __future__ import annotations

import json

import numpy as np
import orjson

from rlstream.formats.prime_rl import PRIME_RL
from rlstream.formats.tinker import TINKER
from rlstream.simulate.text import SHORTCUTS, prompt
from rlstream.simulate.trainer_episodes import episode, logtree
from rlstream.simulate.trainers import Attempt


def _tinker_config(obj):
    files = {"config.json": json.dumps(obj).encode()}
    return TINKER.identity("r", frozenset(files), files.get).config


def test_tinker_staleness_bound_from_async_config():
    cfg = _tinker_config({"max_tokens": 128, "async_config": {"max_steps_off_policy": 3,
                                                              "groups_per_batch": 4}})  # fmt: skip
    assert cfg["training"] == {"max_steps_off_policy": 3}
    assert cfg["sampling"] == {"max_tokens": 128}
    # A recipe's CLI config carries it at the top level; sync training has none.
    assert _tinker_config({"max_steps_off_policy": 2})["training"] == {"max_steps_off_policy": 2}
    assert "training" not in _tinker_config({"max_tokens": 64, "async_config": None})


class _Run:
    run_id = "r"


def _attempt(termination):
    gen = {"tokens": np.array([4, 5]), "ls": np.array([-0.5, -0.1]), "lt": np.array([-0.4, -0.2]),
           "length": 2, "truncated": False, "prompt_len": 3, "text": None}  # fmt: skip
    return Attempt("a1", "g1", "t1", 0.0, True, 1, 4, [gen], termination=termination)


def test_prime_rl_episode_that_ran_out_of_turns():
    out = {}
    for term in ("max_turns", "stop"):
        line = episode(_Run(), 2, _attempt(term))
        assert orjson.loads(line)["traces"][0]["stop_condition"] == (
            "max_turns" if term == "max_turns" else "completed"
        )
        rec, tr = PRIME_RL.parse_file("rollouts", line, "x", 0)
        # a group of one does not train: its sampled tokens are its completion; no text
        assert tr.text is None and tr.tokens[0].tolist() == [4, 5] and not tr.trains
        out[term] = rec["metadata"]
    assert out["max_turns"]["termination_reason"] == "max_turns"
    assert out["max_turns"]["truncated"] is True  # a framework limit (Trace.is_truncated)
    assert out["stop"]["termination_reason"] == "completed" and out["stop"]["truncated"] is False


def test_tinker_logtree_carries_the_logged_groups_text():
    """5 groups of 2: the first 4 are logged (`num_groups_to_log`'s default); group 0's
    second attempt ends with a shortcut; group 1 has equal rewards (not trained)."""
    gen = {"tokens": np.array([4, 5]), "ls": np.array([-0.5, -0.1]), "lt": np.array([-0.4, -0.2]),
           "length": 2, "truncated": False, "prompt_len": 3}  # fmt: skip
    by_group = {}
    for g in range(5):
        members = []
        for t in range(2):
            text = "def solve(x): return x" + ("\n" + SHORTCUTS[0] if (g, t) == (0, 1) else "")
            r = 1.0 if g == 1 else float(t)
            gens = [{**gen, "text": text, "prompt": prompt(f"t{g}")}]
            members.append(Attempt(f"a{g}{t}", f"g{g}", f"t{g}", r, True, 2, 1, gens))
        by_group[f"g{g}"] = members

    class _Step:
        step = 2

    data = logtree(_Step(), by_group)
    recs = TINKER.parse_file("both", data, "iteration_000002/train_logtree.json", 2)
    assert [r.attempt_id for r in recs] == [f"2-{g}-{t}" for g in range(4) for t in range(2)]
    hack = recs[1]
    assert hack.text.returned == ("def solve(x): return x\n" + SHORTCUTS[0],)
    assert hack.text.sent == (prompt("t0"),)  # system and user messages, rendered back
    assert hack.text.reward == 1.0 and hack.trains
    assert [r.trains for r in recs[2:4]] == [False, False]
