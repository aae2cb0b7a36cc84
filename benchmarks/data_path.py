"""The same-host data path, old against new, in one run.

Paths: ``old`` (every array on the socket, an actor thread per server beside an inference thread), ``shm``
(shared memory, the same threads), ``loop`` (shared memory and one acting loop that also runs inference) and
``proc`` (that loop in a process of its own, the default on a CPU learner; the learner process's figure is then its
learning alone, the acting process's under "acting us/st") and ``pin`` (proc with ``--cpu_affinity``: the learner
process on its threads' cores, the acting process and the servers on the others; torchbeast_gym's default, so the
cartpole and null cases' defaults).  Per case and path, a real training run
through the package's launcher with its defaults for --seconds; over the run's second half, from /proc: agent
steps/s, the learner process's core-us per agent step (all its threads) and the env servers', and the one-process
ceiling: 1e6 over the busiest single process's core-us per agent step, the steps/s that process allows given a core
of its own (on a machine of few cores the steps/s is the cores' limit, not a process's).  The paths
alternate within each repeat, so a shared host's drift touches them alike; the last lines give each against
old per case (paired medians).

Cases: ``cartpole`` (torchbeast_gym, IMPALA's defaults, CartPole-v1), ``pong`` (torchbeast_atari, IMPALA's
defaults), ``null`` (the one-process ceiling: an env and a model that cost nothing,
benchmarks/null_env.py and an MLP of 8 units).

    python benchmarks/data_path.py [--cases cartpole pong null] [--seconds 40] [--repeats 2]
    python benchmarks/data_path.py --cases null --paths proc --acting_processes 2 4 --extra --num_servers=8 --num_actors=64
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HZ = os.sysconf("SC_CLK_TCK")

CASES = {
    "cartpole": ("torchbeast_gym", ["--env=CartPole-v1"]),
    "pong": ("torchbeast_atari", ["--env=PongNoFrameskip-v4"]),
    "null": ("torchbeast_gym", ["--env=benchmarks.null_env:Null-v0", "--mlp_sizes=8"]),
}
PATHS = {
    "old": ["--no-shared_memory", "--no-acting_loop", "--no-acting_process"],
    "shm": ["--shared_memory", "--no-acting_loop", "--no-acting_process"],
    "loop": ["--shared_memory", "--acting_loop", "--no-acting_process"],
    "proc": ["--shared_memory", "--acting_process", "--no-cpu_affinity"],
    "pin": ["--shared_memory", "--acting_process", "--cpu_affinity"],
}


def _cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` (all its threads) so far; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / HZ


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f.read().replace("\0", " ")
    except OSError:
        return ""


def path_flags(path: str) -> list[str]:
    """A path's flags: one of PATHS, or ``procN``, the acting process split N ways (``--acting_processes N``)."""
    if path in PATHS:
        return PATHS[path]
    return [*PATHS["proc"], f"--acting_processes={int(path[len('proc') :])}"]


