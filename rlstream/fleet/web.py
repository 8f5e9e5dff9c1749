"""The live pages over HTTP: `rlstream serve OUT` and `rlstream watch --ui-port P`.

`FleetPages(out)` answers GET requests (`handle(target, headers)` -> status, headers,
body) by reading OUT only, through the readers `status` and `report` use
(`fleet.read`, `fleet.outdir`):

- `/` the fleet, `/run?id=RUN` one run (its samples panel's query parameters:
  `fleet.sample_view`), `/compare?id=A&id=B...` a comparison; with
  `fragment=1` only the page's `<main>` (what the live script swaps in);
- `/api/version`: the fleet's version as an ETag (a hash of every run's commit
  sequence, last step and status, and the rejected runs), 304 when the browser's
  `If-None-Match` still matches; the page's script polls it every `refresh` seconds
  one request at a time on one kept-alive connection, and fetches the fragment only
  when it changed;
- `/static/live.js`, `/static/live.css`: shipped in the package.

Reads are bounded per refresh: the run_health and rejected reads (one log replay each,
as `status`) happen at most once per `refresh / 2` seconds whatever the number of tabs
polling, and a page is rendered once per version (cached by request target).

Safety: only GET and HEAD; every response carries a Content-Security-Policy that
allows only this origin's script, style and fetches (`default-src 'none'`), no
framing, no referrer; pages are escaped (`fleet.pages`); a request whose Host header
is not this server's loopback name is refused when bound to a loopback address (a DNS
rebinding page cannot read it). `serve(...)` binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from rlstream.fleet import pages, sample_view
from rlstream.fleet.status import status_rows

log = logging.getLogger("rlstream")

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}
STATIC = {"live.js": "text/javascript; charset=utf-8", "live.css": "text/css; charset=utf-8"}
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}

Response = tuple[int, dict[str, str], bytes]


@dataclass(frozen=True)
class Snapshot:
    latest: list[dict[str, Any]]
    rejected: list[dict[str, Any]]
    etag: str
    loaded_at: float


def version_of(latest: list[dict[str, Any]], rejected: list[dict[str, Any]]) -> str:
    """The ETag of what the pages show: changes with any run's commit, step or status."""
    h = hashlib.sha256()
    for r in sorted(latest, key=lambda r: r["run_id"]):
        key = (r["run_id"], r.get("commit_seq"), r.get("last_step"), r.get("status"))
        h.update(orjson.dumps([str(k) for k in key]))
    h.update(orjson.dumps(sorted(r.get("run_uri", "") for r in rejected)))
    return '"' + h.hexdigest()[:20] + '"'


