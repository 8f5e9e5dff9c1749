"""`watch --notify URL`: a message when a finding fires or resolves.

The outbox is OUT itself: every finding transition the watch commits is an `alerts`
row (written exactly once by the commit protocol, rlstream.pipeline.commit). What was
delivered is the small `notify_sent` table beside it, one row per (endpoint,
transition), in Delta commits that also record the endpoint's app transaction
(`notify-<endpoint hash>`), the same mechanism the tables use. A message is claimed
before its first post: its transitions' `claim/<key>` rows, with its id, in one
commit; after the endpoint's 2xx, their `<key>` rows in a second. So what is pending
after any crash is exactly the transitions with no row: a kill -9 before a message
is delivered loses nothing (it is sent after the restart), and a transition recorded
as sent is never sent again. A claimed message not recorded as sent is posted again
as it was (the same transitions, the same `Idempotency-Key` header and JSON `id`),
before anything new: after a restart, and after a failed post (a timeout or an
error answer may hide that the receiver took it), however many transitions came
meanwhile; they go in the next message. So a message reaches a receiver twice only
when the receiver took it but the watch holds no record of its 2xx: the answer was
lost (a timeout, a dropped connection), or the process died (or OUT was unwritable)
between the 2xx and the second commit. No sender can close that window with a plain
webhook; the repeat carries the same key, which a deduplicating receiver drops.

A `Notifier` runs on its own thread: woken by each commit (`on_commit`, fed by the
driver as the metrics exporter is) or every `poll_seconds`, it reads the alerts with
`to_state` firing or resolved (a firing finding's severity change only when it rises:
`told`), subtracts what was sent or claimed, and posts what is pending to each
endpoint as one message (a burst: many runs firing in one commit is one message; at
most `max_per_message` transitions, the rest in further messages). A failed post (an
error, a non-2xx answer, a redirect, a timeout) is retried with exponential backoff
up to `max_backoff`; the driver never waits on it. Transitions whose time is more
than `history_seconds` before the endpoint's first start (kept in `notify_sent` as a
`start` row) are not sent: a watch started on old runs does not page for their
history.

What a message tells and its formats: `fleet.notify_message`.
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from rlstream.fleet.notify_message import NOTIFIED_STATES, _ms, render, told

__all__ = ["NOTIFIED_STATES", "Notifier", "NotifyConfig", "render", "told", "transition_key"]

log = logging.getLogger("rlstream")

SENT_TABLE = "notify_sent"
SENT_SCHEMA = pa.schema(
    [
        pa.field("endpoint", pa.string(), nullable=False),
        pa.field("key", pa.string(), nullable=False),
        pa.field("message_id", pa.string(), nullable=False),
        pa.field("sent_at", pa.timestamp("ms", tz="UTC"), nullable=False),
    ],
    metadata={"rlstream.schema_version": "1", "rlstream.table": SENT_TABLE},
)
START_KEY = "start"
CLAIM = "claim/"
"""Prefix of the `notify_sent` keys of a message about to be posted (its claim)."""


@dataclass(frozen=True)
class NotifyConfig:
    urls: tuple[str, ...]
    format: str = "slack"
    """`slack` or `json`."""
    base_url: str | None = None
    """Where the run pages are served (`watch --ui-port`), for links; None: no link."""
    poll_seconds: float = 2.0
    timeout_seconds: float = 10.0
    first_backoff: float = 1.0
    max_backoff: float = 60.0
    max_per_message: int = 50
    history_seconds: float = 300.0


def endpoint_id(url: str) -> str:
    """An endpoint's name in `notify_sent` (a hash: a webhook URL is a secret)."""
    return hashlib.sha256(url.encode()).hexdigest()[:16]


def transition_key(t: dict[str, Any]) -> str:
    parts = [t.get(k) for k in ("run_id", "code", "from_state", "to_state", "step")]
    parts.append(_ms(t.get("time")))
    return hashlib.sha256(orjson.dumps([str(p) for p in parts])).hexdigest()[:24]


def _order(a: dict[str, Any]) -> tuple:
    return (_ms(a.get("time")) or 0, a["run_id"], a["code"], transition_key(a))


