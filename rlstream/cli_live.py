"""The command line of the live pages and messages: `rlstream serve OUT` and the
`watch` options `--ui-port`, `--ui-host`, `--ui-url`, `--notify`, `--notify-format`.

`add_serve(sub)` adds the `serve` subcommand; `add_watch_options(w)` the watch
options; `start_live(args, opts)` starts what they ask for beside a watch (one HTTP
server for `/metrics` and the pages, the notifier's thread) and returns the object
the driver feeds (`metrics=`) and a function that stops them. Bad ports and URLs are
usage errors (exit 2) told before anything starts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from rlstream.cli_support import checked_out, port, seconds, storage_options
from rlstream.errors import ConfigError


def add_serve(sub: Any, func: Callable[[argparse.Namespace], int]) -> None:
    sv = sub.add_parser(
        "serve", help="serve live fleet, run and compare pages of OUT (reads only OUT)"
    )
    sv.add_argument("out", metavar="OUT", help="the output folder or URL of analyze/watch")
    sv.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; 0.0.0.0 exposes the pages to the network)",
    )
    sv.add_argument("--port", type=port, default=8765, help="port (default 8765; 0: any free)")
    sv.add_argument(
        "--refresh", type=seconds, default=2.0, help="seconds between page refreshes (default 2)"
    )
    sv.add_argument("--storage-options", help="JSON object passed to fsspec for OUT")
    sv.set_defaults(func=func)


def cmd_serve(args: argparse.Namespace) -> int:
    import threading

    from rlstream.fleet.web import FleetPages, PageServer

    opts = storage_options(args.storage_options)
    checked_out(args.out, opts)
    try:
        server = PageServer(FleetPages(args.out, opts, args.refresh), args.host, args.port)
    except OSError as e:
        raise ConfigError(
            f"cannot serve on {args.host}:{args.port}: {e}; choose another --port"
        ) from e
    server.start()
    host, p = server.address
    print(f"rlstream: serving {args.out} on http://{host}:{p}/ (Ctrl-C to stop)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        print("\nrlstream: stopped", file=sys.stderr)
    finally:
        server.close()
    return 0


def add_watch_options(w: argparse.ArgumentParser) -> None:
    w.add_argument(
        "--in-process",
        action="store_true",
        help="poll, read and commit in this process, without Ray, whatever the work "
        "(default on one machine: here while the work takes under 80 %% of a core, "
        "then a private Ray; docs/runtime.md)",
    )
    w.add_argument(
        "--ray",
        action="store_true",
        help="start a private Ray at once and hand the runs to its tailers, whatever the work",
    )
    w.add_argument(
        "--ui-port",
        type=port,
        help="serve the live pages (and /metrics) on this port (0: any free port; docs/fleet.md)",
    )
    w.add_argument(
        "--ui-host", default="127.0.0.1", help="address to bind the pages to (default 127.0.0.1)"
    )
    w.add_argument(
        "--ui-url",
        metavar="URL",
        help="where people open the pages (a proxy, a port-forward, a `rlstream serve` "
        "elsewhere), for the links in --notify messages (default: --ui-host:--ui-port)",
    )
    w.add_argument(
        "--notify",
        action="append",
        metavar="URL",
        help="POST a message to URL when a finding fires or resolves (repeatable)",
    )
    w.add_argument(
        "--notify-format",
        choices=("slack", "json"),
        default="slack",
        help="message body: a Slack incoming-webhook payload (default) or plain JSON",
    )


class _Fanout:
    """What the driver feeds (`on_poll`, `on_commit`), passed on to each listener."""

    def __init__(self, listeners: list[Any]) -> None:
        self.listeners = listeners

    def on_poll(self, *a: Any) -> None:
        for x in self.listeners:
            if hasattr(x, "on_poll"):
                x.on_poll(*a)

    def on_commit(self, *a: Any) -> None:
        for x in self.listeners:
            x.on_commit(*a)


def start_live(args: argparse.Namespace, opts: dict) -> tuple[Any, Callable[[], None]]:
    """Start the metrics/pages server and the notifier a watch asked for."""
    from urllib.parse import urlsplit

    listeners: list[Any] = []
    closers: list[Callable[[], None]] = []
    ui, mp = getattr(args, "ui_port", None), args.metrics_port
    if ui is not None and mp is not None and ui != mp:
        raise ConfigError("--ui-port serves /metrics too: give one of --ui-port, --metrics-port")
    ui_url = getattr(args, "ui_url", None)
    for opt, url in [*(("--notify", u) for u in args.notify or []), ("--ui-url", ui_url)]:
        if url is None:
            continue
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
            raise ConfigError(f"{opt} {url!r} is not an http(s) URL")
    if ui is not None or mp is not None:
        from rlstream.fleet.prometheus import MetricsExporter

        pages = None
        host = args.metrics_host if ui is None else args.ui_host
        if ui is not None:
            from rlstream.fleet.web import FleetPages

            pages = FleetPages(args.out, opts)
        try:
            exporter = MetricsExporter(
                args.out, host, ui if ui is not None else mp, opts, pages=pages
            )
        except OSError as e:
            what, opt = ("pages", "--ui-port") if ui is not None else ("metrics", "--metrics-port")
            raise ConfigError(
                f"cannot serve {what} on {host}:{ui if ui is not None else mp}: {e}; "
                f"choose another {opt}"
            ) from e
        exporter.start()
        if ui is not None:
            h, p = exporter.address
            print(f"rlstream: live pages on http://{h}:{p}/", file=sys.stderr, flush=True)
        listeners.append(exporter)
        closers.append(exporter.close)
    if args.notify:
        from rlstream.fleet.notify import Notifier, NotifyConfig

        base = ui_url
        if base is None and ui is not None:
            import socket

            h, p = listeners[0].address
            # bound to every address: link by the machine's name, not 0.0.0.0
            base = f"http://{socket.gethostname() if h in ('0.0.0.0', '::') else h}:{p}"
        notifier = Notifier(
            args.out, NotifyConfig(tuple(args.notify), args.notify_format, base), opts
        ).start()
        listeners.append(notifier)
        closers.append(notifier.close)

    def close() -> None:
        for c in reversed(closers):
            c()

    return (_Fanout(listeners) if listeners else None), close
