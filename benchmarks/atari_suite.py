"""A reproducible Atari benchmark (games x agents x seeds from the package's defaults) and its results table.

    python benchmarks/atari_suite.py run --games PongNoFrameskip-v4 BreakoutNoFrameskip-v4 --agents impala ppo \\
        --seeds 1 2 3 [--total_steps N] [--savedir DIR] [--package torchbeast_atari] [-- FLAG ...]
    python benchmarks/atari_suite.py table RUN_DIR ... [--score 18] [--png curves.png] [--steps_at 1000000 ...]

``run`` starts ``python -m <package>.polybeast --env G --agent A --seed S --xpid <G>_<A>_seed<S> --savedir DIR
--pipes_basename unix:/tmp/atari_suite-<pid>-<i>`` (``--total_steps N`` when given, then the flags after ``--``)
for each game, agent and seed, one run after another: every other flag is the package's default for the agent,
which is what is measured.  A run whose directory finished (logs.csv reached the run's --total_steps and
final_test.json exists) is skipped and an unfinished one resumes from its model.tar (the launcher's --xpid
resume), so the same command continues an interrupted benchmark; a run that reached its budget without a final
test (one cut short) gets it from ``--mode test`` on its model.tar.  A run's console is its run directory's out.log.

``table`` groups run directories by (game, agent) and prints a markdown table: the seeds, agent steps reached,
the last-100 return at the end (mean +- std over seeds, and each seed's), the final test (final_test.json's
"test" group) mean +- std over seeds, the agent step and wall time at which the last-100 return first reached
--score (each seed's), agent steps/s and frames/s, and with --steps_at the last-100 return at those steps (the
last row at or before each: nothing interpolated).  Wall time is logs.csv's ``time``: seconds since training
began (the start before it and the final test not counted), summed over a resumed run's starts.  --png draws one
panel per game: per agent the mean over seeds of the last-100 return against agent steps, with the seeds' min-max
band.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import importlib
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.env_ceiling import frames_per_step  # noqa: E402
from rl_core.errors import UserError  # noqa: E402
from rl_core.flags import FlagParser  # noqa: E402
from rl_core.plot import read_columns  # noqa: E402

PROG = "python benchmarks/atari_suite.py"


# ------------------------------------------------------------------------------------------------ run


@dataclasses.dataclass
class Plan:
    """One run of the suite: its label, run directory, launcher arguments, step budget, and whether it tests."""

    label: str
    rundir: str
    args: list[str]
    total_steps: int
    final_test: bool  # not --disable_final_test


def xpid(game: str, agent: str, seed: int) -> str:
    return f"{game.replace('/', '-')}_{agent}_seed{seed}"


def launcher_args(args, game: str, agent: str, seed: int, index: int, extra: list[str]) -> list[str]:
    """The launcher's command line: the run's identity, its own sockets, --total_steps if given, the extra flags."""
    out = ["--env", game, "--agent", agent, "--seed", str(seed), "--xpid", xpid(game, agent, seed),
           "--savedir", args.savedir, "--pipes_basename", f"unix:/tmp/atari_suite-{os.getpid()}-{index}"]
    if args.total_steps is not None:
        out += ["--total_steps", str(args.total_steps)]
    return out + extra


def plans(args, extra: list[str]) -> list[Plan]:
    """Every run, its flags parsed as the launcher parses them (a bad flag is refused before any run starts)."""
    from rl_core.runtime.entry import parse_flags

    try:
        env_pkg = importlib.import_module(f"{args.package}.env")
    except ModuleNotFoundError as e:
        raise UserError(f"--package {args.package}: no module {e.name}: give an installed torchbeast_X "
                        "package") from None
    out = []
    for game in args.games:
        for agent in args.agents:
            for seed in args.seeds:
                argv = launcher_args(args, game, agent, seed, len(out), extra)
                flags = parse_flags(env_pkg, argv, prog=f"python -m {args.package}.polybeast")
                out.append(Plan(f"{game} {agent} seed {seed}", os.path.join(args.savedir, xpid(game, agent, seed)),
                                argv, flags.total_steps, not flags.disable_final_test))
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
        signals.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                        env=dict(os.environ, PYTHONUNBUFFERED="1"))
        status = signals.proc.wait()
        signals.proc = None
        out.seek(0)
        lines = out.read().strip().splitlines()
    return status, lines[-1] if lines else ""


def final_test_of_checkpoint(package: str, plan: Plan, signals: Signals) -> tuple[int, str]:
    """The final test of a run trained to its budget whose final test was cut short (a resume at the budget trains
    and tests nothing): ``--mode test`` on its model.tar, the package's protocol with the run's flags and test
    seeds, whose eval-<time>.json becomes the run's final_test.json."""
    from rl_core import evaluation

    evals = set(glob.glob(os.path.join(plan.rundir, "eval-*.json")))
    status, last = launch(package, ["--mode", "test", "--checkpoint", os.path.join(plan.rundir, "model.tar")], signals)
    new = sorted(set(glob.glob(os.path.join(plan.rundir, "eval-*.json"))) - evals)
    if status != 0 or not new:
        return status or 1, last
    result = read_json(plan.rundir, os.path.basename(new[-1]))
    if result["step"] < plan.total_steps:
        return 1, f"error: {plan.rundir}/model.tar is at step {result['step']}, short of {plan.total_steps}"
    result["xpid"] = os.path.basename(plan.rundir)
    evaluation.write_json(os.path.join(plan.rundir, "final_test.json"), result)
    return 0, last