def measure(case: str, path: str, seconds: float, extra: list[str]) -> dict:
    """One run: steps/s and core-us per agent step of the learner process and of the servers."""
    package, flags = CASES[case]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            f"{package}.polybeast",
            *flags,
            *path_flags(path),
            "--total_steps=1000000000",
            f"--pipes_basename=unix:{tmp}/pipe",
            f"--savedir={tmp}",
            "--xpid=bench",
            "--log_interval=2",
            "--disable_checkpoint",
            "--disable_final_test",
            *extra,
        ]
        with open(os.path.join(tmp, "out"), "w") as out:
            proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
            try:
                time.sleep(seconds / 2)
                kids = _children(proc.pid)
                servers = [k for k in kids if "polybeast_env" in _cmdline(k)]
                others = [k for k in kids if k not in servers]  # the acting process (and multiprocessing's tracker)
                pids = [proc.pid, *kids]
                cpu0, t0 = {p: _cpu_seconds(p) for p in pids}, time.monotonic()
                time.sleep(seconds / 2)
                cpu1, t1 = {p: _cpu_seconds(p) for p in pids}, time.monotonic()
            finally:
                proc.terminate()
                proc.wait(30)
        try:
            with open(os.path.join(tmp, "bench", "logs.csv"), newline="") as f:
                rows = [r for r in csv.DictReader(f) if float(r["time"]) >= seconds / 2 - 1]
        except FileNotFoundError:
            rows = []
        if len(rows) < 2:
            with open(os.path.join(tmp, "out")) as f:
                raise RuntimeError(f"{case} {path}: too few logs.csv rows; its output ends:\n{f.read()[-2000:]}")
    sps = (int(rows[-1]["step"]) - int(rows[0]["step"])) / (float(rows[-1]["time"]) - float(rows[0]["time"]))
    wall = t1 - t0
    us = {p: max(cpu1[p] - cpu0[p], 0.0) / wall / sps * 1e6 for p in pids}  # each process's core-us per agent step
    return {
        "sps": sps,
        "learner_us": us[proc.pid],
        "servers_us": sum(us[p] for p in servers),
        "acting_us": sum(us[p] for p in others),
        "learner_cores": us[proc.pid] * sps / 1e6,
        "servers": len(servers),
        # the one-process ceiling: the agent steps/s that the run's busiest process allows, given a core each (what
        # one process's core-us per agent step caps the run at on a machine of many cores)
        "ceiling": 1e6 / max(us.values()),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--seconds", type=float, default=40.0, help="Length of each run; the second half is measured.")
    parser.add_argument("--repeats", type=int, default=2, help="Runs of every path per case.")
    parser.add_argument("--paths", nargs="+", default=list(PATHS), choices=list(PATHS), help="old is always run.")
    parser.add_argument(
        "--acting_processes",
        nargs="+",
        type=int,
        default=[],
        metavar="N",
        help="Also the proc path with N acting processes (path procN; each needs N env servers: give them to every "
        "path alike, e.g. --extra --num_servers=8 --num_actors=64).",
    )
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="Flags passed to every run.")
    args = parser.parse_args(argv)
    args.paths = [*args.paths, *(f"proc{n}" for n in args.acting_processes if n > 1)]
    print(f"machine: {len(os.sched_getaffinity(0))} cores; {args.seconds:g} s a run, the second half measured")
    print(
        f"{'case':<9} {'path':<7} {'steps/s':>8} {'learner us/st':>14} {'acting us/st':>13} {'servers us/st':>14} "
        f"{'learner cores':>14} {'1-proc ceiling':>15}"
    )
    results: dict[tuple[str, str], list[dict]] = {}
    for case in args.cases:
        for _ in range(args.repeats):
            for path in ["old", *[p for p in args.paths if p != "old"]]:
                r = measure(case, path, args.seconds, args.extra)
                results.setdefault((case, path), []).append(r)
                print(
                    f"{case:<9} {path:<7} {r['sps']:>8,.0f} {r['learner_us']:>14,.1f} {r['acting_us']:>13,.1f} "
                    f"{r['servers_us']:>14,.1f} "
                    f"{r['learner_cores']:>14.2f} {r['ceiling']:>15,.0f}",
                    flush=True,
                )
    print("against old, paired within each repeat: median (range): new's median against old's")
    for case in args.cases:
        old = results[(case, "old")]
        for path in [p for p in args.paths if p != "old"]:
            runs = results[(case, path)]
            for key, label in (
                ("sps", "steps/s"),
                ("learner_us", "learner core-us/st"),
                ("servers_us", "servers"),
                ("ceiling", "one-process ceiling"),
            ):
                ratios = [n[key] / o[key] for o, n in zip(old, runs)]
                print(
                    f"  {case:<9} {path:<4} {label:<19} x{np.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}): "
                    f"{np.median([n[key] for n in runs]):,.1f} against {np.median([o[key] for o in old]):,.1f}"
                )


if __name__ == "__main__":
    main()
