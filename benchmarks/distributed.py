"""What training on several ranks (torchrun, ``rl_core/runtime/distributed.py``) costs: two tables.

    python benchmarks/distributed.py [--iters 50] [--total_steps 40000] [--agent impala]
                                     [--repeats 2] [--skip_allreduce] [--skip_end_to_end]

1. **all-reduce per update.**  A torchrun rank averages its gradients after every backward with
   ``Group.average_gradients``: one all-reduce of all the flattened float32 gradients and the loss.  For
   each model (Atari's AtariNet and IMPALA ResNet on 4x84x84 uint8 frames with 6 actions, the gym
   package's CartPole MLP, SAC's MLPs on Pendulum) the table gives the parameter count, the gradient
   bytes, and the measured time of one ``average_gradients`` call (median of ``--iters`` after a warm-up;
   the ranks meet at a barrier before each) with 2 gloo ranks on this machine's CPU (2 spawned
   processes, 1 torch thread each, as torchrun starts them).  ``update ms`` is one optimizer update of
   the model on one CPU thread without peers (``Learner.learn`` on synthetic batches of the package's
   default shape, per optimizer step; as ``benchmarks/agents.py`` measures it) and ``share`` the
   all-reduce over that update: what a second rank adds to each update on this CPU.

   The ``ring`` columns are NOT measurements: they predict NCCL's ring all-reduce time from the
   bandwidth-optimal ring algorithm's cost (Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce
   algorithms for clusters of workstations"; Thakur et al. 2005):

       t = 2 (N-1)/N * bytes / bus_bandwidth + 2 (N-1) * latency

   (a reduce-scatter and an all-gather, N-1 steps each; the reduction's compute is left out), for N
   ranks within one host (``--intra_bandwidth`` 200e9 B/s, NVLink-class H100 nodes, ``--intra_latency``
   5 us) and across hosts with every ring hop at the network's speed (``--inter_bandwidth`` 12.5e9 B/s,
   100 Gb/s Ethernet / InfiniBand class, ``--inter_latency`` 20 us).  On a machine with CUDA and >= 2
   GPUs the table also measures NCCL over all of them (up to 8); elsewhere it says it did not.

2. **1 vs 2 ranks end to end.**  The same training run (``torchbeast_gym``, CartPole-v1, ``--agent``,
   ``--total_steps``) as one process (``python -m torchbeast_gym.polybeast``) and as a 2-rank torchrun job
   (``torchrun --standalone --nproc_per_node 2``), ``--repeats`` times each, interleaved, never two at
   once: global agent steps/s over the training (logs.csv's last ``step`` / its last ``time``, which
   starts once the model and env servers are up), the process's wall time (startup included), and the
   2-rank / 1-rank ratios of the medians.  ``$POLYBEAST_CORES`` and the rest of the environment reach
   both runs as given.  On a machine with few cores (2 here) the two ranks share the cores with each
   other's env servers: the ratio measures what running distributed costs, not how it scales.
"""

from __future__ import annotations

import argparse
import csv
import importlib
import math
import os
import queue
import socket
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

from rl_core.data.env_spec import BoxActions, DiscreteActions, EnvSpec, Observation  # noqa: E402

ATARI = EnvSpec(Observation((4, 84, 84), "|u1"), DiscreteActions(6))
# name -> (package, argv, env spec): the model each builds with the package's defaults
MODELS = {
    "AtariNet (atari)": ("torchbeast_atari", [], ATARI),
    "ResNet (atari --model resnet)": ("torchbeast_atari", ["--model", "resnet"], ATARI),
    "MLP (gym CartPole)": ("torchbeast_gym", [], EnvSpec(Observation((4,), "<f4"), DiscreteActions(2))),
    "SAC MLPs (gym Pendulum)": (
        "torchbeast_gym",
        [
            "--agent",
            "sac",
            "--env",
            "Pendulum-v1",  # a small replay
            "--replay_buffer_min_size",
            "1",
        ],  # to time updates on
        EnvSpec(Observation((3,), "<f4"), BoxActions((1,), (-2.0,), (2.0,))),
    ),
}


