"""`watch --notify`: messages for finding transitions, checked against a receiver on
127.0.0.1. Here without Ray, on a copy of an analyzed OUT: one message for a burst,
retries with backoff, nothing sent twice across a restart of the notifier, Slack
escaping, and a blocked endpoint never blocking the caller. The kill -9 of a real
watch between a transition and its message is in tests/runtime/test_notify_crash.py."""

from __future__ import annotations

import json
import re
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from rlstream.fleet.notify import Notifier, NotifyConfig, render, transition_key
from rlstream.fleet.read import read_table
from tests.fleet.conftest import HOSTILE_ID


class Receiver:
    """An HTTP endpoint on 127.0.0.1 that records what is posted; `fail` answers the
    next posts with 503, `gate` (cleared) holds each request until set."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.fail = 0
        self.attempts = 0
        self.gate = threading.Event()
        self.gate.set()
        self.waiting = threading.Event()
        rec = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers["Content-Length"]))
                rec.attempts += 1
                rec.waiting.set()
                rec.gate.wait(60)
                if rec.fail:
                    rec.fail -= 1
                    self.send_response(503)
                    self.end_headers()
                    return
                rec.bodies.append(json.loads(data))
                rec.headers.append(dict(self.headers))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *a) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self) -> None:
        self.gate.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def out(fleet_out, tmp_path):
    dst = tmp_path / "out"
    shutil.copytree(fleet_out.out, dst)
    return dst


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def _transitions(out) -> list[dict]:
    rows = read_table(str(out), "alerts").to_pylist()
    return [r for r in rows if r["to_state"] in ("firing", "resolved")]


def _cfg(url: str, fmt: str = "json", **kw) -> NotifyConfig:
    # The fleet's runs were simulated in the past: their whole history is recent enough.
    kw.setdefault("history_seconds", 10**10)
    return NotifyConfig((url,), fmt, "http://127.0.0.1:9/", first_backoff=0.0, **kw)


def test_a_burst_is_one_message_sent_once_across_restarts(out, receiver, fleet_out):
    want = _transitions(out)
    runs = {t["run_id"] for t in want}
    assert len(want) >= 3 and len(runs) >= 3  # several runs fire: a burst
    n = Notifier(str(out), _cfg(receiver.url))
    receiver.fail = 2
    assert n.deliver(force=True) == 0 and n.deliver(force=True) == 0  # 503, 503
    assert n.failed_posts == 2
    assert n.deliver(force=True) == 1
    assert receiver.attempts == 3 and len(receiver.bodies) == 1
    msg = receiver.bodies[0]
    got = {(t["run_id"], t["code"], t["to_state"], t["step"]) for t in msg["transitions"]}
    assert got == {(t["run_id"], t["code"], t["to_state"], t["step"]) for t in want}
    assert len(msg["transitions"]) == len(want)
    assert receiver.headers[0]["Idempotency-Key"] == msg["id"]
    first = msg["transitions"][0]
    assert first["evidence"] and first["advice"]
    # each run is named by its folder, as the pages name it
    folders = {json.loads((d / "run.json").read_text())["run_id"]: d.name
               for d in fleet_out.root.iterdir() if (d / "run.json").exists()}  # fmt: skip
    assert {t["run_id"]: t["name"] for t in msg["transitions"]} == {
        t["run_id"]: folders[t["run_id"]] for t in msg["transitions"]
    }
    assert first["url"].startswith("http://127.0.0.1:9/run?id=")
    # nothing pending: no second message, from this notifier or a new one (a restart)
    assert n.deliver(force=True) == 0
    assert Notifier(str(out), _cfg(receiver.url)).deliver(force=True) == 0
    assert len(receiver.bodies) == 1
    sent = read_table(str(out), "notify_sent").to_pylist()
    want_keys = sorted(transition_key(t) for t in want)
    assert sorted(r["key"] for r in sent if r["key"] not in ("start",) and "/" not in r["key"]) \
        == want_keys  # fmt: skip
    # claimed before the first post (the 503s), in the same message
    claims = [r for r in sent if r["key"].startswith("claim/")]
    assert sorted(r["key"][6:] for r in claims) == want_keys
    assert {r["message_id"] for r in claims} == {msg["id"]}


def test_backoff_doubles_and_caps(out, receiver):
    n = Notifier(str(out), NotifyConfig((receiver.url,), "json", first_backoff=1.0,
                                        max_backoff=4.0, history_seconds=10**10))  # fmt: skip
    receiver.fail = 10
    seen = []
    for _ in range(4):
        n.deliver(force=True)
        seen.append(n._backoff[receiver.url])
    assert seen == [1.0, 2.0, 4.0, 4.0]
    # not due yet: no post without force
    assert n.deliver() == 0 and receiver.attempts == 4


def test_history_before_the_first_start_is_not_sent(out, receiver):
    n = Notifier(str(out), NotifyConfig((receiver.url,), "json", history_seconds=60))
    assert n.deliver(force=True) == 0  # the runs' transitions are days old
    assert receiver.attempts == 0


def test_slack_payload_escapes_run_strings(out, receiver):
    n = Notifier(str(out), _cfg(receiver.url, "slack"))
    assert n.deliver(force=True) == 1
    text = receiver.bodies[0]["text"]
    assert text.startswith("rlstream: ")
    assert HOSTILE_ID not in text and "&lt;script&gt;" in text
    assert "|run page>" in text
    # by name, then id: "`run-000-healthy` (sim-...)"
    lines = text.splitlines()[1:]
    assert lines and all(re.search(r"on `run-\d{3}-[a-z_]+` \(", line) for line in lines)


def test_a_blocked_endpoint_never_blocks_the_commit_side(out, receiver):
    receiver.gate.clear()  # the endpoint holds every request
    n = Notifier(str(out), _cfg(receiver.url, poll_seconds=0.05, timeout_seconds=30)).start()
    try:
        assert receiver.waiting.wait(60)  # the thread is inside a post ...
        for _ in range(100):
            n.on_commit([], 0.0, 1, 0, 0)  # ... and the driver's calls return at once
        assert n._thread.is_alive() and receiver.bodies == []
    finally:
        receiver.gate.set()
        n.close()
    assert len(receiver.bodies) == 1


def test_a_crash_after_the_2xx_resends_the_same_message_id_once(out, receiver, monkeypatch):
    """The one window left (docs/fleet.md, "Exactly once"): the endpoint answered 2xx
    but the process died before `notify_sent` was committed. The restarted notifier
    sends that message again with the same `Idempotency-Key` and JSON `id`, so a
    receiver that deduplicates drops it; and never a third time."""
    want = _transitions(out)
    real = Notifier._record

    def die_before_recording(self, sink, ep, keys, message_id, *version):
        if keys != ["start"] and not keys[0].startswith("claim/"):
            raise SystemExit("killed between the 2xx and the notify_sent commit")
        return real(self, sink, ep, keys, message_id, *version)

    monkeypatch.setattr(Notifier, "_record", die_before_recording)
    with pytest.raises(SystemExit):
        Notifier(str(out), _cfg(receiver.url)).deliver(force=True)
    monkeypatch.setattr(Notifier, "_record", real)
    assert Notifier(str(out), _cfg(receiver.url)).deliver(force=True) == 1
    assert Notifier(str(out), _cfg(receiver.url)).deliver(force=True) == 0
    assert len(receiver.bodies) == 2
    first, again = receiver.bodies
    assert first["id"] == again["id"] == receiver.headers[0]["Idempotency-Key"]
    assert receiver.headers[1]["Idempotency-Key"] == first["id"]
    assert first["transitions"] == again["transitions"] and len(first["transitions"]) == len(want)


def _add_transition(out, run_id: str = "run-new", step: int = 7) -> dict:
    """Commit one more firing transition to OUT's alerts, as a watch would."""
    from rlstream.fleet.read import out_sink
    from rlstream.sinks.health import alerts_table

    row = {"run_id": run_id, "code": "low_ess", "severity": "critical", "from_state": "pending",
           "to_state": "firing", "step": step, "time": 4.0e9, "message": "ESS 0.1",
           "commit_seq": 1}  # fmt: skip
    out_sink(str(out)).append("alerts", alerts_table([row]), {})
    return row