class FleetPages:
    """The pages of one OUT (see the module docstring)."""

    def __init__(
        self,
        out: str,
        storage_options: dict[str, Any] | None = None,
        refresh: float = 2.0,
        max_cached: int = 64,
    ) -> None:
        self.out = out
        self.opts = storage_options
        self.refresh = refresh
        self.max_cached = max_cached
        self._lock = threading.Lock()
        self._snap: Snapshot | None = None
        self._cache: dict[str, tuple[str, bytes]] = {}
        self.reads = 0
        """How many times OUT's run_health was read (tests check the bound)."""

    def snapshot(self) -> Snapshot:
        """The latest run_health rows and rejected runs, read at most once per
        `refresh / 2` seconds; on a failed read the last good one is kept."""
        from rlstream.fleet.outdir import read_rejected
        from rlstream.fleet.read import read_latest

        with self._lock:
            snap = self._snap
            if snap is not None and time.monotonic() - snap.loaded_at < self.refresh / 2:
                return snap
            try:
                latest = read_latest(self.out, self.opts)
                rejected = read_rejected(self.out, self.opts, [r["run_uri"] for r in latest])
                self.reads += 1
            except Exception as e:
                if snap is None:
                    raise
                log.warning("serve: cannot read %s: %s (showing the last good read)", self.out, e)
                return snap
            self._snap = Snapshot(latest, rejected, version_of(latest, rejected), time.monotonic())
            return self._snap

    # -- requests ------------------------------------------------------------------
    def handle(self, target: str, headers: dict[str, str] | None = None) -> Response:
        headers = headers or {}
        parts = urlsplit(target)
        query = parse_qs(parts.query)
        path = parts.path
        if path.startswith("/static/"):
            return self._static(path[len("/static/") :])
        try:
            snap = self.snapshot()
        except Exception as e:
            return _html(503, f"cannot read OUT: {e}")
        if path == "/api/version":
            head = {"ETag": snap.etag, "Cache-Control": "no-cache"}
            if headers.get("if-none-match") == snap.etag:
                return 304, head, b""
            doc = {"etag": snap.etag, "runs": len(snap.latest), "refresh": self.refresh}
            return 200, {**head, "Content-Type": "application/json"}, orjson.dumps(doc)
        if path not in ("/", "/run", "/compare"):
            return _html(404, f"no page at {path}")
        key = f"{path}?{parts.query}"
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and hit[0] == snap.etag:
            body = hit[1]
        else:
            try:
                body = self._page(path, query, snap).encode()
            except LookupError as e:
                return _html(404, str(e.args[0] if e.args else e))
            with self._lock:
                if len(self._cache) >= self.max_cached:
                    self._cache.clear()
                self._cache[key] = (snap.etag, body)
        head = {"Content-Type": "text/html; charset=utf-8", "ETag": snap.etag}
        return 200, {**head, "Cache-Control": "no-cache"}, body

    def _static(self, name: str) -> Response:
        if name not in STATIC:
            return _html(404, "no such file")
        body = resources.files("rlstream.fleet").joinpath("static", name).read_bytes()
        return 200, {"Content-Type": STATIC[name], "Cache-Control": "max-age=60"}, body

    def _page(self, path: str, query: dict[str, list[str]], snap: Snapshot) -> str:
        fragment = query.get("fragment") == ["1"]
        rows = status_rows(snap.latest)
        if path == "/":
            title, main = "fleet", pages.fleet_main(rows, snap.rejected)
            controls = pages.fleet_controls(rows)
        elif path == "/run":
            rid = (query.get("id") or [""])[0]
            row = next((r for r in rows if r["run_id"] == rid), {"run_id": rid})
            title, main, controls = (
                f"run {pages.run_name(row)}",
                self._run(rid, rows, snap, query),
                "",
            )
        else:
            ids = query.get("id") or []
            title, main, controls = "compare", self._compare(ids, rows), ""
        if fragment:
            return main
        return pages.document(title, main, snap.etag, self.refresh, controls)

    def _run(
        self, rid: str, rows: list[dict[str, Any]], snap: Snapshot, query: dict[str, list[str]]
    ) -> str:
        from rlstream.fleet.read import read_bands, read_heldout, read_run_points
        from rlstream.fleet.report_samples import flag_steps

        by_id = {r["run_id"]: r for r in snap.latest}
        row = next((r for r in rows if r["run_id"] == rid), None)
        if row is None:
            raise LookupError(f"no run {rid!r} in {self.out}")
        cohort = row.get("cohort")
        siblings = [r for r in rows if cohort and r.get("cohort") == cohort and r is not row]
        by_run = read_run_points(self.out, self.opts)
        bands = read_bands(self.out, [cohort], self.opts).get(cohort) if cohort else None
        from rlstream.metrics.downsample import RunPoints

        sib = {s["run_id"]: by_run[s["run_id"]] for s in siblings if s["run_id"] in by_run}
        return pages.run_main(
            row,
            by_id[rid],
            by_run.get(rid) or RunPoints(),
            bands,
            siblings,
            sib,
            self._quarantine(rid),
            read_heldout(self.out, rid, self.opts),
            sample_view.samples_html(rid, self._samples(), sample_view.SampleQuery.parse(query)),
            self._transitions(rid),
            flag_steps(rid, self.out, self.opts),
        )

    def _transitions(self, rid: str) -> list[dict[str, Any]]:
        """The run's `alerts` rows (every finding transition it had)."""
        from rlstream.fleet.read import read_table

        cols = ["code", "severity", "from_state", "to_state", "step", "time", "message"]
        return read_table(self.out, "alerts", self.opts, cols, ("run_id", rid)).to_pylist()

    def _quarantine(self, rid: str) -> dict[str, int]:
        from rlstream.fleet.read import read_table

        t = read_table(self.out, "quarantine", self.opts, ["run_id", "reason"], ("run_id", rid))
        out: dict[str, int] = {}
        for reason in t.column("reason").to_pylist() if t.num_rows else []:
            out[reason] = out.get(reason, 0) + 1
        return out

    def _samples(self) -> Any:
        """OUT/samples as a dataset (read by `fleet.sample_view`, bounded), None when
        OUT has no samples table."""
        from deltalake import DeltaTable

        from rlstream.fleet.read import out_sink

        sink = out_sink(self.out, self.opts)
        if not sink.exists("samples"):
            return None
        return sink.dataset(DeltaTable(sink.uri("samples"), storage_options=sink.options))

    def _compare(self, ids: list[str], rows: list[dict[str, Any]]) -> str:
        from rlstream.fleet.compare import CompareConfig, as_json, compare_runs, verdict_line

        names = {r["run_id"]: pages.run_name(r) for r in rows}
        missing = [i for i in ids if i not in names]
        if missing:
            raise LookupError(f"no run {missing[0]!r} in {self.out}")
        if len(ids) < 2:
            return pages.compare_main(ids, names, [])
        found = compare_runs(self.out, ids, CompareConfig(), self.opts)
        return pages.compare_main(
            ids, names, as_json(found), verdict_line(found, CompareConfig(), names)
        )


