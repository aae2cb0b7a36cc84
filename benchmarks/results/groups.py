"""A group of runs (one env and agent over seeds) as the tables and curves show it: its cells (mean ± std, per
seed) and its curve's mean and min-max band."""

from __future__ import annotations

import math

import numpy as np

from benchmarks.results.load import Run, at_or_before
from benchmarks.summary_table import decimals


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
