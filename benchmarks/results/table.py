"""The suite's ``table``: run directories' markdown results table and their curves.

``table`` groups run directories by (env, agent) and prints a markdown table: the seeds, agent steps reached,
the last-100 return at the end (mean +- std over seeds, and each seed's), the final test (final_test.json's
"test" group; then its "train" group, the training levels, where it has one) mean +- std over seeds, the agent
step and wall time at which the last-100 return first reached --score (each seed's), agent steps/s and
frames/s, and with --steps_at the last-100 return at those steps (the last row at or before each: nothing
interpolated).  Wall time is logs.csv's ``time``: seconds since training
began (the start before it and the final test not counted), summed over a resumed run's starts.  --png draws one
panel per env: per agent the mean over seeds of the last-100 return against agent steps, with the seeds' min-max
band.
"""

from __future__ import annotations

import math

import numpy as np

from benchmarks.results.groups import (
    collapsed,
    count_label,
    draw_band,
    final_test_cell,
    grouped,
    known_values,
    last_returns,
    mean_std,
    per_seed,
    pyplot,
    save_figure,
)
from benchmarks.results.load import Run, first_reached, load_run, return_at, writable_dir_of
from benchmarks.summary_table import markdown_table


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
