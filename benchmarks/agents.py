"""Every agent's speed in one table, measured in one run (its tables: docs/experiments/throughput.md).

For impala, ppo, vmpo, r2d2, sac (discrete: CartPole; box: Pendulum) and ppo+rnd with the
package's defaults on its default env (``--package torchbeast_atari``: every one of them but sac_box on
the package's default env, Pong; its launcher sizes the runs to the machine, as with no flags):

* end to end (the real launcher: env servers, sockets, batched inference, learner), once learning
  has started: agent steps/s, frames/s, optimizer updates/s, and the mean learner batch time
  (``update_ms`` of logs.csv);
* standalone (the same ``Learner.learn`` on batches the agent's own data source made from synthetic
  unrolls, no other thread): the batch time, learner core-us per agent step, torch ops per optimizer
  update at two unroll lengths (torch.profiler), and the in-runtime / standalone batch-time ratio:
  what the runtime's other threads (inference, actors, the replay's feeder) cost the learner.

``--old TREE`` also runs the end-to-end part on another checkout (e.g. a ``git worktree`` of an
older commit), interleaved with this one, and prints new / old steps/s.

    python benchmarks/agents.py [--package torchbeast_gym] [--seconds 40] [--agents impala,ppo,...]
                                [--old /path/to/old/tree]
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

# name -> (package, argv): each with the package's defaults for that agent on its default env
CONFIGS = {
    "impala": ("torchbeast_gym", ["--agent", "impala"]),
    "ppo": ("torchbeast_gym", ["--agent", "ppo"]),
    "vmpo": ("torchbeast_gym", ["--agent", "vmpo"]),
    "r2d2": ("torchbeast_gym", ["--agent", "r2d2"]),
    "sac_discrete": ("torchbeast_gym", ["--agent", "sac"]),
    "sac_box": ("torchbeast_gym", ["--agent", "sac", "--env", "Pendulum-v1"]),
    "ppo_rnd": ("torchbeast_gym", ["--agent", "ppo", "--rnd"]),
}
FRAMES_PER_STEP = {"torchbeast_atari": 4}
# The table's columns, in order (benchmarks/gpu/stages.py reads the rows by them)
COLUMNS = (
    "agent",
    "steps/s",
    "frames/s",
    "upd/s",
    "run ms",
    "alone ms",
    "ratio",
    "core-us/st",
    "ops/upd T",
    "ops/upd 4T",
)


def configs(package: str) -> dict[str, tuple[str, list[str]]]:
    """CONFIGS for ``package``: torchbeast_gym's as they are; another package's are those on its default env
    (a config naming its own env, sac_box's Pendulum, is left out)."""
    if package == "torchbeast_gym":
        return dict(CONFIGS)
    return {name: (package, argv) for name, (_, argv) in CONFIGS.items() if "--env" not in argv}


# ------------------------------------------------------------------ end to end
def end_to_end(tree: str, package: str, argv: list[str], seconds: float) -> dict:
    """Runs the launcher for ``seconds`` (then Ctrl-C) and reads logs.csv from learning's start on."""
    with tempfile.TemporaryDirectory() as tmp:
        # the tree first, the caller's path after it (where the env's packages may be: a --target install)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (tree, os.environ.get("PYTHONPATH")) if p))
        cmd = [
            sys.executable,
            "-m",
            f"{package}.polybeast",
            *argv,
            "--total_steps",
            "100000000",
            "--savedir",
            tmp,
            "--xpid",
            "run",
            "--disable_checkpoint",
            "--disable_final_test",
        ]
        console = os.path.join(tmp, "console.log")
        with open(console, "w") as out:
            proc = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + seconds
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        path = os.path.join(tmp, "run", "logs.csv")
        rows = list(csv.DictReader(open(path))) if os.path.exists(path) else []
        learning = [
            r
            for r in rows
            if _num(r.get("update_ms")) == _num(r.get("update_ms")) and _num(r.get("optimizer_steps", "1")) > 0
        ]
        if len(learning) < 2:
            print(
                f"# {' '.join(argv)}: no learning in the end-to-end run ({len(rows)} logs.csv rows, exit status "
                f"{proc.returncode}): {last_line(console)}",
                file=sys.stderr,
                flush=True,
            )
            return {}
    first, last = learning[0], learning[-1]
    span = float(last["time"]) - float(first["time"])
    rest = learning[1:]
    busy = statistics.mean(_num(r["learner_busy"]) for r in rest)
    update_ms = statistics.mean(_num(r["update_ms"]) for r in rest)
    opt_steps = statistics.mean(_num(r.get("optimizer_steps", "1")) for r in rest)
    return {
        "steps_per_s": (int(last["step"]) - int(first["step"])) / span,
        "update_ms": update_ms,
        "updates_per_s": busy * 1000.0 / update_ms * opt_steps,
    }


def last_line(path: str) -> str:
    """A console file's last non-blank line (300 characters at most), "(no output)" where it has none or is gone."""
    try:
        with open(path, errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        return "(no output)"
    return lines[-1][:300] if lines else "(no output)"


def _num(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return float("nan")


# ------------------------------------------------------------------ standalone
def synthetic_unroll(agent, spec, K: int, rng: np.random.Generator, frame_stack: bool = False) -> dict:
    """An actor's handover as the actor thread stores it (``rl_core.runtime.actors``), filled at random.
    ``frame_stack``: observations [C, H, W] that shift by one frame a step, as an Atari env's frame stacks do
    (what ``--replay_frame_stack`` stores once per frame)."""
    from rl_core.data.batch import action_field
    from rl_core.data.batch import POLICY_VERSION

    L1 = agent.sequence()[0] + 1
    obs_dtype = np.dtype(spec.obs.dtype)
    shape = (L1, K, *spec.obs.shape)
    if frame_stack:  # frames [L+C, K, H, W]; step t's stack is frames t .. t+C-1
        C = spec.obs.shape[0]
        frames = rng.integers(0, 255, (L1 + C - 1, K, *spec.obs.shape[1:]))
        obs = np.stack([frames[c : c + L1] for c in range(C)], axis=2)
    else:
        obs = rng.standard_normal(shape) if obs_dtype.kind == "f" else rng.integers(0, 255, shape)
    unroll = {
        "obs": obs.astype(obs_dtype),
        "reward": rng.standard_normal((L1, K)).astype(np.float32),
        "done": rng.random((L1, K)) < 0.02,
        "truncated": np.zeros((L1, K), np.bool_),
        POLICY_VERSION: np.zeros((L1, K), np.int32),
    }
    for name, (shape, dtype) in {"action": action_field(spec), **agent.unroll_fields()}.items():
        if name == "action" and spec.discrete:
            value = rng.integers(0, spec.num_actions, (L1, K))
        elif name == "action":
            value = rng.uniform(-1, 1, (L1, K, *shape))
        else:  # behaviour fields: zeros (a std: ones)
            value = np.full((L1, K, *shape), 1 if "std" in name else 0)
        unroll[name] = value.astype(dtype)
    return {k: torch.from_numpy(v) for k, v in unroll.items()}


def standalone(package: str, argv: list[str], unroll_length: int | None, repeats: int, device: torch.device) -> dict:
    """Learner.learn alone on batches of the agent's data source: batch seconds (median), core-us per agent
    step, torch ops per optimizer step."""
    import importlib

    from rl_core.agents import make_agent
    from rl_core.runtime.entry import parse_flags
    from rl_core.runtime.learner import Learner, Weights, inference_copy

    pkg = importlib.import_module(f"{package}.env")
    extra = ["--unroll_length", str(unroll_length)] if unroll_length else []
    f = parse_flags(pkg, [*argv, *extra])
    env = pkg.make_env(f, 0)
    from rl_core.runtime.evaluate_checkpoint import local_spec

    spec = local_spec(env)
    env.close()
    torch.manual_seed(0)
    agent = make_agent(f, spec)
    model = agent.build_model().to(device)
    if getattr(model, "rnd_ready", None) is not None:
        model.rnd_ready.fill_(True)
    optimizer, scheduler = agent.make_optimizer(model)
    q: queue.Queue = queue.Queue()
    source = agent.make_data_source(q)
    stop = threading.Event()
    weights = Weights(model, optimizer, scheduler, inference_copy(model), threading.Lock())
    learner = Learner(f, agent, weights, source, device, stop)
    g = np.random.default_rng(0)
    K = f.num_actors // f.num_servers
    replay = hasattr(source, "replay")
    stacks = bool(getattr(f, "replay_frame_stack", False))

    def state(k):
        return tuple(s.cpu() for s in model.initial_state(k))

    if replay:
        source.ratio = 1e12  # never gated: sample as fast as asked
        while len(source.replay) < max(source.min_size, 1):
            source.insert(synthetic_unroll(agent, spec, K, g, stacks), state(K))
        source.steps_at_start = source.inserted_steps - 1  # rho I - S stays ~1e12: never waits

    def next_batch():
        if not replay:
            while q.qsize() * K < f.batch_size:
                q.put((synthetic_unroll(agent, spec, K, g, stacks), state(K)))
        batch, st, versions = learner.to_device(*source.next_batch(stop))
        return batch, st, source.take_new_steps(), versions

    if replay:  # env steps a batch stands for: what it trains over the replay ratio
        per_batch = source.trained_per_batch / f.replay_ratio
    else:
        per_batch = f.unroll_length * f.batch_size
    for _ in range(2):  # warm-up (and the abort hooks dropped, as in a run)
        learner.learn(*next_batch())
    walls, cpus = [], []
    for _ in range(repeats):
        batch = next_batch()
        if device.type == "cuda":
            torch.cuda.synchronize()
        w, c = time.perf_counter(), time.process_time()
        learner.learn(*batch)
        if device.type == "cuda":
            torch.cuda.synchronize()
        walls.append(time.perf_counter() - w)
        cpus.append(time.process_time() - c)
    batch = next_batch()
    before = learner.optimizer_steps
    from torch.profiler import ProfilerActivity, profile

    saved = os.dup(2)  # the profiler's native start / stop lines go to stderr
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            learner.learn(*batch)
    finally:
        os.dup2(saved, 2)
    ops = sum(e.count for e in prof.key_averages() if e.key.startswith("aten::"))
    return {
        "batch_ms": 1e3 * statistics.median(walls),
        "core_us_per_step": 1e6 * statistics.median(cpus) / per_batch,
        "ops_per_update": ops / max(learner.optimizer_steps - before, 1),
        "T": f.unroll_length,
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--package",
        default="torchbeast_gym",
        help="The env package whose default env every agent runs on (e.g. torchbeast_atari).",
    )
    p.add_argument(
        "--agents",
        default=None,
        help=f"Comma-separated (default: every one of the package's: {','.join(CONFIGS)} for torchbeast_gym).",
    )
    p.add_argument("--seconds", type=float, default=40.0, help="end-to-end seconds per run")
    p.add_argument("--repeats", type=int, default=20, help="standalone batches timed per agent")
    p.add_argument("--old", default=None, help="another checkout to compare end to end with (e.g. ed6d25c)")
    p.add_argument("--skip_e2e", action="store_true")
    args = p.parse_args(argv)
    table = configs(args.package)
    names = args.agents.split(",") if args.agents else list(table)
    unknown = [name for name in names if name not in table]
    if unknown:
        p.error(f"--agents {','.join(unknown)}: not one of {args.package}'s: {','.join(table)}")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.set_num_threads(1 if device.type == "cpu" else torch.get_num_threads())
    from rl_core.runtime.allocator import keep_freed_memory

    keep_freed_memory()  # as the learner process does, so that "alone" is measured as the run's learner runs
    cores = len(os.sched_getaffinity(0))
    print(
        f"# benchmarks/agents.py  {time.strftime('%Y-%m-%d %H:%M')}  {cores} cores, learner on {device}"
        + (f" ({torch.cuda.get_device_name()})" if device.type == "cuda" else "")
        + f", torch {torch.__version__}"
        + ("" if args.package == "torchbeast_gym" else f", {args.package} on its default env")
    )
    widths = (13, 8, 9, 7, 8, 9, 6, 10, 10, 10)
    head = " ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}" for i, (c, w) in enumerate(zip(COLUMNS, widths)))
    if args.old:
        head += f" {'old st/s':>9} {'new/old':>8}"
    print(head)
    print("-" * len(head))
    for name in names:
        package, argv = table[name]
        alone = standalone(package, argv, None, args.repeats, device)
        alone4 = standalone(package, argv, 4 * alone["T"], 3, device)
        e2e = {} if args.skip_e2e else end_to_end(REPO, package, argv, args.seconds)
        old = end_to_end(args.old, package, argv, args.seconds) if args.old and not args.skip_e2e else {}
        fps = FRAMES_PER_STEP.get(package, 1)
        sps = e2e.get("steps_per_s", math.nan)
        run_ms = e2e.get("update_ms", math.nan)
        line = (
            f"{name:<13} {sps:>8.0f} {sps * fps:>9.0f} {e2e.get('updates_per_s', math.nan):>7.0f} {run_ms:>8.2f} "
            f"{alone['batch_ms']:>9.2f} {run_ms / alone['batch_ms']:>6.2f} {alone['core_us_per_step']:>10.1f} "
            f"{alone['ops_per_update']:>10.0f} {alone4['ops_per_update']:>10.0f}"
        )
        if args.old:
            old_sps = old.get("steps_per_s", math.nan)
            line += f" {old_sps:>9.0f} {sps / old_sps:>8.2f}"
        print(line, flush=True)
    print(
        "steps/s, frames/s, upd/s (optimizer updates), run ms (learner batch in the run): end to end once learning "
        "started; alone ms: the same batch with no other thread; ratio = run / alone; core-us/st: learner CPU per "
        "agent step; ops/upd: aten ops per optimizer update at the default unroll length T and at 4T"
    )


if __name__ == "__main__":
    main()