def ring_seconds(nbytes: int, n: int, bandwidth: float, latency: float) -> float:
    """Ring all-reduce of ``nbytes`` over ``n`` ranks (Patarasuk & Yuan 2009): 2(N-1)/N bytes/B + 2(N-1) a."""
    return 2 * (n - 1) / n * nbytes / bandwidth + 2 * (n - 1) * latency


# ------------------------------------------------------------------ one update, one rank
def build(name: str):
    """(flags, agent, model) of MODELS[name], on the CPU."""
    from rl_core.agents import make_agent
    from rl_core.runtime.entry import parse_flags

    package, argv, spec = MODELS[name]
    flags = parse_flags(importlib.import_module(f"{package}.env"), argv)
    torch.manual_seed(0)
    agent = make_agent(flags, spec)
    return flags, agent, agent.build_model()


def update_seconds(name: str, repeats: int) -> float:
    """Median seconds of one optimizer update (``Learner.learn`` on synthetic batches, per optimizer step)."""
    from benchmarks.agents import synthetic_unroll
    from rl_core.runtime.learner import Learner, Weights, inference_copy

    spec = MODELS[name][2]
    flags, agent, model = build(name)
    optimizer, scheduler = agent.make_optimizer(model)
    q: queue.Queue = queue.Queue()
    source, stop = agent.make_data_source(q), threading.Event()
    weights = Weights(model, optimizer, scheduler, inference_copy(model), threading.Lock())
    learner = Learner(flags, agent, weights, source, torch.device("cpu"), stop)
    rng, K = np.random.default_rng(0), flags.num_actors // flags.num_servers
    replay = hasattr(source, "replay")

    def put():
        unroll, state = synthetic_unroll(agent, spec, K, rng), tuple(s.cpu() for s in model.initial_state(K))
        if replay:
            source.insert(unroll, state)
        else:
            q.put((unroll, state))

    if replay:  # never gated by the replay ratio: sample as fast as asked
        source.ratio = 1e12
        while len(source.replay) < max(source.min_size, 1):
            put()
        source.steps_at_start = source.inserted_steps - 1
    times = []
    for i in range(repeats + 1):  # the first is a warm-up
        while not replay and q.qsize() * K < flags.batch_size:
            put()
        batch, state, versions = learner.to_device(*source.next_batch(stop))
        before, start = learner.optimizer_steps, time.perf_counter()
        learner.learn(batch, state, source.take_new_steps(), versions)
        if i:
            times.append((time.perf_counter() - start) / max(learner.optimizer_steps - before, 1))
    return statistics.median(times)


# ------------------------------------------------------------------ the all-reduce, N ranks
def _reduce_worker(rank: int, size: int, port: int, device_type: str, shapes: dict, iters: int, results) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(size),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(size),
    )
    torch.set_num_threads(1)
    from rl_core.runtime import distributed

    device = torch.device(device_type, rank) if device_type == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    group = distributed.start(distributed.world_from_environ(), device)
    try:
        medians = {}
        for name, model_shapes in shapes.items():
            params = [torch.nn.Parameter(torch.empty(s, device=device)) for s in model_shapes]
            for p in params:
                p.grad = torch.randn_like(p)
            loss, times = torch.ones((), device=device), []
            for i in range(iters + 5):  # 5 warm-up calls
                group.dist.barrier()
                sync()
                start = time.perf_counter()
                group.average_gradients(params, loss)
                sync()
                times.append(time.perf_counter() - start)
            medians[name] = statistics.median(times[5:])
        if rank == 0:
            results.put(medians)
    finally:
        distributed.stop(group)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def allreduce_seconds(shapes: dict, size: int, device_type: str, iters: int) -> dict:
    """{model: median seconds of one ``average_gradients``} over ``size`` spawned ranks."""
    import torch.multiprocessing as mp

    results = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_reduce_worker, args=(size, free_port(), device_type, shapes, iters, results), nprocs=size, join=True)
    return results.get()


