"""Reading the suite's records: a run directory's logs.csv, meta.json and final_test.json (``load_run``), a run's
committed summary (``load_summaries``, ``run_of_summary``) and benchmarks/anchors.json, each into a ``Run`` and its
figures."""

from __future__ import annotations

import argparse
import dataclasses
import glob
import importlib
import json
import math
import os

import numpy as np

from benchmarks.env_ceiling import frames_per_step
from rl_core.errors import UserError
from rl_core.records.plot import read_columns

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROG = "python benchmarks/suite.py"
ANCHORS = os.path.join(REPO, "benchmarks", "anchors.json")
TRANSCRIBED_MARK = "†"


@dataclasses.dataclass
class Run:
    """A run's identity and its logs.csv history (a resumed run's: the rows of its last start on, with the wall
    seconds of every start), read from its directory (``load_run``) or from its summary (``run_of_summary``: the
    rows the summary kept)."""

    run_dir: str  # a summary's path where the run was read from one
    env: str
    agent: str
    seed: int
    steps: np.ndarray
    seconds: np.ndarray
    returns: np.ndarray  # return_last_100; NaN before an episode ended
    final_test: float | None
    frames_per_step: int
    label: str = ""  # a summary's --label, which tells apart runs of one env, agent and seed
    recorded: dict | None = None  # a transcribed summary's wall_seconds and steps_per_s (None: not recorded)
    final_train: float | None = None  # the final test's mean on the training levels, where it has a "train" group
    row_name: str = ""  # the results page's name of a package-default row, ``agent [core]`` (page_rows.row_names)

    @property
    def transcribed(self) -> bool:
        """Read from a summary transcribed from a log, not collected: its curve holds the recorded points alone."""
        return self.recorded is not None

    @property
    def last_step(self) -> int:
        return int(self.steps[-1])

    @property
    def wall_seconds(self) -> float:
        """Training seconds to the last row (a transcribed run's as recorded); NaN where not recorded."""
        if self.recorded is not None:
            return math.nan if self.recorded["wall_seconds"] is None else float(self.recorded["wall_seconds"])
        return float(self.seconds[-1])

    @property
    def steps_per_s(self) -> float:
        if self.recorded is not None:
            return math.nan if self.recorded["steps_per_s"] is None else float(self.recorded["steps_per_s"])
        return self.last_step / self.seconds[-1] if self.seconds[-1] > 0 else math.nan

    @property
    def name(self) -> str:
        """The agent as tables and legends name it: a package-default row's name, else with its label, if any."""
        if self.row_name:
            return self.row_name
        return f"{self.agent} [{self.label}]" if self.label else self.agent


def history_with_wall_seconds(rows: list[tuple[float, ...]]) -> list[tuple[float, ...]]:
    """``(step, time, ...)`` rows of logs.csv in file order -> the kept history (``last_history``) with ``time`` as
    the seconds of training behind each kept row.  logs.csv's clock restarts at each start of the run; a start's
    seconds add on to those of the last row kept before it (its checkpoint's, near enough), so the stretch past the
    checkpoint that the resume redid, or a whole start killed before its first checkpoint, is not counted twice."""
    kept: list[tuple[float, ...]] = []
    offset, last_time, last_step = 0.0, -math.inf, -math.inf
    for step, t, *rest in rows:
        if t < last_time or step <= last_step:  # a new start: its clock from 0, its steps from its checkpoint's
            while kept and kept[-1][0] >= step:
                kept.pop()
            offset = kept[-1][1] if kept else 0.0
        last_time, last_step = t, step
        kept.append((step, offset + t, *rest))
    return kept


def last_history(rows: list[tuple[float, ...]]) -> list[tuple[float, ...]]:
    """Rows with increasing steps: a resumed run's rows past the checkpoint it resumed from give way to the new ones."""
    kept: list[tuple[float, ...]] = []
    for row in rows:
        while kept and kept[-1][0] >= row[0]:
            kept.pop()
        kept.append(row)
    return kept