def test_the_resend_is_the_same_message_although_new_transitions_came_meanwhile(
    out, receiver, monkeypatch
):
    """A kill -9 between the 2xx and the record, then a transition committed before the
    restarted notifier's first round (the restarted watch catches up on its runs): the
    resend is still the first message, with its id and its transitions only, so a
    deduplicating receiver can drop it; the new transition goes in a message of its own."""
    want = _transitions(out)
    real = Notifier._record

    def die_before_recording(self, sink, ep, keys, message_id, *version):
        if keys != ["start"] and not keys[0].startswith("claim/"):
            raise SystemExit("killed between the 2xx and the notify_sent commit")
        return real(self, sink, ep, keys, message_id, *version)

    monkeypatch.setattr(Notifier, "_record", die_before_recording)
    with pytest.raises(SystemExit):
        Notifier(str(out), _cfg(receiver.url)).deliver(force=True)
    monkeypatch.setattr(Notifier, "_record", real)
    _add_transition(out)
    assert Notifier(str(out), _cfg(receiver.url)).deliver(force=True) == 2
    assert Notifier(str(out), _cfg(receiver.url)).deliver(force=True) == 0
    first, again, new = receiver.bodies
    assert again == first and len(first["transitions"]) == len(want)
    assert [h["Idempotency-Key"] for h in receiver.headers] == [first["id"], first["id"], new["id"]]
    assert new["id"] != first["id"]
    assert [(t["run_id"], t["code"]) for t in new["transitions"]] == [("run-new", "low_ess")]


