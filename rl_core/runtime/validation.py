"""Validation during training, and the final test at its end (the package's protocols, rl_core/evaluation/episodes.py)."""

from __future__ import annotations

import copy
import logging
import os
import threading
import time

from rl_core.records import checkpoint_file
from rl_core.evaluation import episodes
from rl_core.runtime.threads import start_thread

log = logging.getLogger("learner")


class Validation:
    """Validation during training on a frozen copy of the weights, in its own thread.

    Triggered every --validate_every minutes and whenever the step count crosses a
    multiple of --validate_step_every; one at a time (a trigger while one runs is
    skipped).  When training reaches --total_steps the running validation is awaited
    and one due at the last step is run, so every crossing is either validated or
    logged as skipped.  Keeps model_best_val.tar (through ``checkpoints``); its thread joins ``threads``.
    """

    def __init__(self, flags, parts, env_pkg, run_log, rundir: str, checkpoints, errors, threads: list):
        self.flags = flags
        self.parts = parts
        self.env_pkg = env_pkg
        self.run_log = run_log
        self.rundir = rundir
        self.checkpoints = checkpoints
        self.errors = errors
        self.threads = threads
        f = flags
        self.enabled = not f.disable_validation and (f.validate_every > 0 or f.validate_step_every > 0)
        self.last_time = time.monotonic()
        self.last_step = parts.learner.step
        self.thread: threading.Thread | None = None
        self.abort = threading.Event()  # an error, a signal: the running validation gives up
        self.result: dict | None = None
        self.for_row = float("nan")
        self.count = 0
        self.best_path = os.path.join(rundir, "model_best_val.tar")
        self.best = float("-inf")
        if os.path.exists(self.best_path):
            self.best = float(checkpoint_file.load(self.best_path).get("valid_return", float("-inf")))

    def take_for_row(self) -> float:
        value, self.for_row = self.for_row, float("nan")
        return value

    def poll(self, now: float) -> None:
        if not self.enabled:
            return
        self._collect()
        f, step = self.flags, self.parts.learner.step
        due = f.validate_every > 0 and now - self.last_time >= f.validate_every * 60
        due = due or episodes.crossed(self.last_step, step, f.validate_step_every)
        self.last_step = step
        if due:
            self.last_time = now
            self._start()

    def finish(self) -> None:
        """Training reached --total_steps: wait for the running validation, then run the one the last
        step made due; both are recorded before the run ends."""
        if not self.enabled:
            return
        f, step = self.flags, self.parts.learner.step
        due = episodes.crossed(self.last_step, step, f.validate_step_every)
        self.last_step = step
        self._wait()
        if due:
            self._start()
            self._wait()

    def _wait(self) -> None:
        while self.thread is not None and self.thread.is_alive():
            self.thread.join(0.25)  # the main thread: a signal's handler runs between the joins
        self._collect()

    def _start(self) -> None:
        f, learner, parts = self.flags, self.parts.learner, self.parts
        if self.thread is not None and self.thread.is_alive():
            log.info("validation still running: skipping this one")
            return
        with learner.lock:  # a consistent snapshot; the learner goes on at once
            model = copy.deepcopy(learner.model)
            step = learner.step
        # The crossings up to the snapshot's step are validated by it (the learner may have moved on since the
        # poll that made it due): the last step's check in ``finish`` then does not validate that step twice.
        self.last_step = max(self.last_step, step)
        model.eval()
        record = f.record_video and self.count == 0
        self.count += 1

        def run():
            frames = episodes.Recording() if record else None
            result = episodes.validate(model, self.env_pkg, f, parts.device, frames, self.abort, parts.agent)
            video = None
            if frames:
                from rl_core.evaluation.video import write_video

                video = write_video(frames, os.path.join(self.rundir, "valid_first_episode"), fps=frames.fps)
            if result is not None:
                self.result = dict(result, step=step, model=model, video=video)

        log.info("validation of the model at step %d started", step)
        self.thread = start_thread("validation", run, self.errors)
        self.threads.append(self.thread)

    def _collect(self) -> None:
        result, self.result = self.result, None
        if result is None:
            return
        step = self.parts.learner.step
        mean = result["mean_return"]
        log.info("validation at step %d: mean return %.2f over %d episodes", result["step"], mean, result["episodes"])
        self.for_row = mean
        scalars = {"valid/mean_return": mean}
        for task, task_mean in result["tasks"].items():
            log.info("validation at step %d, %s: mean return %.2f", result["step"], task, task_mean)
            scalars[f"valid/return_{task}"] = task_mean
        self.run_log.log_scalars(scalars, step)
        if result["video"]:
            self.run_log.log_video("video/valid", result["video"], step)
        if mean > self.best:
            self.best = mean
            self.checkpoints.save_model(self.best_path, result["model"], result["step"], valid_return=mean)
            log.info("new best validation return %.2f: saved %s", mean, self.best_path)


def run_final_test(flags, parts, env_pkg, run_log, rundir: str, checkpoint_path: str, stop: threading.Event) -> None:
    """The package's final-test protocol on the trained model: final_test.json, logs, wandb summary."""
    f, learner = flags, parts.learner
    log.info("final test of the model at step %d", learner.step)
    record = os.path.join(rundir, "test_first_episode") if f.record_video else None
    result = episodes.final_test(learner.model, env_pkg, f, parts.device, record, stop, agent=parts.agent)
    if stop.is_set():
        log.info("final test interrupted: nothing written")
        return
    result.update(step=learner.step, xpid=f.xpid, checkpoint=checkpoint_path)
    episodes.write_json(os.path.join(rundir, "final_test.json"), result)
    report_final_test(result, run_log, learner.step)


def report_final_test(result: dict, run_log, step: int) -> None:
    episodes.log_result(result, "final test")
    scalars, summary = {}, {}
    for group, g in result["groups"].items():
        scalars[f"final_test/{group}_mean"] = g["mean"]
        summary.update(
            {
                f"final_test/{group}/mean": g["mean"],
                f"final_test/{group}/std": g["std"],
                f"final_test/{group}/runs": g["runs"],
            }
        )
        for task, mean in g.get("tasks", {}).items():
            scalars[f"final_test/{group}_{task}_mean"] = mean
            summary[f"final_test/{group}/{task}/mean"] = mean
    run_log.log_scalars(scalars, step)
    run_log.set_summary(summary)
    if result.get("video"):
        run_log.log_video("video/test", result["video"], step)
