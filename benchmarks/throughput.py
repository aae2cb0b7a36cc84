"""Training throughput against this machine's ceiling, measured in one run.

(a) preprocessed env steps/s on one core (random actions);
(b) learner cost per agent step: one IMPALA update of a [T+1, B] batch on one
    thread (core-seconds), and its wall time with the learner's own threads;
(d) end-to-end training agent steps/s of the real launcher (servers, sockets,
    batched inference, learner) in steady state;
(c) inference cost per agent step at the mean batch size that (d) produced.

ceiling = cores / (a + b + c) in core-seconds per agent step: what the machine
could do if every core did only useful work.  The ratio (d) / ceiling is what
the runtime's own overhead leaves.  Under each run a second line says where the
cores' time went during (d), per agent step, from the CPU time of each thread
(named learner-N, inference-N, actor-N, env-server-N), the idle time of the
whole machine and its steal time (on a virtual machine, time its cores waited for
the host: a run with steal is not a measure of this code), to set against (a)-(c)
measured alone.

Given several --num_servers, every repeat runs each layout in turn, and the last lines give each one's
steps/s against the first layout's run of the same repeat (paired, so that a shared host's drift between
minutes cancels): `--num_servers 2 1 --repeats 3`.  A layout ``SxH`` is S servers, H to a process
(``--server_splits H``: double-buffered sampling): `--num_servers 1 2x2` sets one process stepping its 16 envs
at once against one process stepping two halves in turn.

Run through benchmarks/atari_throughput.py, benchmarks/procgen_throughput.py or
benchmarks/football_throughput.py.
"""

from __future__ import annotations

import argparse
import collections
import csv
import glob
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Setup:
    """What differs between environment packages: how to build one env, the obs, the actions."""

    def __init__(
        self,
        package: str,
        env: str,
        obs_shape: list[int],
        num_actions: int,
        frames_per_step: int,
        model_kw: dict | None = None,
    ):
        self.package, self.env = package, env
        self.obs_shape, self.num_actions, self.frames_per_step = obs_shape, num_actions, frames_per_step
        self.model_kw = dict(model_kw or {})  # the package's model flags, for (b) and (c) measured alone

    def make_env(self):
        import importlib

        from rl_core.runtime.entry import make_parser

        pkg = importlib.import_module(f"{self.package}.env")
        parser = make_parser(pkg)
        flags = parser.parse_args([f"--env={self.env}"])
        pkg.check_flags(parser, flags)
        return pkg.make_env(flags, 0)


ATARI = Setup("torchbeast_atari", "PongNoFrameskip-v4", [4, 84, 84], 6, 4)
PROCGEN = Setup("torchbeast_procgen", "chaser", [3, 64, 64], 15, 1)
FOOTBALL = Setup(
    "torchbeast_football", "academy_empty_goal_close", [16, 72, 96], 19, 1, model_kw={"resnet_channels": "16,32,32,32"}
)


def env_steps_per_second(setup: Setup, seconds: float) -> float:
    env = setup.make_env()
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    n_actions = env.action_space.n
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        _, _, terminated, truncated, _ = env.step(int(rng.integers(n_actions)))
        if terminated or truncated:
            env.reset()
        steps += 1
    return steps / (time.perf_counter() - start)


def model_flags(model: str, **kw):
    from rl_core.config.flags import make_parser

    flags = make_parser().parse_args([f"--model={model}"])
    for k, v in kw.items():
        setattr(flags, k, v)
    return flags


def build(setup: Setup, model: str, device: str):
    from models import build_model
    from rl_core.data.env_spec import DiscreteActions, EnvSpec, Observation

    spec = EnvSpec(Observation(tuple(setup.obs_shape), "|u1"), DiscreteActions(setup.num_actions))
    flags = model_flags(model, **setup.model_kw)
    return flags, build_model(flags, spec).to(device)


def learner_seconds(setup: Setup, model: str, T: int, B: int, threads: int, device: str, repeats: int = 5) -> float:
    """Median wall seconds of one update (loss, backward, RMSprop step, weight publish)."""
    from rl_core.agents.impala.agent import ImpalaAgent

    torch.set_num_threads(threads)
    flags, net = build(setup, model, device)
    _, target = build(setup, model, device)
    optimizer = torch.optim.RMSprop(net.parameters(), lr=1e-4, eps=0.01, alpha=0.99)
    batch = {
        "obs": torch.randint(0, 255, (T + 1, B, *setup.obs_shape), dtype=torch.uint8),
        "reward": torch.randn(T + 1, B),
        "done": torch.rand(T + 1, B) < 0.01,
        "action": torch.randint(0, setup.num_actions, (T + 1, B)),
        "policy_logits": torch.randn(T + 1, B, setup.num_actions),
    }
    batch = {k: v.to(device) for k, v in batch.items()}
    agent = ImpalaAgent(flags)
    times = []
    for i in range(repeats + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        loss, _ = agent.loss(net, batch, ())
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 40.0)
        optimizer.step()
        with torch.no_grad():
            for dst, src in zip(target.state_dict().values(), net.state_dict().values()):
                dst.copy_(src)
        if device == "cuda":
            torch.cuda.synchronize()
        if i:  # the first is warm-up
            times.append(time.perf_counter() - start)
    return float(np.median(times))


