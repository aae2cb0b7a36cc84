"""The results page's summary: per package-default row (agent x benchmark) our score beside the best published
figure at no more agent steps than ours, and for the packages scored as a suite (MinAtar) each agent's interquartile
mean over games and seeds with a 95% stratified-bootstrap confidence interval (rliable; Agarwal et al. 2021).

A run's score is its final test's mean where it has one, else its last-100 return at its last row.  The published
figure is the best point of benchmarks/anchors.json's anchors for the env and agent at or below the run's agent steps
(the smallest of a row's seeds').  On a suite each run's score is normalised per game as (score - random) / (best
published at or below its agent steps - random), ``random`` an anchor's random return: 0 is a random policy, 1 the
best published figure.  The bootstrap draws BOOTSTRAP_REPS resamples of the runs within each game from a fixed seed
(BOOTSTRAP_SEED), so the page renders the same figures every time.
"""

from __future__ import annotations

import math
import textwrap
import warnings
from collections import Counter

import numpy as np

IQM_PACKAGES = {"torchbeast_minatar": "MinAtar"}  # packages whose games are summarised by an IQM over games x seeds
BOOTSTRAP_REPS = 2000
BOOTSTRAP_SEED = 0
WIDTH = 120  # a paragraph's lines


def prose(text: str) -> str:
    """A paragraph of the page in lines of at most WIDTH characters, none broken inside a `code` span."""
    parts = text.split("`")
    kept = "`".join(part.replace(" ", "\0") if i % 2 else part for i, part in enumerate(parts))
    return textwrap.fill(kept, WIDTH, break_long_words=False, break_on_hyphens=False).replace("\0", " ")


def short_steps(steps: int) -> str:
    """Agent steps in millions to two decimals or thousands to one: 1,234,560 -> 1.23M, 844,800 -> 844.8k."""
    for size, unit, digits in ((1_000_000, "M", 2), (1_000, "k", 1)):
        if steps >= size:
            return f"{steps / size:.{digits}f}".rstrip("0").rstrip(".") + unit
    return str(steps)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def anchors_for(anchors: dict, env: str, agent: str) -> list[dict]:
    """benchmarks/anchors.json's anchors of ``env`` that are a reference for ``agent``."""
    return [a for a in anchors["anchors"] if a["env"] == env and agent in a["agents"]]


def best_published(anchors: dict, env: str, agent: str | None, steps: int) -> tuple[float, int, str] | None:
    """(return, agent steps, source's name) of the best anchor point for (env, agent) at or below ``steps``; of
    every anchor of ``env`` where ``agent`` is None."""
    of_env = [a for a in anchors["anchors"] if a["env"] == env]
    points = [
        (value, step, anchors["sources"][a["source"]]["name"])
        for a in (of_env if agent is None else anchors_for(anchors, env, agent))
        for step, value in a["points"]
        if step <= steps
    ]
    return max(points, key=lambda p: (p[0], -p[1])) if points else None


def first_published(anchors: dict, env: str, agent: str) -> tuple[float, int] | None:
    """(return, agent steps) of the anchors' earliest point for (env, agent): what lies beyond a short run."""
    points = [(step, value) for a in anchors_for(anchors, env, agent) for step, value in a["points"]]
    return (min(points)[1], min(points)[0]) if points else None


def random_return(anchors: dict, env: str) -> float | None:
    """A random policy's return on ``env``: the first anchor of the env that gives one."""
    return next((a["random"] for a in anchors["anchors"] if a["env"] == env and a.get("random") is not None), None)


def run_score(run) -> tuple[float, str]:
    """(score, which): the final test's mean where the run has one, else the last-100 return at its last row."""
    if run.final_test is not None:
        return float(run.final_test), "final test"
    return float(run.returns[-1]), "last-100"


def decimals(values: list[float]) -> int:
    """2 where every value lies in [-1, 1] (POPGym's and MiniGrid's returns), else 1."""
    return 2 if values and max(abs(v) for v in values) <= 1 + 1e-9 else 1


def which_cell(group: list, kinds: list[str]) -> str:
    """What the score is: ``final test`` or ``last-100`` where every seed's is the same kind, else per seed."""
    if len(set(kinds)) == 1:
        return kinds[0]
    return ", ".join(f"seed {run.seed} {kind}" for run, kind in zip(group, kinds))


def score_cell(group: list) -> str:
    """The seeds' scores, mean ± std (numpy's population std), and which score it is."""
    scored = [(run, *run_score(run)) for run in group]
    scored = [(run, value, kind) for run, value, kind in scored if not math.isnan(value)]
    if not scored:
        return "-"
    values = [value for _, value, _ in scored]
    d = decimals(values)
    text = f"{np.mean(values):.{d}f}" + (f" ± {np.std(values):.{d}f}" if len(values) > 1 else "")
    return f"{text} ({which_cell([r for r, _, _ in scored], [k for _, _, k in scored])})"