def run_one(package: str, plan: Plan, head: str, signals: Signals) -> int:
    """Start or resume the run, then test its checkpoint if it ended at its budget without a final test."""
    step = logged_step(plan.rundir)
    how = "started" if step is None else f"resumed at logged step {step:,}"
    print(f"{head} {how}, {plan.total_steps:,} steps, run directory {plan.rundir}: python -m "
          f"{package}.polybeast {shlex.join(plan.args)}", flush=True)
    start = time.monotonic()
    status, last = launch(package, plan.args, signals)
    if status == 0 and signals.signum is None and not finished(plan):
        print(f"{head} at step {logged_step(plan.rundir) or 0:,} without final_test.json: --mode test on its "
              f"model.tar", flush=True)
        status, last = final_test_of_checkpoint(package, plan, signals)
    ended = "finished" if signals.signum is None else f"stopped by {signal.Signals(signals.signum).name}"
    print(f"{head} {ended}, exit status {status}, {(time.monotonic() - start) / 60:.1f} min"
          + (f", step {logged_step(plan.rundir) or 0:,}" if status == 0 else f": {last}"), flush=True)
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
            print(f"{head} skipped, finished before ({plan.rundir}: step {logged_step(plan.rundir):,} of "
                  f"{plan.total_steps:,}{', final_test.json' if plan.final_test else ''})", flush=True)
            continue
        status = run_one(args.package, plan, head, signals)
        if status != 0 and signals.signum is None:
            failed += 1
    if signals.signum is not None:
        print("the suite stopped: the same command resumes it", flush=True)
        return 128 + signals.signum
    print(f"{len(todo)} runs: {len(todo) - skipped - failed} run, {skipped} skipped, {failed} failed; the table: "
          f"{PROG} table {shlex.quote(args.savedir)}/*", flush=True)
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------- table


@dataclasses.dataclass
class Run:
    """A run directory's identity and its logs.csv history (a resumed run's: the rows of its last start on,
    with the wall seconds of every start)."""

    run_dir: str
    game: str
    agent: str
    seed: int
    steps: np.ndarray
    seconds: np.ndarray
    returns: np.ndarray  # return_last_100; NaN before an episode ended
    final_test: float | None
    frames_per_step: int

    @property
    def last_step(self) -> int:
        return int(self.steps[-1])

    @property
    def steps_per_s(self) -> float:
        return self.last_step / self.seconds[-1] if self.seconds[-1] > 0 else math.nan