def inference_seconds(
    setup: Setup, model: str, batch: int, device: str, precision: str = "float32", repeats: int = 50
) -> float:
    """Median wall seconds of one batched forward pass (T=1) plus sampling, on one thread, at the
    run's --inference_precision."""
    from rl_core.agents.impala.agent import sample_actions

    torch.set_num_threads(1)
    _, net = build(setup, model, device)
    net.set_stem_dtype(getattr(torch, precision))  # as the run's inference copy
    inputs = {
        "obs": torch.randint(0, 255, (1, batch, *setup.obs_shape), dtype=torch.uint8),
        "reward": torch.zeros(1, batch),
        "done": torch.zeros(1, batch, dtype=torch.bool),
        "last_action": torch.zeros(1, batch, dtype=torch.int64),
    }
    times = []
    for i in range(repeats + 5):
        start = time.perf_counter()
        with torch.inference_mode():
            out, _ = net({k: v.to(device) for k, v in inputs.items()}, ())
            sample_actions(out["policy_logits"]).cpu()
        if i >= 5:
            times.append(time.perf_counter() - start)
    return float(np.median(times))


def _cpu_seconds_by_role(pid: int) -> dict[str, float]:
    """CPU seconds so far of each thread of process ``pid`` and its children, summed by role:
    the thread name without its "-N" suffix (learner, inference, actor, env-server), else "other"."""
    hz = os.sysconf("SC_CLK_TCK")
    pids = [pid]
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    pids.append(int(stat.split("/")[2]))
        except (OSError, ValueError, IndexError):
            continue
    roles: dict[str, float] = collections.defaultdict(float)
    for p in pids:
        for stat in glob.glob(f"/proc/{p}/task/*/stat"):
            try:
                with open(stat) as f:
                    text = f.read()
            except OSError:
                continue
            name = text[text.index("(") + 1 : text.rindex(")")].rsplit("-", 1)[0]
            if p != pid and name != "env-server":  # a server's own threads (envpool's) count as the server
                try:
                    with open(f"/proc/{p}/comm") as f:
                        name = f.read().strip().rsplit("-", 1)[0]
                except OSError:
                    pass
            fields = text.rsplit(")", 1)[1].split()
            role = name if name in ("learner", "inference", "actor", "env-server") else "other"
            roles[role] += (int(fields[11]) + int(fields[12])) / hz  # utime + stime
    return roles