def read_json(run_dir: str, name: str) -> dict:
    with open(os.path.join(run_dir, name)) as f:
        return json.load(f)


def launcher_of(meta: dict) -> tuple[str, str]:
    """(package, module) of the launcher in meta.json's argv: .../torchbeast_atari/polybeast.py ->
    ("torchbeast_atari", "polybeast")."""
    path = meta["argv"][0]
    package = os.path.basename(os.path.dirname(path))
    try:
        importlib.import_module(f"{package}.env")
    except ModuleNotFoundError:
        raise UserError(
            f"meta.json's launcher {path} is not a torchbeast_X package's: pass run directories made by "
            "python -m torchbeast_X.polybeast"
        ) from None
    return package, os.path.splitext(os.path.basename(path))[0]


def frames_per_agent_step(meta: dict) -> int:
    """Frames per agent step of the run's package (Atari: the frame skip), as benchmarks/env_ceiling.py counts;
    the package is that of the launcher in meta.json's argv."""
    package = launcher_of(meta)[0]
    return frames_per_step(package, importlib.import_module(f"{package}.env"), argparse.Namespace(**meta["flags"]))


def load_run(run_dir: str) -> Run:
    """A run directory's meta.json, logs.csv and final_test.json; UserError naming what is missing."""
    fix = "pass run directories (SAVEDIR/XPID) made by python -m torchbeast_X.polybeast"
    if not os.path.isdir(run_dir):
        raise UserError(f"{run_dir} is not a directory: {fix}")
    try:
        rows = read_columns(run_dir, ("step", "time", "return_last_100"))
    except FileNotFoundError as e:
        raise UserError(f"{e} {fix}") from None
    if not os.path.exists(os.path.join(run_dir, "meta.json")):
        raise UserError(f"{run_dir} has no meta.json: {fix}")
    if not rows:
        raise UserError(f"{run_dir}/logs.csv has no rows yet: wait for the run's first row (--log_interval)")
    meta = read_json(run_dir, "meta.json")
    history = history_with_wall_seconds(rows)
    steps, secs, returns = (np.array(column) for column in zip(*history))
    flags = meta["flags"]
    final = final_test_summary(run_dir)
    return Run(
        run_dir,
        flags["env"],
        flags["agent"] + ("+rnd" if flags["rnd"] else ""),
        flags["seed"],
        steps.astype(np.int64),
        secs,
        returns,
        final["mean"] if final else None,
        frames_per_agent_step(meta),
        final_train=final.get("train") if final else None,
    )


def final_test_summary(run_dir: str) -> dict | None:
    """final_test.json's "test" group: its mean and std over the test's runs, each run's mean return, the episodes
    played, whether the policy was greedy and the model's step, and the "train" group's mean where the package
    also tests the training levels (Procgen: the test runs are held-out levels); None without one."""
    if not os.path.exists(os.path.join(run_dir, "final_test.json")):
        return None
    result = read_json(run_dir, "final_test.json")
    runs = [run for run in result["runs"] if run.get("group", "test") == "test"]
    group = result["groups"]["test"]
    summary = {
        "mean": group["mean"],
        "std": group["std"],
        "runs": [run["mean_return"] for run in runs],
        "episodes": sum(run["episodes"] for run in runs),
        "greedy": result.get("greedy"),
        "step": result.get("step"),
    }
    if "train" in result["groups"]:
        summary["train"] = result["groups"]["train"]["mean"]
    return summary


def first_reached(run: Run, score: float) -> int | None:
    """The index of the first row whose last-100 return is at least ``score``."""
    hits = np.flatnonzero(run.returns >= score)  # NaN compares False
    return int(hits[0]) if hits.size else None