def wall_seconds(times: list[float]) -> list[float]:
    """logs.csv's ``time`` restarts when a run resumes: seconds since the first start, summed over the starts."""
    out, offset, last = [], 0.0, 0.0
    for t in times:
        if t < last:
            offset += last
        last = t
        out.append(offset + t)
    return out


def last_history(rows: list[tuple[float, ...]]) -> list[tuple[float, ...]]:
    """Rows with increasing steps: a resumed run's rows past the checkpoint it resumed from give way to the new ones."""
    kept: list[tuple[float, ...]] = []
    for row in rows:
        while kept and kept[-1][0] >= row[0]:
            kept.pop()
        kept.append(row)
    return kept


def read_json(run_dir: str, name: str) -> dict:
    with open(os.path.join(run_dir, name)) as f:
        return json.load(f)


def frames_per_agent_step(meta: dict) -> int:
    """Frames per agent step of the run's package (Atari: the frame skip), as benchmarks/env_ceiling.py counts;
    the package is that of the launcher in meta.json's argv."""
    package = os.path.basename(os.path.dirname(meta["argv"][0]))
    try:
        env_pkg = importlib.import_module(f"{package}.env")
    except ModuleNotFoundError:
        raise UserError(f"meta.json's launcher {meta['argv'][0]} is not a torchbeast_X package's: pass run "
                        "directories made by python -m torchbeast_X.polybeast") from None
    return frames_per_step(package, env_pkg, argparse.Namespace(**meta["flags"]))


def load_run(run_dir: str) -> Run:
    """A run directory's meta.json, logs.csv and final_test.json; UserError naming what is missing."""
    fix = "pass run directories (SAVEDIR/XPID) made by python -m torchbeast_X.polybeast"
    if not os.path.isdir(run_dir):
        raise UserError(f"{run_dir} is not a directory: {fix}")
    try:
        rows = read_columns(run_dir, ("step", "time", "return_last_100"))
    except FileNotFoundError as e:
        raise UserError(f"{e} {fix}") from None
    if not os.path.exists(os.path.join(run_dir, "meta.json")):
        raise UserError(f"{run_dir} has no meta.json: {fix}")
    if not rows:
        raise UserError(f"{run_dir}/logs.csv has no rows yet: wait for the run's first row (--log_interval)")
    meta = read_json(run_dir, "meta.json")
    seconds = wall_seconds([row[1] for row in rows])
    history = last_history([(row[0], t, row[2]) for row, t in zip(rows, seconds)])
    steps, secs, returns = (np.array(column) for column in zip(*history))
    flags = meta["flags"]
    final = read_json(run_dir, "final_test.json") if os.path.exists(os.path.join(run_dir, "final_test.json")) else None
    return Run(run_dir, flags["env"], flags["agent"] + ("+rnd" if flags["rnd"] else ""), flags["seed"],
               steps.astype(np.int64), secs, returns, final["groups"]["test"]["mean"] if final else None,
               frames_per_agent_step(meta))


def first_reached(run: Run, score: float) -> int | None:
    """The index of the first row whose last-100 return is at least ``score``."""
    hits = np.flatnonzero(run.returns >= score)  # NaN compares False
    return int(hits[0]) if hits.size else None


def at_or_before(steps: np.ndarray, values: np.ndarray, points) -> np.ndarray:
    """Each point's value: that of the last step at or before it (NaN before the first)."""
    index = np.searchsorted(steps, points, side="right") - 1
    return np.where(index >= 0, values[np.maximum(index, 0)], np.nan)