def _idle_and_steal_seconds() -> tuple[float, float]:
    """Idle + iowait seconds, and steal seconds (time a virtual machine's cores waited for the
    host), of all cores so far (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    hz = os.sysconf("SC_CLK_TCK")
    return (fields[3] + fields[4]) / hz, fields[7] / hz


def end_to_end(
    setup: Setup,
    model: str,
    num_actors: int,
    num_servers: str,
    T: int,
    B: int,
    seconds: float,
    device: str,
    extra: list[str],
):
    """Steady-state SPS, mean inference batch and the core-seconds per second of each role
    (plus "idle" and "steal") over the second half of a real training run."""
    with tempfile.TemporaryDirectory() as tmp:
        shape = [f"--unroll_length={T}", f"--batch_size={B}"] if T is not None else []  # None: the agent's own
        cmd = [
            sys.executable,
            "-m",
            f"{setup.package}.polybeast",
            f"--env={setup.env}",
            f"--model={model}",
            f"--num_actors={num_actors}",
            *layout_flags(num_servers),
            *shape,
            "--total_steps=1000000000",
            f"--pipes_basename=unix:{tmp}/pipe",
            f"--savedir={tmp}",
            "--xpid=bench",
            "--log_interval=5",
            "--disable_checkpoint",
            *extra,
        ]
        if device == "cpu":
            cmd.append("--disable_cuda")
        with open(os.path.join(tmp, "out"), "w") as out:
            proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
            time.sleep(seconds / 2)
            cpu0, (idle0, steal0), t0 = _cpu_seconds_by_role(proc.pid), _idle_and_steal_seconds(), time.monotonic()
            time.sleep(seconds / 2)
            cpu1, (idle1, steal1), t1 = _cpu_seconds_by_role(proc.pid), _idle_and_steal_seconds(), time.monotonic()
            proc.terminate()
            proc.wait(30)
        with open(os.path.join(tmp, "bench", "logs.csv"), newline="") as f:
            rows = list(csv.DictReader(f))
    key = "env_steps" if any(a.startswith("--agent=") and a != "--agent=impala" for a in extra) else "step"
    # (a replay agent's step count moves once per learner batch; the env steps it inserts are its throughput,
    # measured from the second half of the run, after its replay filled)
    rows = rows[2:-1] if key == "step" else [r for r in rows if float(r["time"]) >= seconds / 2]
    if len(rows) < 2:
        raise RuntimeError("run too short for a steady-state measurement: raise --seconds")
    sps = (int(rows[-1][key]) - int(rows[0][key])) / (float(rows[-1]["time"]) - float(rows[0]["time"]))
    batch = float(np.nanmean([float(r["inference_batch"]) for r in rows]))
    usage = {role: (cpu1[role] - cpu0.get(role, 0.0)) / (t1 - t0) for role in cpu1}
    usage["idle"] = (idle1 - idle0) / (t1 - t0)
    usage["steal"] = (steal1 - steal0) / (t1 - t0)
    return sps, batch, usage


def main(setup: Setup, default_model: str, default_T: int, argv=None, default_seconds: float = 60.0) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=default_model, choices=["atari", "resnet"])
    parser.add_argument("--num_actors", nargs="+", type=int, default=[8, 16])
    parser.add_argument(
        "--num_servers",
        nargs="+",
        type=layout,
        default=["2"],
        help="Env servers (S, or SxH: H to a process); several: each layout in turn within every repeat (same minute), "
        "and a paired summary of their steps/s against the first.",
    )
    parser.add_argument("--unroll_length", type=int, default=default_T)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=default_seconds, help="Length of each end-to-end run.")
    parser.add_argument("--repeats", type=int, default=1, help="End-to-end runs per number of envs.")
    parser.add_argument("--device", nargs="+", default=["cuda"] if torch.cuda.is_available() else ["cpu"])
    parser.add_argument(
        "--inference_precision",
        default="float32",
        choices=["float32", "bfloat16"],
        help="The run's central inference precision; (c) is measured at it.",
    )
    parser.add_argument(
        "--agents",
        nargs="+",
        default=["impala"],
        help="Agents whose end-to-end frames/s are printed beside IMPALA's (e.g. impala r2d2); "
        "each but IMPALA runs with its package defaults (its own T and B).",
    )
    parser.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="Flags passed to the training run.")
    args = parser.parse_args(argv)
    from rl_core.runtime.allocator import keep_freed_memory

    keep_freed_memory()  # as the learner process does, so (b) and (c) are measured as they run
    cores = len(os.sched_getaffinity(0))
    T, B, fps = args.unroll_length, args.batch_size, setup.frames_per_step
    print(
        f"machine: {cores} cores; {setup.env}, model {args.model}, T={T}, B={B}, "
        f"inference in {args.inference_precision}; 1 agent step = {fps} frame(s)"
    )
    print("(a) and (b) are the means of a measurement just before and one just after each end-to-end run,")
    print("(c) is measured just after it: each ratio compares (d) with the machine's speed in the same")
    print("minute (a shared host's speed drifts).")
    for device in args.device:
        on_cpu = device == "cpu"
        learn_n = learner_seconds(setup, args.model, T, B, cores, device)
        print(f"[{device}] learner update on {cores} threads: {learn_n * 1e3:,.0f} ms")
        print(
            f"{'device':<6} {'envs':>4} {'(a) us':>7} {'(b) us':>7} {'batch':>6} {'(c) us':>7} {'ceiling':>8} "
            f"{'(d) SPS':>8} {'frames/s':>9} {'ratio':>6}   (a)-(c): core-us per agent step"
        )
        ratios: dict[tuple[int, int], list[float]] = {}
        speeds: dict[tuple[int, int], list[float]] = {}

        def env_and_learner_us() -> tuple[float, float]:
            """(a) and (b): core-us per agent step of the env alone and of the learner on one thread."""
            return (
                1e6 / env_steps_per_second(setup, 4.0),
                learner_seconds(setup, args.model, T, B, 1, device) / (T * B) * 1e6,
            )

        after = None  # the last run's "after" measurement is the next run's "before": nothing ran in between
        for num_actors in args.num_actors if "impala" in args.agents else []:
            for _ in range(args.repeats):
                for servers in args.num_servers:  # interleaved: a host's drift touches every layout alike
                    before = after or env_and_learner_us()
                    sps, batch, usage = end_to_end(
                        setup,
                        args.model,
                        num_actors,
                        servers,
                        T,
                        B,
                        args.seconds,
                        device,
                        [f"--inference_precision={args.inference_precision}", *args.extra],
                    )
                    n = max(1, round(batch))
                    infer_us = inference_seconds(setup, args.model, n, device, args.inference_precision) / n * 1e6
                    after = env_and_learner_us()
                    env_us, learn_us = ((x + y) / 2 for x, y in zip(before, after))
                    # On a GPU the learner and inference cost no CPU core-time.
                    ceiling = cores / (env_us + (learn_us + infer_us if on_cpu else 0.0)) * 1e6
                    ratios.setdefault((num_actors, servers), []).append(sps / ceiling)
                    speeds.setdefault((num_actors, servers), []).append(sps)
                    label = f"{num_actors}/{servers}" if len(args.num_servers) > 1 else f"{num_actors}"
                    print(
                        f"{device:<6} {label:>4} {env_us:>7,.0f} {learn_us:>7,.0f} {batch:>6.1f} {infer_us:>7,.0f} "
                        f"{ceiling:>8,.0f} {sps:>8,.0f} {fps * sps:>9,.0f} {sps / ceiling:>6.2f}",
                        flush=True,
                    )
                    roles = ("env-server", "learner", "inference", "actor", "other", "idle", "steal")
                    print(
                        "       during (d), core-us per agent step: "
                        + ", ".join(f"{r} {usage.get(r, 0.0) / sps * 1e6:,.0f}" for r in roles),
                        flush=True,
                    )
        others = [a for a in args.agents if a != "impala"]
        if others:
            print(f"[{device}] end to end per agent (IMPALA as above; the others with their package defaults):")
            print(f"{'agent':<8} {'envs':>4} {'SPS':>8} {'frames/s':>9}   core-us per agent step")
        for agent in others:
            for num_actors in args.num_actors:
                sps, batch, usage = end_to_end(
                    setup,
                    args.model,
                    num_actors,
                    args.num_servers[0],
                    None,
                    None,
                    args.seconds,
                    device,
                    [f"--agent={agent}", *args.extra],
                )
                roles = ("env-server", "learner", "inference", "actor", "other", "idle")
                print(
                    f"{agent:<8} {num_actors:>4} {sps:>8,.0f} {fps * sps:>9,.0f}   "
                    + ", ".join(f"{r} {usage.get(r, 0.0) / sps * 1e6:,.0f}" for r in roles),
                    flush=True,
                )
        if args.repeats > 1:
            for (num_actors, servers), values in ratios.items():
                print(
                    f"[{device}] {num_actors} envs on {servers} servers: ratio median {np.median(values):.2f}, "
                    f"min {min(values):.2f}, max {max(values):.2f} over {len(values)} runs"
                )
        for line in layout_summary(speeds, args.num_servers):
            print(f"[{device}] {line}")


def layout(text: str) -> str:
    """An env-server layout: ``S`` servers, or ``SxH``, S servers of which H share a process."""
    servers, x, splits = text.partition("x")
    if not servers.isdigit() or int(servers) < 1 or (x and not (splits.isdigit() and int(splits) >= 1)):
        raise argparse.ArgumentTypeError(f"{text!r}: give S or SxH, H dividing S (e.g. 2 or 2x2)")
    if x and int(servers) % int(splits):
        raise argparse.ArgumentTypeError(f"{text!r}: give S or SxH, H dividing S (e.g. 2 or 2x2)")
    return text


def layout_flags(text: str) -> list[str]:
    servers, _, splits = text.partition("x")
    return [f"--num_servers={servers}", *([f"--server_splits={splits}"] if splits else [])]


def layout_summary(speeds: dict[tuple[int, str], list[float]], servers: list[str]) -> list[str]:
    """Each layout's steps/s against the first one's run just before it (same repeat, same minute): the
    median and range of those paired ratios.  ``speeds[(num_actors, num_servers)]`` lists one figure per
    repeat, in order."""
    lines = []
    if len(servers) < 2:
        return lines
    for (num_actors, n), values in speeds.items():
        base = speeds.get((num_actors, servers[0]), [])
        if n == servers[0] or not base:
            continue
        paired = [v / b for v, b in zip(values, base)]
        lines.append(
            f"{num_actors} envs, {n} servers against {servers[0]}: steps/s x{np.median(paired):.3f} "
            f"(paired median; {min(paired):.3f}-{max(paired):.3f} over {len(paired)} repeats), "
            f"{np.median(values):,.0f} against {np.median(base):,.0f}"
        )
    return lines
