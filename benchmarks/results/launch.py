"""The suite's ``run``: envs x agents x seeds through a package's launcher with its defaults, one run after another.

``run`` starts ``python -m <package>.polybeast --env E --agent A --seed S --xpid <E>_<A>_seed<S>[_<label>] --savedir DIR
--pipes_basename unix:/tmp/suite-<pid>-<i>`` (``--total_steps N`` when given, then the flags after ``--``) for each
env, agent and seed, one run after another: every other flag is the package's default for the agent, which is what
is measured.  A run whose directory finished (logs.csv reached the run's --total_steps and final_test.json exists)
is skipped and an unfinished one resumes from its model.tar (the launcher's --xpid resume), so the same command
continues an interrupted benchmark; a run that reached its budget without a final test (one cut short) gets it from
``--mode test`` on its model.tar; one whose launcher alone was signalled, short of its budget, is left for the same
command to resume.  A run's console is its run directory's out.log.  ``--games`` is ``--envs``.
"""

from __future__ import annotations

import dataclasses
import glob
import importlib
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time

from benchmarks.results.load import PROG, path_name, read_json
from rl_core.errors import UserError
from rl_core.records.plot import read_columns


@dataclasses.dataclass
class Plan:
    """One run of the suite: its label, run directory, launcher arguments, step budget, and whether it tests."""

    label: str
    rundir: str
    args: list[str]
    total_steps: int
    final_test: bool  # not --disable_final_test


def xpid(env: str, agent: str, seed: int, label: str = "") -> str:
    """The run directory's name under --savedir (``_<label>`` after it where the runs have one)."""
    return f"{env.replace('/', '-')}_{agent}_seed{seed}" + (f"_{path_name(label)}" if label else "")


def launcher_args(args, env: str, agent: str, seed: int, index: int, extra: list[str]) -> list[str]:
    """The launcher's command line: the run's identity, its own sockets, --total_steps if given, the extra flags."""
    out = [
        "--env",
        env,
        "--agent",
        agent,
        "--seed",
        str(seed),
        "--xpid",
        xpid(env, agent, seed, args.label),
        "--savedir",
        args.savedir,
        "--pipes_basename",
        f"unix:/tmp/suite-{os.getpid()}-{index}",
    ]
    if args.total_steps is not None:
        out += ["--total_steps", str(args.total_steps)]
    return out + extra


def plans(args, extra: list[str]) -> list[Plan]:
    """Every run, its flags parsed as the launcher parses them (a bad flag is refused before any run starts)."""
    from rl_core.runtime.entry import parse_flags

    try:
        env_pkg = importlib.import_module(f"{args.package}.env")
    except ModuleNotFoundError as e:
        raise UserError(
            f"--package {args.package}: no module {e.name}: give an installed torchbeast_X package"
        ) from None
    out = []
    for env in args.envs:
        for agent in args.agents:
            for seed in args.seeds:
                argv = launcher_args(args, env, agent, seed, len(out), extra)
                flags = parse_flags(env_pkg, argv, prog=f"python -m {args.package}.polybeast")
                out.append(
                    Plan(
                        f"{env} {agent} seed {seed}",
                        os.path.join(args.savedir, xpid(env, agent, seed, args.label)),
                        argv,
                        flags.total_steps,
                        not flags.disable_final_test,
                    )
                )
    return out


def logged_step(rundir: str) -> int | None:
    """The step of logs.csv's last row; None without one."""
    try:
        rows = read_columns(rundir, ("step",))
    except FileNotFoundError:
        return None
    return int(rows[-1][0]) if rows else None


def finished(plan: Plan) -> bool:
    """logs.csv reached the run's --total_steps and its final test (unless disabled) was written."""
    step = logged_step(plan.rundir)
    tested = not plan.final_test or os.path.exists(os.path.join(plan.rundir, "final_test.json"))
    return step is not None and step >= plan.total_steps and tested


class Signals:
    """SIGINT / SIGTERM: passed on to the run under way (it checkpoints and exits), and no later run starts."""

    def __init__(self):
        self.signum: int | None = None
        self.proc: subprocess.Popen | None = None
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        self.signum = signum
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signum)  # a terminal's Ctrl-C reached it already: it takes a repeat as the same


