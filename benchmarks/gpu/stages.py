"""The GPU suite's stages: each runs the project's scripts or launcher as a child within its share and returns its
result (a dict, "status" first among its keys) for the tables."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import shlex
import sys
import time

import numpy as np
import torch

from benchmarks.agents import COLUMNS, last_line
from benchmarks.gpu.budget import AGENTS, PACKAGE, PONG, STOP_GRACE_S, TARGET, TRAINING, acting_counts, agent_need_s
from benchmarks.gpu.children import REPO, Ended, Stopper, run_child
from benchmarks.results.load import first_reached, load_run
from rl_core.errors import UserError
from rl_core.records.plot import read_columns

CHILD_GRACE_S = 10.0  # a measuring script's stop, before it is killed


@dataclasses.dataclass
class Context:
    args: argparse.Namespace
    savedir: str
    deadline: float  # time.monotonic() by which every stage has ended
    stopper: Stopper

    def left(self) -> float:
        return self.deadline - time.monotonic()


def free_name(savedir: str, name: str) -> str:
    """``name``, or ``name-2``, ``name-3``, ...: a run directory not there yet (a stage run again starts fresh)."""
    candidate, i = name, 1
    while os.path.exists(os.path.join(savedir, candidate)):
        i += 1
        candidate = f"{name}-{i}"
    return candidate


def parse_ceiling(text: str) -> list[tuple[int, float, float]]:
    """env_ceiling.py's rows: (processes, steps/s, frames/s)."""
    rows = []
    for line in text.splitlines():
        m = re.fullmatch(r"\s*(\d+)\s+([\d,]+)\s+([\d,]+)\s+([\d,]+)\s+([\d.]+)\s*", line)
        if m:
            rows.append((int(m[1]), float(m[2].replace(",", "")), float(m[3].replace(",", ""))))
    return rows


def stage_ceiling(ctx, share: float) -> dict:
    out = os.path.join(ctx.savedir, "ceiling.out")
    cmd = [
        sys.executable,
        os.path.join(REPO, "benchmarks", "env_ceiling.py"),
        "--package",
        PACKAGE,
        "--env",
        PONG,
        "--seconds",
        f"{ctx.args.ceiling_seconds:g}",
    ]
    now = time.monotonic()
    # its need is an estimate: it may run over by half before it is stopped, within what is left
    end = now + min(1.5 * share, ctx.left())
    ended = run_child(cmd, out, end - CHILD_GRACE_S, end, ctx.stopper)
    with open(out) as f:
        rows = parse_ceiling(f.read())
    if not rows:
        return {"status": stopped_or_failed(ended, out)}
    best = max(rows, key=lambda r: r[2])
    return {
        "status": "done",
        "env": PONG,
        "seconds": ctx.args.ceiling_seconds,
        "rows": rows,
        "procs": best[0],
        "frames_s": best[2],
        "command": shlex.join(["python", *cmd[1:]]).replace(REPO + "/", ""),
    }


def stopped_or_failed(ended: Ended, out: str) -> str:
    if ended.why == "signal":
        return "stopped by signal"
    if ended.why == "budget":
        return "stopped: budget"
    return f"failed (exit status {ended.status}): {last_line(out)}"


def steady_frames_s(run) -> float:
    """Frames/s over the second half of the run's training time (start-up of learning left out)."""
    half = np.flatnonzero(run.seconds >= run.seconds[-1] / 2)
    i = int(half[0]) if half.size else 0
    if i >= len(run.steps) - 1 and len(run.steps) > 1:
        i = len(run.steps) - 2
    span = run.seconds[-1] - run.seconds[i]
    return (run.steps[-1] - run.steps[i]) / span * run.frames_per_step if span > 0 else math.nan


