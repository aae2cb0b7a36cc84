"""`--agent ppo` on CartPole against cleanrl's single-file `ppo.py` with the same settings, in one run.

cleanrl's script is not part of this project: pass the path of its `cleanrl/ppo.py` (a clone of
github.com/vwxyzjn/cleanrl; it needs `tyro`).  Both run cleanrl's defaults (4 envs x 128 steps, 4 epochs of 4
minibatches, Adam at 2.5e-4 decaying linearly, discount 0.99, GAE 0.95, clip 0.2, the value clipped at 0.2,
entropy 0.01, gradients clipped at 0.5) for --total_steps, one after the other per repeat, at each --threads
setting of torch's intra-op threads ("default": each program's own; cleanrl's is torch's, the cores).  Each
runner's agent steps/s is its own count over its own training time: cleanrl's last "SPS:" line (steps since its
start over the time since), ours the last logs.csv row's step over its time.

    python benchmarks/cleanrl_ppo.py --cleanrl ~/cleanrl/cleanrl/ppo.py [--total_steps 100000] [--repeats 2]
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# cleanrl ppo.py's defaults as this project's flags
SAME_SETTINGS = [
    "--env=CartPole-v1",
    "--agent=ppo",
    "--num_actors=4",
    "--num_servers=1",
    "--batch_size=4",
    "--unroll_length=128",
    "--num_epochs=4",
    "--num_minibatches=4",
    "--learning_rate=2.5e-4",
    "--lr_decay=linear",
    "--epsilon=1e-5",
    "--discounting=0.99",
    "--gae_lambda=0.95",
    "--ppo_clip=0.2",
    "--ppo_clip_decay=none",
    "--value_clip=0.2",
    "--entropy_cost=0.01",
    "--baseline_cost=0.5",
    "--grad_norm_clipping=0.5",
]


def _env(threads: str) -> dict:
    env = dict(os.environ)
    if threads != "default":
        env["OMP_NUM_THREADS"] = threads
    return env


def run_cleanrl(path: str, steps: int, threads: str) -> tuple[float, float]:
    """(agent steps/s, wall seconds) of cleanrl's ppo.py."""
    with tempfile.TemporaryDirectory() as tmp:
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, path, "--env-id", "CartPole-v1", "--total-timesteps", str(steps), "--no-cuda"],
            cwd=tmp,
            env=_env(threads),
            capture_output=True,
            text=True,
        )
        wall = time.monotonic() - started
    speeds = re.findall(r"^SPS: (\d+)", result.stdout, re.M)
    if result.returncode != 0 or not speeds:
        raise RuntimeError(f"cleanrl's ppo.py failed ({result.returncode}):\n{(result.stdout + result.stderr)[-2000:]}")
    return float(speeds[-1]), wall


def run_ours(steps: int, threads: str, extra: list[str]) -> tuple[float, float]:
    """(agent steps/s, wall seconds) of `--agent ppo` with cleanrl's settings."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "torchbeast_gym.polybeast",
            *SAME_SETTINGS,
            f"--total_steps={steps}",
            f"--pipes_basename=unix:{tmp}/pipe",
            f"--savedir={tmp}",
            "--xpid=bench",
            "--log_interval=1",
            "--disable_checkpoint",
            "--disable_final_test",
            *([] if threads == "default" else [f"--torch_threads={threads}"]),
            *extra,
        ]
        started = time.monotonic()
        result = subprocess.run(cmd, cwd=REPO, env=_env(threads), capture_output=True, text=True)
        wall = time.monotonic() - started
        if result.returncode != 0:
            raise RuntimeError(
                f"--agent ppo failed ({result.returncode}):\n{result.stdout[-2000:]}{result.stderr[-2000:]}"
            )
        with open(os.path.join(tmp, "bench", "logs.csv"), newline="") as f:
            last = list(csv.DictReader(f))[-1]
    return int(last["step"]) / float(last["time"]), wall


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cleanrl", required=True, metavar="PATH", help="cleanrl's cleanrl/ppo.py")
    parser.add_argument("--total_steps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", nargs="+", default=["default", "1"], help="torch intra-op threads per run")
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="Flags for --agent ppo's runs.")
    args = parser.parse_args(argv)
    print(f"machine: {len(os.sched_getaffinity(0))} cores; CartPole-v1, cleanrl's defaults, {args.total_steps:,} steps")
    print(f"{'runner':<10} {'threads':>8} {'steps/s':>9} {'wall s':>7}")
    ratios: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for threads in args.threads:
            theirs, their_wall = run_cleanrl(args.cleanrl, args.total_steps, threads)
            print(f"{'cleanrl':<10} {threads:>8} {theirs:>9,.0f} {their_wall:>7.1f}", flush=True)
            ours, our_wall = run_ours(args.total_steps, threads, args.extra)
            print(f"{'ours':<10} {threads:>8} {ours:>9,.0f} {our_wall:>7.1f}", flush=True)
            ratios.setdefault(threads, []).append(ours / theirs)
    for threads, values in ratios.items():
        print(
            f"threads {threads}: ours / cleanrl's steps/s, paired: median x{np.median(values):.2f} "
            f"({min(values):.2f}-{max(values):.2f} over {len(values)} pairs)"
        )


if __name__ == "__main__":
    main()