def return_at(run: Run, step: int) -> float | None:
    """The last-100 return of the last row at or before ``step`` that has one; None if the run stopped before it."""
    known = ~np.isnan(run.returns)
    if run.last_step < step or not known.any():
        return None
    value = float(at_or_before(run.steps[known], run.returns[known], step))
    return None if math.isnan(value) else value


def grouped(runs: list[Run]) -> dict[tuple[str, str], list[Run]]:
    """(game, agent) -> its runs by seed, in the order the games and agents first appear."""
    groups: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.game, run.agent), []).append(run)
    return {key: sorted(group, key=lambda r: r.seed) for key, group in groups.items()}


def seeds_repeat(group: list[Run]) -> bool:
    """Whether some seed of the group was run more than once."""
    return len({run.seed for run in group}) < len(group)


def count_label(group: list[Run]) -> str:
    """``"n seeds"``, or ``"n runs of k seeds"`` where a seed was run more than once."""
    seeds = len({run.seed for run in group})
    noun = "seed" if seeds == 1 else "seeds"
    return f"{len(group)} runs of {seeds} {noun}" if seeds_repeat(group) else f"{seeds} {noun}"


def mean_std(values: list[float], group: list[Run]) -> str:
    """``mean ± std`` (numpy's population std) over the values, ``(k of n seeds)`` (or ``runs``) when some of the
    group's runs have none."""
    if not values:
        return "-"
    text = f"{np.mean(values):.1f} ± {np.std(values):.1f}"
    if len(values) == len(group):
        return text
    return f"{text} ({len(values)} of {len(group)} {'runs' if seeds_repeat(group) else 'seeds'})"


def per_seed(texts: list[str]) -> str:
    return " / ".join(texts)


def collapsed(texts: list[str]) -> str:
    """One text when every seed's is the same, else each seed's."""
    return texts[0] if len(set(texts)) == 1 else per_seed(texts)


def group_row(group: list[Run], score: float, steps_at: list[int]) -> list[str]:
    """One table row: the (game, agent) group's runs summarised."""
    ends = [float(run.returns[-1]) for run in group]
    reached = [(run, first_reached(run, score)) for run in group]
    finals = [run.final_test for run in group if run.final_test is not None]
    row = [group[0].game, group[0].agent, per_seed([str(run.seed) for run in group]),
           collapsed([f"{run.last_step:,}" for run in group]),
           mean_std([v for v in ends if not math.isnan(v)], group),
           per_seed([f"{v:.1f}" if not math.isnan(v) else "-" for v in ends]),
           mean_std(finals, group),
           per_seed([f"{int(run.steps[i]):,}" if i is not None else "not reached" for run, i in reached]),
           per_seed([f"{run.seconds[i] / 60:.2f}" if i is not None else "not reached" for run, i in reached]),
           f"{np.mean([run.steps_per_s for run in group]):,.0f}",
           f"{np.mean([run.steps_per_s * run.frames_per_step for run in group]):,.0f}"]
    for step in steps_at:
        values = [return_at(run, step) for run in group]
        row.append(mean_std([v for v in values if v is not None], group))
    return row


def markdown(runs: list[Run], score: float, steps_at: list[int]) -> str:
    header = ["game", "agent", "seeds", "agent steps", "last-100 return", "last-100 per seed", "final test",
              f"step first ≥ {score:g}", f"minutes to ≥ {score:g}", "agent steps/s", "frames/s",
              *[f"last-100 at {step:,}" for step in steps_at]]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for group in grouped(runs).values():
        lines.append("| " + " | ".join(group_row(group, score, steps_at)) + " |")
    return "\n".join(lines)