def training_result(rundir: str, target: float | None) -> dict:
    """A training stage's figures from its run directory (benchmarks/results/load.py's reading of logs.csv)."""
    run = load_run(rundir)
    with open(os.path.join(rundir, "meta.json")) as f:
        flags = json.load(f)["flags"]
    last = float(run.returns[-1])
    out = {
        "steps": run.last_step,
        "train_s": float(run.seconds[-1]),
        "last100": None if math.isnan(last) else last,
        "frames_s": run.steps_per_s * run.frames_per_step,
        "steady_frames_s": steady_frames_s(run),
        "layout": f"{flags['num_servers']} servers x {flags['num_actors'] // flags['num_servers']} envs, "
        f"B={flags['batch_size']}, T={flags['unroll_length']}",
    }
    if target is not None:
        i = first_reached(run, target)
        out.update(
            reached_step=None if i is None else int(run.steps[i]),
            reached_train_s=None if i is None else float(run.seconds[i]),
        )
    return out


def stage_training(ctx, stage: str, share: float) -> dict:
    agent, game = TRAINING[stage]
    xpid = free_name(ctx.savedir, stage)
    rundir = os.path.join(ctx.savedir, xpid)
    steps = {"impala": ctx.args.impala_steps, "ppo": ctx.args.ppo_steps, "r2d2": ctx.args.r2d2_steps}[agent]
    argv = [
        "--env",
        game,
        *([] if agent == "impala" else ["--agent", agent]),
        "--savedir",
        ctx.savedir,
        "--xpid",
        xpid,
        "--disable_final_test",
        *([] if steps is None else ["--total_steps", str(steps)]),
    ]
    cmd = polybeast_cmd(argv)
    target = TARGET if game == PONG else None

    def reached() -> bool:
        try:
            rows = read_columns(rundir, ("return_last_100",))
        except FileNotFoundError:
            return False
        return bool(rows) and rows[-1][0] >= target  # NaN compares False

    end = time.monotonic() + share
    ended = run_child(
        cmd,
        os.path.join(ctx.savedir, f"{stage}.out"),
        end - STOP_GRACE_S,
        end,
        ctx.stopper,
        reached if target is not None else None,
    )
    command = f"python -m {PACKAGE}.polybeast {shlex.join(argv)}".replace(ctx.savedir, "SAVEDIR")
    base = {
        "game": game,
        "agent": agent,
        "rundir": rundir,
        "command": command,
        "stopped": ended.why,
        "exit": ended.status,
        "wall_s": ended.seconds,
        "share_s": share,
    }
    if ended.status != 0 and ended.why == "exited":
        return {**base, "status": f"failed (exit status {ended.status}): {last_line(os.path.join(rundir, 'out.log'))}"}
    try:
        result = training_result(rundir, target)
    except UserError as e:
        return {**base, "status": f"no result ({ended.why} after {ended.seconds:.0f} s): {e}"}
    if target is not None:
        result["reached_wall_s"] = ended.target_s
    return {**base, **result, "status": "done"}


def polybeast_cmd(argv: list[str]) -> list[str]:
    """The Atari launcher's command line (a test's fake launcher replaces it)."""
    return [sys.executable, "-m", f"{PACKAGE}.polybeast", *argv]


SPLIT_KEYS = ("num_servers", "num_actors", "batch_size", "server_splits")


def run_layout(rundir: str) -> dict:
    """The run's num_servers, num_actors, batch_size and server_splits: meta.json's ``sizing`` record (the values
    used, whether sized or given), its flags where a record lacks one; and its acting processes (0: acting in the
    learner process, as a GPU run's default)."""
    with open(os.path.join(rundir, "meta.json")) as f:
        meta = json.load(f)
    record, flags = meta.get("sizing") or {}, meta.get("flags", {})
    values = {k: int(record.get(k, flags.get(k, 1))) for k in SPLIT_KEYS}
    values["acting_processes"] = acting_processes(flags, bool(record.get("gpu")))
    return values


def acting_processes(flags: dict, gpu: bool) -> int:
    """The acting processes a run's flags (meta.json's) had, by the launcher's own rule; 0: acting in the learner
    process (a record without the flag: 0)."""
    if "acting_process" not in flags:
        return 0
    from rl_core.runtime.parts import wants_acting_process

    wanted = wants_acting_process(argparse.Namespace(**flags), torch.device("cuda" if gpu else "cpu"), None)
    return int(flags.get("acting_processes") or 1) if wanted else 0


