"""CPU of an idle local Ray, for comparison with the idle cost of a watch.

    python -m bench.ray_baseline [--actors 4] [--seconds 20] [--system-config JSON]

Starts a private local Ray (2 CPUs, no dashboard, as `rlstream` does), creates
`--actors` idle actors, waits 5 s, then measures the CPU seconds of every Ray process
and of this process over `--seconds`. Whatever a watch of idle runs costs above this
figure is rlstream's own work. Prints each process's share, then the total.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def ray_cpu_seconds() -> dict[str, tuple[str, float]]:
    """pid -> (short command line, CPU seconds) of every Ray process and this one."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            if b"ray" not in cmd and int(pid) != os.getpid():
                continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            name = " ".join(x.decode().rsplit("/", 1)[-1] for x in cmd.split(b"\0")[:2])
            out[pid] = (name[:60], (int(fields[11]) + int(fields[12])) / tick)
        except (OSError, ValueError, IndexError):
            continue  # a process that ended meanwhile
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--actors", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument(
        "--system-config",
        type=json.loads,
        default=None,
        help="Ray _system_config as JSON, e.g. '{\"prestart_worker_first_driver\": false}'",
    )
    args = ap.parse_args()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    extra = {"_system_config": args.system_config} if args.system_config else {}
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, **extra)

    @ray.remote(num_cpus=0)
    class Idle:
        def ping(self) -> int:
            return 1

    actors = [Idle.remote() for _ in range(args.actors)]
    ray.get([a.ping.remote() for a in actors])
    time.sleep(5)
    c0, t0 = ray_cpu_seconds(), time.monotonic()
    time.sleep(args.seconds)
    c1, t1 = ray_cpu_seconds(), time.monotonic()
    used = {pid: (name, c - c0.get(pid, (name, c))[1]) for pid, (name, c) in c1.items()}
    for pid, (name, c) in sorted(used.items(), key=lambda kv: -kv[1][1]):
        print(f"  {100 * c / (t1 - t0):5.1f}%  {pid:>7}  {name}")
    total = sum(c for _, c in used.values())
    print(
        f"idle local Ray with {args.actors} idle actors: "
        f"{100 * total / (t1 - t0):.1f}% of one core over {t1 - t0:.0f} s"
    )
    ray.shutdown()


if __name__ == "__main__":
    main()
