"""`bench live`'s S3 case: S3 requests per idle run per poll, against moto's server.

Idle runs (`bench.live.idle_runs`) uploaded to moto's S3 server on 127.0.0.1, run in
this process, every HTTP request counted by a WSGI wrapper; `rlstream watch
s3://...` with `--poll P`; requests over a window / runs / polls, in two windows:
the first right after every run has its latest row (each run still polled every
time), the second once they have been quiet for longer than `idle_backoff_seconds`
(steady state, as for the idle cost; the figure reported) (polls = window / P, an
upper bound on the polls made, so the figure is a lower bound only by the few polls
skipped when a commit overran).
"""

from __future__ import annotations

import collections
import os
import socket
import threading
import time
from pathlib import Path

from bench.live import COMMIT, POLL, _latest_steps, _stop, _wait, _watch, idle_runs
from rlstream.config import PipelineConfig


class CountingMoto:
    """moto's S3 server on 127.0.0.1, counting every request it serves."""

    def __init__(self) -> None:
        from moto.server import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server

        self.counts: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()
        app = DomainDispatcherApplication(create_backend_app)

        def counted(environ, start_response):
            q = environ.get("QUERY_STRING", "")
            kind = (
                "list"
                if "list-type" in q
                or (environ["REQUEST_METHOD"] == "GET" and environ["PATH_INFO"].count("/") <= 1)
                else environ["REQUEST_METHOD"]
            )
            with self.lock:
                self.counts[kind] += 1
            return app(environ, start_response)

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = make_server("127.0.0.1", self.port, counted, threaded=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def snapshot(self) -> collections.Counter[str]:
        with self.lock:
            return collections.Counter(self.counts)

    def stop(self) -> None:
        self.server.shutdown()


def s3_requests(n: int, window: float, work: Path, steady: bool = True) -> dict:
    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    moto = CountingMoto()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": moto.endpoint,
    }
    os.environ.update(env)
    try:
        import s3fs

        fs = s3fs.S3FileSystem(
            skip_instance_cache=True, use_listings_cache=False, endpoint_url=moto.endpoint
        )
        fs.mkdir("rlbench")
        local = work / f"s3idle{n}"
        idle_runs(local, n)
        fs.put(str(local), "rlbench/runs", recursive=True)
        out = work / f"s3idle{n}-out"
        proc = _watch("s3://rlbench/runs", out, env)
        try:
            ready = _wait(lambda: len(_latest_steps(out)) >= n, 300, proc)
            t_ready = time.monotonic()
            time.sleep(2 * COMMIT)
            windows = [_count(moto, window)]  # just read: every run polled each time
            if steady:  # no new bytes for longer than idle_backoff_seconds
                quiet = PipelineConfig().idle_backoff_seconds + 2 * COMMIT
                time.sleep(max(0.0, t_ready + quiet - time.monotonic()))
                windows.append(_count(moto, window))
        finally:
            _stop(proc)
    finally:
        moto.stop()
    res: dict = {"runs": n, "ready": ready}
    for name, (diff, dt) in zip(("first", "steady"), windows, strict=False):
        per = sum(diff.values()) / n / (dt / POLL)
        print(
            f"  S3 ({name} window): {n} idle runs, {sum(diff.values())} requests in {dt:.0f} s "
            f"(~{dt / POLL:.0f} polls): {per:.2f} requests per run per poll {dict(diff)}; "
            f"ready: {ready}",
            flush=True,
        )
        res[name] = {"requests": dict(diff), "window_s": dt, "per_run_per_poll": per}
    res["per_run_per_poll"] = res["steady" if steady else "first"]["per_run_per_poll"]
    return res


def _count(moto: CountingMoto, window: float) -> tuple[collections.Counter[str], float]:
    """Requests moto answered over `window` seconds, and the seconds it took."""
    c0, t0 = moto.snapshot(), time.monotonic()
    time.sleep(window)
    return moto.snapshot() - c0, time.monotonic() - t0
