"""The "Defaults" reference of docs/health.md, rendered from the rules config.

Each field's documentation is the string literal that follows it in
``rlstream/health/config.py``, ``thresholds.py``, ``thresholds_policy.py`` or
``config_peers.py`` (attribute docstrings, read with ``ast``); defaults come
from the dataclasses themselves, so the page cannot drift from the code:

    python -m rlstream.health.reference      # prints the section
"""

from __future__ import annotations

import ast
import dataclasses
import inspect

from rlstream.health import config as C
from rlstream.health import config_peers, thresholds, thresholds_policy

SOURCES = (C, thresholds, thresholds_policy, config_peers)
"""The modules whose classes hold the documented fields."""


def _field_docs() -> dict[str, dict[str, str]]:
    """class name -> field name -> its docstring (whitespace collapsed)."""
    out: dict[str, dict[str, str]] = {}
    nodes = [n for mod in SOURCES for n in ast.parse(inspect.getsource(mod)).body]
    for node in nodes:
        if not isinstance(node, ast.ClassDef):
            continue
        docs: dict[str, str] = {}
        body = node.body
        for i, stmt in enumerate(body[:-1]):
            nxt = body[i + 1]
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[stmt.target.id] = " ".join(nxt.value.value.split())
        out[node.name] = docs
    return out


def _table(obj: object, docs: dict[str, str]) -> list[str]:
    lines = ["| key | default | meaning |", "|---|---|---|"]
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        if f.name == "enabled":
            continue
        lines.append(f"| {f.name} | {getattr(obj, f.name)} | {docs.get(f.name, '')} |")
    return lines


def defaults_markdown(rules: C.RulesConfig = C.DEFAULT_RULES) -> str:
    """The section, from ``### [history]`` to the last rule's table."""
    docs = _field_docs()
    out = ["### [history]", "", *_table(rules.history, docs["HistoryConfig"])]
    for code in C.CODES:
        rule = rules.rule(code)
        cls = type(rule)
        out += ["", f"### [{code}]", "", " ".join((cls.__doc__ or "").split()), ""]
        inherited: dict[str, str] = {}
        for k in reversed(cls.__mro__):  # base classes first, overridden by subclasses
            inherited.update(docs.get(k.__name__, {}))
        out += _table(rule, inherited)
    out += ["", "### [cohorts]", "", " ".join((C.CohortsConfig.__doc__ or "").split()), ""]
    out += _table(rules.cohorts, docs["CohortsConfig"])
    out += ["", "### [limits]", "", " ".join((C.LimitsConfig.__doc__ or "").split()), ""]
    out += _table(rules.limits, docs["LimitsConfig"])
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(defaults_markdown(), end="")
