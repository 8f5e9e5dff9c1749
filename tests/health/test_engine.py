"""Alert lifecycle, hysteresis, config overrides, pickling, bounded memory, purity."""

from __future__ import annotations

import ast
import dataclasses
import pickle
import random
from pathlib import Path

import pytest
from health_synth import CTX, fold_all, healthy_row, rows

from rlstream.errors import ConfigError
from rlstream.health import (
    DEFAULT_RULES,
    check_time,
    findings,
    fold_step,
    load_rules,
    new_state,
    rules_from_dict,
)
from rlstream.health.config import RuleConfig, RulesConfig

HEALTH = Path(__file__).resolve().parents[2] / "rlstream" / "health"


def _transitions(rs, code, cfg=DEFAULT_RULES):
    _, tr = fold_all(rs, cfg=cfg)
    return [(t.from_state, t.to_state, t.step) for t in tr if t.code == code]


def _short_lengths(rs, start, stop, factor):
    for r in rs[start:stop]:
        r["completion_len_mean"] *= factor
    return rs


def test_pending_firing_resolved_sequence():
    rs = _short_lengths(rows(130), 60, 90, 0.2)
    tr = _transitions(rs, "length_collapse")
    states = [(a, b) for a, b, _ in tr]
    assert states == [("inactive", "pending"), ("pending", "firing"), ("firing", "resolved")]
    pending, firing, resolved = (s for _, _, s in tr)
    # The recent median (5 steps) crosses at step 62; for_steps=5 fires 4 steps later;
    # clear_steps=5 resolves 5 clear evaluations after the median recovers (step 92).
    assert pending == 62 and firing == 66 and 94 <= resolved <= 98
    state, _ = fold_all(rs)
    [f] = [f for f in findings(state) if f.code == "length_collapse"]
    assert f.state == "resolved" and f.since_step == 62 and "resolved at step" in f.message


def test_resolved_findings_age_out():
    rs = _short_lengths(rows(200), 60, 90, 0.2)
    state, _ = fold_all(rs)  # resolved near step 96, keep_resolved_steps = 50
    assert "length_collapse" not in [f.code for f in findings(state)]


def test_short_blip_stays_pending_and_never_fires():
    rs = _short_lengths(rows(120), 60, 64, 0.2)  # 2 steps of recent median below
    tr = _transitions(rs, "length_collapse")
    assert [(a, b) for a, b, _ in tr] == [("inactive", "pending"), ("pending", "inactive")]


def test_flickering_condition_does_not_flap():
    rs = rows(200)
    for r in rs[60::2]:  # reported reward wrong on every other step
        r["reported_reward_mean"] = r["reward_mean"] + 0.2
    tr = _transitions(rs, "metric_disagreement")
    assert [(a, b) for a, b, _ in tr] == [("inactive", "pending"), ("pending", "firing")]


def test_metric_hovering_at_threshold_does_not_flap():
    rng = random.Random(3)
    rs = rows(300)
    for r in rs[60:]:  # length around 0.4x baseline, the firing threshold, +-10%
        r["completion_len_mean"] = 24 * 0.4 * (1 + rng.gauss(0, 0.1))
    tr = _transitions(rs, "length_collapse")
    assert [(a, b) for a, b, _ in tr] == [("inactive", "pending"), ("pending", "firing")]
    no_hyst = dataclasses.replace(
        DEFAULT_RULES, history=dataclasses.replace(DEFAULT_RULES.history, hysteresis=1.0)
    )
    assert len(_transitions(rs, "length_collapse", no_hyst)) > 2  # the band is what helps


def test_fold_does_not_modify_its_input_and_ignores_old_steps():
    rs = rows(80)
    state, _ = fold_all(rs[:70])
    before = pickle.dumps(state)
    after, _ = fold_step(state, rs[70], CTX)
    assert pickle.dumps(state) == before and after.last_step == 70
    again, tr = fold_step(after, rs[65], CTX)  # out of order: ignored
    assert again is after and tr == []


