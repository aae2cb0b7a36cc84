"""The GPU suite: a (GPU) machine's figures in one command, within a time budget: the env ceiling, IMPALA Pong with
no flag but ``--env`` (stopped at a last-100 of 18), the sizing's env servers against the same envs split in two,
acting in the learner process against acting processes that infer on the GPU, every agent's Atari throughput, then
PPO and R2D2 on Pong and PPO on Breakout, each stage a child given a share of ``--budget_s``; its markdown tables are
printed and written to ``<savedir>/gpu_suite.md``.  The stages, the budget, the output, and how to run it on a
machine without a package registry (carrying wheels): docs/experiments/throughput.md, "Running the GPU suite".  Its library is benchmarks/gpu/ (budget, children, stages, tables).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.gpu.budget import MARGIN_S, STAGES, acting_counts, allot, plan  # noqa: E402
from benchmarks.gpu.children import Stopper  # noqa: E402
from benchmarks.gpu.stages import (  # noqa: E402
    Context,
    stage_acting,
    stage_agents,
    stage_ceiling,
    stage_splits,
    stage_training,
)
from benchmarks.gpu.tables import PROG, markdown  # noqa: E402


def machine_line() -> tuple[str, str]:
    """(the first line's description, the short one the tables carry)."""
    import torch

    from rl_core.config.sizing import usable_cores

    cores = usable_cores()
    if torch.cuda.is_available():
        device = f"cuda ({torch.cuda.get_device_name(0)}, {torch.cuda.device_count()} GPU)"
    else:
        device = "cpu (no CUDA device: the learner runs on the CPU)"
    full = (
        f"{device}, torch {torch.__version__}, Python {platform.python_version()}, {cores} usable cores "
        f"({os.cpu_count()} online)"
    )
    short = (
        f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'CPU only'}, {cores} cores, "
        f"torch {torch.__version__}"
    )
    return full, short


def load_results(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f).get("stages", {})
    except (OSError, ValueError):
        return {}


def save(savedir: str, results: dict, machine: str) -> str:
    text = markdown(results, machine)
    for name, content in (("gpu_suite.json", json.dumps({"stages": results}, indent=1)), ("gpu_suite.md", text)):
        tmp = os.path.join(savedir, name + ".partial")
        with open(tmp, "w") as f:
            f.write(content)
        os.replace(tmp, os.path.join(savedir, name))
    return text


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget_s", type=float, default=1500.0, help="The whole suite's seconds at most.")
    p.add_argument(
        "--savedir",
        default=None,
        help="Run directories, consoles, the tables (default: ~/logs/torchbeast/gpu_suite-<date>-<time>).",
    )
    p.add_argument("--stages", default=",".join(STAGES), help=f"Comma-separated, in this order: {','.join(STAGES)}.")
    p.add_argument(
        "--impala_steps",
        type=int,
        default=None,
        help="IMPALA's --total_steps (default: the package's, 50M: stopped at 18 or by the budget).",
    )
    p.add_argument("--ppo_steps", type=int, default=None, help="PPO's --total_steps (default: the package's, 10M).")
    p.add_argument("--r2d2_steps", type=int, default=None, help="R2D2's --total_steps (default: the package's).")
    p.add_argument("--impala_max_s", type=float, default=720.0, help="IMPALA's share at most (seconds).")
    p.add_argument("--ceiling_seconds", type=float, default=5.0, help="Each env-ceiling measurement's seconds.")
    p.add_argument(
        "--splits_seconds",
        type=float,
        default=75.0,
        help="Each of the splits stage's two IMPALA runs (wall seconds from its launch).",
    )
    p.add_argument(
        "--acting_seconds",
        type=float,
        default=75.0,
        help="Each of the acting stage's IMPALA runs (wall seconds from its launch).",
    )
    p.add_argument(
        "--acting_counts",
        default="1,2",
        help="The acting stage's runs beside acting in the learner process: --acting_process with each number of "
        "--acting_processes (comma-separated).",
    )
    p.add_argument("--agents_seconds", type=float, default=30.0, help="Each agent's end-to-end run (seconds).")
    p.add_argument("--agents_repeats", type=int, default=10, help="Learner batches timed alone per agent.")
    return p