def at_or_before(steps: np.ndarray, values: np.ndarray, points) -> np.ndarray:
    """Each point's value: that of the last step at or before it (NaN before the first)."""
    index = np.searchsorted(steps, points, side="right") - 1
    return np.where(index >= 0, values[np.maximum(index, 0)], np.nan)


def return_at(run: Run, step: int) -> float | None:
    """The last-100 return of the last row at or before ``step`` that has one; None if the run stopped before it."""
    known = ~np.isnan(run.returns)
    if run.last_step < step or not known.any():
        return None
    value = float(at_or_before(run.steps[known], run.returns[known], step))
    return None if math.isnan(value) else value


def path_name(text: str) -> str:
    """A file name's part: ``/`` and ``:`` become ``-``."""
    return text.replace("/", "-").replace(":", "-")


def writable_dir_of(path: str, flag: str) -> None:
    """UserError unless the directory the file ``path`` goes into exists."""
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise UserError(f"{flag} {path}: its directory does not exist: create it or choose another path")


def load_anchors(path: str = ANCHORS) -> dict:
    """benchmarks/anchors.json: ``sources`` and ``anchors``."""
    with open(path) as f:
        return json.load(f)


def anchors_of(anchors: dict, env: str, agents) -> list[dict]:
    """The anchors of ``env`` for any of ``agents``."""
    return [a for a in anchors["anchors"] if a["env"] == env and set(a["agents"]) & set(agents)]


def score_values(anchor: dict) -> list[float]:
    """An anchor's score as a list: none for null."""
    score = anchor.get("score")
    return [] if score is None else [float(score)]


def anchor_scores(anchors: dict, env: str) -> set[float]:
    """The scores of ``env``'s anchors."""
    return {s for a in anchors["anchors"] if a["env"] == env for s in score_values(a)}


def anchor_score(anchors: dict, env: str, agent: str) -> float | None:
    """The score of the first anchor of (env, agent) that has one."""
    return next((score_values(a)[-1] for a in anchors_of(anchors, env, [agent]) if score_values(a)), None)


SUMMARY_KEYS = ("package", "env", "agent", "seed", "command", "agent_steps", "curve", "final_test", "frames_per_step")


def load_summaries(data: str) -> list[tuple[str, dict]]:
    """(path, summary) of every ``<data>/<package>/<env>/*.json``, by path."""
    paths = sorted(glob.glob(os.path.join(data, "*", "*", "*.json")))
    if not paths:
        raise UserError(
            f"{data} holds no summaries (<package>/<env>/<agent>_seed<S>.json): write them with "
            f"{PROG} collect RUN_DIR ..."
        )
    out = []
    for path in paths:
        with open(path) as f:
            summary = json.load(f)
        missing = [key for key in SUMMARY_KEYS if key not in summary]
        if missing:
            raise UserError(f"{path} is not a run summary (no {', '.join(missing)}): write it with {PROG} collect")
        out.append((path, summary))
    return out


def transcribed(summary: dict) -> bool:
    """A summary transcribed by hand from a run's log in docs/experiments/ (its ``source`` says which; no run
    directory behind it): its curve holds only the recorded points, its times only those recorded (null else)."""
    return "source" in summary


def run_of_summary(path: str, summary: dict) -> Run:
    """The run as the summary's rows give it (a transcribed one's wall time and agent steps/s as recorded)."""
    curve = summary["curve"]
    returns, seconds = (
        np.array([math.nan if v is None else v for v in curve[key]], dtype=float) for key in ("return_last_100", "time")
    )
    final = summary["final_test"]
    recorded = {key: summary.get(key) for key in ("wall_seconds", "steps_per_s")} if transcribed(summary) else None
    return Run(
        path,
        summary["env"],
        summary["agent"],
        summary["seed"],
        np.array(curve["step"], dtype=np.int64),
        seconds,
        returns,
        final["mean"] if final else None,
        summary["frames_per_step"],
        summary.get("label") or "",
        recorded,
        final.get("train") if final else None,
    )