def run_steps_text(last_step: int, summary: dict, steps_text=None) -> str:
    """The agent steps a run reached (``steps_text``: how to write them; ``short_steps`` unless given), and where it
    ended short of its own --total_steps ``1.23M of 5M, stopped`` (``running when collected`` where its summary has a
    start and no end)."""
    total = summary.get("total_steps")
    if total is None or last_step >= total:
        return (steps_text or short_steps)(last_step)
    how = "running when collected" if summary.get("start") and not summary.get("end") else "stopped"
    return f"{short_steps(last_step)} of {short_steps(total)}, {how}"


def steps_cell(group: list, info: dict[str, dict]) -> str:
    """The agent steps each seed reached, once where they are the same (``run_steps_text``: a run short of its own
    budget says so)."""
    texts = [run_steps_text(run.last_step, info[run.run_dir]) for run in group]
    return texts[0] if len(set(texts)) == 1 else " / ".join(texts)


def published_cell(anchors: dict, env: str, agent: str, steps: int) -> str:
    """``value at N (source)`` for the best published point at or below ``steps``; where every published point lies
    beyond, the first of them, and ``-`` where the env has none for the agent."""
    best = best_published(anchors, env, agent, steps)
    if best is not None:
        value, step, source = best
        return f"{value:g} at {short_steps(step)} ({source})"
    first = first_published(anchors, env, agent)
    if first is None:
        return "-"
    return f"none at ≤ {short_steps(steps)} ({first[0]:g} at {short_steps(first[1])})"


def summary_rows(groups: list[list], info: dict[str, dict], anchors: dict, titles: dict[str, str]) -> list[list[str]]:
    """One row per package-default (env, agent, core) of the packages not scored as a suite."""
    rows = []
    for group in groups:
        run = group[0]
        package = info[run.run_dir]["package"]
        steps = min(r.last_step for r in group)
        rows.append(
            [
                titles.get(package, package),
                run.env,
                run.name,
                str(len({r.seed for r in group})),
                steps_cell(group, info),
                score_cell(group),
                published_cell(anchors, run.env, run.agent, steps),
            ]
        )
    return rows


SUMMARY_HEADER = ["package", "env", "agent", "seeds", "agent steps", "ours", "best published at ≤ our agent steps"]


def normalised_scores(group: list, anchors: dict) -> dict[int, tuple[float, str]]:
    """Seed -> (normalised score, which score) of a game's runs, between the game's random return and its best
    published point (of any agent) at or below the run's agent steps; runs without such a point, or whose game has
    no random return, left out."""
    out = {}
    for run in group:
        best = best_published(anchors, run.env, None, run.last_step)  # one scale per game, whichever agent
        random = random_return(anchors, run.env)
        score, kind = run_score(run)
        if best is None or random is None or best[0] == random or math.isnan(score):
            continue
        out[run.seed] = ((score - random) / (best[0] - random), kind)
    return out


def score_matrix(games: dict[str, dict[int, tuple[float, str]]]) -> tuple[np.ndarray, list[int], list[str]]:
    """(runs x games matrix of normalised scores, the seeds every game has, the games), games without a scored run
    left out."""
    games = {game: seeds for game, seeds in games.items() if seeds}
    seeds = sorted(set.intersection(*(set(s) for s in games.values()))) if games else []
    names = sorted(games)
    matrix = np.array([[games[g][s][0] for g in names] for s in seeds], dtype=float).reshape(len(seeds), len(names))
    return matrix, seeds, names


def interval_estimate(matrix: np.ndarray) -> tuple[float, float, float]:
    """(IQM, CI low, CI high): rliable's stratified bootstrap over the runs within each game, from BOOTSTRAP_SEED.
    rliable 1.2's resampling draws from numpy's global generator (its ``random_state`` reaches arch's alone): that
    generator is seeded for the call and its state put back after."""
    from rliable import library, metrics

    state = np.random.get_state()
    np.random.seed(BOOTSTRAP_SEED)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # arch's RandomState deprecation, rliable passes one
            points, intervals = library.get_interval_estimates(
                {"agent": matrix},
                lambda scores: np.array([metrics.aggregate_iqm(scores)]),
                reps=BOOTSTRAP_REPS,
                random_state=np.random.RandomState(BOOTSTRAP_SEED),
            )
    finally:
        np.random.set_state(state)
    return float(points["agent"][0]), float(intervals["agent"][0, 0]), float(intervals["agent"][1, 0])


