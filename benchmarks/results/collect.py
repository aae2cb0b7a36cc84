"""The suite's ``collect``: a run directory -> its committed JSON summary.

``collect`` writes one small JSON summary per run directory, ``<out>/<package>/<env>/<agent>_seed<S>[_<label>].json``:
what meta.json, logs.csv, final_test.json and out.log record of the run (its command is meta.json's argv, that of
its last start; the machine is --machine, with the cores, GPU and device line the run recorded), its final test,
its greedy validations and its last-100 curve cut to at most CURVE_POINTS rows (every row at which it first
reached an anchor's score or a --score kept).  A summary with a ``source`` was transcribed by hand from a run's
record in docs/experiments/ (its run directory was not kept): its curve holds the recorded points alone, its times
and its wall time and agent steps/s only where recorded (null else).  ``--variant TEXT`` marks the runs as variants
(the summary's ``variant``: what they changed from the package's defaults).
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex

import numpy as np

from benchmarks.results.load import (
    Run,
    anchor_scores,
    final_test_summary,
    first_reached,
    last_history,
    launcher_of,
    load_anchors,
    load_run,
    path_name,
    read_json,
)
from rl_core.errors import UserError
from rl_core.records.plot import read_columns

CURVE_POINTS = 200  # a summary's curve: at most this many rows (and those of the scores)


VALIDATION_LINE = re.compile(r"validation at step (\d+): mean return (\S+) over \d+ episodes")
DEVICE_LINE = re.compile(r"\] device: (.+)$")


def out_log_lines(run_dir: str) -> list[str]:
    """out.log's lines (every start's: the launcher appends), none without one."""
    path = os.path.join(run_dir, "out.log")
    if not os.path.exists(path):
        return []
    with open(path, errors="replace") as f:
        return f.read().splitlines()


def validation_points(run_dir: str, lines: list[str]) -> dict | None:
    """The run's greedy validations (rl_core/runtime/validation.py): out.log's lines, each at the validated model's
    step; without them logs.csv's valid_mean_return, at the step of the row after the validation ended (one
    overtaken by the next before a row was written is missing there).  A resumed run's repeated steps give way to
    its later start's.  None where the run validated nothing."""
    points = [(int(m.group(1)), float(m.group(2))) for m in map(VALIDATION_LINE.search, lines) if m]
    source = "out.log"
    if not points:
        rows = read_columns(run_dir, ("step", "valid_mean_return"))
        points, source = [(int(step), value) for step, value in rows if not math.isnan(value)], "logs.csv"
    if not points:
        return None
    kept = last_history(points)
    return {"source": source, "step": [step for step, _ in kept], "mean_return": [rounded(v) for _, v in kept]}


def recorded_machine(meta: dict, lines: list[str]) -> dict:
    """What the run recorded of its machine: meta.json's sizing (the cores it could use, whether the learner had a
    GPU; a resumed run keeps its first start's) and out.log's device lines (each start's, repeats dropped)."""
    sizing = meta.get("sizing") or {}
    devices = [m.group(1) for m in map(DEVICE_LINE.search, lines) if m]
    return {"usable_cores": sizing.get("cores"), "gpu": sizing.get("gpu"), "devices": list(dict.fromkeys(devices))}


def rounded(value: float, digits: int = 3) -> float | None:
    """JSON's number: rounded, None for NaN."""
    return None if math.isnan(value) else round(float(value), digits)


def rounded_return(value: float, scores: list[float], digits: int = 3) -> float | None:
    """``rounded``, but never up onto or past a score the value is below: 0.89952 is kept as 0.899, not 0.9, so that
    the summary's first row at 0.9 is the run directory's."""
    kept = rounded(value, digits)
    if kept is not None and any(value < score <= kept for score in scores):
        kept = math.floor(float(value) * 10**digits) / 10**digits
    return kept