def allreduce_table(args) -> None:
    torch.set_num_threads(1)
    ranks = [int(n) for n in args.predict_ranks.split(",")]
    shapes, sizes = {}, {}
    for name in MODELS:
        # what the learner averages: the parameters that take a gradient (not targets or frozen layers)
        params = [p for p in build(name)[2].parameters() if p.requires_grad]
        shapes[name] = [tuple(p.shape) for p in params]
        sizes[name] = sum(p.numel() for p in params)
    gloo = allreduce_seconds(shapes, 2, "cpu", args.iters)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nccl = allreduce_seconds(shapes, min(gpus, 8), "cuda", args.iters) if gpus >= 2 else None
    cols = ["model", "params", "grad MB", "gloo 2 ranks ms", "update ms", "share"]
    cols += [f"ring {n} GPUs/host us" for n in ranks] + [f"ring {n} hosts us" for n in ranks]
    cols += [f"NCCL {min(gpus, 8)} GPUs ms (measured)"] if nccl else []
    print(f"### all-reduce per update ({os.cpu_count()} cores, torch {torch.__version__})\n")
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for name in MODELS:
        nbytes = 4 * (sizes[name] + 1)  # float32 gradients and the loss
        update = update_seconds(name, args.update_repeats) if args.update_repeats else None
        row = [
            name,
            f"{sizes[name]:,}",
            f"{4 * sizes[name] / 1e6:.3f}",
            f"{1e3 * gloo[name]:.3f}",
            f"{1e3 * update:.1f}" if update else "-",
            f"{gloo[name] / update:.1%}" if update else "-",
        ]
        row += [f"{1e6 * ring_seconds(nbytes, n, args.intra_bandwidth, args.intra_latency):.1f}" for n in ranks]
        row += [f"{1e6 * ring_seconds(nbytes, n, args.inter_bandwidth, args.inter_latency):.1f}" for n in ranks]
        row += [f"{1e3 * nccl[name]:.3f}"] if nccl else []
        print("| " + " | ".join(row) + " |", flush=True)
    print(
        f"\nparams: the parameters that take a gradient, what the learner averages (SAC's target critics "
        f"left out).  gloo: measured, median of {args.iters} calls of Group.average_gradients (flatten, "
        f"all-reduce, copy back) on 2 CPU ranks of this machine; update: one optimizer step on 1 CPU thread "
        f"without peers; share = gloo / update.  ring: PREDICTED, not measured, by t = 2(N-1)/N bytes/B + "
        f"2(N-1) latency (ring all-reduce, Patarasuk & Yuan 2009), within a host B = {args.intra_bandwidth:.3g} "
        f"B/s, latency {args.intra_latency:.3g} s; across hosts B = {args.inter_bandwidth:.3g} B/s, latency "
        f"{args.inter_latency:.3g} s.  "
        + (
            "NCCL: measured on this machine's GPUs."
            if nccl
            else f"NCCL: not measured ({gpus} CUDA device{'s' if gpus != 1 else ''}; needs >= 2)."
        ),
        flush=True,
    )


