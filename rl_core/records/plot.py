"""Learning curves: smoothed episode return against env steps, one line per run.

    python -m rl_core.records.plot RUN_DIR [RUN_DIR ...] --out curves.png [--smoothing 0.9]

Reads each run's logs.csv, so it works on a run still in progress.
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


def read_curve(run_dir: str) -> tuple[list[int], list[float]]:
    """(steps, mean episode return) of the log ticks in which episodes ended."""
    rows = [
        (int(step), value)
        for step, value in read_columns(run_dir, ("step", "mean_episode_return"))
        if not math.isnan(value)
    ]  # NaN: no episodes ended that tick
    return [step for step, _ in rows], [value for _, value in rows]


def smooth(values: list[float], weight: float) -> list[float]:
    """Exponential moving average with bias correction (TensorBoard's smoothing)."""
    out, last, norm = [], 0.0, 0.0
    for value in values:
        last = weight * last + (1 - weight) * value
        norm = weight * norm + (1 - weight)
        out.append(last / norm)
    return out


def plot(run_dirs: list[str], out: str, smoothing: float = 0.9, title: str | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for run_dir in run_dirs:
        steps, returns = read_curve(run_dir)
        label = os.path.basename(os.path.normpath(run_dir))
        if not steps:
            print(f"{run_dir}: no finished episodes yet", file=sys.stderr)
            continue
        (line,) = ax.plot(steps, smooth(returns, smoothing), label=label)
        ax.plot(steps, returns, color=line.get_color(), alpha=0.2, linewidth=0.8)
    ax.set_xlabel("env steps")
    ax.set_ylabel("episode return")
    ax.set_title(title or "learning curves")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rl_core.records.plot", description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", help="Run directories (savedir/xpid).")
    parser.add_argument("--out", default="curves.png", help="Output image.")
    parser.add_argument("--smoothing", type=float, default=0.9, help="EMA weight in [0, 1).")
    parser.add_argument("--title", default=None)
    args = parser.parse_args(argv)
    if not 0 <= args.smoothing < 1:
        parser.error("--smoothing must be in [0, 1)")
    try:
        plot(args.run_dirs, args.out, args.smoothing, args.title)
    except FileNotFoundError as e:
        parser.error(str(e))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