def plot_curves(runs: list[Run], png: str, score: float) -> None:
    """One panel per game: per agent the seeds' mean last-100 return and their min-max band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = list(dict.fromkeys(run.game for run in runs))
    fig, axes = plt.subplots(1, len(games), figsize=(6 * len(games), 4.5), squeeze=False)
    for ax, game in zip(axes[0], games):
        for (g, agent), group in grouped(runs).items():
            if g == game:
                draw_band(ax, agent, group)
        ax.axhline(score, color="gray", linestyle="--", linewidth=0.8, label=f"score {score:g}")
        ax.set(title=game, xlabel="agent steps", ylabel="last-100 return")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def draw_band(ax, agent: str, group: list[Run]) -> None:
    """The mean over seeds and the min-max band, on the steps at which every seed has a last-100 return."""
    curves = [(run.steps[~np.isnan(run.returns)], run.returns[~np.isnan(run.returns)]) for run in group]
    curves = [(steps, values) for steps, values in curves if steps.size]
    if not curves:
        return
    grid = np.unique(np.concatenate([steps for steps, _ in curves]))
    grid = grid[(grid >= max(steps[0] for steps, _ in curves)) & (grid <= min(steps[-1] for steps, _ in curves))]
    values = np.stack([at_or_before(steps, v, grid) for steps, v in curves])
    (line,) = ax.plot(grid, values.mean(0), drawstyle="steps-post", label=f"{agent} ({count_label(group)})")
    ax.fill_between(grid, values.min(0), values.max(0), step="post", color=line.get_color(), alpha=0.2)


def table(args) -> int:
    runs = [load_run(run_dir) for run_dir in args.run_dirs]
    if args.png and not os.path.isdir(os.path.dirname(os.path.abspath(args.png))):
        raise UserError(f"--png {args.png}: its directory does not exist: create it or choose another path")
    print(markdown(runs, args.score, args.steps_at))
    print(f"\nmean ± std over seeds (numpy's population std), per seed in the seeds' order; minutes: of training "
          f"(logs.csv's time); frames/s: agent steps/s x the package's frames per agent step "
          f"({', '.join(sorted({f'{r.game}: {r.frames_per_step}' for r in runs}))})")
    if args.png:
        plot_curves(runs, args.png, args.score)
        print(f"wrote {args.png}")
    return 0


# ----------------------------------------------------------------------------------------------- main


def make_parser() -> FlagParser:
    parser = FlagParser(prog=PROG, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", usage=f"{PROG} run --games GAME ... [--agents AGENT ...] [--seeds SEED ...] [flags] "
                                    "[-- FLAG ...]",
                       help="Run games x agents x seeds one after another (flags after -- are passed on).",
                       description="Runs games x agents x seeds one after another with the package's defaults; the "
                                   "flags after -- are passed on to every run; a finished run is skipped.")
    r.add_argument("--games", nargs="+", required=True, metavar="GAME", help="--env of the runs.")
    r.add_argument("--agents", nargs="+", default=["impala"], metavar="AGENT", help="--agent of the runs.")
    r.add_argument("--seeds", nargs="+", type=int, default=[1], metavar="SEED", help="--seed of the runs.")
    r.add_argument("--total_steps", type=int, default=None,
                   help="Each run's budget (default: the package's for the agent).")
    r.add_argument("--savedir", default="~/logs/torchbeast/atari_suite", help="Where the run directories go.")
    r.add_argument("--package", default="torchbeast_atari", help="The torchbeast_X package whose launcher runs.")
    t = sub.add_parser("table", help="The results table (markdown) and curves of run directories.",
                       description="Prints the results table (markdown) of run directories grouped by (game, agent).")
    t.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    t.add_argument("--score", type=float, default=18.0, help="The last-100 return whose first step and time are given.")
    t.add_argument("--png", default=None, help="Also draw the curves, one panel per game, into this PNG.")
    t.add_argument("--steps_at", nargs="+", type=int, default=[], metavar="STEP",
                   help="Also give the last-100 return at these agent steps.")
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = make_parser().parse_args(own)
    if extra and args.command != "run":
        make_parser().error("flags after -- are passed on by run only")
    try:
        if args.command == "run":
            args.savedir = os.path.abspath(os.path.expanduser(args.savedir))
            return run_suite(args, extra)
        return table(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
