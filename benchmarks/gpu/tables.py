"""The GPU suite's markdown: a table per stage's result, in the stages' order (``markdown``)."""

from __future__ import annotations

import math

from benchmarks.agents import COLUMNS
from benchmarks.gpu.budget import AGENT_STAGES, BREAKOUT, PONG, STAGES, TARGET, TRAINING

PROG = "python benchmarks/gpu_suite.py"
GOAL_WALL_S = 600.0  # IMPALA Pong reaching TARGET within 10 minutes of wall time
GOAL_CEILING_RATIO = 0.9  # IMPALA's frames/s against the env ceiling
# cleanrl at 10M steps (docs.cleanrl.dev; docs/results.md): ppo_atari, and dqn_atari beside R2D2
CLEANRL_10M = {("ppo", PONG): 20.36, ("ppo", BREAKOUT): 415.0, ("r2d2", PONG): 20.25}


def fmt(value, spec: str = ",.0f", none: str = "-") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return none
    return format(value, spec)


def minutes(seconds) -> str:
    return fmt(None if seconds is None else seconds / 60, ".2f")


def yes_no(ok: bool | None) -> str:
    return "-" if ok is None else ("yes" if ok else "no")


def caption(result: dict) -> str:
    return f"({result.get('date', '?')}, {result.get('machine', '?')})"


def ceiling_table(r: dict) -> list[str]:
    out = [
        f"**Env ceiling** `{r['command']}` {caption(r)}: {fmt(r['frames_s'])} frames/s ({r['procs']} processes)",
        "",
        "| processes | env steps/s | frames/s |",
        "|---|---|---|",
    ]
    out += [f"| {p} | {fmt(s)} | {fmt(f)} |" for p, s, f in r["rows"]]
    return out


def impala_table(r: dict, ceiling: dict | None) -> list[str]:
    ceiling_fps = ceiling["frames_s"] if ceiling and ceiling.get("status") == "done" else None
    ratio = r["steady_frames_s"] / ceiling_fps if ceiling_fps else None
    reached = r.get("reached_step") is not None
    # wall time from the launch to the row that reached the target, as the suite saw it (else: logs.csv's time)
    wall = (r.get("reached_wall_s") or r.get("reached_train_s")) if reached else None
    end = f"{fmt(r['last100'], '.2f')} at the end" if r["last100"] is not None else "no episode ended"
    out = [
        f"**IMPALA Pong** `{r['command']}` {caption(r)}: {r['layout']}; stopped: {r['stopped']} "
        f"(share {r['share_s']:.0f} s)",
        "",
        f"| agent steps | step first ≥ {TARGET:g} | training min to ≥ {TARGET:g} | wall min to ≥ {TARGET:g} "
        f"(from launch) | last-100 | frames/s (mean) | frames/s (2nd half) | / ceiling | "
        f"≥ {TARGET:g} within {GOAL_WALL_S / 60:g} min | ≥ {GOAL_CEILING_RATIO:g} x ceiling |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| {fmt(r['steps'])} | {fmt(r.get('reached_step'), ',', 'not reached')} | "
        f"{minutes(r.get('reached_train_s')) if reached else 'not reached'} | "
        f"{minutes(wall) if reached else 'not reached'} | {end} | {fmt(r['frames_s'])} | "
        f"{fmt(r['steady_frames_s'])} | {fmt(ratio, '.2f')} | "
        f"{yes_no(wall is not None and wall <= GOAL_WALL_S)} | "
        f"{yes_no(None if ratio is None else ratio >= GOAL_CEILING_RATIO)} |",
    ]
    return out


def compared_runs(r: dict, ceiling: dict | None, *, title, flag, first, column, cell, base, base_fps) -> list[str]:
    """A stage's IMPALA Pong runs side by side (``title``, comparing ``flag``; ``first``: how its first run was
    chosen): a row per run, ``cell(run)`` in the column ``column``, and its frames/s over its second half against
    ``base_fps`` (the column ``/ base``) and the env ceiling's."""
    ceiling_fps = ceiling["frames_s"] if ceiling and ceiling.get("status") == "done" else None
    runs = r["runs"]
    against = "".join(f" against `{u['command']}`" for u in runs[1:])
    how = "" if r["status"] == "done" else f"; {r['status']}"
    out = [
        f"**{title}** (`{flag}`, IMPALA Pong, {r['seconds']:g} s a run) {caption(r)}: "
        f"`{runs[0]['command']}` ({first}){against}{how}",
        "",
        f"| layout (processes x splits x envs) | envs, batch | {column} | frames/s (2nd half) | / {base} | / ceiling |",
        "|---|---|---|---|---|---|",
    ]
    for u in runs:
        if u["status"] != "done":
            out.append(f"| - | - | {cell(u)} | {u['status']} | - | - |")
            continue
        fps = u["steady_frames_s"]
        out.append(
            f"| {u['layout']} | {u['num_actors']}, B={u['batch_size']} | {cell(u)} | {fmt(fps)} | "
            f"{fmt(fps / base_fps if base_fps else None, '.2f')} | "
            f"{fmt(fps / ceiling_fps if ceiling_fps else None, '.2f')} |"
        )
    return out