def layout_name(values: dict) -> str:
    """processes x splits x envs (a server's)."""
    servers, splits = values["num_servers"], values["server_splits"]
    return f"{servers // splits} x {splits} x {values['num_actors'] // servers}"


def other_layout(sized: dict) -> tuple[dict | None, str]:
    """The same envs and batch as ``sized`` in the layout it is compared with: unsplit (a process per
    num_servers / server_splits, its envs as one server) where the sizing split, else 2 splits a process (twice
    the servers, half the envs each); None and why where the envs do not divide so."""
    servers, splits, actors = sized["num_servers"], sized["server_splits"], sized["num_actors"]
    if splits > 1:
        return {**sized, "num_servers": servers // splits, "server_splits": 1}, ""
    if actors % (2 * servers):
        return None, f"{actors} envs on {servers} servers do not split in 2 (not a multiple of {2 * servers})"
    return {**sized, "num_servers": 2 * servers, "server_splits": 2}, ""


def layout_run(ctx, xpid: str, extra: list[str], stop_at: float, kill_at: float) -> dict:
    """One IMPALA Pong run with ``extra`` flags (none: the launcher's sizing and defaults), stopped (SIGINT) at
    ``stop_at``: its layout, how it acted and its frames/s."""
    rundir = os.path.join(ctx.savedir, xpid)
    argv = ["--env", PONG, "--savedir", ctx.savedir, "--xpid", xpid, "--disable_final_test", *extra]
    ended = run_child(polybeast_cmd(argv), os.path.join(ctx.savedir, f"{xpid}.out"), stop_at, kill_at, ctx.stopper)
    command = f"python -m {PACKAGE}.polybeast {shlex.join(argv)}".replace(ctx.savedir, "SAVEDIR")
    out = {"rundir": rundir, "command": command, "stopped": ended.why, "exit": ended.status, "wall_s": ended.seconds}
    if ended.why == "signal":
        return {**out, "status": "stopped by signal"}
    if ended.status != 0 and ended.why == "exited":
        return {**out, "status": f"failed (exit status {ended.status}): {last_line(os.path.join(rundir, 'out.log'))}"}
    try:
        values = run_layout(rundir)
        run = load_run(rundir)
    except (OSError, ValueError, KeyError, UserError) as e:
        return {**out, "status": f"no result ({ended.why} after {ended.seconds:.0f} s): {e}"}
    return {
        **out,
        **values,
        "status": "done",
        "layout": layout_name(values),
        "steps": run.last_step,
        "train_s": float(run.seconds[-1]),
        "frames_s": run.steps_per_s * run.frames_per_step,
        "steady_frames_s": steady_frames_s(run),
    }


def splits_run(ctx, xpid: str, given: dict | None, stop_at: float, kill_at: float) -> dict:
    """One IMPALA Pong run of the splits stage: the launcher's sizing where ``given`` is None, else those values as
    flags."""
    extra = [] if given is None else [a for k in SPLIT_KEYS for a in (f"--{k}", str(given[k]))]
    return {"sized": given is None, **layout_run(ctx, xpid, extra, stop_at, kill_at)}


def stage_splits(ctx, share: float) -> dict:
    """IMPALA Pong for --splits_seconds with the launcher's sizing (its --server_splits), then for as long with
    the same envs and batch in the other layout (unsplit where the sizing split, else split in 2)."""
    seconds = ctx.args.splits_seconds
    stage_end = time.monotonic() + share
    base = {"game": PONG, "agent": "impala", "seconds": seconds, "share_s": share}
    stop_at = min(time.monotonic() + seconds, stage_end - STOP_GRACE_S)
    first = splits_run(ctx, free_name(ctx.savedir, "splits_sized"), None, stop_at, stop_at + STOP_GRACE_S)
    runs = [first]
    if first["status"] != "done":  # the second would compare with nothing
        return {**base, "runs": runs, "status": first["status"]}
    given, why = other_layout(first)
    if given is None:
        return {**base, "runs": runs, "status": f"not compared: {why}"}
    stop_at = min(time.monotonic() + seconds, stage_end - STOP_GRACE_S)
    xpid = free_name(ctx.savedir, f"splits_h{given['server_splits']}")
    second = splits_run(ctx, xpid, given, stop_at, min(stop_at + STOP_GRACE_S, stage_end))
    runs.append(second)
    if second["status"] == "done" and layout_name(second) != layout_name(given):
        second["status"] = f"no result: it ran {layout_name(second)}, not the {layout_name(given)} given"
    return {**base, "runs": runs, "status": second["status"]}


def stage_acting(ctx, share: float) -> dict:
    """IMPALA Pong for --acting_seconds with the package's defaults (on a GPU learner: acting and inference in the
    learner process), then as long with ``--acting_process --acting_processes N`` for each of --acting_counts (the
    acting loops in N child processes, inferring on the GPU): the same sizing, envs and batch."""
    seconds = ctx.args.acting_seconds
    stage_end = time.monotonic() + share
    base = {"game": PONG, "agent": "impala", "seconds": seconds, "share_s": share}
    runs = []
    for n in [None, *acting_counts(ctx.args)]:
        stop_at = min(time.monotonic() + seconds, stage_end - STOP_GRACE_S)
        extra = [] if n is None else ["--acting_process", "--acting_processes", str(n)]
        xpid = free_name(ctx.savedir, "acting_in" if n is None else f"acting_p{n}")
        run = layout_run(ctx, xpid, extra, stop_at, min(stop_at + STOP_GRACE_S, stage_end))
        runs.append(run)
        if run["status"] == "done" and n is not None and run["acting_processes"] != n:
            run["status"] = f"no result: it ran {run['acting_processes']} acting processes, not the {n} given"
        if n is None and run["status"] != "done":  # the others would compare with nothing
            break
    failed = next((r["status"] for r in runs if r["status"] != "done"), None)
    return {**base, "runs": runs, "status": failed or "done"}


def stage_agents(ctx, share: float) -> dict:
    n = int(round(share / agent_need_s(ctx.args)))
    names = list(AGENTS[:n])
    out = os.path.join(ctx.savedir, "agents.out")
    cmd = [
        sys.executable,
        os.path.join(REPO, "benchmarks", "agents.py"),
        "--package",
        PACKAGE,
        "--agents",
        ",".join(names),
        "--seconds",
        f"{ctx.args.agents_seconds:g}",
        "--repeats",
        str(ctx.args.agents_repeats),
    ]
    end = time.monotonic() + min(1.25 * share, ctx.left())
    ended = run_child(cmd, out, end - CHILD_GRACE_S, end, ctx.stopper)
    with open(out) as f:
        text = f.read()
    rows, header = parse_agents(text)
    if not rows:
        return {"status": stopped_or_failed(ended, out)}
    measured = [row[0] for row in rows]
    why = "stopped: budget" if ended.why == "budget" else stopped_or_failed(ended, out)
    return {
        "status": "done",
        "rows": rows,
        "header": header,
        "skipped": [a for a in AGENTS if a not in names],
        "unmeasured": {a: why for a in names if a not in measured},
        "unfinished": ended.why if ended.why != "exited" else None,
        "command": shlex.join(["python", *cmd[1:]]).replace(REPO + "/", ""),
    }


def parse_agents(text: str) -> tuple[list[list[str]], str]:
    """agents.py's table rows (split on blanks, in benchmarks.agents.COLUMNS' order) and its first line."""
    lines = text.splitlines()
    header = next((line for line in lines if line.startswith("# benchmarks/agents.py")), "")
    rows = []
    for line in lines:
        fields = line.split()
        if len(fields) == len(COLUMNS) and fields[0] in AGENTS:
            rows.append(fields)
    return rows, header