def iqm_rows(groups: list[list], anchors: dict) -> tuple[list[list[str]], list[str]]:
    """One row per agent (and core) of a suite's package-default groups; the (game, agent) pairs left out for want of
    a published point or a random return."""
    by_agent: dict[str, dict[str, dict[int, tuple[float, str]]]] = {}
    left_out = []
    for group in groups:
        scores = normalised_scores(group, anchors)
        by_agent.setdefault(group[0].name, {})[group[0].env] = scores
        if len(scores) < len(group):
            left_out.append(f"{group[0].env} {group[0].name}")
    rows = []
    for name, games in by_agent.items():
        matrix, seeds, names = score_matrix(games)
        if matrix.size == 0:
            continue
        iqm, low, high = interval_estimate(matrix)
        kinds = [games[g][s][1] for g in names for s in seeds]
        used = ", ".join(f"{kind} ({n} run{'s' * (n != 1)})" for kind, n in Counter(kinds).items())
        seeds_text = f"{len(seeds)} ({', '.join(map(str, seeds))})"
        rows.append([name, str(len(names)), seeds_text, f"{iqm:.2f}", f"[{low:.2f}, {high:.2f}]", used])
    return rows, left_out


IQM_HEADER = ["agent", "games", "seeds (every game's)", "IQM, normalised", "95% CI", "score used"]


def game_name(env: str) -> str:
    """``MinAtar/Breakout-v0`` -> ``Breakout-v0``: a column's name."""
    return env.split("/")[-1]


def game_table(groups: list[list], anchors: dict) -> str:
    """Agent x game: each cell ours (score_cell) over the seeds; the header row under it the game's random return and
    its best published point (any agent) at or below the budget of the game's runs."""
    envs = sorted({group[0].env for group in groups})
    cells: dict[str, dict[str, str]] = {}
    for group in groups:
        cells.setdefault(group[0].name, {})[group[0].env] = score_cell(group)
    published = []
    for env in envs:
        steps = max(run.last_step for group in groups if group[0].env == env for run in group)
        best = best_published(anchors, env, None, steps)
        random = random_return(anchors, env)
        text = "-" if best is None else f"{best[0]:g} at {short_steps(best[1])} ({best[2].split(' (')[0]})"
        published.append(text + ("" if random is None else f"; random {random:g}"))
    rows = [["best published", *published]]
    rows += [[name, *(by_env.get(env, "-") for env in envs)] for name, by_env in cells.items()]
    return markdown_table(["agent", *map(game_name, envs)], rows)


def iqm_section(package: str, title: str, groups: list[list], anchors: dict) -> list[str]:
    """The lines of a suite's summary: its agents' IQM table, or one line where it has no runs yet."""
    if not groups:
        return [f"**{title}** (`{package}`): no run summaries yet (docs/data/{package}/)."]
    rows, left_out = iqm_rows(groups, anchors)
    lines = [
        prose(
            f"**{title}** (`{package}`): per agent the interquartile mean over games and seeds of the normalised "
            f"score, (score - random) / (best published for the game, any agent, at ≤ the run's agent steps - random), with its 95% "
            f"stratified-bootstrap confidence interval (rliable, {BOOTSTRAP_REPS:,} resamples, seed "
            f"{BOOTSTRAP_SEED}): 0 is a random policy, 1 the best published figure."
        ),
        "",
        markdown_table(IQM_HEADER, rows) if rows else "No run has a published point at or below its agent steps.",
        "",
        prose("Per game, ours (mean ± std over seeds, and which score) beside the best published figure:"),
        "",
        game_table(groups, anchors),
    ]
    if left_out:
        lines += [
            "",
            prose(
                f"Left out (no published point at or below the run's steps, or no random return): {', '.join(left_out)}."
            ),
        ]
    return lines


def render_summary(groups: list[list], info: dict[str, dict], anchors: dict, titles: dict[str, str]) -> list[str]:
    """The page's summary section: the rows of the packages not scored as a suite, then each suite's IQM."""
    package_of = {id(group): info[group[0].run_dir]["package"] for group in groups}
    plain = [g for g in groups if package_of[id(g)] not in IQM_PACKAGES]
    lines = [
        "## Summary",
        "",
        prose(
            "Each agent at its package's defaults: ours is the final test's mean over seeds where the runs have one, "
            "else the last-100 return at the end (± the seeds' std); beside it the best published point "
            "(benchmarks/anchors.json) at no more agent steps than our run's."
        ),
        "",
        markdown_table(SUMMARY_HEADER, summary_rows(plain, info, anchors, titles)),
    ]
    for package, title in IQM_PACKAGES.items():
        lines += ["", *iqm_section(package, title, [g for g in groups if package_of[id(g)] == package], anchors)]
    return lines