def splits_table(r: dict, ceiling: dict | None) -> list[str]:
    """The split layout against the unsplit one, the same envs and batch."""
    runs = r["runs"]
    unsplit = next((u["steady_frames_s"] for u in runs if u["status"] == "done" and u["server_splits"] == 1), None)
    return compared_runs(
        r,
        ceiling,
        title="Split env servers",
        flag="--server_splits",
        first="the sizing's",
        column="run",
        cell=lambda u: "the sizing's" if u["sized"] else "given",
        base="unsplit",
        base_fps=unsplit,
    )


def acting_where(run: dict) -> str:
    n = run.get("acting_processes")
    return "-" if n is None else "in the learner process" if n == 0 else f"{n} acting process{'es' if n > 1 else ''}"


def acting_table(r: dict, ceiling: dict | None) -> list[str]:
    """Acting in the learner process (a GPU run's default) against acting processes, the same sizing."""
    first = r["runs"][0]
    return compared_runs(
        r,
        ceiling,
        title="Acting processes",
        flag="--acting_process",
        first="the package's defaults",
        column="acting",
        cell=acting_where,
        base="the first",
        base_fps=first["steady_frames_s"] if first["status"] == "done" else None,
    )


def agents_table(r: dict) -> list[str]:
    how = f"; stopped: {r['unfinished']}" if r.get("unfinished") else ""
    out = [
        f"**Every agent on Atari** `{r['command']}` {caption(r)}{how}: {r.get('header', '').lstrip('# ')}",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    out += ["| " + " | ".join(row) + " |" for row in r["rows"]]
    out += [f"| {name} | {why} |" + " |" * (len(COLUMNS) - 2) for name, why in r.get("unmeasured", {}).items()]
    out += [f"| {name} | skipped: budget |" + " |" * (len(COLUMNS) - 2) for name in r["skipped"]]
    return out


def agent_rows(results: dict) -> list[str]:
    """PPO's and R2D2's stages: each run's steps, last-100, the step and minutes at which it reached 18 on Pong."""
    out = [
        "**PPO and R2D2 with the package's defaults** (`--agent ppo`: cleanrl's settings in lockstep; `--agent "
        "r2d2`: recurrent)",
        "",
        "| game | agent | agent steps | last-100 at the end | 18 first at | cleanrl at 10M | training min | frames/s | "
        "layout | stopped | date, machine |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for stage in AGENT_STAGES:
        r = results.get(stage)
        if r is None:
            continue
        agent, game = TRAINING[stage]
        if r["status"] != "done":
            out.append(f"| {game} | {agent} | {r['status']} |" + " |" * 8)
            continue
        step = r.get("reached_step")
        reached = (
            "-"
            if game != PONG
            else "not reached"
            if step is None
            else f"{fmt(step)} ({minutes(r['reached_train_s'])} min)"
        )
        out.append(
            f"| {game} | {agent} | {fmt(r['steps'])} | {fmt(r['last100'], '.2f', 'no episode ended')} | "
            f"{reached} | {CLEANRL_10M[agent, game]:g} | {minutes(r['train_s'])} | {fmt(r['frames_s'])} | "
            f"{r['layout']} | {r['stopped']} | {r.get('date', '?')}, {r.get('machine', '?')} |"
        )
    return out


def markdown(results: dict, machine: str) -> str:
    """Every recorded stage's table, in the stages' order."""
    out = [f"### GPU suite (`{PROG}`), {machine}", ""]
    for stage in STAGES:
        r = results.get(stage)
        if r is None or stage in AGENT_STAGES and stage != next(s for s in AGENT_STAGES if s in results):
            continue
        if stage in AGENT_STAGES:
            out += agent_rows(results) + [""]
        elif stage == "splits" and r.get("runs"):
            out += splits_table(r, results.get("ceiling")) + [""]
        elif stage == "acting" and r.get("runs"):
            out += acting_table(r, results.get("ceiling")) + [""]
        elif r["status"] != "done":
            out += [f"**{stage}**: {r['status']} {caption(r)}", ""]
        elif stage == "ceiling":
            out += ceiling_table(r) + [""]
        elif stage == "impala_pong":
            out += impala_table(r, results.get("ceiling")) + [""]
        else:
            out += agents_table(r) + [""]
    return "\n".join(out).rstrip() + "\n"
