"""A latency-injecting HTTP/TCP proxy for object-store benchmarks and tests.

`LatencyProxy(upstream_port, delay)` listens on 127.0.0.1 only (an ephemeral port,
`endpoint`), relays bytes to 127.0.0.1:`upstream_port` (moto's S3 server), and holds
each HTTP request for `delay` seconds before forwarding it: every request then pays
`delay` before its first response byte, as against a distant object store, while
requests on different connections wait concurrently. It runs its own asyncio loop in
a daemon thread, started by `start()` and stopped by `stop()` (or the context manager);
`ProxyProcess` runs one in a process of its own.

A request is recognised as bytes from the client that start with an HTTP method once
the previous response has begun (keep-alive connections carry many requests, one at a
time: botocore does not pipeline). `counts` holds requests seen per method.

`throttle(n, method, path) -> bool`, when given, is asked for every GET and HEAD
(`n` counts them from 1): True answers that request with `503 SlowDown` (S3's
throttling reply) instead of forwarding it, as S3 does under request-rate pressure.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import multiprocessing
import threading
from collections.abc import Callable
from typing import Any

METHODS = (b"GET ", b"HEAD ", b"PUT ", b"POST ", b"DELETE ", b"OPTIONS ", b"PATCH ")
SLOWDOWN_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)

Throttle = Callable[[int, str, str], bool]


class LatencyProxy:
    """Relays 127.0.0.1:`endpoint` to 127.0.0.1:`upstream_port`, `delay` s per request."""

    def __init__(
        self, upstream_port: int, delay: float = 0.0, throttle: Throttle | None = None
    ) -> None:
        self.upstream_port = upstream_port
        self.delay = delay
        self.throttle = throttle
        self.counts: collections.Counter[str] = collections.Counter()
        self.throttled = 0
        self.inflight = 0
        self.peak_inflight = 0
        """Most requests received and not yet answered at once (all connections)."""
        self._reads = 0
        self.upstream_s: list[float] = []
        """Seconds from forwarding each request to the upstream's first response byte:
        the upstream's own answer time (moto's), the added delay excluded."""
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests(self) -> int:
        with self._lock:
            return sum(self.counts.values())

    def snapshot(self) -> collections.Counter[str]:
        with self._lock:
            return collections.Counter(self.counts)

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> LatencyProxy:
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._client, "127.0.0.1", 0)
            )
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="latency-proxy", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("latency proxy did not start")
        return self

    def stop(self) -> None:
        if self._thread is None:
            return

        async def close() -> None:
            assert self._server is not None
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._thread = None
        self._loop.close()

    def __enter__(self) -> LatencyProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- relaying --------------------------------------------------------------------
    async def _client(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        try:
            ureader, uwriter = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            cwriter.close()
            return
        # True once the upstream has answered: the client's next bytes are a new request.
        # answered[1]: when the request being answered was forwarded.
        answered: list = [True, 0.0]
        up = asyncio.ensure_future(self._requests(creader, cwriter, uwriter, answered))
        down = asyncio.ensure_future(self._responses(ureader, cwriter, answered))
        try:
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (up, down):
                t.cancel()
            for w in (uwriter, cwriter):
                with contextlib.suppress(Exception):
                    w.close()

    async def _requests(
        self,
        creader: asyncio.StreamReader,
        cwriter: asyncio.StreamWriter,
        uwriter: asyncio.StreamWriter,
        answered: list,
    ) -> None:
        buf = b""
        while True:
            chunk = await creader.read(65536)
            if not chunk:
                return
            buf += chunk
            while buf:
                if not (answered[0] and buf.startswith(METHODS)):
                    uwriter.write(buf)  # body bytes, or a continuation of the head
                    buf = b""
                    break
                head_end = buf.find(b"\r\n\r\n")
                if head_end < 0:
                    break  # read the rest of the head first
                head, buf = buf[: head_end + 4], buf[head_end + 4 :]
                method, _, rest = head.partition(b" ")
                path = rest.split(b" ", 1)[0].decode(errors="replace")
                name = method.decode()
                with self._lock:
                    self.counts[name] += 1
                    self.inflight += 1
                    self.peak_inflight = max(self.peak_inflight, self.inflight)
                    n = 0
                    if name in ("GET", "HEAD"):
                        self._reads += 1
                        n = self._reads
                if self.delay:
                    await asyncio.sleep(self.delay)
                if n and self.throttle is not None and self.throttle(n, name, path):
                    with self._lock:
                        self.throttled += 1
                        self.inflight -= 1
                    body = b"" if name == "HEAD" else SLOWDOWN_BODY
                    cwriter.write(
                        b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
                        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                    )
                    await cwriter.drain()
                    continue
                answered[0], answered[1] = False, self._loop.time()
                uwriter.write(head)
            await uwriter.drain()

    async def _responses(
        self, ureader: asyncio.StreamReader, cwriter: asyncio.StreamWriter, answered: list
    ) -> None:
        while True:
            chunk = await ureader.read(65536)
            if not chunk:
                return
            if not answered[0]:
                answered[0] = True
                with self._lock:
                    self.inflight -= 1
                    self.upstream_s.append(self._loop.time() - answered[1])
            cwriter.write(chunk)
            await cwriter.drain()


def _serve(upstream_port: int, delay: float, conn: Any) -> None:
    with LatencyProxy(upstream_port, delay) as px:
        conn.send(px.port)
        while (msg := conn.recv()) != "stop":
            conn.send(list(px.upstream_s) if msg == "upstream" else dict(px.snapshot()))


class ProxyProcess:
    """A `LatencyProxy` (no throttling) in a process of its own, so that the threads of
    the process that measures (a monitor reading the tables every 0.1 s) do not hold
    the interpreter lock while requests wait to be relayed. Same `endpoint`,
    `requests()` and `snapshot()`; a context manager."""

    def __init__(self, upstream_port: int, delay: float = 0.0) -> None:
        self.upstream_port = upstream_port
        self.delay = delay
        self.port = 0
        self._proc: Any = None
        self._conn: Any = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ProxyProcess:
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=_serve, args=(self.upstream_port, self.delay, child), daemon=True
        )
        self._proc.start()
        if not self._conn.poll(60):
            self._proc.kill()
            raise RuntimeError("latency proxy process did not start")
        self.port = self._conn.recv()
        return self

    def snapshot(self) -> collections.Counter[str]:
        self._conn.send("snapshot")
        return collections.Counter(self._conn.recv())

    def requests(self) -> int:
        return sum(self.snapshot().values())

    def upstream_times(self) -> list[float]:
        """`LatencyProxy.upstream_s` of the proxy in the other process."""
        self._conn.send("upstream")
        return self._conn.recv()

    def stop(self) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(OSError):
            self._conn.send("stop")
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._proc = None

    def __enter__(self) -> ProxyProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
