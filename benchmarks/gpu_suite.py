r"""The GPU suite: a GPU machine's figures in one command, within a time budget (docs/experiments/throughput.md).

    python benchmarks/gpu_suite.py [--budget_s 1500] [--savedir DIR]
                                   [--stages ceiling,impala_pong,splits,agents,ppo_pong,r2d2_pong,ppo_breakout]
                                   [--impala_steps N] [--ppo_steps N] [--r2d2_steps N] [--impala_max_s 720]
                                   [--ceiling_seconds 5] [--splits_seconds 75] [--agents_seconds 30]
                                   [--agents_repeats 10]

Stages, one after another, each a subprocess of the project's own scripts and launcher:

1. ``ceiling``: ``benchmarks/env_ceiling.py --package torchbeast_atari --env PongNoFrameskip-v4``: the
   machine's env ceiling (frames/s of 1, 2, 4, ... processes stepping Pong with random actions).
2. ``impala_pong``: ``python -m torchbeast_atari.polybeast --env PongNoFrameskip-v4`` with no other flag but
   the run's place (``--savedir``, ``--xpid``), ``--disable_final_test`` (5 x 30 test games would eat the
   budget) and ``--total_steps`` only if ``--impala_steps`` is given (the package's 50M otherwise; IMPALA's
   rate on Atari is constant): the launcher sizes servers and envs to the machine (14 servers x 4 envs, the
   batch the package's 8, on 16 cores with a GPU).  The suite stops it (SIGINT: the launcher's clean stop, a checkpoint saved) as soon as logs.csv's
   last-100 return reaches 18, or when its share of the budget runs out.
3. ``splits``: the launcher's ``--server_splits`` end to end (docs/scaling.md, "Double-buffered servers"):
   IMPALA Pong for ``--splits_seconds`` of wall time with no sizing flag (whatever the launcher sizes: 14
   servers x 32 envs on 16 cores with a GPU), then as long with the same envs and batch split in two
   (``--server_splits 2``, ``--num_servers`` twice the sized servers, the sized ``--num_actors`` and
   ``--batch_size``, read from the first run's meta.json ``sizing``).  Where the sizing splits (a package's
   ``SERVER_SPLITS`` above 1), the second run is the unsplit one: ``--server_splits 1``, ``--num_servers``
   the sized servers / splits.  Each run's frames/s over the second half of its logs.csv rows,
   against the unsplit run's and the env ceiling's.
4. ``agents``: ``benchmarks/agents.py --package torchbeast_atari``: every agent's throughput on Pong (end to end
   with the launcher's sizing, and its learner alone), as many agents as the budget holds.
5. ``ppo_pong``, ``r2d2_pong``, ``ppo_breakout``: ``--agent ppo`` (torchbeast_atari's PPO defaults are cleanrl's
   ppo_atari settings, 10M steps) and ``--agent r2d2`` (the package's recurrent R2D2) with no other flag, for what
   is left, stopped the same way: on Pong at a last-100 of 18 (the wall time to it), or at their share's end;
   cleanrl's PPO reaches 20.36 and 415 at 10M steps, its DQN 20.25 on Pong.

The budget.  Each stage gets what is left of ``--budget_s`` (less a margin for the suite's own start and its
tables): the ceiling, the splits and the agents what they need (their measurement seconds and a start-up per
process or agent; the splits 2 x (``--splits_seconds`` + 20 s for a clean stop)), IMPALA up to
``--impala_max_s`` but never the splits' and the agents' share, the PPO runs what is left, split between
them (whatever IMPALA saves by reaching 18 early goes to them).  A stage whose share is too short is printed
as "skipped: budget"; a child still running at its share's end is stopped (SIGINT), then killed, so the suite
never runs past ``--budget_s``.  A training stage needs at least a minute.  Ctrl-C (or SIGTERM) stops the
stage under way the same way, writes the tables of the stages done, and ends with one line.

Output: markdown tables, ready for docs/experiments/throughput.md (the env ceiling; IMPALA Pong: the step and the
minutes at which the last-100 return first reached 18, or "not reached" and the last-100 at the end, frames/s and
their ratio to the ceiling, the goals met or not: >= 18 within 10 minutes of wall time, frames/s >= 0.9 of the
ceiling; the splits: a row per layout, processes x splits x envs, its frames/s, their ratio to the unsplit
layout's and to the ceiling; the agents' table; the PPO rows).  They are printed at the end and written to
``<savedir>/gpu_suite.md`` after every stage; ``<savedir>/gpu_suite.json`` keeps each stage's result, so that
runs of the suite with other ``--stages`` and the same ``--savedir`` add up to one set of tables (a stage run
again replaces its row).  The run directories (logs.csv, out.log, model.tar) and each stage's console
(``<stage>.out``; the splits': ``splits_sized.out``, ``splits_h1.out`` or ``splits_h2.out``) are in the
savedir too.  The first line says the device, torch, Python and the usable cores found.

How long: ``--budget_s`` (25 minutes by default) at most; on 16 cores about 45 s of ceiling, up to 12 minutes of
IMPALA, 190 s of splits (2 x 75 s runs and their stops: about 165 s used), 6 x 75 s of agents, the rest PPO (80 s
of Pong if IMPALA takes its 12 minutes, more if it reaches 18 earlier).  On a CPU it runs too (the learner on
the CPU), for checking: ``--budget_s 100`` gives the ceiling and a minute of IMPALA and skips the rest;
``--stages splits --splits_seconds 40 --budget_s 200`` the splits alone.

On a device machine (/work/.library/device/README.md: Python 3.12 with torch 2.11 + CUDA, no package
registry, one command <= 10 minutes, 30 s warm between calls, 15 minutes of device time a session, a machine's
start included), from this repository's root:

* Here, once: ``echo /.whl/ >> .git/info/exclude`` (already in .gitignore) and the Atari packages the image lacks
  as cp312 wheels (6 MB)::

      python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
          --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
          ale-py==0.11.2 gymnasium==1.2.2 farama-notifications==0.0.4

  (cloudpickle, numpy, typing-extensions, tensorboard are in the image; envpool is not needed for Atari).
* Every call: ``carry: [".whl"]`` and the command begins with
  ``python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site
  .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 || exit;``
* The whole suite (25 minutes) outlasts a session's device time, so a session runs part of it, in calls made
  at once one after the other (the machine goes back 30 s after a call), each within one command's 10 minutes.
  What ran on 2026-11-26 (docs/experiments/throughput.md, 12 of the 15 minutes with the machine's start)::

      call 1: ...; timeout 560 python3 benchmarks/gpu_suite.py --stages ceiling,impala_pong,splits --budget_s 545 \
              --ceiling_seconds 4 --splits_seconds 40 --savedir /tmp/gs 2>&1 | tee $OUT/suite.log;
              cp /tmp/gs/gpu_suite.md /tmp/gs/gpu_suite.json $OUT/; cp /tmp/gs/impala_pong/logs.csv $OUT/impala.csv
      call 2: ...; timeout 290 python3 benchmarks/gpu_suite.py --stages splits --budget_s 280 --splits_seconds 100 \
              --savedir /tmp/gs2 2>&1 | tee $OUT/suite2.log

  A second session (docs/experiments/throughput.md) ran ``--stages agents,ppo_pong --budget_s 550``, then
  ``benchmarks/agents.py`` alone with ``--seconds 20`` (too short at 448 envs for IMPALA, R2D2 and PPO+RND to learn:
  keep 30); left: ``--stages ppo_breakout``.  The PPO stages make about 1,000 agent steps/s there (8 envs,
  cleanrl's settings), so a session's minutes show only their start, not cleanrl's 10M steps.  Each call's output
  has its own tables.  A machine of 30 minutes holds the whole suite in one ``setsid`` run watched by three calls
  (``sleep 585; cat /tmp/gs.log`` in the second, ``until grep -q '^gpu_suite: \(done\|stopped\)' /tmp/gs.log; do
  sleep 5; done`` in the third).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.agents import COLUMNS, configs, last_line  # noqa: E402
from benchmarks.suite import first_reached, load_run  # noqa: E402
from benchmarks.env_ceiling import default_procs  # noqa: E402
from rl_core.errors import UserError  # noqa: E402
from rl_core.records.plot import read_columns  # noqa: E402

PROG = "python benchmarks/gpu_suite.py"
STAGES = ("ceiling", "impala_pong", "splits", "agents", "ppo_pong", "r2d2_pong", "ppo_breakout")
PACKAGE = "torchbeast_atari"
PONG, BREAKOUT = "PongNoFrameskip-v4", "BreakoutNoFrameskip-v4"
TRAINING = {
    "impala_pong": ("impala", PONG),
    "ppo_pong": ("ppo", PONG),
    "r2d2_pong": ("r2d2", PONG),
    "ppo_breakout": ("ppo", BREAKOUT),
}
AGENT_STAGES = ("ppo_pong", "r2d2_pong", "ppo_breakout")  # the agents beside IMPALA, in one table
TARGET = 18.0  # the last-100 return on Pong a training stage stops at
GOAL_WALL_S = 600.0  # ... within 10 minutes of wall time
GOAL_CEILING_RATIO = 0.9  # IMPALA's frames/s against the env ceiling
# cleanrl at 10M steps (docs.cleanrl.dev; docs/results.md): ppo_atari, and dqn_atari beside R2D2
CLEANRL_10M = {("ppo", PONG): 20.36, ("ppo", BREAKOUT): 415.0, ("r2d2", PONG): 20.25}
AGENTS = tuple(configs(PACKAGE))  # benchmarks/agents.py's agents on Atari, in its order

MARGIN_S = 15.0  # the suite's own start (torch's import) and its tables at the end
TRAIN_MIN_S = 60.0  # a training stage given less would be mostly start-up
STOP_GRACE_S = 20.0  # a launcher's clean stop (5 s documented) and its checkpoint, before it is killed
CHILD_GRACE_S = 10.0  # a measuring script's stop, before it is killed
CEILING_OVERHEAD_S = 4.0  # per measurement of env_ceiling.py: forking, building and warming the envs
AGENT_OVERHEAD_S = 45.0  # per agent of agents.py beside its end-to-end seconds: learner alone, start, stop
POLL_S = 1.0


# ------------------------------------------------------------------------------------------ the budget


def ceiling_need_s(args, cores: int) -> float:
    return len(default_procs(cores)) * (args.ceiling_seconds + CEILING_OVERHEAD_S)


def agent_need_s(args) -> float:
    return args.agents_seconds + AGENT_OVERHEAD_S


def splits_need_s(args) -> float:
    """Two runs of --splits_seconds, each with its clean stop's grace."""
    return 2 * (args.splits_seconds + STOP_GRACE_S)