def test_pickle_round_trip_continues_identically():
    rs = rows(160, "length_collapse", onset=110)
    state, _ = fold_all(rs[:100])
    clone = pickle.loads(pickle.dumps(state))
    a, b = state, clone
    tr_a, tr_b = [], []
    for r in rs[100:]:
        a, ta = fold_step(a, r, CTX)
        b, tb = fold_step(b, r, CTX)
        tr_a += ta
        tr_b += tb
    assert tr_a == tr_b and tr_a
    assert findings(a) == findings(b)
    assert check_time(a, 1e12, None, CTX)[1] == check_time(b, 1e12, None, CTX)[1]


def test_state_size_does_not_grow_with_run_length():
    rng = random.Random(0)
    state = new_state()
    sizes = {}
    for i in range(2000):
        state, _ = fold_step(state, healthy_row(i, rng), CTX)
        if i in (199, 1999):
            sizes[i] = len(pickle.dumps(state))
    assert sizes[1999] < 1.1 * sizes[199]


def test_load_rules_overrides_and_keeps_defaults(tmp_path):
    p = tmp_path / "rules.toml"
    p.write_text(
        "[history]\nwindow = 40\n\n[low_ess]\ness_max = 0.5\nfor_steps = 2\n"
        '\n[tasks_mastered]\nseverity = "warning"\nreward_min = 1\n'
    )
    cfg = load_rules(p)
    assert cfg.history.window == 40 and cfg.history.baseline_steps == 10
    assert cfg.low_ess.ess_max == 0.5 and cfg.low_ess.for_steps == 2
    assert cfg.low_ess.ratio == DEFAULT_RULES.low_ess.ratio
    assert cfg.tasks_mastered.reward_min == 1.0 and isinstance(cfg.tasks_mastered.reward_min, float)
    assert cfg.tasks_mastered.severity == "warning"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.low_ess.ess_max = 0.1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[low_ess]\ness_min = 0.5\n", "unknown key 'ess_min' in [low_ess]"),
        ("[low_esss]\ness_max = 0.5\n", "unknown table [low_esss]"),
        ('[low_ess]\ness_max = "high"\n', "[low_ess] ess_max must be float"),
        ("[low_ess]\nfor_steps = 1.5\n", "[low_ess] for_steps must be int"),
        ('[low_ess]\nseverity = "fatal"\n', "severity must be one of"),
        ("[history]\nwindow = 10\n", "window (10) must be >= trend_steps"),
        ("[low_ess\n", "not valid TOML"),
    ],
)
def test_load_rules_rejects_bad_files_clearly(tmp_path, text, needle):
    p = tmp_path / "rules.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_rules(p)
    assert needle in str(err.value)


def test_missing_rules_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_rules(tmp_path / "nope.toml")


def test_disabled_rule_never_fires():
    cfg = rules_from_dict({"degenerate_outputs": {"enabled": False}})
    _, tr = fold_all(rows(130, "degenerate_outputs", onset=60), cfg=cfg)
    assert not [t for t in tr if t.code == "degenerate_outputs"]


def test_every_field_is_documented():
    src = (HEALTH / "config.py").read_text()
    tree = ast.parse(src)
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            body = node.body
            for i, stmt in enumerate(body):
                if isinstance(stmt, ast.AnnAssign) and node.name in ("HistoryConfig", "RuleConfig"):
                    nxt = body[i + 1] if i + 1 < len(body) else None
                    assert isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant), (
                        f"{node.name}.{stmt.target.id} lacks a docstring"
                    )
    for f in dataclasses.fields(RulesConfig):
        assert f.name == "history" or issubclass(
            f.type if isinstance(f.type, type) else RuleConfig, RuleConfig
        )


def test_health_is_pure():
    forbidden = {"ray", "fsspec", "s3fs", "pyarrow", "boto3", "aiobotocore"}
    for path in HEALTH.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                assert top not in forbidden, f"{path.name} imports {name}"
                if top == "rlstream":
                    assert name.startswith("rlstream.health") or name == "rlstream.errors", (
                        f"{path.name} imports {name}: health may only use itself and errors"
                    )
