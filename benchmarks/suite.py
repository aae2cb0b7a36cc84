"""One benchmark command for every package: runs (envs x agents x seeds from the package's defaults), their table,
committed run summaries and the results page drawn from them.

    python benchmarks/suite.py run --package torchbeast_atari --envs PongNoFrameskip-v4 BreakoutNoFrameskip-v4 \\
        --agents impala ppo --seeds 1 2 3 [--total_steps N] [--savedir DIR] [--label TEXT] [-- FLAG ...]
    python benchmarks/suite.py table RUN_DIR ... [--score 18] [--png curves.png] [--steps_at 1000000 ...]
    python benchmarks/suite.py collect RUN_DIR ... [--out docs/data] [--machine TEXT] [--label TEXT] [--variant TEXT] \\
        [--score S ...]
    python benchmarks/suite.py render [--data docs/data] [--out docs/results.md] [--img docs/img] [--experiments DIR]

``run`` starts ``python -m <package>.polybeast --env E --agent A --seed S --xpid <E>_<A>_seed<S>[_<label>] --savedir DIR
--pipes_basename unix:/tmp/suite-<pid>-<i>`` (``--total_steps N`` when given, then the flags after ``--``) for each
env, agent and seed, one run after another: every other flag is the package's default for the agent, which is what
is measured.  A run whose directory finished (logs.csv reached the run's --total_steps and final_test.json exists)
is skipped and an unfinished one resumes from its model.tar (the launcher's --xpid resume), so the same command
continues an interrupted benchmark; a run that reached its budget without a final test (one cut short) gets it from
``--mode test`` on its model.tar.  A run's console is its run directory's out.log.  ``--games`` is ``--envs``.

``table`` groups run directories by (env, agent) and prints a markdown table: the seeds, agent steps reached,
the last-100 return at the end (mean +- std over seeds, and each seed's), the final test (final_test.json's
"test" group; then its "train" group, the training levels, where it has one) mean +- std over seeds, the agent
step and wall time at which the last-100 return first reached --score (each seed's), agent steps/s and
frames/s, and with --steps_at the last-100 return at those steps (the last row at or before each: nothing
interpolated).  Wall time is logs.csv's ``time``: seconds since training
began (the start before it and the final test not counted), summed over a resumed run's starts.  --png draws one
panel per env: per agent the mean over seeds of the last-100 return against agent steps, with the seeds' min-max
band.

``collect`` writes one small JSON summary per run directory, ``<out>/<package>/<env>/<agent>_seed<S>[_<label>].json``:
what meta.json, logs.csv, final_test.json and out.log record of the run (its command is meta.json's argv, that of
its last start; the machine is --machine, with the cores, GPU and device line the run recorded), its final test,
its greedy validations and its last-100 curve cut to at most CURVE_POINTS rows (every row at which it first
reached an anchor's score or a --score kept).  A summary with a ``source`` was transcribed by hand from a run's
record in docs/experiments/ (its run directory was not kept): its curve holds the recorded points alone, its times
and its wall time and agent steps/s only where recorded (null else).  ``--variant TEXT`` marks the runs as variants
(the summary's ``variant``: what they changed from the package's defaults).

``render`` draws the results page from those summaries alone, into the region of --out between MARKERS (printed to
stdout where --out has none).  A summary is a package-default row or a variant (benchmarks/page_rows.py says which,
how a row is named ``agent [core]`` and which of its flags its command shows: those that differ from today's
defaults).  The region: first the summary (benchmarks/summary_table.py: per row our score beside the best published
point at or below our agent steps; MinAtar's agents by their IQM over games and seeds with a stratified-bootstrap
interval, rliable's), then per package that has summaries a table of its package-default rows, one per env, agent and
core (a run that ended short of its --total_steps "1.23M of 5M, stopped"; a transcribed run's seed marked, with a line
under the table saying so; the last column links the variants), the rows' commands and per env a PNG whose x-axis
ends at the rows' most agent steps, with the anchors' published points up to there (benchmarks/anchors.json), a
transcribed run's points as markers joined by a line.  The variants go into the experiments page each row links
(--experiments, default the experiments/ next to --out), between VARIANT_MARKERS (a "Variant runs" section appended
where a page has none): a table with what each changed, and their commands as recorded.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import importlib
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks import page_rows, summary_table  # noqa: E402
from benchmarks.env_ceiling import frames_per_step  # noqa: E402
from benchmarks.summary_table import decimals, markdown_table, prose, short_steps  # noqa: E402
from rl_core.errors import UserError  # noqa: E402
from rl_core.config.flags import FlagParser  # noqa: E402
from rl_core.records.plot import read_columns  # noqa: E402

PROG = "python benchmarks/suite.py"
ANCHORS = os.path.join(REPO, "benchmarks", "anchors.json")
MARKERS = ("<!-- suite:begin -->", "<!-- suite:end -->")
CURVE_POINTS = 200  # a summary's curve: at most this many rows (and those of the scores)


# ------------------------------------------------------------------------------------------------ run


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
    how = "started" if step is None else f"resumed at logged step {step:,}"
    print(
        f"{head} {how}, {plan.total_steps:,} steps, run directory {plan.rundir}: python -m "
        f"{package}.polybeast {shlex.join(plan.args)}",
        flush=True,
    )
    start = time.monotonic()
    status, last = launch(package, plan.args, signals)
    if status == 0 and signals.signum is None and not finished(plan):
        print(
            f"{head} at step {logged_step(plan.rundir) or 0:,} without final_test.json: --mode test on its model.tar",
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


# ----------------------------------------------------------------------------------------------- runs


@dataclasses.dataclass
class Run:
    """A run's identity and its logs.csv history (a resumed run's: the rows of its last start on, with the wall
    seconds of every start), read from its directory (``load_run``) or from its summary (``run_of_summary``: the
    rows the summary kept)."""

    run_dir: str  # a summary's path where the run was read from one
    env: str
    agent: str
    seed: int
    steps: np.ndarray
    seconds: np.ndarray
    returns: np.ndarray  # return_last_100; NaN before an episode ended
    final_test: float | None
    frames_per_step: int
    label: str = ""  # a summary's --label, which tells apart runs of one env, agent and seed
    recorded: dict | None = None  # a transcribed summary's wall_seconds and steps_per_s (None: not recorded)
    final_train: float | None = None  # the final test's mean on the training levels, where it has a "train" group
    row_name: str = ""  # the results page's name of a package-default row, ``agent [core]`` (page_rows.row_names)

    @property
    def transcribed(self) -> bool:
        """Read from a summary transcribed from a log, not collected: its curve holds the recorded points alone."""
        return self.recorded is not None

    @property
    def last_step(self) -> int:
        return int(self.steps[-1])

    @property
    def wall_seconds(self) -> float:
        """Training seconds to the last row (a transcribed run's as recorded); NaN where not recorded."""
        if self.recorded is not None:
            return math.nan if self.recorded["wall_seconds"] is None else float(self.recorded["wall_seconds"])
        return float(self.seconds[-1])

    @property
    def steps_per_s(self) -> float:
        if self.recorded is not None:
            return math.nan if self.recorded["steps_per_s"] is None else float(self.recorded["steps_per_s"])
        return self.last_step / self.seconds[-1] if self.seconds[-1] > 0 else math.nan

    @property
    def name(self) -> str:
        """The agent as tables and legends name it: a package-default row's name, else with its label, if any."""
        if self.row_name:
            return self.row_name
        return f"{self.agent} [{self.label}]" if self.label else self.agent


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


def launcher_of(meta: dict) -> tuple[str, str]:
    """(package, module) of the launcher in meta.json's argv: .../torchbeast_atari/polybeast.py ->
    ("torchbeast_atari", "polybeast")."""
    path = meta["argv"][0]
    package = os.path.basename(os.path.dirname(path))
    try:
        importlib.import_module(f"{package}.env")
    except ModuleNotFoundError:
        raise UserError(
            f"meta.json's launcher {path} is not a torchbeast_X package's: pass run directories made by "
            "python -m torchbeast_X.polybeast"
        ) from None
    return package, os.path.splitext(os.path.basename(path))[0]


def frames_per_agent_step(meta: dict) -> int:
    """Frames per agent step of the run's package (Atari: the frame skip), as benchmarks/env_ceiling.py counts;
    the package is that of the launcher in meta.json's argv."""
    package = launcher_of(meta)[0]
    return frames_per_step(package, importlib.import_module(f"{package}.env"), argparse.Namespace(**meta["flags"]))


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
    final = final_test_summary(run_dir)
    return Run(
        run_dir,
        flags["env"],
        flags["agent"] + ("+rnd" if flags["rnd"] else ""),
        flags["seed"],
        steps.astype(np.int64),
        secs,
        returns,
        final["mean"] if final else None,
        frames_per_agent_step(meta),
        final_train=final.get("train") if final else None,
    )


def final_test_summary(run_dir: str) -> dict | None:
    """final_test.json's "test" group: its mean and std over the test's runs, each run's mean return, the episodes
    played, whether the policy was greedy and the model's step, and the "train" group's mean where the package
    also tests the training levels (Procgen: the test runs are held-out levels); None without one."""
    if not os.path.exists(os.path.join(run_dir, "final_test.json")):
        return None
    result = read_json(run_dir, "final_test.json")
    runs = [run for run in result["runs"] if run.get("group", "test") == "test"]
    group = result["groups"]["test"]
    summary = {
        "mean": group["mean"],
        "std": group["std"],
        "runs": [run["mean_return"] for run in runs],
        "episodes": sum(run["episodes"] for run in runs),
        "greedy": result.get("greedy"),
        "step": result.get("step"),
    }
    if "train" in result["groups"]:
        summary["train"] = result["groups"]["train"]["mean"]
    return summary


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
    """(env, agent's name) -> its runs by seed, in the order the envs and agents first appear."""
    groups: dict[tuple[str, str], list[Run]] = {}
    for run in runs:
        groups.setdefault((run.env, run.name), []).append(run)
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
    """``mean ± std`` (numpy's population std) over the values (one value alone), ``(k of n seeds)`` (or ``runs``)
    when some of the group's runs have none."""
    if not values:
        return "-"
    d = decimals(values)
    text = f"{np.mean(values):.{d}f}" + (f" ± {np.std(values):.{d}f}" if len(values) > 1 else "")
    if len(values) == len(group):
        return text
    return f"{text} ({len(values)} of {len(group)} {'runs' if seeds_repeat(group) else 'seeds'})"


def last_returns(group: list[Run]) -> list[float]:
    """Each run's last-100 return at its last row (NaN where no episode had ended)."""
    return [float(run.returns[-1]) for run in group]


def known_values(values: list[float]) -> list[float]:
    return [v for v in values if not math.isnan(v)]


def final_tests(group: list[Run]) -> list[float]:
    """The final tests' means of the runs that have one."""
    return [run.final_test for run in group if run.final_test is not None]


def final_test_cell(group: list[Run]) -> str:
    """The final tests' mean +- std, then that on the training levels where the test also played them (the
    first figure is then the held-out levels')."""
    trains = [run.final_train for run in group if run.final_train is not None]
    cell = mean_std(final_tests(group), group)
    return f"{cell} (training levels {mean_std(trains, group)})" if trains else cell


def per_seed(texts: list[str]) -> str:
    return " / ".join(texts)


def collapsed(texts: list[str]) -> str:
    """One text when every seed's is the same, else each seed's."""
    return texts[0] if len(set(texts)) == 1 else per_seed(texts)


def pyplot():
    """matplotlib's pyplot on the Agg backend (files, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, png: str) -> None:
    """The figure into a PNG file, then closed."""
    fig.savefig(png, dpi=100)
    pyplot().close(fig)


def draw_band(ax, label: str, curves: list[tuple[np.ndarray, np.ndarray]], **style):
    """The mean over the (steps, values) curves and their min-max band, on the steps at which every curve has a value
    (NaN: none); the mean's line, or None where no curve has a value."""
    curves = [(steps[~np.isnan(values)], values[~np.isnan(values)]) for steps, values in curves]
    curves = [(steps, values) for steps, values in curves if steps.size]
    if not curves:
        return None
    grid = np.unique(np.concatenate([steps for steps, _ in curves]))
    grid = grid[(grid >= max(steps[0] for steps, _ in curves)) & (grid <= min(steps[-1] for steps, _ in curves))]
    values = np.stack([at_or_before(steps, v, grid) for steps, v in curves])
    (line,) = ax.plot(grid, values.mean(0), drawstyle="steps-post", label=label, **style)
    ax.fill_between(grid, values.min(0), values.max(0), step="post", color=line.get_color(), alpha=0.2)
    return line


# ---------------------------------------------------------------------------------------------- table


def group_row(group: list[Run], score: float, steps_at: list[int]) -> list[str]:
    """One table row: the (env, agent) group's runs summarised."""
    ends = last_returns(group)
    reached = [(run, first_reached(run, score)) for run in group]
    row = [
        group[0].env,
        group[0].name,
        per_seed([str(run.seed) for run in group]),
        collapsed([f"{run.last_step:,}" for run in group]),
        mean_std(known_values(ends), group),
        per_seed([f"{v:.1f}" if not math.isnan(v) else "-" for v in ends]),
        final_test_cell(group),
        per_seed([f"{int(run.steps[i]):,}" if i is not None else "not reached" for run, i in reached]),
        per_seed([f"{run.seconds[i] / 60:.2f}" if i is not None else "not reached" for run, i in reached]),
        f"{np.mean([run.steps_per_s for run in group]):,.0f}",
        f"{np.mean([run.steps_per_s * run.frames_per_step for run in group]):,.0f}",
    ]
    for step in steps_at:
        values = [return_at(run, step) for run in group]
        row.append(mean_std([v for v in values if v is not None], group))
    return row


def markdown(runs: list[Run], score: float, steps_at: list[int]) -> str:
    header = [
        "env",
        "agent",
        "seeds",
        "agent steps",
        "last-100 return",
        "last-100 per seed",
        "final test",
        f"step first ≥ {score:g}",
        f"minutes to ≥ {score:g}",
        "agent steps/s",
        "frames/s",
        *[f"last-100 at {step:,}" for step in steps_at],
    ]
    return markdown_table(header, [group_row(group, score, steps_at) for group in grouped(runs).values()])


def plot_curves(runs: list[Run], png: str, score: float) -> None:
    """One panel per env: per agent the seeds' mean last-100 return and their min-max band."""
    plt = pyplot()
    envs = list(dict.fromkeys(run.env for run in runs))
    fig, axes = plt.subplots(1, len(envs), figsize=(6 * len(envs), 4.5), squeeze=False)
    for ax, env in zip(axes[0], envs):
        for (e, name), group in grouped(runs).items():
            if e == env:
                draw_band(ax, f"{name} ({count_label(group)})", [(run.steps, run.returns) for run in group])
        ax.axhline(score, color="gray", linestyle="--", linewidth=0.8, label=f"score {score:g}")
        ax.set(title=env, xlabel="agent steps", ylabel="last-100 return")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    save_figure(fig, png)


def writable_dir_of(path: str, flag: str) -> None:
    """UserError unless the directory the file ``path`` goes into exists."""
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise UserError(f"{flag} {path}: its directory does not exist: create it or choose another path")


def table(args) -> int:
    runs = [load_run(run_dir) for run_dir in args.run_dirs]
    if args.png:
        writable_dir_of(args.png, "--png")
    print(markdown(runs, args.score, args.steps_at))
    print(
        f"\nmean ± std over seeds (numpy's population std), per seed in the seeds' order; minutes: of training "
        f"(logs.csv's time); frames/s: agent steps/s x the package's frames per agent step "
        f"({', '.join(sorted({f'{r.env}: {r.frames_per_step}' for r in runs}))})"
    )
    if args.png:
        plot_curves(runs, args.png, args.score)
        print(f"wrote {args.png}")
    return 0


# -------------------------------------------------------------------------------------------- collect

VALIDATION_LINE = re.compile(r"validation at step (\d+): mean return (\S+) over \d+ episodes")
DEVICE_LINE = re.compile(r"\] device: (.+)$")


def out_log_lines(run_dir: str) -> list[str]:
    """out.log's lines (every start's: the launcher appends), none without one."""
    path = os.path.join(run_dir, "out.log")
    if not os.path.exists(path):
        return []
    with open(path, errors="replace") as f:
        return f.read().splitlines()


def validation_points(run_dir: str, lines: list[str]) -> dict | None:
    """The run's greedy validations (rl_core/runtime/validation.py): out.log's lines, each at the validated model's
    step; without them logs.csv's valid_mean_return, at the step of the row after the validation ended (one
    overtaken by the next before a row was written is missing there).  A resumed run's repeated steps give way to
    its later start's.  None where the run validated nothing."""
    points = [(int(m.group(1)), float(m.group(2))) for m in map(VALIDATION_LINE.search, lines) if m]
    source = "out.log"
    if not points:
        rows = read_columns(run_dir, ("step", "valid_mean_return"))
        points, source = [(int(step), value) for step, value in rows if not math.isnan(value)], "logs.csv"
    if not points:
        return None
    kept = last_history(points)
    return {"source": source, "step": [step for step, _ in kept], "mean_return": [rounded(v) for _, v in kept]}


def recorded_machine(meta: dict, lines: list[str]) -> dict:
    """What the run recorded of its machine: meta.json's sizing (the cores it could use, whether the learner had a
    GPU; a resumed run keeps its first start's) and out.log's device lines (each start's, repeats dropped)."""
    sizing = meta.get("sizing") or {}
    devices = [m.group(1) for m in map(DEVICE_LINE.search, lines) if m]
    return {"usable_cores": sizing.get("cores"), "gpu": sizing.get("gpu"), "devices": list(dict.fromkeys(devices))}


def rounded(value: float, digits: int = 3) -> float | None:
    """JSON's number: rounded, None for NaN."""
    return None if math.isnan(value) else round(float(value), digits)


def rounded_return(value: float, scores: list[float], digits: int = 3) -> float | None:
    """``rounded``, but never up onto or past a score the value is below: 0.89952 is kept as 0.899, not 0.9, so that
    the summary's first row at 0.9 is the run directory's."""
    kept = rounded(value, digits)
    if kept is not None and any(value < score <= kept for score in scores):
        kept = math.floor(float(value) * 10**digits) / 10**digits
    return kept


def curve_rows(run: Run, scores: list[float]) -> np.ndarray:
    """The rows a summary keeps: at most CURVE_POINTS spread over the history (its first and last among them), and
    the first row reaching each score, so that the summary gives the same first step as the run directory."""
    even = np.round(np.linspace(0, len(run.steps) - 1, min(len(run.steps), CURVE_POINTS))).astype(np.int64)
    reached = [i for i in (first_reached(run, score) for score in scores) if i is not None]
    return np.unique(np.concatenate([even, np.array(reached, dtype=np.int64)]))


def summarize(
    run_dir: str, machine: str | None, label: str, scores: list[float], anchors: dict, variant: str = ""
) -> dict:
    """A run directory's summary (see the module's docstring): what ``render`` needs, without the directory."""
    run = load_run(run_dir)
    meta = read_json(run_dir, "meta.json")
    package, module = launcher_of(meta)
    lines = out_log_lines(run_dir)
    scores = sorted(set(scores) | anchor_scores(anchors, run.env))
    rows = curve_rows(run, scores)
    sizing = meta.get("sizing") or {}
    return {
        "package": package,
        "env": run.env,
        "agent": run.agent,
        "seed": run.seed,
        "label": label or None,
        "variant": variant or None,
        "xpid": os.path.basename(os.path.normpath(run_dir)),
        "command": f"python -m {package}.{module} {shlex.join(meta['argv'][1:])}",
        "distributed": meta.get("distributed"),
        "git_commit": meta.get("git_commit"),
        "start": meta.get("start"),
        "end": meta.get("end"),
        "reason": meta.get("reason"),
        "machine": machine,
        "recorded_machine": recorded_machine(meta, lines),
        "sizing": {k: sizing.get(k) for k in ("num_servers", "num_actors", "batch_size", "server_splits")},
        "total_steps": meta["flags"]["total_steps"],
        "agent_steps": run.last_step,
        "wall_seconds": rounded(run.seconds[-1], 1),
        "steps_per_s": rounded(run.steps_per_s, 1),
        "frames_per_step": run.frames_per_step,
        "final_test": final_test_summary(run_dir),
        "validation": validation_points(run_dir, lines),
        "curve": {
            "rows": len(run.steps),
            "exact_scores": scores,
            "step": [int(run.steps[i]) for i in rows],
            "time": [rounded(run.seconds[i], 1) for i in rows],
            "return_last_100": [rounded_return(run.returns[i], scores) for i in rows],
        },
    }


def path_name(text: str) -> str:
    """A file name's part: ``/`` and ``:`` become ``-``."""
    return text.replace("/", "-").replace(":", "-")


def summary_path(out: str, summary: dict) -> str:
    """``<out>/<package>/<env>/<agent>_seed<S>[_<label>].json``."""
    label = f"_{path_name(summary['label'])}" if summary["label"] else ""
    name = f"{path_name(summary['agent'])}_seed{summary['seed']}{label}.json"
    return os.path.join(out, summary["package"], path_name(summary["env"]), name)


def write_summary(path: str, summary: dict) -> None:
    """The summary as JSON, a line per key (diffs stay readable, the file small)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    body = ",\n".join(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}" for key, value in summary.items())
    with open(path + ".tmp", "w") as f:
        f.write("{\n" + body + "\n}\n")
    os.replace(path + ".tmp", path)


def collect(args) -> int:
    """Every run directory read and summarised first (a bad one writes nothing), then the summaries written."""
    anchors = load_anchors()
    summaries = [
        (run_dir, summarize(run_dir, args.machine, args.label, args.score, anchors, args.variant))
        for run_dir in args.run_dirs
    ]
    paths: dict[str, str] = {}
    for run_dir, summary in summaries:
        path = summary_path(args.out, summary)
        if path in paths:
            raise UserError(f"{paths[path]} and {run_dir} are both {path}: collect them apart, each with its --label")
        paths[path] = run_dir
    for (run_dir, summary), path in zip(summaries, paths):
        write_summary(path, summary)
        print(
            f"{run_dir} -> {path} ({os.path.getsize(path):,} bytes): {summary['agent_steps']:,} agent steps", flush=True
        )
    return 0


# --------------------------------------------------------------------------------------------- render


def load_anchors(path: str = ANCHORS) -> dict:
    """benchmarks/anchors.json: ``sources`` and ``anchors``."""
    with open(path) as f:
        return json.load(f)


def anchors_of(anchors: dict, env: str, agents) -> list[dict]:
    """The anchors of ``env`` for any of ``agents``."""
    return [a for a in anchors["anchors"] if a["env"] == env and set(a["agents"]) & set(agents)]


def score_values(anchor: dict) -> list[float]:
    """An anchor's score as a list: none for null."""
    score = anchor.get("score")
    return [] if score is None else [float(score)]


def anchor_scores(anchors: dict, env: str) -> set[float]:
    """The scores of ``env``'s anchors."""
    return {s for a in anchors["anchors"] if a["env"] == env for s in score_values(a)}


def anchor_score(anchors: dict, env: str, agent: str) -> float | None:
    """The score of the first anchor of (env, agent) that has one."""
    return next((score_values(a)[-1] for a in anchors_of(anchors, env, [agent]) if score_values(a)), None)


SUMMARY_KEYS = ("package", "env", "agent", "seed", "command", "agent_steps", "curve", "final_test", "frames_per_step")


def load_summaries(data: str) -> list[tuple[str, dict]]:
    """(path, summary) of every ``<data>/<package>/<env>/*.json``, by path."""
    paths = sorted(glob.glob(os.path.join(data, "*", "*", "*.json")))
    if not paths:
        raise UserError(
            f"{data} holds no summaries (<package>/<env>/<agent>_seed<S>.json): write them with "
            f"{PROG} collect RUN_DIR ..."
        )
    out = []
    for path in paths:
        with open(path) as f:
            summary = json.load(f)
        missing = [key for key in SUMMARY_KEYS if key not in summary]
        if missing:
            raise UserError(f"{path} is not a run summary (no {', '.join(missing)}): write it with {PROG} collect")
        out.append((path, summary))
    return out


def transcribed(summary: dict) -> bool:
    """A summary transcribed by hand from a run's log in docs/experiments/ (its ``source`` says which; no run
    directory behind it): its curve holds only the recorded points, its times only those recorded (null else)."""
    return "source" in summary


def run_of_summary(path: str, summary: dict) -> Run:
    """The run as the summary's rows give it (a transcribed one's wall time and agent steps/s as recorded)."""
    curve = summary["curve"]
    returns, seconds = (
        np.array([math.nan if v is None else v for v in curve[key]], dtype=float) for key in ("return_last_100", "time")
    )
    final = summary["final_test"]
    recorded = {key: summary.get(key) for key in ("wall_seconds", "steps_per_s")} if transcribed(summary) else None
    return Run(
        path,
        summary["env"],
        summary["agent"],
        summary["seed"],
        np.array(curve["step"], dtype=np.int64),
        seconds,
        returns,
        final["mean"] if final else None,
        summary["frames_per_step"],
        summary.get("label") or "",
        recorded,
        final.get("train") if final else None,
    )


def duration(seconds: float) -> str:
    """Minutes (a decimal below 10), hours from 2 on; "-" where not recorded (NaN)."""
    if math.isnan(seconds):
        return "-"
    if seconds < 600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def steps_text(steps: int, short: bool = False) -> str:
    """Agent steps with their thousands separated, or (``short``) as ``short_steps`` gives them."""
    return short_steps(steps) if short else f"{steps:,}"


def steps_cell(group: list[Run], info: dict[str, dict], short: bool = False) -> str:
    """The agent steps each run reached (``short``: in millions); ``1.23M of 5M, stopped`` for one that ended short
    of its --total_steps (``running when collected`` where it had not ended when it was collected: meta.json had no
    end yet)."""
    texts = []
    for run in group:
        summary = info[run.run_dir]
        total = summary.get("total_steps")
        if total is None or run.last_step >= total:
            texts.append(steps_text(run.last_step, short))
            continue
        how = "running when collected" if summary.get("start") and not summary.get("end") else "stopped"
        texts.append(f"{short_steps(run.last_step)} of {short_steps(total)}, {how}")
    return collapsed(texts)


def reached_cell(group: list[Run], info: dict[str, dict], score: float | None, short: bool = False) -> str:
    """``score: each seed's first step`` (``≤``: the summary did not keep the score's first row: its next kept
    row's step; ``short``: steps in millions)."""
    if score is None:
        return "-"
    texts = []
    for run in group:
        i, exact = first_reached(run, score), score in info[run.run_dir]["curve"].get("exact_scores", [])
        if i is None:
            texts.append("not reached" if exact else "not on the kept rows")
        else:
            texts.append(f"{'' if exact else '≤ '}{steps_text(int(run.steps[i]), short)}")
    text = f"{score:g}: {collapsed(texts) if short else per_seed(texts)}"
    validations = [info[run.run_dir].get("validation") for run in group]
    if all(validations):  # an agent read by its greedy validations (R2D2: its training returns explore)
        text += f"; greedy validation: {per_seed([validation_reached(v, score, short) for v in validations])}"
    return text


def validation_reached(validation: dict, score: float, short: bool = False) -> str:
    """The step of the first greedy validation whose mean return reached ``score``, and the last one's return."""
    points = [(step, value) for step, value in zip(validation["step"], validation["mean_return"]) if value is not None]
    hits = [step for step, value in points if value >= score]
    last = f"last {points[-1][1]:g} at {short_steps(points[-1][0])}" if points else "none"
    return f"{steps_text(hits[0], short)} ({last})" if hits else f"not reached ({last})"


def machine_text(summary: dict) -> str:
    """--machine of the collect, else what the run recorded (device, usable cores)."""
    if summary.get("machine"):
        return summary["machine"]
    recorded = summary.get("recorded_machine") or {}
    parts = [device.split(", ")[0] for device in recorded.get("devices", [])]
    if recorded.get("usable_cores"):
        parts.append(f"{recorded['usable_cores']} usable cores")
    return "; ".join(parts) or "-"


SHARED_WORDS = ("beside", "shared")


def short_machine(text: str) -> str:
    """The machine's name alone (the text before its first comma), ``, shared`` where the text says the run shared
    it: the results page's column (the variants' tables keep the whole text)."""
    name, _, rest = text.partition(",")
    return name + (", shared" if any(word in rest for word in SHARED_WORDS) else "")


def rate_cell(group: list[Run], info: dict[str, dict]) -> str:
    """Agent steps/s: the mean over the runs, or each run's where they ran on different machines or one's is not
    recorded."""
    rates = [run.steps_per_s for run in group]
    if any(math.isnan(rate) for rate in rates) or len({machine_text(info[run.run_dir]) for run in group}) > 1:
        return per_seed(["-" if math.isnan(rate) else f"{rate:,.0f}" for rate in rates])
    return f"{np.mean(rates):,.0f}"


TRANSCRIBED_MARK = "†"
EXPERIMENTS = os.path.join(REPO, "docs", "experiments")
VARIANT_MARKERS = ("<!-- suite:variants:begin -->", "<!-- suite:variants:end -->")
VARIANT_HEADING = "## Variant runs"
VARIANT_ANCHOR = "#variant-runs"


def experiments_page(package: str, agent: str, summary: dict, experiments: str = EXPERIMENTS) -> str:
    """The page of ``experiments`` that holds a run's history (and its variants' table): its package's where it
    has one (``memory.md`` for ``torchbeast_memory``), ``recurrent.md`` for a run its command gives a recurrent
    core, else its agent's."""
    page = os.path.join(experiments, f"{package.removeprefix('torchbeast_')}.md")
    if os.path.exists(page):
        return page
    if any(word.split("=")[0] in page_rows.CORE_WORDS for word in str(summary.get("command", "")).split()):
        return os.path.join(experiments, "recurrent.md")
    return os.path.join(experiments, f"{agent.split('+')[0]}.md")


def render_row(group: list[Run], info: dict[str, dict], anchors: dict, agent: str, short: bool = False) -> list[str]:
    """One row of a table: the (env, agent) group's summaries under the agent cell ``agent``, a transcribed run's
    seed marked; ``short``: steps in millions and the machine's name alone (``short_machine``)."""
    machine = short_machine if short else str
    run = group[0]
    return [
        run.env,
        agent,
        per_seed([f"{r.seed}{TRANSCRIBED_MARK if r.transcribed else ''}" for r in group]),
        steps_cell(group, info, short),
        mean_std(known_values(last_returns(group)), group),
        final_test_cell(group),
        reached_cell(group, info, anchor_score(anchors, run.env, run.agent), short),
        (collapsed if short else per_seed)([duration(r.wall_seconds) for r in group]),
        rate_cell(group, info),
        collapsed([machine(machine_text(info[r.run_dir])) for r in group]),
    ]


ROW_WIDTH = 200  # the longest line of a results table's row, in bytes


def linked_row(group: list[Run], info: dict[str, dict], anchors: dict, experiments: str, variants: str) -> list[str]:
    """A results page row, short (``render_row``): the agent links the page of docs/experiments/ that holds its
    history (``experiments_page``, a reference link: ``page_ref``), ``variants`` the last cell.  A row still longer
    than ROW_WIDTH gives, one cell after another until it fits (``compact_cells``), the seeds' mean wall time, their
    mean agent steps/s, their machines' names once each and how many seeds reached the anchor score."""
    run = group[0]
    page = experiments_page(info[run.run_dir]["package"], run.agent, info[run.run_dir], experiments)
    cells = render_row(group, info, anchors, f"[{run.name}][{page_ref(page)}]", short=True) + [variants]
    for index, text in compact_cells(group, info, anchors):
        if len(markdown_table(RENDER_HEADER, [cells]).splitlines()[-1].encode()) <= ROW_WIDTH:
            break
        cells[index] = text
    return cells


def compact_cells(group: list[Run], info: dict[str, dict], anchors: dict) -> list[tuple[int, str]]:
    """(column, text) of a row's cells in a shorter form over its seeds, in the order ``linked_row`` takes them."""
    score = anchor_score(anchors, group[0].env, group[0].agent)
    reached = [r for r in group if score is not None and first_reached(r, score) is not None]
    return [
        (7, duration(float(np.mean([r.wall_seconds for r in group])))),
        (8, f"{np.mean([r.steps_per_s for r in group]):,.0f}"),
        (9, ", ".join(dict.fromkeys(short_machine(machine_text(info[r.run_dir])) for r in group))),
        (6, "-" if score is None else f"{score:g}: {len(reached)} of {len(group)} seeds"),
    ]


def page_ref(path: str, anchor: str = "") -> str:
    """The reference link's label of an experiments page (and an anchor in it): ``memory.md``, ``memory.md
    variants``; ``page_refs`` writes their definitions."""
    return os.path.basename(path) + (" variants" if anchor else "")


def page_refs(paths: set[tuple[str, str]], out_dir: str) -> list[str]:
    """The reference links' definitions of the (page, anchor) pairs, by label."""
    refs = {page_ref(path, anchor): os.path.relpath(path, out_dir) + anchor for path, anchor in paths}
    return [f"[{label}]: {target}" for label, target in sorted(refs.items())]


RENDER_HEADER = [
    "env",
    "agent",
    "seeds",
    "agent steps",
    "last-100 at the end",
    "final test",
    "steps to anchor score",
    "wall time",
    "agent steps/s",
    "machine",
]
COMMAND_WIDTH = 120


def without_seed(command: str) -> list[str]:
    """A command's words without ``--seed S``."""
    words, out = shlex.split(command), []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word == "--seed":
            skip = True
        elif not word.startswith("--seed="):
            out.append(word)
    return out


def wrapped_command(command: str) -> list[str]:
    """A shell command in lines of at most COMMAND_WIDTH characters continued with `` \\`` (a flag kept with its
    value)."""
    words = [shlex.quote(word) for word in shlex.split(command)]
    units: list[str] = []
    for word in words:
        if units and units[-1].startswith("--") and " " not in units[-1] and not word.startswith("--"):
            units[-1] += " " + word
        else:
            units.append(word)
    lines, line = [], units[0]
    for unit in units[1:]:
        if len(line) + len(unit) + 3 > COMMAND_WIDTH:
            lines.append(line + " \\")
            line = "    " + unit
        else:
            line += " " + unit
    return lines + [line]


def command_block(groups: list[list[Run]], info: dict[str, dict], command_of=page_rows.page_command) -> list[str]:
    """The runs' commands (``command_of`` a summary) as a shell block: per group the first seed's, and each other
    seed's that differs in more than its --seed; each with the commit it ran at."""
    lines = ["```sh"]
    for group in groups:
        kinds: dict[tuple[str, ...], list[Run]] = {}
        for run in group:
            kinds.setdefault(tuple(without_seed(command_of(info[run.run_dir]))), []).append(run)
        for runs in kinds.values():
            summary = info[runs[0].run_dir]
            world = (summary.get("distributed") or {}).get("world_size")
            others = [str(r.seed) for r in runs[1:]]
            commits = list(dict.fromkeys(c[:7] for r in runs if (c := info[r.run_dir].get("git_commit"))))
            lines.append(
                f"# {runs[0].env} {runs[0].name}, seed {runs[0].seed}"
                + (
                    f" (seed{'s' if len(others) > 1 else ''} {', '.join(others)} the same with its own --seed)"
                    if others
                    else ""
                )
                + (f", under torchrun, world size {world}" if world else "")
                + (f", at commit {' / '.join(commits)}" if commits else "")
            )
            lines += wrapped_command(command_of(summary))
    return lines + ["```"]


def draw_transcribed(ax, group: list[Run], color=None) -> None:
    """Each transcribed run of the group: its recorded points as markers joined by a line, a marker and a line style
    per seed, in ``color`` (None: the axes' next one)."""
    for marker, style, run in zip("osD^v<>", ["-", "--", "-.", ":"] * 2, group):
        known = ~np.isnan(run.returns)
        (line,) = ax.plot(
            run.steps[known],
            run.returns[known],
            marker=marker,
            linestyle=style,
            color=color,
            markersize=5,
            label=f"{run.name} seed {run.seed}{TRANSCRIBED_MARK} (recorded points): "
            f"last-100 {run.returns[known][-1] if known.any() else math.nan:.1f}",
        )
        color = line.get_color()


def drawn_anchors(anchors: dict, env: str, agents, budget: int) -> list[tuple[dict, list]]:
    """(anchor, its points at or below ``budget``) of the env's anchors for the agents that have such points."""
    out = []
    for anchor in anchors_of(anchors, env, agents):
        points = [point for point in anchor["points"] if point[0] <= budget]
        if points:
            out.append((anchor, points))
    return out


def plot_env(env: str, groups: list[list[Run]], info: dict[str, dict], anchors: dict):
    """The figure of one (package, env), its x-axis to our budget (the most agent steps of its runs): per row the
    seeds' mean last-100 return with their min-max band (and its greedy validations, dashed, where the runs have
    them), a transcribed run's recorded points as markers joined by a line, the anchors' points at or below the
    budget as markers, their scores and the env's random return as lines."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 6))
    if len(groups) > 10:  # past the default cycle's 10 colours, two groups would share one
        ax.set_prop_cycle(color=plt.cm.tab20.colors)
    budget = max(run.last_step for group in groups for run in group)
    for whole in groups:
        group = [r for r in whole if not r.transcribed]
        line = None
        if group:
            end = known_values(last_returns(group))
            line = draw_band(
                ax,
                f"{group[0].name} ({count_label(group)}): last-100 {f'{np.mean(end):.{decimals(end)}f}' if end else '-'}",
                [(r.steps, r.returns) for r in group],
            )
            validations = [info[r.run_dir].get("validation") for r in group]
            if line is not None and all(validations):
                curves = [(np.array(v["step"]), np.array(v["mean_return"], dtype=float)) for v in validations]
                draw_band(
                    ax, f"{group[0].name} greedy validation", curves, color=line.get_color(), linestyle="--", marker="."
                )
        draw_transcribed(ax, [r for r in whole if r.transcribed], line.get_color() if line is not None else None)
    drawn = drawn_anchors(anchors, env, {r.agent for g in groups for r in g}, budget)
    for marker, (anchor, points) in zip("os^Dv<>", drawn):
        steps, values = zip(*points)
        ax.plot(
            steps,
            values,
            marker=marker,
            linestyle=":",
            color="black",
            markersize=6,
            label=f"{anchors['sources'][anchor['source']]['name']} ({', '.join(anchor['agents'])})",
        )
    lines = {(s, "score") for anchor, _ in drawn for s in score_values(anchor)[-1:]}
    lines |= {(a["random"], "random") for a in anchors["anchors"] if a["env"] == env and a.get("random") is not None}
    for value, what in sorted(lines):
        ax.axhline(
            value, color="gray", linestyle="--" if what == "score" else "-.", linewidth=0.8, label=f"{what} {value:g}"
        )
    ax.set(title=env, xlabel="agent steps", ylabel="return (last 100 episodes; validations: greedy)")
    ax.set_xlim(0, budget * 1.03)
    ax.xaxis.set_major_formatter(lambda x, _: short_steps(int(x)))
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(0, -0.14), ncol=2, frameon=False)  # under the axes
    fig.tight_layout()
    return fig


PACKAGE_TITLES = {
    "torchbeast_atari": "Atari",
    "torchbeast_gym": "gym",
    "torchbeast_mujoco": "MuJoCo",
    "torchbeast_football": "Football",
    "torchbeast_procgen": "Procgen",
    "torchbeast_dmlab": "DeepMind Lab",
    "torchbeast_memory": "Memory tasks: POPGym, MiniGrid",
    "torchbeast_minatar": "MinAtar",
}
SHORT_TITLES = {package: title.split(":")[0] for package, title in PACKAGE_TITLES.items()}  # the summary's column


@dataclasses.dataclass
class PageRuns:
    """The summaries as the page shows them: the package-default rows' runs by (package, env, row name), each named
    ``agent [core]`` (benchmarks/page_rows.py), and the variants' runs by (package, env, agent [label]), each with
    what it changed and the (package, env, agent, core) of the row it varies."""

    defaults: dict[tuple[str, str, str], list[Run]]
    variants: dict[tuple[str, str, str], list[Run]]
    reasons: dict[str, str]  # a variant's summary path -> what it changed
    varies: dict[str, tuple[str, str, str, str]]  # a variant's summary path -> (package, env, agent, core)


def page_runs(summaries: list[tuple[str, dict]]) -> PageRuns:
    """The summaries split into package-default rows and variants (benchmarks/page_rows.py), each side grouped, its
    runs by seed."""
    reasons = {path: page_rows.variant_reason(summary) for path, summary in summaries}
    defaults = [(path, summary) for path, summary in summaries if reasons[path] is None]
    names = page_rows.row_names(defaults)
    page_rows.check_one_per_seed(defaults, names)
    out = PageRuns({}, {}, {p: r for p, r in reasons.items() if r is not None}, {})
    for path, summary in summaries:
        run = run_of_summary(path, summary)
        if reasons[path] is None:
            run.row_name = names[path]
            out.defaults.setdefault((summary["package"], run.env, run.name), []).append(run)
        else:
            out.variants.setdefault((summary["package"], run.env, run.name), []).append(run)
            out.varies[path] = (summary["package"], run.env, run.agent, page_rows.core_of(summary))
    for groups in (out.defaults, out.variants):
        for group in groups.values():
            group.sort(key=lambda r: r.seed)
    packages = list(dict.fromkeys(summary["package"] for _, summary in summaries))
    info = dict(summaries)
    out.defaults = dict(sorted(out.defaults.items(), key=lambda item: row_order(item[1], packages, info)))
    return out


def row_order(group: list[Run], packages: list[str], info: dict[str, dict]) -> tuple:
    """A package-default row's place: by package (as the summaries come), env, agent, then core (CORE_ORDER)."""
    run = group[0]
    core = page_rows.core_of(info[run.run_dir])
    rank = page_rows.CORE_ORDER.index(core) if core in page_rows.CORE_ORDER else len(page_rows.CORE_ORDER)
    return packages.index(info[run.run_dir]["package"]), run.env, run.agent, rank


def variant_pages(group: list[Run], page: PageRuns, info: dict[str, dict], experiments: str) -> dict[str, int]:
    """The experiments pages that hold variants of a row's (env, agent, core), with how many runs each."""
    run = group[0]
    key = (info[run.run_dir]["package"], run.env, run.agent, page_rows.core_of(info[run.run_dir]))
    pages: dict[str, int] = {}
    for path, varies in page.varies.items():
        if varies == key:
            where = experiments_page(key[0], run.agent, info[path], experiments)
            pages[where] = pages.get(where, 0) + 1
    return pages


def package_table(package: str, page: PageRuns, info: dict, anchors: dict, experiments: str, refs: set) -> list[str]:
    """A package's table of package-default rows, the pages it links added to ``refs`` (``page_refs``)."""
    rows = []
    for (p, _, _), group in page.defaults.items():
        if p != package:
            continue
        run = group[0]
        refs.add((experiments_page(package, run.agent, info[run.run_dir], experiments), ""))
        pages = variant_pages(group, page, info, experiments)
        refs.update((path, VARIANT_ANCHOR) for path in pages)
        variants = ", ".join(f"[{n}][{page_ref(path, VARIANT_ANCHOR)}]" for path, n in pages.items()) or "-"
        rows.append(linked_row(group, info, anchors, experiments, variants))
    return [markdown_table(RENDER_HEADER + ["variant runs"], rows), ""] if rows else []


def variants_alone(package: str, page: PageRuns, info: dict, experiments: str, refs: set) -> list[str]:
    """A line naming the package's envs that have variants and no package-default row, each with its pages."""
    shown = {env for (p, env, _) in page.defaults if p == package}
    pages: dict[str, set[str]] = {}
    for (p, env, _), group in page.variants.items():
        if p == package and env not in shown:
            for run in group:
                pages.setdefault(env, set()).add(experiments_page(p, run.agent, info[run.run_dir], experiments))
    if not pages:
        return []
    refs.update((path, VARIANT_ANCHOR) for paths in pages.values() for path in paths)
    envs = [
        f"{env} ({', '.join(f'[{page_ref(p)}][{page_ref(p, VARIANT_ANCHOR)}]' for p in sorted(paths))})"
        for env, paths in sorted(pages.items())
    ]
    return [prose("No run at the package's defaults yet, variants alone: " + "; ".join(envs) + "."), ""]


def anchors_line(runs: list[Run], anchors: dict) -> str:
    """The sources of the anchors drawn beside the runs."""
    used = {
        (a["source"], tuple(a["agents"]))
        for env in {r.env for r in runs}
        for a in anchors_of(anchors, env, {r.agent for r in runs})
    }
    sources = [
        f"[{anchors['sources'][s]['name']}]({anchors['sources'][s]['url']}) for {', '.join(agents)}"
        for s, agents in sorted(used)
    ]
    return prose("Anchors: " + ("; ".join(sources) if sources else "none for these envs") + ".")


def render_package(
    package: str, page: PageRuns, info: dict, anchors: dict, out_dir: str, img: str, experiments: str, refs: set
) -> str:
    """A package's section of the page: its table of package-default rows (a line on the transcribed runs where it
    has some, one on the envs with variants alone), the rows' commands, a PNG per env (written into ``img``) and
    the anchors' sources; the pages its links name added to ``refs``."""
    groups = {(env, name): g for (p, env, name), g in page.defaults.items() if p == package}
    runs = [run for group in groups.values() for run in group]
    title = f"{PACKAGE_TITLES[package]} (`{package}`)" if package in PACKAGE_TITLES else f"`{package}`"
    lines = [f"### {title}", "", *package_table(package, page, info, anchors, experiments, refs)]
    if any(run.transcribed for run in runs):
        lines += [
            prose(
                f"{TRANSCRIBED_MARK} Transcribed from the run's record in docs/experiments/ (the summary's "
                f"`source` names the section; its run directory was not kept): its curve holds the recorded "
                f'points alone, and "-" is a figure not recorded.'
            ),
            "",
        ]
    lines += variants_alone(package, page, info, experiments, refs)
    if not groups:
        return "\n".join(lines).rstrip()
    lines += [
        prose(
            "Commands (the flags that differ from the package's defaults of today; each flag not given ran at the "
            "default of the commit named):"
        ),
        "",
        *command_block(list(groups.values()), info),
        "",
    ]
    for env in dict.fromkeys(env for env, _ in groups):
        png = os.path.join(img, f"suite_{package}_{path_name(env)}.png")
        save_figure(plot_env(env, [g for (e, _), g in groups.items() if e == env], info, anchors), png)
        lines += [f"![{env}, {package}]({os.path.relpath(png, out_dir)})", ""]
    return "\n".join(lines + [anchors_line(runs, anchors)])


def render_markdown(
    summaries: list[tuple[str, dict]], anchors: dict, out_dir: str, img: str, data: str, experiments: str = EXPERIMENTS
) -> tuple[str, dict[str, str]]:
    """The page's generated region (the summary, then a section per package that has summaries, PNGs written into
    ``img``, the reference links' definitions last) and each experiments page's variants region, by page."""
    info = {path: summary for path, summary in summaries}
    page = page_runs(summaries)
    packages = dict.fromkeys(summary["package"] for _, summary in summaries)
    shown = os.path.relpath(data, REPO) if os.path.abspath(data).startswith(REPO + os.sep) else data
    note = prose(
        f"Generated by `{PROG} render` from the run summaries in {shown} (`{PROG} collect RUN_DIR ...`): one row "
        f"per env, agent and core at the package's defaults; its variant runs (other flags, earlier defaults, "
        f"probes) are in the page the column links.  Mean ± std over seeds, per seed in the seeds' order; steps to "
        f"anchor score: the agent step of the first logs.csv row whose last-100 return reached the score of "
        f"benchmarks/anchors.json (and, where every seed has greedy validations, the first validation at it); wall "
        f"time: logs.csv's time, summed over a resumed run's starts."
    )
    refs: set[tuple[str, str]] = set()
    sections = [render_package(p, page, info, anchors, out_dir, img, experiments, refs) for p in packages]
    region = [
        *summary_table.render_summary(list(page.defaults.values()), info, anchors, SHORT_TITLES),
        "",
        "## Results per package",
        "",
        note,
        *("\n" + section for section in sections),
        "",
        *page_refs(refs, out_dir),
    ]
    return "\n".join(region), variant_regions(page, info, anchors, experiments)


def variant_regions(page: PageRuns, info: dict[str, dict], anchors: dict, experiments: str) -> dict[str, str]:
    """Each experiments page's variants region: a table of the variants it holds (what each changed in the last
    column) and their commands as recorded; every page that has the markers gets one, "none" where it holds none."""
    by_page: dict[str, list[list[Run]]] = {
        path: [] for path in glob.glob(os.path.join(experiments, "*.md")) if VARIANT_MARKERS[0] in read_text(path)
    }
    for (package, _, _), group in page.variants.items():
        run = group[0]
        by_page.setdefault(experiments_page(package, run.agent, info[run.run_dir], experiments), []).append(group)
    out = {}
    for path, groups in sorted(by_page.items()):
        if not groups:
            out[path] = (
                "None: every run of this page's packages and agents with a summary is a row of the results page."
            )
            continue
        rows = [
            render_row(g, info, anchors, g[0].name) + [collapsed([page.reasons[r.run_dir] for r in g])] for g in groups
        ]
        out[path] = "\n".join(
            [
                prose(
                    f"Generated by `{PROG} render` from the run summaries in docs/data marked as variants: what each "
                    "run changed from its package's defaults is its last column, and the rows at the defaults are "
                    "in [results.md](../results.md).  Commands as recorded, the run's identity left out (a path of "
                    "the machine it ran on as SAVEDIR/...): each flag not given ran at the default of the commit named."
                ),
                "",
                markdown_table(RENDER_HEADER + ["what differs"], rows),
                "",
                *command_block(groups, info, page_rows.variant_command),
            ]
        )
    return out


def read_text(path: str) -> str:
    """A text file's contents."""
    with open(path) as f:
        return f.read()


def replace_region(text: str, region: str, markers: tuple[str, str] = MARKERS) -> str | None:
    """``text`` with what lies between ``markers`` replaced by ``region``; None where the markers are not both
    there."""
    begin, end = text.find(markers[0]), text.find(markers[1])
    if begin < 0 or end < begin:
        return None
    return text[: begin + len(markers[0])] + "\n" + region + "\n" + text[end:]


def write_variant_regions(regions: dict[str, str]) -> None:
    """Each page's variants region between VARIANT_MARKERS; a page without them gets a VARIANT_HEADING section with
    them at its end (a page that does not exist, its title too)."""
    for path, region in regions.items():
        text = read_text(path) if os.path.exists(path) else f"# {os.path.basename(path)[:-3]}\n"
        page = replace_region(text, region, VARIANT_MARKERS)
        if page is None:
            page = f"{text.rstrip()}\n\n{VARIANT_HEADING}\n\n{VARIANT_MARKERS[0]}\n{region}\n{VARIANT_MARKERS[1]}\n"
        with open(path, "w") as f:
            f.write(page)


def render(args) -> int:
    summaries = load_summaries(args.data)
    writable_dir_of(args.out, "--out")
    os.makedirs(args.img, exist_ok=True)
    out_dir = os.path.dirname(os.path.abspath(args.out))
    experiments = args.experiments or os.path.join(out_dir, "experiments")
    region, variants = render_markdown(summaries, load_anchors(), out_dir, args.img, args.data, experiments)
    page = None
    if os.path.exists(args.out):
        page = replace_region(read_text(args.out), region)
    if page is None:
        print(region)
        print(
            f"{args.out} has no {MARKERS[0]} ... {MARKERS[1]} region: the markdown is printed above instead",
            file=sys.stderr,
        )
        return 0
    with open(args.out, "w") as f:
        f.write(page)
    write_variant_regions(variants)
    print(
        f"wrote {len(summaries)} runs' summaries into {args.out} (between its markers), their curves into {args.img} "
        f"and the variants' tables into {', '.join(os.path.relpath(p, out_dir) for p in variants) or 'no page'}"
    )
    return 0


# ----------------------------------------------------------------------------------------------- main


def make_parser() -> FlagParser:
    parser = FlagParser(prog=PROG, description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser(
        "run",
        usage=f"{PROG} run --envs ENV ... [--agents AGENT ...] [--seeds SEED ...] [flags] [-- FLAG ...]",
        help="Run envs x agents x seeds one after another (flags after -- are passed on).",
        description="Runs envs x agents x seeds one after another with the package's defaults; the "
        "flags after -- are passed on to every run; a finished run is skipped.",
    )
    r.add_argument(
        "--envs",
        "--games",
        dest="envs",
        nargs="+",
        required=True,
        metavar="ENV",
        help="--env of the runs (--games: the same).",
    )
    r.add_argument("--agents", nargs="+", default=["impala"], metavar="AGENT", help="--agent of the runs.")
    r.add_argument("--seeds", nargs="+", type=int, default=[1], metavar="SEED", help="--seed of the runs.")
    r.add_argument(
        "--total_steps", type=int, default=None, help="Each run's budget (default: the package's for the agent)."
    )
    r.add_argument("--savedir", default="~/logs/torchbeast/atari_suite", help="Where the run directories go.")
    r.add_argument("--package", default="torchbeast_atari", help="The torchbeast_X package whose launcher runs.")
    r.add_argument(
        "--label",
        default="",
        help="Tells these runs apart from others of the same env, agent and seed (the flags after -- differ, e.g. "
        "the core): their run directories end in _<label>; collect them with the same --label.",
    )
    t = sub.add_parser(
        "table",
        help="The results table (markdown) and curves of run directories.",
        description="Prints the results table (markdown) of run directories grouped by (env, agent).",
    )
    t.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    t.add_argument("--score", type=float, default=18.0, help="The last-100 return whose first step and time are given.")
    t.add_argument("--png", default=None, help="Also draw the curves, one panel per env, into this PNG.")
    t.add_argument(
        "--steps_at",
        nargs="+",
        type=int,
        default=[],
        metavar="STEP",
        help="Also give the last-100 return at these agent steps.",
    )
    c = sub.add_parser(
        "collect",
        help="A committed summary (JSON, a few KB) of each run directory.",
        description="Writes <out>/<package>/<env>/<agent>_seed<S>[_<label>].json per run directory.",
    )
    c.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    c.add_argument("--out", default=os.path.join(REPO, "docs", "data"), help="Where the summaries go.")
    c.add_argument(
        "--machine", default=None, help="The machine the runs ran on, in words (meta.json does not record it)."
    )
    c.add_argument("--label", default="", help="Tells these runs apart from others of the same env, agent and seed.")
    c.add_argument(
        "--variant",
        default="",
        help="What these runs changed from the package's defaults (other flags, earlier defaults, a probe), in a few "
        "words: their rows go to docs/experiments/, not the results page's tables.",
    )
    c.add_argument(
        "--score",
        nargs="+",
        type=float,
        default=[],
        metavar="SCORE",
        help="Also keep the first row reaching these last-100 returns (the anchors' are kept).",
    )
    d = sub.add_parser(
        "render",
        help="The results page from the committed summaries.",
        description="Writes the tables and curves of the summaries into --out between "
        f"{MARKERS[0]} and {MARKERS[1]} (to stdout where it has none) and --img.",
    )
    d.add_argument("--data", default=os.path.join(REPO, "docs", "data"), help="The summaries' directory.")
    d.add_argument("--out", default=os.path.join(REPO, "docs", "results.md"), help="The page.")
    d.add_argument("--img", default=os.path.join(REPO, "docs", "img"), help="Where the PNGs go.")
    d.add_argument(
        "--experiments",
        default=None,
        help="The pages the rows link and the variants' tables go into (default: --out's directory's experiments/).",
    )
    return parser


COMMANDS = {"table": table, "collect": collect, "render": render}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args = make_parser().parse_args(own)
    if extra and args.command != "run":
        make_parser().error("flags after -- are passed on by run only")
    try:
        if args.command == "run":
            args.savedir = os.path.abspath(os.path.expanduser(args.savedir))
            return run_suite(args, extra)
        return COMMANDS[args.command](args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
