"""Learning curves: per run the last-100 return the progress line prints, against agent steps.

    polybeast-plot RUN_DIR [RUN_DIR ...] [--out curves.png] [--title TEXT]

(the same as ``python -m rl_core.records.plot``).  Reads each run's logs.csv, so it works on a run still in progress.
Per run two lines: the mean return of the last 100 episodes (``return_last_100``, bold: what the console prints, its
last point the run's last value) and, faint, the mean return of the episodes that ended in each log row (raw).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys


def read_columns(run_dir: str, columns: tuple[str, ...]) -> list[tuple[float, ...]]:
    """The rows of logs.csv in file order as tuples of ``columns`` (floats, NaN kept); a row where one is
    missing or not a number (a row being written) is left out."""
    path = os.path.join(run_dir, "logs.csv")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{run_dir} has no logs.csv: is it a run directory?")
    rows = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                rows.append(tuple(float(row[column]) for column in columns))
            except (KeyError, TypeError, ValueError):
                continue
    return rows


def read_curves(run_dir: str) -> tuple[list[int], list[float], list[int], list[float]]:
    """(steps, last-100 return, steps, mean return of each row's episodes) of the rows in which they are known."""
    rows = read_columns(run_dir, ("step", "return_last_100", "mean_episode_return"))
    last = [(int(step), value) for step, value, _ in rows if not math.isnan(value)]  # NaN: no episode ended yet
    raw = [(int(step), value) for step, _, value in rows if not math.isnan(value)]  # NaN: none ended that row
    return [s for s, _ in last], [v for _, v in last], [s for s, _ in raw], [v for _, v in raw]


def plot(run_dirs: list[str], out: str, title: str | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for run_dir in run_dirs:
        steps, last_100, raw_steps, raw = read_curves(run_dir)
        name = os.path.basename(os.path.normpath(run_dir))
        if not steps:
            print(f"{run_dir}: no finished episodes yet", file=sys.stderr)
            continue
        (line,) = ax.plot(steps, last_100, label=f"{name}: last-100 return ({last_100[-1]:.2f} at {steps[-1]:,})")
        ax.plot(
            raw_steps,
            raw,
            color=line.get_color(),
            alpha=0.25,
            linewidth=0.8,
            label=f"{name}: raw (the episodes ended in each log row)",
        )
    ax.xaxis.set_major_formatter(lambda x, _: f"{x / 1e6:g}M" if x else "0")
    ax.set_xlabel("agent steps")
    ax.set_ylabel("episode return")
    ax.set_title(title or "learning curves")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="polybeast-plot", description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", help="Run directories (savedir/xpid).")
    parser.add_argument("--out", default="curves.png", help="Output image.")
    parser.add_argument("--title", default=None)
    args = parser.parse_args(argv)
    try:
        plot(args.run_dirs, args.out, args.title)
    except FileNotFoundError as e:
        parser.error(str(e))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