def _html(status: int, message: str) -> Response:
    body = pages.document("error", f'<p class="error">{pages._e(message)}</p>', "", 0)
    return status, {"Content-Type": "text/html; charset=utf-8"}, body.encode()


def make_handler(
    pages_: FleetPages | None, metrics: Any = None, host: str = "127.0.0.1"
) -> type[BaseHTTPRequestHandler]:
    """A request handler serving the pages (if given) and `/metrics` (if `metrics`,
    a `prometheus.MetricsExporter`, is given)."""
    loopback = host in LOOPBACK

    class Handler(BaseHTTPRequestHandler):
        server_version = "rlstream"
        sys_version = ""
        # Keep-alive: a tab's polls reuse one connection; an idle one closes after 60 s.
        protocol_version = "HTTP/1.1"
        timeout = 60

        def do_HEAD(self) -> None:
            self._answer(head_only=True)

        def do_GET(self) -> None:
            self._answer(head_only=False)

        def _answer(self, head_only: bool) -> None:
            name = (self.headers.get("Host") or "").rsplit(":", 1)[0]
            if metrics is not None and self.path.split("?")[0] == "/metrics":
                from rlstream.fleet.prometheus import CONTENT_TYPE

                status, head, body = 200, {"Content-Type": CONTENT_TYPE}, metrics.page().encode()
            elif loopback and name not in LOOPBACK:
                status, head, body = _html(421, "this server answers only on its loopback name")
            elif pages_ is None:
                status, head, body = _html(404, "only /metrics is served here")
            else:
                hdrs = {k.lower(): v for k, v in self.headers.items()}
                status, head, body = pages_.handle(self.path, hdrs)
            self.send_response(status)
            for k, v in {**head, **SECURITY_HEADERS}.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not head_only and status != 304:
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http: " + format, *args)

    return Handler


class Served:
    """An HTTP server on host:port answering from daemon threads, started and closed."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], host: str, port: int) -> None:
        self.server = ThreadingHTTPServer((host, port), handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    def start(self):
        self.thread.start()
        return self

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class PageServer(Served):
    """The pages on host:port from a daemon thread (`rlstream serve`)."""

    def __init__(self, pages_: FleetPages, host: str = "127.0.0.1", port: int = 8765) -> None:
        super().__init__(make_handler(pages_, None, host), host, port)