def curve_rows(run: Run, scores: list[float]) -> np.ndarray:
    """The rows a summary keeps: at most CURVE_POINTS spread over the history (its first and last among them), and
    the first row reaching each score, so that the summary gives the same first step as the run directory."""
    even = np.round(np.linspace(0, len(run.steps) - 1, min(len(run.steps), CURVE_POINTS))).astype(np.int64)
    reached = [i for i in (first_reached(run, score) for score in scores) if i is not None]
    return np.unique(np.concatenate([even, np.array(reached, dtype=np.int64)]))


def summarize(
    run_dir: str, machine: str | None, label: str, scores: list[float], anchors: dict, variant: str = ""
) -> dict:
    """A run directory's summary (see the module's docstring): what ``render`` needs, without the directory."""
    run = load_run(run_dir)
    meta = read_json(run_dir, "meta.json")
    package, module = launcher_of(meta)
    lines = out_log_lines(run_dir)
    scores = sorted(set(scores) | anchor_scores(anchors, run.env))
    rows = curve_rows(run, scores)
    sizing = meta.get("sizing") or {}
    return {
        "package": package,
        "env": run.env,
        "agent": run.agent,
        "seed": run.seed,
        "label": label or None,
        "variant": variant or None,
        "xpid": os.path.basename(os.path.normpath(run_dir)),
        "command": f"python -m {package}.{module} {shlex.join(meta['argv'][1:])}",
        "distributed": meta.get("distributed"),
        "git_commit": meta.get("git_commit"),
        "start": meta.get("start"),
        "end": meta.get("end"),
        "reason": meta.get("reason"),
        "machine": machine,
        "recorded_machine": recorded_machine(meta, lines),
        "sizing": {k: sizing.get(k) for k in ("num_servers", "num_actors", "batch_size", "server_splits")},
        "total_steps": meta["flags"]["total_steps"],
        "agent_steps": run.last_step,
        "wall_seconds": rounded(run.seconds[-1], 1),
        "steps_per_s": rounded(run.steps_per_s, 1),
        "frames_per_step": run.frames_per_step,
        "final_test": final_test_summary(run_dir),
        "validation": validation_points(run_dir, lines),
        "curve": {
            "rows": len(run.steps),
            "exact_scores": scores,
            "step": [int(run.steps[i]) for i in rows],
            "time": [rounded(run.seconds[i], 1) for i in rows],
            "return_last_100": [rounded_return(run.returns[i], scores) for i in rows],
        },
    }


def summary_path(out: str, summary: dict) -> str:
    """``<out>/<package>/<env>/<agent>_seed<S>[_<label>].json``."""
    label = f"_{path_name(summary['label'])}" if summary["label"] else ""
    name = f"{path_name(summary['agent'])}_seed{summary['seed']}{label}.json"
    return os.path.join(out, summary["package"], path_name(summary["env"]), name)


def write_summary(path: str, summary: dict) -> None:
    """The summary as JSON, a line per key (diffs stay readable, the file small)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    body = ",\n".join(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)}" for key, value in summary.items())
    with open(path + ".tmp", "w") as f:
        f.write("{\n" + body + "\n}\n")
    os.replace(path + ".tmp", path)


def collect(args) -> int:
    """Every run directory read and summarised first (a bad one writes nothing), then the summaries written."""
    anchors = load_anchors()
    summaries = [
        (run_dir, summarize(run_dir, args.machine, args.label, args.score, anchors, args.variant))
        for run_dir in args.run_dirs
    ]
    paths: dict[str, str] = {}
    for run_dir, summary in summaries:
        path = summary_path(args.out, summary)
        if path in paths:
            raise UserError(f"{paths[path]} and {run_dir} are both {path}: collect them apart, each with its --label")
        paths[path] = run_dir
    for (run_dir, summary), path in zip(summaries, paths):
        write_summary(path, summary)
        print(
            f"{run_dir} -> {path} ({os.path.getsize(path):,} bytes): {summary['agent_steps']:,} agent steps", flush=True
        )
    return 0