def test_a_post_whose_answer_was_lost_is_retried_as_the_same_message(out, receiver):
    """The receiver took the message but its answer was a 503 (or never came): the
    retry carries the same id and transitions, though a transition arrived meanwhile,
    which then goes in the next message."""
    n = Notifier(str(out), _cfg(receiver.url))
    receiver.fail = 1
    assert n.deliver(force=True) == 0 and receiver.attempts == 1
    _add_transition(out)
    assert n.deliver(force=True) == 2
    retried, new = receiver.bodies
    assert "run-new" not in {t["run_id"] for t in retried["transitions"]}
    assert [t["run_id"] for t in new["transitions"]] == ["run-new"]
    sent = read_table(str(out), "notify_sent").to_pylist()
    claim_ids = {r["message_id"] for r in sent if r["key"].startswith("claim/")}
    assert claim_ids == {retried["id"], new["id"]}


def test_a_redirect_is_not_followed_as_a_get_that_would_count_as_sent(out):
    """urllib follows a 302 to a POST with a GET without the body; a 200 to that GET
    is not a delivery. The post fails (retried later) and nothing is recorded as sent."""
    gets = []

    class H(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(302)
            self.send_header("Location", "/moved")
            self.end_headers()

        def do_GET(self) -> None:
            gets.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *a) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/hook"
        n = Notifier(str(out), _cfg(url))
        assert n.deliver(force=True) == 0 and n.failed_posts == 1
        assert gets == []
        sent = read_table(str(out), "notify_sent").to_pylist()
        assert [r for r in sent if r["key"] != "start" and "/" not in r["key"]] == []
    finally:
        server.shutdown()
        server.server_close()


def _live_args(out, **kw):
    import argparse

    base = dict(out=str(out), ui_port=None, ui_host="127.0.0.1", ui_url=None,
                metrics_port=None, metrics_host="127.0.0.1", notify=["http://127.0.0.1:9/h"],
                notify_format="json")  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize("ui_port", [0, None])
