"""A headless Chromium driven over the DevTools protocol, with the standard library only.

`Browser()` starts Debian's chromium with the project's flags, a fresh profile and
`--remote-debugging-port=0`, reads the port it chose (from its stderr), and talks to its first page over a WebSocket (RFC 6455 text frames, masked
as a client must). `call(method, **params)` sends a command and returns its result,
keeping the events that arrive meanwhile in `events`; `evaluate(expr)` returns a
JavaScript value; `wait_for(expr, timeout)` re-evaluates until truthy, waiting on
the socket (for events) between tries; `errors()` lists console errors, uncaught
exceptions and log entries of level error (a CSP violation is one).
`artifacts(tmp_path)`: where the browser tests keep their screenshots,
$RLSTREAM_TEST_ARTIFACTS if set (.ci/run sets it to test-artifacts/), else the test's
tmp folder.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


def artifacts(tmp_path: Path) -> Path:
    d = Path(os.environ.get("RLSTREAM_TEST_ARTIFACTS") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


class Browser:
    def __init__(self, profile: Path, width: int = 1400, height: int = 1000) -> None:
        assert CHROMIUM is not None
        profile.mkdir(parents=True, exist_ok=False)
        self.proc = subprocess.Popen(
            [
                CHROMIUM,
                *FLAGS,
                f"--user-data-dir={profile}",
                "--remote-debugging-port=0",
                "--remote-allow-origins=*",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Chromium names its DevTools port on stderr; the rest of stderr is drained.
        port = None
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if line.startswith("DevTools listening on ws://"):
                port = int(urlsplit(line.split()[-1]).port or 0)
                break
        assert port, "chromium exited before opening its DevTools port"
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            targets = json.load(r)
        page = next(t for t in targets if t["type"] == "page")
        self._connect(page["webSocketDebuggerUrl"])
        self._id = 0
        self.events: list[dict[str, Any]] = []
        self.call("Runtime.enable")
        self.call("Log.enable")
        self.call("Page.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    # -- WebSocket -----------------------------------------------------------------
    def _connect(self, url: str) -> None:
        u = urlsplit(url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        req = (
            f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(req.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.sock.recv(1)
        assert head.startswith(b"HTTP/1.1 101"), head

    def _send(self, text: str) -> None:
        data = text.encode()
        n = len(data)
        if n < 126:
            header = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 65536:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(header + mask + masked)

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("DevTools socket closed")
            buf += chunk
        return buf

    def _recv(self) -> dict[str, Any]:
        message = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._exact(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._exact(8))[0]
            payload = self._exact(n)
            if b0 & 0x0F in (0x9, 0xA):  # ping/pong: not a message
                continue
            message += payload
            if b0 & 0x80:
                return json.loads(message)

    # -- protocol ------------------------------------------------------------------
    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._id += 1
        self.sock.settimeout(60)
        self._send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            msg = self._recv()
            if msg.get("id") == self._id:
                assert "error" not in msg, msg
                return msg.get("result", {})
            self.events.append(msg)

    def evaluate(self, expr: str) -> Any:
        got = self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        assert "exceptionDetails" not in got, got
        return got["result"].get("value")

    def pump(self, seconds: float) -> None:
        """Wait up to `seconds` for events (and keep them)."""
        self.sock.settimeout(seconds)
        try:
            self.events.append(self._recv())
        except TimeoutError:
            pass
        finally:
            self.sock.settimeout(60)

    def wait_for(self, expr: str, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            got = self.evaluate(expr)
            if got:
                return got
            if time.monotonic() > deadline:
                return got
            self.pump(0.1)

    def navigate(self, url: str, timeout: float = 60) -> None:
        self.call("Page.navigate", url=url)
        self.wait_for(
            "document.readyState === 'complete' && document.body "
            "&& document.body.getAttribute('data-ready') === '1'",
            timeout,
        )

    def errors(self) -> list[str]:
        out = []
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(json.dumps(p.get("args")))
            elif m == "Runtime.exceptionThrown":
                out.append(json.dumps(p.get("exceptionDetails")))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", ""))
        return out

    def screenshot(self, path: Path) -> None:
        got = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        path.write_bytes(base64.b64decode(got["data"]))

    def close(self) -> None:
        try:
            self.sock.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)
