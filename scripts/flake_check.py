"""Runs chosen tests N times, alone or under CI's load, and prints pass counts and durations.

CI runs ``pytest -n 2 --dist loadgroup``: one worker takes the ``learning`` group, one test after
another, while the other works through the rest of the suite (2-rank torchrun trainings, the
runtime's and the faults' trainings).  ``--load ci`` reproduces that second worker: the rest of
the suite (``-m "not learning"``) runs in a loop in the background for as long as the chosen tests
run; ``--load none`` runs them alone.  Both: ``--load none,ci``.

    python scripts/flake_check.py tests/test_learning.py::test_vmpo_with_the_package_defaults_learns_cartpole \\
        --runs 10 --load ci

Each run's output is kept under ``--out``; per run the table shows pass or fail, its duration and the
lines the test printed that match ``--show`` (the learning tests print where they got to).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"]


class Load:
    """The rest of the suite, over and over, in its own process group (CI's other xdist worker)."""

    def __init__(self, out_dir: str):
        self.out_dir = out_dir
        self.proc: subprocess.Popen | None = None
        self.rounds = 0

    def poll(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            self.rounds += 1
            out = open(os.path.join(self.out_dir, f"load-{self.rounds}.log"), "w")
            self.proc = subprocess.Popen(
                [*PYTEST, "-q", "-m", "not learning", "-x", "--timeout=900"],
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def run_once(test: str, log_path: str, load: Load | None, timeout: float) -> tuple[bool, float, str]:
    start = time.monotonic()
    with open(log_path, "w") as out:
        proc = subprocess.Popen(
            [*PYTEST, "-q", "-s", test], cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        while proc.poll() is None:
            if load is not None:
                load.poll()  # a load round that ended starts again: the load lasts as long as the test
            if time.monotonic() - start > timeout:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return False, time.monotonic() - start, f"killed after {timeout:.0f} s"
            time.sleep(0.5)
    wall = time.monotonic() - start
    with open(log_path) as f:
        text = f.read()
    passed = proc.returncode == 0
    failure = next((line[2:].strip() for line in text.splitlines() if line.startswith("E ")), "")
    return passed, wall, failure


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tests", nargs="+", help="pytest node ids")
    p.add_argument("--runs", type=int, default=10, help="runs of each test under each load")
    p.add_argument("--load", default="ci", help="none, ci, or both as none,ci")
    p.add_argument(
        "--show",
        default=r"last-100|first at|final test",
        help="regex: lines of each run's output shown beside its result",
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds before a run counts as failed")
    p.add_argument("--out", default="/tmp/flake_check", help="where each run's output is kept")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    show = re.compile(args.show)
    summary = []
    for load_name in args.load.split(","):
        if load_name not in ("none", "ci"):
            p.error(f"--load {load_name}: choose none or ci")
        for test in args.tests:
            load = Load(args.out) if load_name == "ci" else None
            results = []
            try:
                for i in range(1, args.runs + 1):
                    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", test.split("::")[-1])[:80]
                    log_path = os.path.join(args.out, f"{name}-{load_name}-{i}.log")
                    passed, wall, failure = run_once(test, log_path, load, args.timeout)
                    with open(log_path) as f:
                        shown = [line.strip() for line in f if show.search(line)]
                    results.append((passed, wall))
                    print(
                        f"{test} [load {load_name}] run {i}/{args.runs}: {'pass' if passed else 'FAIL'} "
                        f"{wall:.0f} s  {' | '.join(shown)[:300]}{'  ' + failure[:200] if failure else ''}",
                        flush=True,
                    )
            finally:
                if load is not None:
                    load.stop()
            summary.append((test, load_name, results, load.rounds if load else 0))
    print(f"\n{'test':<90} {'load':>5} {'passed':>8} {'min s':>7} {'median s':>9} {'max s':>7}")
    for test, load_name, results, rounds in summary:
        walls = [w for _, w in results]
        passed = sum(ok for ok, _ in results)
        print(
            f"{test[-90:]:<90} {load_name:>5} {passed:>4}/{len(results):<3} {min(walls):>7.0f} "
            f"{statistics.median(walls):>9.0f} {max(walls):>7.0f}"
        )
    return 0 if all(ok for _, _, results, _ in summary for ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
