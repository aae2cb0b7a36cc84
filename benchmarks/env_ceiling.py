"""The machine's env ceiling: N processes each stepping the package's env with random actions.

    python benchmarks/env_ceiling.py [--package torchbeast_atari ...|all] [--env ENV] [--seconds 5]
                                     [--procs 1 2 4 ...]

Each process builds one env as the package's env servers do (``make_env(flags, seed)`` from the
package's parsed flags, ``--env`` or the package's default), takes uniformly random actions (sampled
beforehand), resets at episode ends, and counts its steps over the same ``--seconds`` as the others (a
barrier starts them together, after every env is built and warmed up).  The table gives, for N = 1, 2,
4, ... up to the usable cores (``rl_core.config.sizing.usable_cores``): env steps/s of all N together, frames/s
(steps x the package's frames per step: Atari's frame skip, DMLab's action repeats, 1 elsewhere), steps/s
per process and the speed-up over one process.  No training run steps its envs faster than this: it is
the ceiling a throughput figure (``benchmarks/atari_throughput.py``) is held against, and what the
launcher's sizing (``rl_core/config/sizing.py``) spends the cores on.
"""

from __future__ import annotations

import argparse
import importlib
import multiprocessing as mp
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from rl_core.config.env_package import installed_env_packages  # noqa: E402  (after the repository's path)

PACKAGES = tuple(installed_env_packages())  # every registered package (pyproject.toml)
# The env measured when --env is not given: the package's default, but Football's cheapest scenario.
DEFAULT_ENVS = {"torchbeast_football": "academy_empty_goal_close"}


def package_flags(package: str, env: str | None):
    """The package's env module and its flags for ``env``, parsed and checked as an env server's are."""
    from rl_core.runtime.entry import make_parser

    pkg = importlib.import_module(f"{package}.env")
    parser = make_parser(pkg)
    env = env or DEFAULT_ENVS.get(package)
    flags = parser.parse_args([f"--env={env}"] if env else [])
    if hasattr(pkg, "check_flags"):
        pkg.check_flags(parser, flags)
    return pkg, flags


def frames_per_step(package: str, pkg, flags) -> int:
    if package == "torchbeast_atari":
        return int(pkg.FRAME_SKIP)
    return int(getattr(flags, "num_action_repeats", 1))


def _worker(package: str, env_name: str | None, seed: int, seconds: float, barrier, results) -> None:
    try:
        pkg, flags = package_flags(package, env_name)
        env = pkg.make_env(flags, seed)
        env.action_space.seed(seed)
        actions = [env.action_space.sample() for _ in range(4096)]
        env.reset(seed=seed)
        warm_until = time.perf_counter() + 0.5
        i = 0
        while time.perf_counter() < warm_until:  # caches, lazy allocations, the first resets
            _, _, terminated, truncated, _ = env.step(actions[i % len(actions)])
            if terminated or truncated:
                env.reset()
            i += 1
    except BaseException as e:  # noqa: BLE001 - the parent names it
        barrier.abort()
        results.put((seed, None, f"{type(e).__name__}: {e}"))
        return
    try:
        barrier.wait(timeout=600)
    except Exception:  # noqa: BLE001 - another worker failed
        results.put((seed, None, "aborted"))
        return
    steps, start = 0, time.perf_counter()
    end = start + seconds
    while True:
        for _ in range(64):  # the clock read once per 64 steps
            _, _, terminated, truncated, _ = env.step(actions[steps % len(actions)])
            if terminated or truncated:
                env.reset()
            steps += 1
        now = time.perf_counter()
        if now >= end:
            break
    env.close()
    results.put((seed, steps / (now - start), None))


def measure(package: str, env_name: str | None, procs: int, seconds: float) -> list[float]:
    """Steps/s of each of ``procs`` processes stepping at the same time."""
    ctx = mp.get_context("fork")  # the parent holds no env and no thread: a cheap, safe start
    barrier, results = ctx.Barrier(procs), ctx.Queue()
    workers = [
        ctx.Process(target=_worker, args=(package, env_name, seed, seconds, barrier, results), daemon=True)
        for seed in range(procs)
    ]
    for w in workers:
        w.start()
    rates, errors = [], []
    for _ in workers:
        _, rate, error = results.get(timeout=seconds + 660)
        (errors if error else rates).append(error or rate)
    for w in workers:
        w.join(timeout=30)
    real = [e for e in errors if e != "aborted"]
    if real:
        raise RuntimeError(real[0])
    return rates


def default_procs(cores: int) -> list[int]:
    counts, n = [], 1
    while n < cores:
        counts.append(n)
        n *= 2
    return counts + [cores]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--package",
        nargs="+",
        default=["torchbeast_atari"],
        help=f"Environment packages, or all ({', '.join(PACKAGES)}).",
    )
    parser.add_argument(
        "--env",
        default=None,
        help=f"The env (default: the package's; Football: {DEFAULT_ENVS['torchbeast_football']}); one package only.",
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="Length of each measurement.")
    parser.add_argument(
        "--procs",
        nargs="+",
        type=int,
        default=None,
        help="Process counts (default: 1, 2, 4, ... up to the usable cores).",
    )
    args = parser.parse_args(argv)
    from rl_core.config.sizing import usable_cores

    packages = list(PACKAGES) if args.package == ["all"] else args.package
    if args.env and len(packages) > 1:
        parser.error("--env names the env of one --package")
    cores = usable_cores()
    counts = args.procs or default_procs(cores)
    for package in packages:
        try:
            pkg, flags = package_flags(package, args.env)
            name, fps = flags.env, frames_per_step(package, pkg, flags)
            base = measure(package, args.env, counts[0], args.seconds)
        except SystemExit:  # the package's check_flags refused (DMLab not installed), its reason on stderr
            print(f"{package}: skipped (its flags were refused: the reason is on stderr)\n", flush=True)
            continue
        except Exception as e:  # noqa: BLE001 - a package whose env cannot run here: say so, go on
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
            print(f"{package}: skipped ({type(e).__name__}: {first})\n", flush=True)
            continue
        print(
            f"env ceiling: {package} {name} on {cores} usable cores; {args.seconds:g} s a measurement; "
            f"1 step = {fps} frame{'s' if fps != 1 else ''}"
        )
        print(f"{'procs':>5} {'steps/s':>10} {'frames/s':>10} {'per proc':>9} {'speed-up':>8}")
        one = sum(base) / counts[0]
        for n in counts:
            rates = base if n == counts[0] else measure(package, args.env, n, args.seconds)
            total = sum(rates)
            print(f"{n:>5} {total:>10,.0f} {total * fps:>10,.0f} {total / n:>9,.0f} {total / one:>8.2f}", flush=True)
        print(flush=True)


if __name__ == "__main__":
    main()