def allot(stage: str, left: float, later: list[str], args, cores: int) -> float:
    """The seconds ``stage`` gets of the ``left`` the budget still holds, ``later`` being the stages after it;
    0: skipped for the budget.  The ceiling, the splits and the agents get what they need (the agents: as many
    as fit), IMPALA up to --impala_max_s and never the share of the splits and of the agents that would fit
    beside its minimum, the PPO runs an equal part of what is left."""
    left = max(left, 0.0)
    if stage in ("ceiling", "splits"):
        need = ceiling_need_s(args, cores) if stage == "ceiling" else splits_need_s(args)
        return need if left >= need else 0.0
    if stage == "agents":
        return min(len(AGENTS), int(left // agent_need_s(args))) * agent_need_s(args)
    if left < TRAIN_MIN_S:
        return 0.0
    if stage == "impala_pong":
        reserve = 0.0
        if "splits" in later and left - TRAIN_MIN_S >= splits_need_s(args):
            reserve = splits_need_s(args)
        if "agents" in later:
            reserve += min(len(AGENTS), int((left - TRAIN_MIN_S - reserve) // agent_need_s(args))) * agent_need_s(args)
        return min(args.impala_max_s, left - reserve)
    share = left / (1 + sum(s in TRAINING for s in later))
    return share if share >= TRAIN_MIN_S else left


def plan(budget_s: float, stages: list[str], args, cores: int) -> dict[str, float]:
    """Each stage's share if every stage took all of it (what the start prints; the run allots again as it goes,
    so what a stage leaves unused goes to the next)."""
    left, out = budget_s - MARGIN_S, {}
    for i, stage in enumerate(stages):
        out[stage] = allot(stage, left, stages[i + 1 :], args, cores)
        left -= out[stage]
    return out


# -------------------------------------------------------------------------------------------- children


class Stopper:
    """SIGINT / SIGTERM: recorded, and passed on to the child under way (as a terminal's Ctrl-C would reach it;
    the children run in their own sessions so that only this reaches them)."""

    def __init__(self, install: bool = True):
        self.signum: int | None = None
        self.proc: subprocess.Popen | None = None
        self.first = 0.0
        for sig in (signal.SIGINT, signal.SIGTERM) if install else ():
            signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        now = time.monotonic()
        if self.signum is not None and now - self.first > 1.0 and self.proc is not None:
            signal_group(self.proc, signal.SIGKILL)  # a repeat: stop waiting
            return
        if self.signum is None:
            self.signum, self.first = signum, now
            if self.proc is not None:
                signal_group(self.proc, signal.SIGINT)


def signal_group(proc: subprocess.Popen, signum: int) -> None:
    """Signal the child's process group (it leads one: start_new_session), if it still runs."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signum)
        except ProcessLookupError:
            pass


@dataclasses.dataclass
class Ended:
    status: int
    why: str  # "exited", "target", "budget", "signal"
    seconds: float  # from the start to the exit
    target_s: float | None = None  # from the start to when the target was seen


def run_child(cmd: list[str], out_path: str, stop_at: float, kill_at: float, stopper: Stopper, target=None) -> Ended:
    """Run ``cmd`` (cwd: the repository) to its exit, its output into ``out_path``; SIGINT to its group at
    ``stop_at`` (time.monotonic()), or as soon as ``target()`` is true, or at the suite's own signal; SIGKILL
    at ``kill_at``."""
    env = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p),
    )
    start = time.monotonic()
    why, target_s = "exited", None
    if stopper.signum is not None:  # the suite was stopped: start nothing more (a SIGINT sent while a child
        return Ended(-signal.SIGINT, "signal", 0.0)  # starts can be lost, if it inherited SIGINT ignored)
    with open(out_path, "w") as out:
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        stopper.proc = proc
        if stopper.signum is not None:  # a signal came while it started
            signal_group(proc, signal.SIGINT)
        try:
            while proc.poll() is None:
                now = time.monotonic()
                if stopper.signum is not None and why == "exited":
                    why = "signal"
                elif why == "exited" and target is not None and target():
                    why, target_s = "target", now - start
                    signal_group(proc, signal.SIGINT)
                elif why == "exited" and now >= stop_at:
                    why = "budget"
                    signal_group(proc, signal.SIGINT)
                if now >= kill_at:
                    signal_group(proc, signal.SIGKILL)
                try:
                    proc.wait(timeout=POLL_S)
                except subprocess.TimeoutExpired:
                    pass
        finally:
            stopper.proc = None
            if proc.poll() is None:
                signal_group(proc, signal.SIGKILL)
                proc.wait()
    if why == "exited" and stopper.signum is not None:  # it ended of the signal before the loop saw it
        why = "signal"
    return Ended(proc.returncode, why, time.monotonic() - start, target_s)


# -------------------------------------------------------------------------------------------- stages


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
    """A training stage's figures from its run directory (benchmarks/suite.py's reading of logs.csv)."""
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
    used, whether sized or given), its flags where a record lacks one."""
    with open(os.path.join(rundir, "meta.json")) as f:
        meta = json.load(f)
    record, flags = meta.get("sizing") or {}, meta.get("flags", {})
    return {k: int(record.get(k, flags.get(k, 1))) for k in SPLIT_KEYS}


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


def splits_run(ctx, xpid: str, given: dict | None, stop_at: float, kill_at: float) -> dict:
    """One IMPALA Pong run of the splits stage, stopped (SIGINT) at ``stop_at``: its layout and frames/s (the
    launcher's sizing where ``given`` is None, else those values as flags)."""
    rundir = os.path.join(ctx.savedir, xpid)
    extra = [] if given is None else [a for k in SPLIT_KEYS for a in (f"--{k}", str(given[k]))]
    argv = ["--env", PONG, "--savedir", ctx.savedir, "--xpid", xpid, "--disable_final_test", *extra]
    ended = run_child(polybeast_cmd(argv), os.path.join(ctx.savedir, f"{xpid}.out"), stop_at, kill_at, ctx.stopper)
    command = f"python -m {PACKAGE}.polybeast {shlex.join(argv)}".replace(ctx.savedir, "SAVEDIR")
    out = {
        "sized": given is None,
        "rundir": rundir,
        "command": command,
        "stopped": ended.why,
        "exit": ended.status,
        "wall_s": ended.seconds,
    }
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


# -------------------------------------------------------------------------------------------- tables


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


def splits_table(r: dict, ceiling: dict | None) -> list[str]:
    """The split layout against the unsplit one, the same envs and batch: frames/s over each run's second half."""
    ceiling_fps = ceiling["frames_s"] if ceiling and ceiling.get("status") == "done" else None
    runs = r["runs"]
    unsplit = next((u["steady_frames_s"] for u in runs if u["status"] == "done" and u["server_splits"] == 1), None)
    sized = runs[0]["command"]
    against = "".join(f" against `{u['command']}`" for u in runs[1:])
    how = "" if r["status"] == "done" else f"; {r['status']}"
    out = [
        f"**Split env servers** (`--server_splits`, IMPALA Pong, {r['seconds']:g} s a run) {caption(r)}: "
        f"`{sized}` (the sizing's){against}{how}",
        "",
        "| layout (processes x splits x envs) | envs, batch | run | frames/s (2nd half) | / unsplit | / ceiling |",
        "|---|---|---|---|---|---|",
    ]
    for u in runs:
        who = "the sizing's" if u["sized"] else "given"
        if u["status"] != "done":
            out.append(f"| - | - | {who} | {u['status']} | - | - |")
            continue
        fps = u["steady_frames_s"]
        out.append(
            f"| {u['layout']} | {u['num_actors']}, B={u['batch_size']} | {who} | {fmt(fps)} | "
            f"{fmt(fps / unsplit if unsplit else None, '.2f')} | "
            f"{fmt(fps / ceiling_fps if ceiling_fps else None, '.2f')} |"
        )
    return out


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
        elif r["status"] != "done":
            out += [f"**{stage}**: {r['status']} {caption(r)}", ""]
        elif stage == "ceiling":
            out += ceiling_table(r) + [""]
        elif stage == "impala_pong":
            out += impala_table(r, results.get("ceiling")) + [""]
        else:
            out += agents_table(r) + [""]
    return "\n".join(out).rstrip() + "\n"


# -------------------------------------------------------------------------------------------- main


def machine_line() -> tuple[str, str]:
    """(the first line's description, the short one the tables carry)."""
    import torch

    from rl_core.config.sizing import usable_cores

    cores = usable_cores()
    if torch.cuda.is_available():
        device = f"cuda ({torch.cuda.get_device_name(0)}, {torch.cuda.device_count()} GPU)"
    else:
        device = "cpu (no CUDA device: the learner runs on the CPU)"
    full = (
        f"{device}, torch {torch.__version__}, Python {platform.python_version()}, {cores} usable cores "
        f"({os.cpu_count()} online)"
    )
    short = (
        f"{torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'CPU only'}, {cores} cores, "
        f"torch {torch.__version__}"
    )
    return full, short


@dataclasses.dataclass
class Context:
    args: argparse.Namespace
    savedir: str
    deadline: float  # time.monotonic() by which every stage has ended
    stopper: Stopper

    def left(self) -> float:
        return self.deadline - time.monotonic()


def load_results(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f).get("stages", {})
    except (OSError, ValueError):
        return {}


def save(savedir: str, results: dict, machine: str) -> str:
    text = markdown(results, machine)
    for name, content in (("gpu_suite.json", json.dumps({"stages": results}, indent=1)), ("gpu_suite.md", text)):
        tmp = os.path.join(savedir, name + ".partial")
        with open(tmp, "w") as f:
            f.write(content)
        os.replace(tmp, os.path.join(savedir, name))
    return text


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget_s", type=float, default=1500.0, help="The whole suite's seconds at most.")
    p.add_argument(
        "--savedir",
        default=None,
        help="Run directories, consoles, the tables (default: ~/logs/torchbeast/gpu_suite-<date>-<time>).",
    )
    p.add_argument("--stages", default=",".join(STAGES), help=f"Comma-separated, in this order: {','.join(STAGES)}.")
    p.add_argument(
        "--impala_steps",
        type=int,
        default=None,
        help="IMPALA's --total_steps (default: the package's, 50M: stopped at 18 or by the budget).",
    )
    p.add_argument("--ppo_steps", type=int, default=None, help="PPO's --total_steps (default: the package's, 10M).")
    p.add_argument("--r2d2_steps", type=int, default=None, help="R2D2's --total_steps (default: the package's).")
    p.add_argument("--impala_max_s", type=float, default=720.0, help="IMPALA's share at most (seconds).")
    p.add_argument("--ceiling_seconds", type=float, default=5.0, help="Each env-ceiling measurement's seconds.")
    p.add_argument(
        "--splits_seconds",
        type=float,
        default=75.0,
        help="Each of the splits stage's two IMPALA runs (wall seconds from its launch).",
    )
    p.add_argument("--agents_seconds", type=float, default=30.0, help="Each agent's end-to-end run (seconds).")
    p.add_argument("--agents_repeats", type=int, default=10, help="Learner batches timed alone per agent.")
    return p


def main(argv=None) -> int:
    parser = make_parser()
    args = parser.parse_args(argv)
    stages = [s for s in args.stages.split(",") if s]
    unknown = [s for s in stages if s not in STAGES]
    if unknown or not stages:
        parser.error(f"--stages {args.stages}: give some of {','.join(STAGES)}")
    stages = [s for s in STAGES if s in stages]
    if args.budget_s <= 0 or args.splits_seconds <= 0:
        parser.error("--budget_s and --splits_seconds must be positive")
    start = time.monotonic()
    stopper = Stopper()  # first: a Ctrl-C during torch's import is one line too
    savedir = os.path.abspath(
        os.path.expanduser(args.savedir or f"~/logs/torchbeast/gpu_suite-{datetime.datetime.now():%Y%m%d-%H%M%S}")
    )
    os.makedirs(savedir, exist_ok=True)
    from rl_core.config.sizing import usable_cores

    full, short = machine_line()
    cores = usable_cores()
    print(f"gpu_suite: {full}; budget {args.budget_s:g} s; savedir {savedir}", flush=True)
    shares = plan(args.budget_s - (time.monotonic() - start), stages, args, cores)
    print(
        "plan: "
        + ", ".join(f"{s} {v:.0f} s" if v else f"{s} skipped: budget" for s, v in shares.items())
        + " (the PPO runs also get what earlier stages leave)",
        flush=True,
    )
    ctx = Context(args, savedir, start + args.budget_s - MARGIN_S, stopper)
    results = load_results(os.path.join(savedir, "gpu_suite.json"))
    failed = False
    for i, stage in enumerate(stages):
        if stopper.signum is not None:
            break
        share = allot(stage, ctx.left(), stages[i + 1 :], args, cores)
        stamp = {"date": f"{datetime.date.today()}", "machine": short}
        if share <= 0:
            kept = results.get(stage, {}).get("status") == "done"  # an earlier run's result stays
            if not kept:
                results[stage] = {"status": "skipped: budget", **stamp}
            print(
                f"[{stage}] skipped: budget ({max(ctx.left(), 0):.0f} s left)"
                + (f"; the result of {results[stage]['date']} kept" if kept else ""),
                flush=True,
            )
            save(savedir, results, short)
            continue
        print(f"[{stage}] started, {share:.0f} s of {ctx.left():.0f} s left", flush=True)
        t = time.monotonic()
        if stage == "ceiling":
            result = stage_ceiling(ctx, share)
        elif stage == "agents":
            result = stage_agents(ctx, share)
        elif stage == "splits":
            result = stage_splits(ctx, share)
        else:
            result = stage_training(ctx, stage, share)
        if result["status"] != "stopped by signal":  # nothing measured: an earlier result stays
            results[stage] = {**result, **stamp}
        failed |= result["status"].startswith(("failed", "no result"))
        how = f" (stopped: {result['stopped']})" if result.get("stopped", "exited") != "exited" else ""
        print(f"[{stage}] {result['status']}{how} in {time.monotonic() - t:.0f} s", flush=True)
        save(savedir, results, short)
    if stopper.signum is not None:
        name = signal.Signals(stopper.signum).name
        print(
            f"gpu_suite: stopped by {name} after {time.monotonic() - start:.0f} s; the stages done are in "
            f"{savedir}/gpu_suite.md",
            flush=True,
        )
        return 128 + stopper.signum
    text = save(savedir, results, short)
    print()
    print(text, flush=True)
    print(
        f"gpu_suite: done in {time.monotonic() - start:.0f} s of {args.budget_s:g}; tables in {savedir}/gpu_suite.md",
        flush=True,
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