def test_links_go_to_ui_url_when_given(out, ui_port):
    """`--ui-url`: where people open the pages (a proxy, a port-forward, a serve
    elsewhere), with or without `--ui-port`; not the address the watch is bound to."""
    from rlstream.cli_live import start_live

    fan, close = start_live(_live_args(out, ui_port=ui_port, ui_url="https://rl.example/p/"), {})
    try:
        notifier = fan.listeners[-1]
        assert notifier.cfg.base_url == "https://rl.example/p/"
        doc = json.loads(render([_transitions(out)[0]], notifier.cfg, str(out), "m"))
        assert doc["transitions"][0]["url"].startswith("https://rl.example/p/run?id=")
    finally:
        close()


def test_ui_url_must_be_http(out):
    from rlstream.cli_live import start_live
    from rlstream.errors import ConfigError

    with pytest.raises(ConfigError, match=r"--ui-url 'rl\.example' is not an http"):
        start_live(_live_args(out, ui_url="rl.example"), {})


def test_notify_sent_is_read_once_not_every_round(out, receiver, monkeypatch):
    """A round's cost does not grow with the messages sent: the notifier reads
    notify_sent at its first round and then keeps it (it is the table's only writer);
    a restart reads it again and still sends nothing twice."""
    import rlstream.fleet.read as read

    reads = []
    real = read.read_table

    def counting(out_, table, *a, **kw):
        reads.append(table)
        return real(out_, table, *a, **kw)

    monkeypatch.setattr(read, "read_table", counting)
    n = Notifier(str(out), _cfg(receiver.url))
    assert n.deliver(force=True) == 1
    first = reads.count("notify_sent")  # 0: the first round wrote the table
    _add_transition(out)
    assert n.deliver(force=True) == 1  # the new transition, from the kept outbox
    for _ in range(3):
        assert n.deliver(force=True) == 0
    assert reads.count("notify_sent") == first and reads.count("alerts") == 5
    assert Notifier(str(out), _cfg(receiver.url)).deliver(force=True) == 0  # a restart
    assert reads.count("notify_sent") == first + 1 and len(receiver.bodies) == 2


def test_a_severity_flapping_at_every_step_pages_once_per_rise(out, receiver):
    """A failure burst that swings between warning and critical at every step is one
    firing message, one when it first rises to critical, and one when it resolves;
    not a message per step. A new firing stretch starts over."""
    from rlstream.fleet.read import out_sink
    from rlstream.sinks.health import alerts_table

    seq = [("pending", "firing", "warning", 1), ("firing", "firing", "critical", 2),
           ("firing", "firing", "warning", 3), ("firing", "firing", "critical", 4),
           ("firing", "firing", "warning", 5), ("firing", "resolved", "warning", 6),
           ("resolved", "firing", "warning", 8), ("firing", "firing", "critical", 9),
           ("firing", "firing", "warning", 10)]  # fmt: skip
    rows = [{"run_id": "flappy", "code": "rollout_failure_burst", "severity": sev,
             "from_state": a, "to_state": b, "step": st, "time": 4.0e9 + st,
             "message": f"burst at step {st}", "commit_seq": 1} for a, b, sev, st in seq]  # fmt: skip
    out_sink(str(out)).append("alerts", alerts_table(rows), {})
    n = Notifier(str(out), _cfg(receiver.url))
    assert n.deliver(force=True) == 1
    mine = [t for t in receiver.bodies[0]["transitions"] if t["run_id"] == "flappy"]
    assert [(t["step"], t["from_state"], t["to_state"], t["severity"]) for t in mine] == [
        (1, "pending", "firing", "warning"),
        (2, "firing", "firing", "critical"),
        (6, "firing", "resolved", "warning"),
        (8, "resolved", "firing", "warning"),
        (9, "firing", "firing", "critical"),
    ]
    assert n.deliver(force=True) == 0  # the rest are never pending, after a restart too
    assert Notifier(str(out), _cfg(receiver.url)).deliver(force=True) == 0
    text = render(mine, _cfg(receiver.url, "slack"), str(out), "m").decode()
    assert text.count("*escalated*") == 2 and text.count("*firing*") == 2
