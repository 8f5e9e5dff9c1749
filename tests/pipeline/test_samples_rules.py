"""The rules file's [samples] table and --samples-top: what is kept and scanned, and
clear errors for a bad table; the health rules' loader accepts the table."""

from __future__ import annotations

import argparse

import pytest

from rlstream.cli_support import samples_settings
from rlstream.errors import ConfigError
from rlstream.health import load_rules
from rlstream.metrics.scanners import DEFAULT_SCANNERS, SampleText, scan

RULES = """
[samples]
top = 6
probes = 2
high_reward = 1
default_scanners = false

[[samples.scanner]]
name = "reads_answer_key"
pattern = "answers?\\\\.json"
on = "tool_calls"

[low_ess]
ess_max = 0.6
"""


def _args(path, top=None) -> argparse.Namespace:
    return argparse.Namespace(rules=str(path) if path else None, samples_top=top)


def test_rules_file_sets_samples_and_health_rules_alike(tmp_path):
    f = tmp_path / "rules.toml"
    f.write_text(RULES)
    cfg = samples_settings(_args(f))
    assert (cfg.top, cfg.probes, cfg.high_reward) == (6, 2, 1.0)
    (sc,) = cfg.all_scanners()
    assert sc.name == "reads_answer_key"
    assert scan(cfg.all_scanners(), SampleText((), ("```bash\ncat answers.json\n```",))) == (
        "reads_answer_key",
    )
    assert load_rules(f).low_ess.ess_max == 0.6
    assert samples_settings(_args(f, top=2)).top == 2
    assert samples_settings(_args(None)).all_scanners() == DEFAULT_SCANNERS


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ("[samples]\ntop = 'x'\n", "top must be int"),
        ("[samples]\nkeep = 3\n", "unknown key 'keep'"),
        ("[samples]\n[[samples.scanner]]\nname = 'x'\npattern = '('\n", "bad pattern"),
        ("[samples]\n[[samples.scanner]]\nname = 'x'\nentry = 'nope_mod:f'\n", "cannot be loaded"),
        ("[samples]\n[[samples.scanner]]\nname = 'x'\nregex = 'a'\n", "unknown: ['regex']"),
    ],
)
def test_a_bad_samples_table_names_what_is_wrong(tmp_path, table, says):
    f = tmp_path / "rules.toml"
    f.write_text(table)
    with pytest.raises(ConfigError, match="samples") as e:
        samples_settings(_args(f))
    assert says in str(e.value)
