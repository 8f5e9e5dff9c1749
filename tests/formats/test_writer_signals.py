"""Signals the simulated trainers' files must carry for the rules to see them, read
back by the readers: tinker-cookbook's async staleness bound (`rl/train.py`
`Config.async_config`) and a prime-rl episode that ran out of turns (verifiers'
`stop_condition`)."""

from __future__ import annotations

import json

import numpy as np
import orjson

from rlstream.formats.prime_rl import PRIME_RL
from rlstream.formats.tinker import TINKER
from rlstream.simulate.trainer_episodes import episode
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
