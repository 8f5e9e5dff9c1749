"""The findings timeline of the run page (rlstream/fleet/timeline.py): stretches of
each finding from a run's alerts rows, in any row order, with the current finding's
evidence for an open stretch, and a finding with no transition drawn from its
since_step; every run string escaped."""

from __future__ import annotations

from rlstream.fleet.timeline import episodes, timeline_html


def _t(code, frm, to, step, msg="", sev="warning"):
    return {"code": code, "severity": sev, "from_state": frm, "to_state": to, "step": step,
            "time": None, "message": msg}  # fmt: skip


def test_stretches_from_transitions_in_any_order():
    rows = [
        _t("low_ess", "firing", "firing", 30, "escalated", "critical"),
        _t("low_ess", "pending", "firing", 12, "fired"),
        _t("low_ess", "inactive", "pending", 10, "pending"),
        _t("stalled", "inactive", "firing", 33, "no step"),
        _t("low_ess", "firing", "resolved", 40, "back"),
        _t("low_ess", "resolved", "pending", 50, "again"),
    ]
    now = [{"code": "low_ess", "severity": "warning", "state": "pending", "since_step": 50,
            "message": "ESS 0.6 now"}]  # fmt: skip
    eps = episodes(rows, now)
    got = [(e["code"], e["pending"], e["firing"], e["end"], e["state"], e["severity"]) for e in eps]
    assert got == [
        ("low_ess", 10, 12, 40, "resolved", "critical"),  # its worst severity
        ("stalled", None, 33, None, "firing", "warning"),
        ("low_ess", 50, None, None, "pending", "warning"),
    ]
    assert eps[0]["message"] == "fired" and eps[0]["end_message"] == "back"
    assert eps[2]["message"] == "ESS 0.6 now"  # the open stretch: today's evidence


def test_an_open_stretch_that_fell_back_says_what_it_is_now_and_at_worst():
    rows = [
        _t("burst", "inactive", "firing", 3, "a", "warning"),
        _t("burst", "firing", "firing", 4, "b", "critical"),
        _t("burst", "firing", "firing", 5, "c", "warning"),
    ]
    now = [{"code": "burst", "severity": "warning", "state": "firing", "since_step": 3,
            "message": "c now"}]  # fmt: skip
    html = timeline_html(episodes(rows, now), 6)
    assert "<b>burst</b> [warning now, critical at worst, firing]" in html
    assert 'fill="#c0392b"' in html  # drawn in its worst colour
    rows.append(_t("burst", "firing", "resolved", 6, "d", "warning"))
    assert "<b>burst</b> [critical, resolved]" in timeline_html(episodes(rows), 6)


def test_a_finding_with_no_transition_and_escaping():
    now = [{"code": "x<y>", "severity": "critical", "state": "firing", "since_step": 4,
            "message": "<script>bad()</script>"}]  # fmt: skip
    eps = episodes([], now)
    assert [(e["firing"], e["end"], e["state"]) for e in eps] == [(4, None, "firing")]
    html = timeline_html(eps, 10)
    assert "<script>" not in html and "&lt;script&gt;bad()&lt;/script&gt;" in html
    assert "x&lt;y&gt;" in html and "firing since step 4" in html
    assert timeline_html([], 10) == '<p class="sub">No finding.</p>'


def test_the_list_puts_what_fires_first_most_severe_first():
    rows = [
        _t("a_info", "inactive", "firing", 1, sev="info"),
        _t("b_old", "inactive", "firing", 2),
        _t("b_old", "firing", "resolved", 5),
        _t("c_crit", "inactive", "firing", 8, sev="critical"),
        _t("d_pend", "inactive", "pending", 9),
    ]
    html = timeline_html(episodes(rows), 10)
    order = [html.index(f"<b>{c}</b>") for c in ("c_crit", "a_info", "d_pend", "b_old")]
    assert order == sorted(order)
