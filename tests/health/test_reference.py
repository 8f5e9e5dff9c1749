"""docs/health.md's Defaults section is what the config says."""

from __future__ import annotations

from pathlib import Path

from rlstream.health.reference import defaults_markdown


def test_docs_defaults_section_matches_the_config():
    page = (Path(__file__).parents[2] / "docs" / "health.md").read_text()
    assert page.endswith(defaults_markdown()), "run: python -m rlstream.health.reference"
