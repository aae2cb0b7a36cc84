"""A (package, env)'s figure on the results page, drawn from run summaries and the anchors (for ``render``)."""

from __future__ import annotations

import math

import numpy as np

from benchmarks.results.groups import count_label, draw_band, known_values, last_returns, pyplot
from benchmarks.results.load import TRANSCRIBED_MARK, Run, anchors_of, score_values
from benchmarks.summary_table import decimals, short_steps


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
