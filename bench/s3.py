"""S3 latency benchmark: `rlstream analyze` and `watch` against object-store latency.

- **Batch**: one simulated archive (2 runs × 20 steps × 8 groups × 4 attempts, 1,280
  transcripts; quick: 1 run × 4 steps) is analysed by `rlstream analyze ROOT --out
  OUT` (a subprocess: CLI start, private Ray started and stopped, outputs on local
  disk) from four places: local disk; moto's S3 server (`moto_server`, its own
  process on 127.0.0.1) behind `bench.proxy.LatencyProxy` with no delay ("loopback");
  and behind the proxy adding 10 ms and 50 ms per request. Rounds are interleaved,
  the order rotated each round; medians. Reported: end-to-end wall, ratio to
  loopback, requests per transcript (counted at the proxy), peak RSS of the command's
  process tree. The first round's per-(run, step) token aggregates must agree across
  the four before anything is reported.
- **Live** (`watch`): `runs` live runs written in real time to local disk by
  `simulate_live` and mirrored to moto (each changed file uploaded whole, as a writer
  on S3 rewrites it, every 0.2 s); `rlstream watch s3://...` reads them through the
  proxy at 50 ms. Freshness of a step = when `run_health/latest` (local OUT) first
  shows it minus when the mirror uploaded the steps.jsonl holding its line. Compared
  with the bound of the local case (2 polls + 1 commit) plus one round trip.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.common import median, percentile, ray_env, rlstream_cmd, run_measured
from bench.proxy import LatencyProxy

DELAYS = {"local": None, "loopback": 0.0, "+10ms": 0.010, "+50ms": 0.050}
BUCKET = "rlbench"


class MotoServer:
    """`moto_server -H 127.0.0.1 -p PORT` as its own process, for the with-block."""

    def __enter__(self) -> MotoServer:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        exe = Path(sys.executable).with_name("moto_server")
        self.proc = subprocess.Popen(
            [str(exe), "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        end = time.monotonic() + 30
        while time.monotonic() < end:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            self.proc.kill()
            raise RuntimeError("moto_server did not start")
        self.endpoint = f"http://127.0.0.1:{self.port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def aws_env(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
    }


def _s3fs(endpoint: str):
    import s3fs

    return s3fs.S3FileSystem(
        skip_instance_cache=True,
        use_listings_cache=False,
        endpoint_url=endpoint,
        key="testing",
        secret="testing",
    )


def _aggregates(out: Path, root: Path, work: Path) -> dict:
    tmp = work / "s3-agg.json"
    py = [sys.executable, "-m", "bench.contenders"]
    run_measured([*py, "rlstream-out", str(out), str(tmp), "--runs-root", str(root)])
    return json.loads(tmp.read_text())


def batch(quick: bool, reps: int, work: Path) -> dict:
    from rlstream.simulate import SimConfig, simulate

    root = work / "s3-archive"
    if not root.exists():
        cfg = SimConfig(runs=1 if quick else 2, steps=4 if quick else 20, groups=8, seed=18)
        simulate(root, cfg)
    n = len(list(root.glob("*/transcripts/*.json")))
    size = sum(p.stat().st_size for p in root.glob("**/*") if p.is_file())
    print(f"s3: archive of {n} transcripts, {size / 1e6:.1f} MB; {reps} rounds", flush=True)
    walls: dict[str, list[float]] = {k: [] for k in DELAYS}
    rss: dict[str, list[int]] = {k: [] for k in DELAYS}
    reqs: dict[str, dict] = {}
    env0 = ray_env()
    with MotoServer() as moto:
        fs = _s3fs(moto.endpoint)
        fs.mkdir(BUCKET)
        fs.put(str(root), f"{BUCKET}/runs", recursive=True)
        names = list(DELAYS)
        for r in range(reps):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                out = work / f"s3-out-{name.strip('+')}-{r}"
                delay = DELAYS[name]
                if delay is None:
                    t = run_measured(
                        [*rlstream_cmd(), "analyze", str(root), "--out", str(out)], env0
                    )
                else:
                    with LatencyProxy(moto.port, delay) as px:
                        env = {**env0, **aws_env(px.endpoint)}
                        cmd = [*rlstream_cmd(), "analyze", f"s3://{BUCKET}/runs", "--out", str(out)]
                        t = run_measured(cmd, env)
                        reqs[name] = dict(px.snapshot())
                walls[name].append(t.wall)
                rss[name].append(t.peak_rss)
                print(f"  round {r + 1} {name:9s} {t.wall:6.2f} s", flush=True)
            if r == 0:
                ref = _aggregates(work / "s3-out-local-0", root, work)
                for name in names[1:]:
                    got = _aggregates(work / f"s3-out-{name.strip('+')}-0", root, work)
                    if got != ref:
                        raise AssertionError(f"s3: {name} disagrees with local disk")
                print(f"  all four agree on {len(ref.get('rows', ref))} rows", flush=True)
    res: dict = {"transcripts": n, "bytes": size, "rounds": reps, "contenders": {}}
    base = median(walls["loopback"])
    print("  contender  median s  vs loopback  requests/transcript  peak RSS MiB  rounds")
    for name in names:
        m = median(walls[name])
        per = sum(reqs[name].values()) / n if name in reqs else float("nan")
        res["contenders"][name] = {
            "wall_median": m,
            "walls": walls[name],
            "ratio_vs_loopback": m / base,
            "requests": reqs.get(name, {}),
            "requests_per_transcript": per,
            "peak_rss_mib": max(rss[name]) / 2**20,
        }
        print(
            f"  {name:9s} {m:9.2f} {m / base:11.2f}x {per:20.2f} {max(rss[name]) / 2**20:13.0f}"
            f"  {', '.join(f'{w:.2f}' for w in walls[name])}",
            flush=True,
        )
    return res


class Mirror:
    """Uploads every file of a local folder that changed (size or mtime) to S3, whole,
    every `period` s; notes when each steps.jsonl step line was first uploaded."""

    def __init__(self, root: Path, fs, prefix: str, period: float = 0.2) -> None:
        self.root, self.fs, self.prefix, self.period = root, fs, prefix, period
        self.sent: dict[Path, tuple[int, float]] = {}
        self.uploaded: dict[tuple[str, int], float] = {}
        self.run_ids: dict[Path, str] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.is_set():
            self.once()
            self.stop.wait(self.period)

    def once(self) -> None:
        for p in sorted(self.root.glob("**/*")):
            try:
                st = p.stat()
                if not p.is_file() or self.sent.get(p) == (st.st_size, st.st_mtime):
                    continue
                data = p.read_bytes()
            except FileNotFoundError:
                continue
            key = f"{self.prefix}/{p.relative_to(self.root)}"
            self.fs.pipe_file(key, data)
            now = time.time()
            self.sent[p] = (st.st_size, st.st_mtime)
            if p.name == "run.json":
                self.run_ids[p.parent] = json.loads(data)["run_id"]
            elif p.name == "steps.jsonl" and p.parent in self.run_ids:
                rid = self.run_ids[p.parent]
                for line in data.split(b"\n")[:-1]:
                    step = json.loads(line).get("step")
                    if step is not None:
                        self.uploaded.setdefault((rid, step), now)


def live(runs: int, steps: int, delay: float, work: Path, interval: float = 1.0) -> dict:
    from bench.live import COMMIT, POLL, LatestMonitor, _stop, _wait, _watch
    from rlstream.simulate import SimConfig, simulate_live

    root, out = work / f"s3live{runs}", work / f"s3live{runs}-out"
    cfg = SimConfig(runs=runs, steps=steps, groups=2, group_size=4, tokens=64, seed=runs)
    with MotoServer() as moto, LatencyProxy(moto.port, delay) as px:
        fs = _s3fs(moto.endpoint)
        fs.mkdir(BUCKET)
        writer = threading.Thread(target=simulate_live, args=(root, cfg, interval), daemon=True)
        writer.start()
        _wait(lambda: root.exists() and len(list(root.glob("*/run.json"))) >= runs, 60)
        mirror = Mirror(root, fs, f"{BUCKET}/live")
        mirror.once()
        mirror.thread.start()
        proc = _watch(f"s3://{BUCKET}/live", out, aws_env(px.endpoint))
        mon = LatestMonitor(out).start()
        try:
            ready = _wait(lambda: len(mon.last) >= runs, 300, proc)
            t_ready = time.time()
            writer.join()
            time.sleep(2 * mirror.period)
            last = {}
            for (rid, s), _ in mirror.uploaded.items():
                last[rid] = max(last.get(rid, -1), s)
            bound = 2 * POLL + COMMIT + delay
            _wait(lambda: all(mon.last.get(r, -1) >= s for r, s in last.items()), 60, proc)
        finally:
            mon.stop()
            mirror.stop.set()
            mirror.thread.join()
            _stop(proc)
        fresh, missing = [], 0
        for key, t in mirror.uploaded.items():
            if t < t_ready:
                continue
            seen = mon.seen.get(key)
            if seen is None:
                missing += 1
            else:
                fresh.append(seen - t)
    res = {
        "runs": runs,
        "delay_s": delay,
        "ready": ready,
        "steps_measured": len(fresh),
        "missing": missing,
        "p50": percentile(fresh, 0.5),
        "p99": percentile(fresh, 0.99),
        "max": max(fresh) if fresh else float("nan"),
        "bound": bound,
    }
    print(
        f"  watch s3 +{delay * 1000:.0f} ms, {runs} live runs: freshness p50 {res['p50']:.2f} s, "
        f"p99 {res['p99']:.2f} s, max {res['max']:.2f} s over {len(fresh)} step lines "
        f"(bound {bound:.2f} s = 2 polls + 1 commit + 1 round trip); missing {missing}",
        flush=True,
    )
    return res


def main(quick: bool, reps: int | None, work: Path) -> dict:
    env = aws_env("")
    env.pop("AWS_ENDPOINT_URL")
    os.environ.update(env)  # credentials for this process's s3fs; endpoints are explicit
    res = {"batch": batch(quick, reps or (1 if quick else 3), work)}
    print("s3: live runs under watch, through the proxy at 50 ms", flush=True)
    res["live"] = live(5 if quick else 20, 20 if quick else 60, 0.050, work)
    return res