def main(argv=None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    stages = [s for s in args.stages.split(",") if s]
    unknown = [s for s in stages if s not in STAGES]
    if unknown or not stages:
        parser.error(f"--stages {args.stages}: give some of {','.join(STAGES)}")
    stages = [s for s in STAGES if s in stages]
    if args.budget_s <= 0 or args.splits_seconds <= 0 or args.acting_seconds <= 0:
        parser.error("--budget_s, --splits_seconds and --acting_seconds must be positive")
    try:
        bad_counts = not acting_counts(args) or min(acting_counts(args)) < 1
    except ValueError:
        bad_counts = True
    if bad_counts:
        parser.error(f"--acting_counts {args.acting_counts}: give numbers of acting processes, e.g. 1,2")
    start = time.monotonic()
    stopper = Stopper()  # first: a Ctrl-C during torch's import is one line too
    savedir = os.path.abspath(
        os.path.expanduser(args.savedir or f"~/logs/torchbeast/gpu_suite-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    )
    os.makedirs(savedir, exist_ok=True)
    from rl_core.config.sizing import usable_cores

    full, short = machine_line()
    cores = usable_cores()
    print(f"gpu_suite: {full}; budget {args.budget_s:g} s; savedir {savedir}", flush=True)
    shares = plan(args.budget_s - (time.monotonic() - start), stages, args, cores)
    print(
        "plan: "
        + ", ".join(f"{s} {v:.0f} s" if v else f"{s} skipped: budget" for s, v in shares.items())
        + " (the PPO runs also get what earlier stages leave)",
        flush=True,
    )
    ctx = Context(args, savedir, start + args.budget_s - MARGIN_S, stopper)
    results = load_results(os.path.join(savedir, "gpu_suite.json"))
    failed = False
    for i, stage in enumerate(stages):
        if stopper.signum is not None:
            break
        share = allot(stage, ctx.left(), stages[i + 1 :], args, cores)
        stamp = {"date": f"{datetime.date.today()}", "machine": short}
        if share <= 0:
            kept = results.get(stage, {}).get("status") == "done"  # an earlier run's result stays
            if not kept:
                results[stage] = {"status": "skipped: budget", **stamp}
            print(
                f"[{stage}] skipped: budget ({max(ctx.left(), 0):.0f} s left)"
                + (f"; the result of {results[stage]['date']} kept" if kept else ""),
                flush=True,
            )
            save(savedir, results, short)
            continue
        print(f"[{stage}] started, {share:.0f} s of {ctx.left():.0f} s left", flush=True)
        t = time.monotonic()
        if stage == "ceiling":
            result = stage_ceiling(ctx, share)
        elif stage == "agents":
            result = stage_agents(ctx, share)
        elif stage == "splits":
            result = stage_splits(ctx, share)
        elif stage == "acting":
            result = stage_acting(ctx, share)
        else:
            result = stage_training(ctx, stage, share)
        if result["status"] != "stopped by signal":  # nothing measured: an earlier result stays
            results[stage] = {**result, **stamp}
        failed |= result["status"].startswith(("failed", "no result"))
        how = f" (stopped: {result['stopped']})" if result.get("stopped", "exited") != "exited" else ""
        print(f"[{stage}] {result['status']}{how} in {time.monotonic() - t:.0f} s", flush=True)
        save(savedir, results, short)
    if stopper.signum is not None:
        name = signal.Signals(stopper.signum).name
        print(
            f"gpu_suite: stopped by {name} after {time.monotonic() - start:.0f} s; the stages done are in "
            f"{savedir}/gpu_suite.md",
            flush=True,
        )
        return 128 + stopper.signum
    text = save(savedir, results, short)
    print()
    print(text, flush=True)
    print(
        f"gpu_suite: done in {time.monotonic() - start:.0f} s of {args.budget_s:g}; tables in {savedir}/gpu_suite.md",
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