class _Outbox:
    """One endpoint's `notify_sent` rows: its first start, the transitions sent or
    claimed, and the claims (messages posted, or about to be) not yet recorded as sent."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        rows = sorted(rows, key=lambda r: _ms(r["sent_at"]) or 0)
        start = next((r for r in rows if r["key"] == START_KEY), None)
        self.start: float | None = None if start is None else float(_ms(start["sent_at"]) or 0)
        self.taken: set[str] = set()
        self.claims: dict[str, list[str]] = {}
        done = set()
        for r in rows:
            key = r["key"]
            if key.startswith(CLAIM):
                self.claims.setdefault(r["message_id"], []).append(key[len(CLAIM) :])
                self.taken.add(key[len(CLAIM) :])
            elif key != START_KEY:
                self.taken.add(key)
                done.add(r["message_id"])
        for mid in done:
            self.claims.pop(mid, None)

    def open_claim(self, skip: set[str]) -> tuple[str, list[str]] | None:
        """The oldest claimed message not recorded as sent (claims keep their order)
        whose id is not in `skip`."""
        return next(((m, k) for m, k in self.claims.items() if m not in skip), None)

    def claim(self, mid: str, keys: list[str]) -> None:
        self.claims[mid] = list(keys)
        self.taken.update(keys)

    def sent(self, mid: str, keys: list[str]) -> None:
        self.claims.pop(mid, None)
        self.taken.update(keys)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """urllib turns a POST answered 301/302/303 into a GET of the new address without
    the body, whose 200 would count as delivered: a redirect is an error answer here."""

    def redirect_request(self, *_: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


class Notifier:
    """Delivers OUT's finding transitions to the endpoints (see the module docstring)."""

    def __init__(
        self, out: str, cfg: NotifyConfig, storage_options: dict[str, Any] | None = None
    ) -> None:
        from rlstream.fleet.read import out_sink

        self.out, self.cfg, self.opts = out, cfg, storage_options
        self._sink_obj: Any = None

        def sink() -> Any:
            if self._sink_obj is None:
                self._sink_obj = out_sink(out, storage_options)
            return self._sink_obj

        self._sink = sink
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rlstream-notify", daemon=True)
        self._backoff = {u: 0.0 for u in cfg.urls}
        self._outboxes: dict[str, _Outbox] = {}
        """Each endpoint's notify_sent rows, read at the first round, then kept."""
        self._retry_at = {u: 0.0 for u in cfg.urls}
        self._known: dict[str, str] = {}
        """Run names by id (`_names`)."""
        self.sent_messages = 0
        self.failed_posts = 0

    def start(self) -> Notifier:
        self._thread.start()
        return self

    def on_poll(self, *_: Any) -> None:
        pass

    def on_commit(self, *_: Any) -> None:
        """Told by the driver after each commit: look for new transitions now."""
        self._wake.set()

    def close(self, final_timeout: float = 5.0) -> None:
        """Stop the thread after one last delivery attempt of what is pending."""
        self._stop.set()
        self._wake.set()
        self._thread.join(self.cfg.timeout_seconds + final_timeout)

    def _loop(self) -> None:
        while True:
            self._wake.wait(self.cfg.poll_seconds)
            self._wake.clear()
            stopping = self._stop.is_set()
            try:
                self.deliver(force=stopping)
            except Exception as e:  # OUT unreadable for now: the next round retries
                log.warning("notify: %s", e)
            if stopping:
                return

    # -- one round -----------------------------------------------------------------
    def deliver(self, force: bool = False) -> int:
        """Post what is pending to each endpoint due (all with `force`); returns the
        number of messages delivered."""
        sink = self._sink()
        if not sink.exists("alerts"):
            return 0
        from rlstream.fleet.read import read_table

        rows = read_table(self.out, "alerts", self.opts).to_pylist()
        by_key = {transition_key(a): a for a in rows if a.get("to_state") in NOTIFIED_STATES}
        alerts = sorted(told(rows), key=_order)
        if len(self._outboxes) < len(self.cfg.urls):
            # Read once: this notifier is notify_sent's only writer, so what it holds
            # after that is the table (a round's cost does not grow with messages sent).
            sent_rows = (
                read_table(self.out, SENT_TABLE, self.opts).to_pylist()
                if sink.exists(SENT_TABLE)
                else []
            )
            for url in self.cfg.urls:
                ep = endpoint_id(url)
                self._outboxes[url] = _Outbox([r for r in sent_rows if r["endpoint"] == ep])
        delivered = 0
        now = time.monotonic()
        for url in self.cfg.urls:
            if not force and now < self._retry_at[url]:
                continue
            ep = endpoint_id(url)
            outbox = self._outboxes[url]
            if outbox.start is None:
                self._record(sink, ep, [START_KEY], START_KEY)
                outbox.start = time.time() * 1000
            floor = outbox.start - self.cfg.history_seconds * 1000
            gone: set[str] = set()
            while True:
                claim = outbox.open_claim(gone)
                if claim is None:
                    pending = [
                        a
                        for a in alerts
                        if (_ms(a.get("time")) or floor) >= floor
                        and transition_key(a) not in outbox.taken
                    ][: self.cfg.max_per_message]
                    if not pending:
                        break
                    keys = [transition_key(a) for a in pending]
                    mid = hashlib.sha256("".join(keys).encode()).hexdigest()[:24]
                    # Claimed before the first post: a retry, in this process or after
                    # a restart, is this same message with this same id.
                    version = self._record(sink, ep, [CLAIM + k for k in keys], mid) + 1
                    outbox.claim(mid, keys)
                else:
                    mid, keys = claim
                    pending = sorted((by_key[k] for k in keys if k in by_key), key=_order)
                    if not pending:  # its rows are gone from alerts (a reset run): later
                        gone.add(mid)
                        continue
                    version = self._next_version(sink, ep)  # read before the post
                # Between the endpoint's 2xx and the record below is the one window in
                # which a kill -9 makes the message go twice (with the same id).
                body = render(pending, self.cfg, self.out, mid, self._names(pending))
                if not self._post(url, body, mid):
                    break
                self._record(sink, ep, keys, mid, version)
                outbox.sent(mid, keys)
                delivered += 1
        return delivered

    def _names(self, pending: list[dict[str, Any]]) -> dict[str, str]:
        """The runs' names (folders) for a message, read from run_health when one of
        its runs is not known yet; a failed read leaves the ids."""
        if any(t["run_id"] not in self._known for t in pending):
            from rlstream.fleet.read import read_latest
            from rlstream.fleet.report import run_name

            try:
                self._known = {r["run_id"]: run_name(r) for r in read_latest(self.out, self.opts)}
            except Exception as e:
                log.warning("notify: cannot read run names: %s", e)
        return self._known

    def _post(self, url: str, body: bytes, message_id: str) -> bool:
        req = urllib.request.Request(
            url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "Idempotency-Key": message_id},
        )
        try:
            with _OPENER.open(req, timeout=self.cfg.timeout_seconds) as r:
                ok = 200 <= r.status < 300
        except urllib.error.HTTPError as e:
            moved = " (a redirect is not followed: give the URL it names)" if e.code < 400 else ""
            log.warning("notify: endpoint %s answered %s%s", endpoint_id(url), e.code, moved)
            ok = False
        except Exception as e:
            log.warning("notify: cannot post to endpoint %s: %s", endpoint_id(url), e)
            ok = False
        if ok:
            self._backoff[url], self._retry_at[url] = 0.0, 0.0
            self.sent_messages += 1
            return True
        self.failed_posts += 1
        b = self._backoff[url]
        b = self.cfg.first_backoff if b == 0 else min(b * 2, self.cfg.max_backoff)
        self._backoff[url] = b
        self._retry_at[url] = time.monotonic() + b * random.uniform(0.8, 1.2)
        return False

    def _next_version(self, sink: Any, ep: str) -> int:
        app = f"notify-{ep}"
        return (sink.txn_versions(SENT_TABLE, [app])[app] or 0) + 1

    def _record(
        self, sink: Any, ep: str, keys: list[str], message_id: str, version: int | None = None
    ) -> int:
        """Append `keys` for this message in one commit; returns the version recorded."""
        app = f"notify-{ep}"
        if version is None:
            version = self._next_version(sink, ep)
        now = int(time.time() * 1000)
        rows = pa.table(
            {
                "endpoint": [ep] * len(keys),
                "key": keys,
                "message_id": [message_id] * len(keys),
                "sent_at": pa.array([now] * len(keys), pa.timestamp("ms", tz="UTC")),
            },
            schema=SENT_SCHEMA,
        )
        sink.append(SENT_TABLE, rows, {app: version})
        return version