# ------------------------------------------------------------------ end to end
def training_run(ranks: int, args, savedir: str) -> dict:
    """One run to --total_steps: {steps, train_s, sps, wall_s, rc, last line}."""
    flags = [
        "--env",
        "CartPole-v1",
        "--agent",
        args.agent,
        "--total_steps",
        str(args.total_steps),
        "--savedir",
        savedir,
        "--xpid",
        "run",
        "--disable_final_test",
        "--disable_validation",
        "--disable_checkpoint",
    ]
    launcher = (
        [sys.executable]
        if ranks == 1
        else [os.path.join(os.path.dirname(sys.executable), "torchrun"), "--standalone", "--nproc_per_node", str(ranks)]
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
    start = time.perf_counter()
    proc = subprocess.run(
        [*launcher, "-m", "torchbeast_gym.polybeast", *flags],
        cwd=savedir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wall = time.perf_counter() - start
    path = os.path.join(savedir, "run", "logs.csv")
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            rows = list(csv.DictReader(f))
    steps, train = (int(rows[-1]["step"]), float(rows[-1]["time"])) if rows else (0, math.nan)
    lines = [line for line in proc.stdout.splitlines() if "SPS" in line] or proc.stdout.splitlines()[-1:]
    return {
        "steps": steps,
        "train_s": train,
        "sps": steps / train if rows else math.nan,
        "wall_s": wall,
        "rc": proc.returncode,
        "last": lines[-1].strip() if lines else "",
    }


def end_to_end_table(args) -> None:
    runs = {1: [], 2: []}
    for _ in range(args.repeats):  # interleaved, one after the other, never together
        for ranks in runs:
            with tempfile.TemporaryDirectory() as tmp:
                runs[ranks].append(training_run(ranks, args, tmp))
    cores = os.environ.get("POLYBEAST_CORES", "unset")
    print(
        f"\n### 1 vs 2 ranks end to end (torchbeast_gym CartPole-v1, --agent {args.agent}, --total_steps "
        f"{args.total_steps:,}; {os.cpu_count()} cores, POLYBEAST_CORES={cores})\n"
    )
    print("| ranks | run | steps | train s | steps/s | wall s | exit |")
    print("|---|---|---|---|---|---|---|")
    for ranks, results in runs.items():
        for i, r in enumerate(results):
            print(
                f"| {ranks} | {i + 1} | {r['steps']:,} | {r['train_s']:.2f} | {r['sps']:,.0f} | {r['wall_s']:.1f} "
                f"| {r['rc']} |"
            )
    median = {
        ranks: {k: statistics.median(r[k] for r in results) for k in ("train_s", "sps", "wall_s")}
        for ranks, results in runs.items()
    }
    one, two = median[1], median[2]
    print(
        f"| 2 / 1 | median | | {two['train_s'] / one['train_s']:.2f} | {two['sps'] / one['sps']:.2f} | "
        f"{two['wall_s'] / one['wall_s']:.2f} | |"
    )
    for ranks, results in runs.items():
        for r in results:
            if r["rc"]:
                print(f"\n{ranks} rank{'s' if ranks > 1 else ''}: exit {r['rc']}; its last line: {r['last'][:300]}")
    print(
        f"\nsteps/s: global agent steps over the training (logs.csv's last step / its time, startup excluded); "
        f"wall s: the whole process, startup included; the ratios are of the medians over --repeats.  This machine "
        f"has {os.cpu_count()} cores: the 2 ranks share them with each other's env servers, so the ratio measures "
        f"the overhead of running distributed, not scaling.  Runs this short are noisy: raise --repeats or "
        f"--total_steps for a steadier figure.",
        flush=True,
    )


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--skip_allreduce", action="store_true", help="Skip table 1.")
    p.add_argument("--skip_end_to_end", action="store_true", help="Skip table 2.")
    p.add_argument("--iters", type=int, default=50, help="Timed all-reduce calls per model (after 5 warm-up).")
    p.add_argument(
        "--update_repeats",
        type=int,
        default=2,
        help="Timed optimizer updates per model (after 1 warm-up); 0 skips them (ResNet: ~5 s each).",
    )
    p.add_argument("--predict_ranks", default="2,8", help="N of the ring predictions.")
    p.add_argument("--intra_bandwidth", type=float, default=200e9, help="Bus bandwidth within a host, B/s.")
    p.add_argument("--intra_latency", type=float, default=5e-6, help="Per-step latency within a host, s.")
    p.add_argument("--inter_bandwidth", type=float, default=12.5e9, help="Bus bandwidth across hosts, B/s.")
    p.add_argument("--inter_latency", type=float, default=20e-6, help="Per-step latency across hosts, s.")
    p.add_argument("--total_steps", type=int, default=40_000, help="End-to-end run length (global agent steps).")
    p.add_argument("--agent", default="impala", help="End-to-end runs' --agent.")
    p.add_argument("--repeats", type=int, default=2, help="End-to-end runs of each kind, interleaved.")
    args = p.parse_args(argv)
    if not args.skip_allreduce:
        allreduce_table(args)
    if not args.skip_end_to_end:
        end_to_end_table(args)


if __name__ == "__main__":
    main()
