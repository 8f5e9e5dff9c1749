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
  `simulate_live` and mirrored to moto by a child process (`Mirror`: new transcripts
  once, a changed JSONL rewritten whole, as a writer on S3 does, every 0.2 s);
  `rlstream watch s3://...` reads them through the proxy (`ProxyProcess`, its own
  process, apart from the monitor's thread) at loopback and at 50 ms. Freshness of a
  step = when `run_health/latest` (local OUT) first shows it minus when the mirror
  uploaded the steps.jsonl holding its line. Lines uploaded before every run had its
  first latest row (start-up) are left out. Compared with the bound of the local
  case (2 polls + 1 commit) plus one round trip.
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

from bench.common import freshness, held_clock, median, ray_env, rlstream_cmd, run_measured
from bench.proxy import LatencyProxy, ProxyProcess

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


def _measured(cmd: list[str], env: dict[str, str]):
    """run_measured, once more if the command failed (a private Ray can time out
    starting on a heavily loaded machine)."""
    try:
        return run_measured(cmd, env)
    except RuntimeError as e:
        print(f"  (failed, run again: {str(e).splitlines()[-1][:160]})", flush=True)
        return run_measured(cmd, env)


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
        res_stage = stage(root, moto.port, reps, work, n)
        for r in range(reps):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                out = work / f"s3-out-{name.strip('+')}-{r}"
                delay = DELAYS[name]
                if delay is None:
                    t = _measured([*rlstream_cmd(), "analyze", str(root), "--out", str(out)], env0)
                else:
                    with LatencyProxy(moto.port, delay) as px:
                        env = {**env0, **aws_env(px.endpoint)}
                        cmd = [*rlstream_cmd(), "analyze", f"s3://{BUCKET}/runs", "--out", str(out)]
                        t = _measured(cmd, env)
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
    res["in_process"] = res_stage
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


def stage(root: Path, moto_port: int, reps: int, work: Path, n: int) -> dict:
    """The reading and parsing alone, without Ray: `analyze_local` (one process, units
    one after the other, each unit's reads concurrent) at each delay, interleaved."""
    from rlstream.config import PipelineConfig
    from rlstream.pipeline.local import analyze_local

    walls: dict[str, list[float]] = {k: [] for k in DELAYS}
    reqs: dict[str, int] = {}
    names = list(DELAYS)
    for r in range(reps):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            out = str(work / f"s3-stage-{name.strip('+')}-{r}")
            if DELAYS[name] is None:
                t0 = time.perf_counter()
                analyze_local([str(root)], out)
                walls[name].append(time.perf_counter() - t0)
                continue
            with LatencyProxy(moto_port, DELAYS[name]) as px:
                cfg = PipelineConfig(storage_options={"endpoint_url": px.endpoint})
                t0 = time.perf_counter()
                analyze_local([f"s3://{BUCKET}/runs"], out, cfg)
                walls[name].append(time.perf_counter() - t0)
                reqs[name] = px.requests()
    base = median(walls["loopback"])
    print("  in one process, no Ray (analyze_local): median s, vs loopback, requests/transcript")
    for name in names:
        m = median(walls[name])
        print(
            f"  {name:9s} {m:7.2f} {m / base:6.2f}x {reqs.get(name, 0) / n:6.2f}   "
            f"{', '.join(f'{w:.2f}' for w in walls[name])}",
            flush=True,
        )
    return {k: {"walls": v, "median": median(v), "requests": reqs.get(k)} for k, v in walls.items()}


MONITOR_INTERVAL = 0.25
"""Seconds between the live part's reads of the newest run_health rows, longer than the
local live part's 0.1 s: the monitor's reads take CPU from the cores that moto, the
mirror and the watch share (bench/README.md); freshness is read up to this much late."""


class Mirror:
    """Uploads a local runs folder to S3 as a writer on object storage would: new
    transcripts once (before the lines that name them: steps.jsonl and rollouts.jsonl
    are read first and uploaded last), a changed JSONL whole, then a changed run.json. Notes when
    each step line was first uploaded."""

    def __init__(self, root: Path, fs, prefix: str) -> None:
        self.root, self.fs, self.prefix = root, fs, prefix
        self.sent: dict[Path, bytes] = {}
        self.seen: dict[Path, tuple[int, int]] = {}
        self.names: set[str] = set()
        self.uploaded: dict[tuple[str, int], float] = {}

    def once(self) -> None:
        puts: dict[str, bytes] = {}
        last: dict[str, bytes] = {}
        steps: dict[str, bytes] = {}
        for run in sorted(p for p in self.root.iterdir() if p.is_dir()):
            for name in ("run.json", "rollouts.jsonl", "steps.jsonl"):
                try:
                    st = os.stat(run / name)
                except FileNotFoundError:
                    continue
                if self.seen.get(run / name) == (st.st_size, st.st_mtime_ns):
                    continue  # unchanged since it was last read: not read again
                self.seen[run / name] = (st.st_size, st.st_mtime_ns)
                data = (run / name).read_bytes()
                if self.sent.get(run / name) != data:
                    last[f"{self.prefix}/{run.name}/{name}"] = data
                    self.sent[run / name] = data
                    if name == "steps.jsonl":
                        steps[run.name] = data
            with os.scandir(run / "transcripts") as it:
                for e in it:
                    key = f"{run.name}/transcripts/{e.name}"
                    if e.name.endswith(".json") and key not in self.names:
                        self.names.add(key)
                        puts[f"{self.prefix}/{key}"] = Path(e.path).read_bytes()
        if puts:
            self.fs.pipe(puts)
        # The JSONL files, then run.json: a finished run's run.json (`finished_at`) must
        # not land before its last lines (uploaded together, either could land first,
        # and the watch would take the last lines as late).
        jsonl = {k: v for k, v in last.items() if not k.endswith("/run.json")}
        for batch in (jsonl, {k: v for k, v in last.items() if k not in jsonl}):
            if batch:
                self.fs.pipe(batch)
        now = time.time()
        for run, data in steps.items():
            rid = json.loads(self.sent[self.root / run / "run.json"])["run_id"]
            for line in data.split(b"\n")[:-1]:
                step = json.loads(line).get("step")
                if step is not None:
                    self.uploaded.setdefault((rid, step), now)


def write_and_mirror(root: str, runs: int, steps: int, interval: float, endpoint: str, log: str):
    """Child process: `simulate_live` into `root`, mirrored to s3://rlbench/live every
    0.2 s; writes {"uploaded": [[run_id, step, time], ...]} to `log` at the end. The
    runs write their first step, then wait until the file `log`.go exists (the watch
    is up), so the measured steps do not depend on how long the watch took to start."""
    from rlstream.simulate import SimConfig, simulate_live

    cfg = SimConfig(runs=runs, steps=steps, groups=2, group_size=4, tokens=64, seed=runs)
    go = Path(f"{log}.go")
    clock = held_clock(go.exists, 3 * interval)

    writer = threading.Thread(
        target=simulate_live, args=(root, cfg, interval), kwargs={"clock": clock}, daemon=True
    )
    writer.start()
    base = Path(root)
    while len(list(base.glob("*/run.json"))) < runs:
        time.sleep(0.05)
    mirror = Mirror(base, _s3fs(endpoint), f"{BUCKET}/live")
    while writer.is_alive():
        mirror.once()
        time.sleep(0.2)
    mirror.once()
    rows = [[r, s, t] for (r, s), t in mirror.uploaded.items()]
    Path(log).write_text(json.dumps({"uploaded": rows}))


def live(runs: int, steps: int, delay: float, work: Path, interval: float = 1.0) -> dict:
    import multiprocessing

    from bench.live import COMMIT, POLL, LatestMonitor, _stop, _wait, _watch

    tag = f"s3live{runs}-{round(delay * 1000)}ms"
    root, out, log = work / tag, work / f"{tag}-out", work / f"{tag}.json"
    with MotoServer() as moto, ProxyProcess(moto.port, delay) as px:
        _s3fs(moto.endpoint).mkdir(BUCKET)
        args = (str(root), runs, steps, interval, moto.endpoint, str(log))
        writer = multiprocessing.get_context("spawn").Process(target=write_and_mirror, args=args)
        writer.start()
        fs = _s3fs(moto.endpoint)
        _wait(lambda: fs.exists(f"{BUCKET}/live") and len(fs.ls(f"{BUCKET}/live")) >= runs, 120)
        proc = _watch(f"s3://{BUCKET}/live", out, aws_env(px.endpoint))
        mon = LatestMonitor(out, MONITOR_INTERVAL).start()
        try:
            ready = _wait(lambda: len(mon.last) >= runs, 300, proc)
            t_ready = time.time()
            Path(f"{log}.go").touch()  # the writers start their steps now
            writer.join()
            uploaded = {(r, s): t for r, s, t in json.loads(log.read_text())["uploaded"]}
            last: dict[str, int] = {}
            for rid, s in uploaded:
                last[rid] = max(last.get(rid, -1), s)
            bound = 2 * POLL + COMMIT + delay
            _wait(lambda: all(mon.last.get(r, -1) >= s for r, s in last.items()), 60, proc)
            requests = dict(px.snapshot())
            upstream = sorted(px.upstream_times())
        finally:
            mon.stop()
            _stop(proc)
    fresh, missing = [], 0
    for key, t in uploaded.items():
        if t < t_ready:
            continue
        seen = mon.seen.get(key)
        if seen is None:
            missing += 1
        else:
            fresh.append(seen - t)
    early = sum(1 for t in uploaded.values() if t < t_ready)
    res = {
        "runs": runs,
        "delay_s": delay,
        "left_out_before_ready": early,
        "ready": ready,
        **freshness(fresh, missing, bound),
        "requests": requests,
        "moto_answer_ms": {
            f"p{q}": round(1000 * upstream[min(len(upstream) - 1, len(upstream) * q // 100)], 1)
            for q in (50, 90, 99)
        }
        if upstream
        else {},
    }
    print(
        f"  watch s3 +{delay * 1000:.0f} ms, {runs} live runs: freshness p50 {res['p50']:.2f} s, "
        f"p99 {res['p99']:.2f} s, max {res['max']:.2f} s over {len(fresh)} step lines "
        f"(bound {bound:.2f} s = 2 polls + 1 commit + 1 round trip; {early} lines uploaded "
        f"before every run had its first row left out); missing {missing}; requests {requests}; "
        f"moto's own answer time (ms, at the proxy) {res['moto_answer_ms']}",
        flush=True,
    )
    return res


def main(
    quick: bool,
    reps: int | None,
    work: Path,
    steps: int | None = None,
    interval: float = 1.0,
    live_only: bool = False,
) -> dict:
    """The batch part, then the live part (`steps` per run, a step every `interval`
    seconds; 60 steps, or 40 quick); `live_only`: the live part alone."""
    env = aws_env("")
    env.pop("AWS_ENDPOINT_URL")
    os.environ.update(env)  # credentials for this process's s3fs; endpoints are explicit
    res = {} if live_only else {"batch": batch(quick, reps or (1 if quick else 3), work)}
    print("s3: live runs under watch, through the proxy at loopback and at 50 ms", flush=True)
    n, steps = (5, steps or 40) if quick else (20, steps or 60)
    res["live"] = [live(n, steps, d, work, interval) for d in (0.0, 0.05)]
    return res