def launch(package: str, args: list[str], signals: Signals) -> tuple[int, str]:
    """Run the package's launcher to its end: (exit status, its console's last line)."""
    cmd = [sys.executable, "-m", f"{package}.polybeast", *args]
    with tempfile.TemporaryFile("w+") as out:
        signals.proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONUNBUFFERED="1")
        )
        status = signals.proc.wait()
        signals.proc = None
        out.seek(0)
        lines = out.read().strip().splitlines()
    return status, lines[-1] if lines else ""


def final_test_of_checkpoint(package: str, plan: Plan, signals: Signals) -> tuple[int, str]:
    """The final test of a run trained to its budget whose final test was cut short (a resume at the budget trains
    and tests nothing): ``--mode test`` on its model.tar, the package's protocol with the run's flags and test
    seeds, whose eval-<time>.json becomes the run's final_test.json."""
    from rl_core.evaluation import episodes

    evals = set(glob.glob(os.path.join(plan.rundir, "eval-*.json")))
    status, last = launch(package, ["--mode", "test", "--checkpoint", os.path.join(plan.rundir, "model.tar")], signals)
    new = sorted(set(glob.glob(os.path.join(plan.rundir, "eval-*.json"))) - evals)
    if status != 0 or not new:
        return status or 1, last
    result = read_json(plan.rundir, os.path.basename(new[-1]))
    if result["step"] < plan.total_steps:
        return 1, f"error: {plan.rundir}/model.tar is at step {result['step']}, short of {plan.total_steps}"
    result["xpid"] = os.path.basename(plan.rundir)
    episodes.write_json(os.path.join(plan.rundir, "final_test.json"), result)
    return 0, last


def run_one(package: str, plan: Plan, head: str, signals: Signals) -> int:
    """Start or resume the run, then test its checkpoint if it ended at its budget without a final test."""
    step = logged_step(plan.rundir)
    if step is None:
        how = "started"
    elif os.path.exists(os.path.join(plan.rundir, "model.tar")):
        how = f"resumed (logged to step {step:,})"
    else:  # killed before its first checkpoint: the run starts over (the results read its new rows: last_history)
        how = f"started over: no model.tar (logs.csv had reached step {step:,})"
    print(
        f"{head} {how}, {plan.total_steps:,} steps, run directory {plan.rundir}: python -m "
        f"{package}.polybeast {shlex.join(plan.args)}",
        flush=True,
    )
    start = time.monotonic()
    status, last = launch(package, plan.args, signals)
    step = logged_step(plan.rundir) or 0
    if status == 0 and signals.signum is None and step < plan.total_steps:
        # its launcher was stopped on its own (a signal to it, not to the suite): nothing to test yet
        print(
            f"{head} stopped at step {step:,} of {plan.total_steps:,}, its launcher interrupted: "
            "the same command resumes it",
            flush=True,
        )
        return status
    if status == 0 and signals.signum is None and not finished(plan):
        print(
            f"{head} at step {step:,} without final_test.json: --mode test on its model.tar",
            flush=True,
        )
        status, last = final_test_of_checkpoint(package, plan, signals)
    ended = "finished" if signals.signum is None else f"stopped by {signal.Signals(signals.signum).name}"
    print(
        f"{head} {ended}, exit status {status}, {(time.monotonic() - start) / 60:.1f} min"
        + (f", step {logged_step(plan.rundir) or 0:,}" if status == 0 else f": {last}"),
        flush=True,
    )
    return status


def run_suite(args, extra: list[str]) -> int:
    """Each planned run in turn; 0 when every run finished, 1 when one failed, 128 + N after signal N."""
    todo = plans(args, extra)
    signals = Signals()
    failed = skipped = 0
    for i, plan in enumerate(todo):
        head = f"[{i + 1}/{len(todo)}] {plan.label}:"
        if signals.signum is not None:
            break
        if finished(plan):
            skipped += 1
            print(
                f"{head} skipped, finished before ({plan.rundir}: step {logged_step(plan.rundir):,} of "
                f"{plan.total_steps:,}{', final_test.json' if plan.final_test else ''})",
                flush=True,
            )
            continue
        status = run_one(args.package, plan, head, signals)
        if status != 0 and signals.signum is None:
            failed += 1
    if signals.signum is not None:
        print("the suite stopped: the same command resumes it", flush=True)
        return 128 + signals.signum
    print(
        f"{len(todo)} runs: {len(todo) - skipped - failed} run, {skipped} skipped, {failed} failed; the table: "
        f"{PROG} table {shlex.quote(args.savedir)}/*",
        flush=True,
    )
    return 1 if failed else 0
