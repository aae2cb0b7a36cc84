"""Cost of the recurrent cores: actor step, learner unroll, recurrent state per env.

    python benchmarks/recurrent_cost.py [--quick] [--devices cpu,cuda] [--repeats N] [--no-stepwise] [--threads N]

Actor step: one T=1 call, B=32, under no_grad, state carried (the actors' inference).
Learner unroll: forward + backward of a T-step unroll, B=32, from a stored state, with
the core input requiring grad (it stands for the stem's output); loss = sum(w * out).
The learner timings of the cores are interleaved round by round, and the ratio
RTRL / TBPTT-eLSTM is the median of the per-round ratios, which keeps it meaningful on
a shared machine. "rtrl_elstm*" is the literal published algorithm (impl="stepwise"),
shown for comparison with the default fused RTRL.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch

from models.recurrent import make_core

INPUT_SIZE = 257
BATCH = 32


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build_cores(hidden: int, device: torch.device, stepwise: bool):
    specs = [("lstm", "lstm", {}), ("elstm", "elstm", {}), ("rtrl_elstm", "rtrl_elstm", {})]
    if stepwise:
        specs.append(("rtrl_elstm*", "rtrl_elstm", {"impl": "stepwise"}))
    torch.manual_seed(0)
    return {
        label: make_core(kind, input_size=INPUT_SIZE, hidden_size=hidden, **kw).to(device) for label, kind, kw in specs
    }


def warm_state(core, device, gen_steps: int = 20):
    """A state with realistic values (traces included): run the core for a few steps."""
    with torch.no_grad():
        x = torch.randn(gen_steps, BATCH, INPUT_SIZE, device=device)
        done = torch.zeros(gen_steps, BATCH, dtype=torch.bool, device=device)
        _, state = core(x, done, core.initial_state(BATCH, device=device))
    return state


def state_bytes_per_env(state) -> int:
    return sum(s.numel() * s.element_size() for s in state) // BATCH


def actor_step_ms(core, device, steps: int, repeats: int) -> float:
    state = warm_state(core, device)
    x = torch.randn(1, BATCH, INPUT_SIZE, device=device)
    done = torch.zeros(1, BATCH, dtype=torch.bool, device=device)
    done[0, 0] = True
    times = []
    with torch.no_grad():
        for r in range(repeats + 1):
            sync(device)
            t0 = time.perf_counter()
            s = state
            for _ in range(steps):
                _, s = core(x, done, s)
            sync(device)
            if r:  # the first round is warm-up
                times.append((time.perf_counter() - t0) / steps * 1e3)
    return statistics.median(times)


def learner_rounds(cores, device, T: int, repeats: int):
    """Per-core list of learner-unroll times (ms), rounds interleaved across cores."""
    gen = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randn(T, BATCH, INPUT_SIZE, generator=gen).to(device).requires_grad_()
    w = torch.randn(T, BATCH, max(c.hidden_size for c in cores.values()), generator=gen).to(device)
    done = (torch.rand(T, BATCH, generator=gen) < 0.01).to(device)
    states = {k: warm_state(c, device) for k, c in cores.items()}

    def step(core, state):
        core.zero_grad(set_to_none=True)
        x.grad = None
        out, _ = core(x, done, state)
        (out * w[..., : core.hidden_size]).sum().backward()

    times = {k: [] for k in cores}
    for r in range(repeats + 1):
        for k, core in cores.items():
            sync(device)
            t0 = time.perf_counter()
            step(core, states[k])
            sync(device)
            if r:
                times[k].append((time.perf_counter() - t0) * 1e3)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="reduced smoke-check set (H=256, T=20, CPU)")
    ap.add_argument("--devices", default=None, help="comma list among cpu,cuda (default: cpu and cuda if available)")
    ap.add_argument("--repeats", type=int, default=None, help="timed rounds per measurement")
    ap.add_argument("--no-stepwise", action="store_true", help="skip the literal published RTRL (slow on CPU)")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    if args.devices:
        devices = [d.strip() for d in args.devices.split(",") if d.strip()]
    else:
        devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() and not args.quick else [])
    if "cuda" in devices and not torch.cuda.is_available():
        print("cuda not available: skipped")
        devices.remove("cuda")
    hiddens, unrolls = ((256,), (20,)) if args.quick else ((256, 512), (50, 100))
    repeats = args.repeats or (2 if args.quick else 5)
    stepwise = not (args.no_stepwise or args.quick)

    print(
        f"torch {torch.__version__}, CPU threads {torch.get_num_threads()}, "
        f"I={INPUT_SIZE}, B={BATCH}, repeats={repeats} (medians)"
    )
    actor_rows, learner_rows = [], []
    for dev_name in devices:
        device = torch.device(dev_name)
        label = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        for H in hiddens:
            cores = build_cores(H, device, stepwise)
            for k, core in cores.items():
                state = core.initial_state(BATCH, device=device)
                actor_rows.append(
                    (label, H, k, actor_step_ms(core, device, 10, repeats), state_bytes_per_env(state) / 1024)
                )
            for T in unrolls:
                times = learner_rounds(cores, device, T, repeats)
                med = {k: statistics.median(v) for k, v in times.items()}
                ratio = {
                    k: statistics.median(a / b for a, b in zip(times[k], times["elstm"]))
                    for k in times
                    if k.startswith("rtrl")
                }
                learner_rows.append((label, H, T, med, ratio))

    print("\nActor step (T=1, B=32, no_grad) and recurrent state per env")
    print(f"{'device':<24} {'H':>4}  {'core':<12} {'ms/step':>9} {'state KiB/env':>14}")
    for label, H, k, ms, kib in actor_rows:
        print(f"{label:<24} {H:>4}  {k:<12} {ms:>9.3f} {kib:>14.1f}")

    print("\nLearner unroll (forward+backward, B=32), ms; ratio = RTRL / TBPTT eLSTM")
    names = list(learner_rows[0][3]) if learner_rows else []
    head = " ".join(f"{n:>12}" for n in names)
    rnames = [n for n in names if n.startswith("rtrl")]
    print(f"{'device':<24} {'H':>4} {'T':>4} {head} " + " ".join(f"{'ratio ' + n:>18}" for n in rnames))
    for label, H, T, med, ratio in learner_rows:
        cells = " ".join(f"{med[n]:>12.1f}" for n in names)
        print(f"{label:<24} {H:>4} {T:>4} {cells} " + " ".join(f"{ratio[n]:>17.2f}x" for n in rnames))
    if stepwise:
        print("rtrl_elstm* = impl='stepwise' (published algorithm: traces advanced step by step)")

    for label, H, T, _, ratio in learner_rows:
        if H == 512 and T == 100:
            verdict = "met" if ratio["rtrl_elstm"] <= 3.0 else "NOT met"
            print(f"target RTRL/TBPTT <= 3x at H=512, T=100 on {label}: {ratio['rtrl_elstm']:.2f}x ({verdict})")


if __name__ == "__main__":
    main()
