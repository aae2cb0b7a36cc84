"""A results table's row drawn from run summaries: its cells, the experiments page its agent links and the rows'
commands (for ``render``)."""

from __future__ import annotations

import math
import os
import shlex
import textwrap

import numpy as np

from benchmarks import page_rows
from benchmarks.results.groups import collapsed, final_test_cell, known_values, last_returns, mean_std, per_seed
from benchmarks.results.load import REPO, TRANSCRIBED_MARK, Run, anchor_score, first_reached
from benchmarks.summary_table import markdown_table, run_steps_text, short_steps

EXPERIMENTS = os.path.join(REPO, "docs", "experiments")


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
    of its --total_steps (``summary_table.run_steps_text``)."""
    return collapsed(
        [run_steps_text(run.last_step, info[run.run_dir], lambda n: steps_text(n, short)) for run in group]
    )


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


ENV_SLOT = "ENVSLOT"  # the --env value of a command run on several envs, written "$env" in its loop


def command_block(groups: list[list[Run]], info: dict[str, dict], command_of=page_rows.page_command) -> list[str]:
    """The runs' commands (``command_of`` a summary) as a shell block: per group the first seed's, and each other
    seed's that differs in more than its --seed; each with the commit it ran at.  Commands that differ in their
    --env alone (the same agent, seeds and flags on several envs) are one ``for env in ...`` loop."""
    entries: dict[tuple, list[tuple[str, list[Run]]]] = {}
    for group in groups:
        kinds: dict[tuple[str, ...], list[Run]] = {}
        for run in group:
            kinds.setdefault(tuple(without_seed(command_of(info[run.run_dir]))), []).append(run)
        for runs in kinds.values():
            command = command_of(info[runs[0].run_dir])
            key = (runs[0].name, tuple(r.seed for r in runs), env_free(command, runs[0].env))
            entries.setdefault(key if key[2] else (id(runs),), []).append((command, runs))
    lines = ["```sh"]
    for same in sorted(entries.values(), key=lambda same: same[0][1][0].name):
        command, runs = same[0]
        summary = info[runs[0].run_dir]
        world = (summary.get("distributed") or {}).get("world_size")
        others = [str(r.seed) for r in runs[1:]]
        commits = {env_runs[0].env: run_commits(env_runs, info) for _, env_runs in same}
        lines += comment_lines(
            f"# {runs[0].env + ' ' if len(same) == 1 else ''}{runs[0].name}, seed {runs[0].seed}"
            + (
                f" (seed{'s' if len(others) > 1 else ''} {', '.join(others)} the same with its own --seed)"
                if others
                else ""
            )
            + (f", on each of {len(same)} envs" if len(same) > 1 else "")
            + (f", under torchrun, world size {world}" if world else "")
            + commits_text(commits)
        )
        if len(same) == 1:
            lines += wrapped_command(command)
            continue
        body = wrapped_command(env_free(command, runs[0].env))
        lines.append(f"for env in {' '.join(shlex.quote(env) for env in commits)}; do")
        lines += ["    " + line.replace(ENV_SLOT, '"$env"') for line in body[:-1]]
        lines.append("    " + body[-1].replace(ENV_SLOT, '"$env"') + "; done")
    return lines + ["```"]


def env_free(command: str, env: str) -> str:
    """The command with its ``--env`` value written ENV_SLOT; "" where it names no ``--env`` of that value."""
    words = shlex.split(command)
    for i, word in enumerate(words[:-1]):
        if word == "--env" and words[i + 1] == env:
            return shlex.join([*words[: i + 1], ENV_SLOT, *words[i + 2 :]])
    return ""


def run_commits(runs: list[Run], info: dict[str, dict]) -> str:
    """The commits the runs ran at (each once, in the runs' order), ``a / b``."""
    return " / ".join(dict.fromkeys(c[:7] for r in runs if (c := info[r.run_dir].get("git_commit"))))


def commits_text(commits: dict[str, str]) -> str:
    """``, at commit C`` where every env ran at the same; else each commit with the envs that ran at it (their names
    after the last ``/``)."""
    at = {}
    for env, commit in commits.items():
        if commit:
            at.setdefault(commit, []).append(env.rsplit("/", 1)[-1])
    if not at:
        return ""
    if len(at) == 1:
        return f", at commit {next(iter(at))}"
    return ", at commits " + ", ".join(f"{commit} ({', '.join(envs)})" for commit, envs in at.items())


def comment_lines(text: str) -> list[str]:
    """A shell comment in lines of at most COMMAND_WIDTH characters, each continued line starting ``#   ``."""
    return textwrap.wrap(text, COMMAND_WIDTH, subsequent_indent="#   ", break_long_words=False, break_on_hyphens=False)
