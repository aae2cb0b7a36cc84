"""Do env servers idle while their envs' actions are in flight, and what keeps them stepping?

    python benchmarks/server_overlap.py [--envs 16] [--layouts 1 2 4 1x2 1x4] [--seconds 20]
                                        [--server_cores 1] [--inference_cores 0] [--latency_ms MS]

On a 16-core H100 machine each of 14 Atari env servers (32 envs each) was busy 74% of the time, idle while
its actions made the round trip through central inference (docs/experiments/throughput.md).  This benchmark isolates
that round trip on any machine: real ``EnvServer`` processes (Pong, the package's preprocessing) pinned to
``--server_cores``, and one client process pinned to ``--inference_cores`` that answers every server as the
learner's actors do: it receives the server's step, runs the package's AtariNet on the observations (a
forward pass behind one lock, as central inference is) and sends sampled actions back; or, with
``--latency_ms``, sends random actions after that long: a GPU learner, whose inference takes no core from
the servers.  Nothing trains, so the round trip is the only thing a server waits for.

A layout ``P`` puts the ``--envs`` envs on P server processes; ``PxH`` on P processes of H servers each
(``--server_splits H``: a process's servers step in turn, each while the others' actions are in flight,
sample-factory's double-buffered sampling).  All share the server cores.  Printed per layout: agent steps/s
of all envs together, its ratio to the first layout, and the servers' busy share (their CPU time over the
wall time of the server cores).  ``rl_core/config/sizing.py`` takes its splits from this (docs/experiments/throughput.md).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import threading
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

ENV = "PongNoFrameskip-v4"


def serve(addresses: list[str], first_index: int, num_envs: int, cores: list[int], ready) -> None:
    """One env server process pinned to ``cores``: ``num_envs`` Pong envs at each of ``addresses`` (more than one:
    the splits of ``--server_splits``, stepped in turn)."""
    os.sched_setaffinity(0, cores)
    from rl_core.runtime import transport as tp
    from rl_core.runtime.env_server import EnvServer, serve_splits
    from torchbeast_atari.env import create_env

    lock = threading.Lock() if len(addresses) > 1 else None
    servers = []
    for h, address in enumerate(addresses):
        seeds = [1000 * (first_index + h) + slot for slot in range(num_envs)]
        servers.append(
            EnvServer(
                tp.parse_address(address),
                [lambda s=s: create_env(ENV, s) for s in seeds],
                seeds,
                server_index=first_index + h,
                env_name=ENV,
                step_lock=lock,
            )
        )
    ready.set()
    serve_splits(servers)


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_layout(
    procs_n: int,
    splits: int,
    envs: int,
    seconds: float,
    server_cores: list[int],
    inference_cores: list[int],
    basename: str,
    latency_s: float | None = None,
) -> tuple[float, float]:
    """(agent steps/s, servers' busy share) of ``envs`` envs on ``procs_n`` processes of ``splits`` each; the client answers with
    the network, or, given ``latency_s``, with random actions after that long (a GPU's round trip)."""
    import torch

    from models import build_model
    from rl_core.config.flags import make_parser
    from rl_core.runtime import transport as tp

    ctx = mp.get_context("spawn")
    servers = procs_n * splits
    addresses = [f"unix:{basename}.{procs_n}x{splits}.{i}" for i in range(servers)]
    events = [ctx.Event() for _ in range(procs_n)]
    procs = [
        ctx.Process(
            target=serve,
            args=(addresses[j * splits : (j + 1) * splits], j * splits, envs // servers, server_cores, e),
            daemon=True,
        )
        for j, e in enumerate(events)
    ]
    for p in procs:
        p.start()
    for e in events:
        e.wait(120)
    os.sched_setaffinity(0, inference_cores)
    torch.set_num_threads(len(inference_cores))
    flags = make_parser().parse_args(["--model=atari"])
    conns, spec = [], None
    for a in addresses:
        conn = tp.Connection(tp.connect(tp.parse_address(a), 60.0), poll_s=0.5)
        kind, msg = conn.recv()
        from rl_core.data.env_spec import EnvSpec

        spec = EnvSpec.from_json(tp.field_json(msg["spec"]))
        conns.append(conn)
    model = build_model(flags, spec).eval() if latency_s is None else None
    rng = np.random.default_rng(0)
    lock = threading.Lock()
    stop = threading.Event()
    counts = [0] * servers

    def actor(i: int) -> None:
        conn, K = conns[i], envs // servers
        state = {"action": np.zeros(K, np.int64)}
        while not stop.is_set():
            try:
                kind, msg = conn.recv(stop)
            except (tp.ConnectionClosed, tp.ProtocolError, tp.Stopped, OSError):
                return  # the layout is over: its servers were stopped
            inputs = {
                "obs": torch.from_numpy(msg["obs"][None]),
                "reward": torch.from_numpy(msg["reward"][None]),
                "done": torch.from_numpy(msg["done"][None]),
                "last_action": torch.from_numpy(state["action"][None]),
            }
            if model is None:  # a GPU's answer: no CPU here, a fixed round trip
                time.sleep(latency_s)
                action = rng.integers(0, spec.num_actions, K)
            else:
                with lock, torch.no_grad():
                    logits = model(inputs)[0]["policy_logits"][0]
                    action = torch.multinomial(torch.softmax(logits, -1), 1)[:, 0].numpy()
            state["action"] = action
            conn.send(tp.ACTION, {"action": action})
            counts[i] += K

    threads = [threading.Thread(target=actor, args=(i,), daemon=True) for i in range(servers)]
    for t in threads:
        t.start()
    time.sleep(min(5.0, seconds / 2))  # warm up
    start_steps, start_cpu, start = sum(counts), sum(cpu_seconds(p.pid) for p in procs), time.perf_counter()
    time.sleep(seconds)
    steps, cpu, wall = (
        sum(counts) - start_steps,
        sum(cpu_seconds(p.pid) for p in procs) - start_cpu,
        time.perf_counter() - start,
    )
    stop.set()
    for p in procs:
        p.terminate()
    for p in procs:
        p.join(10)
    for c in conns:
        c.close()
    for t in threads:  # a daemon thread left in torch's C++ at interpreter exit aborts the process
        t.join(10)
    return steps / wall, cpu / (wall * len(server_cores))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", type=int, default=16, help="envs in all, split evenly over each layout's servers")
    p.add_argument(
        "--layouts",
        nargs="+",
        default=["1", "2", "4", "1x2", "1x4"],
        help="per layout, server processes (P) or P x splits per process (PxH, --server_splits H)",
    )
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--server_cores", type=int, nargs="+", default=[1])
    p.add_argument("--inference_cores", type=int, nargs="+", default=[0])
    p.add_argument(
        "--latency_ms",
        type=float,
        default=None,
        help="answer with random actions after this many ms instead of the network: a GPU learner's "
        "round trip, which takes no CPU from the machine (default: the network on the client's cores)",
    )
    args = p.parse_args(argv)
    try:
        layouts = [tuple(int(n) for n in (text.split("x") + ["1"])[:2]) for text in args.layouts]
    except ValueError:
        p.error(f"--layouts takes P or PxH (processes x splits), got {args.layouts}")
    bad = [text for text, (n, h) in zip(args.layouts, layouts) if n < 1 or h < 1 or args.envs % (n * h)]
    if bad:
        p.error(f"--envs {args.envs} is not a multiple of the layouts {bad}: each split takes envs / (P x H)")
    cores = sorted(os.sched_getaffinity(0))
    if not set(args.server_cores + args.inference_cores) <= set(cores):
        p.error(f"--server_cores/--inference_cores must be among this process's cores {cores}")
    basename = f"/tmp/server_overlap-{os.getpid()}"
    answer = "the network" if args.latency_ms is None else f"random actions after {args.latency_ms:g} ms"
    print(
        f"{args.envs} Pong envs; servers on cores {args.server_cores}, the client on {args.inference_cores} "
        f"answering with {answer}; {args.seconds:.0f} s per layout"
    )
    print(
        "| server processes x splits | envs per split | processes per server core | agent steps/s | vs first | "
        "servers busy |"
    )
    print("|---|---|---|---|---|---|")
    first = None
    for servers, splits in layouts:
        sps, busy = run_layout(
            servers,
            splits,
            args.envs,
            args.seconds,
            args.server_cores,
            args.inference_cores,
            basename,
            None if args.latency_ms is None else args.latency_ms / 1000,
        )
        first = first or sps
        print(
            f"| {servers} x {splits} | {args.envs // (servers * splits)} | {servers / len(args.server_cores):g} | "
            f"{sps:,.0f} | "
            f"{sps / first:.2f} | {busy:.0%} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
