"""The run's checkpoint: read and checked at the start, restored into the parts, saved, and the one line of a
failed write."""

from __future__ import annotations

import logging
import os
import threading

from rl_core.records import checkpoint_file
from rl_core.agents import STATE_FLAGS, describe_agent
from rl_core.errors import CheckpointWriteError, UserError

log = logging.getLogger("learner")


class Checkpoints:
    """model.tar of a run directory (``rundir`` None: a torchrun rank other than 0, which writes nothing and
    resumes from rank 0's ``saved``).  ``saved_step``: the step of model.tar as on disk (None: none yet)."""

    def __init__(self, flags, global_flags, rundir: str | None, path: str, saved: dict | None, stop: threading.Event):
        self.flags = flags
        self.global_flags = global_flags  # (recorded in each checkpoint: the run's flags, whatever the world size)
        self.rundir = rundir
        self.path = path
        self.saved = saved
        self.stop = stop
        self.saved_step: int | None = None

    @classmethod
    def read(cls, flags, global_flags, rundir: str, stop: threading.Event) -> Checkpoints:
        """A checkpoint to resume is read (and refused, in one line) before any server starts."""
        path = os.path.join(rundir, "model.tar")
        saved = checkpoint_file.load(path) if os.path.exists(path) else None
        checkpoints = cls(flags, global_flags, rundir, path, saved, stop)
        if saved is not None:
            checkpoints._check_same_agent(saved.get("flags", {}))
        return checkpoints

    def describe(self) -> str:
        if self.saved is None:
            return "new run"
        return f"resuming {self.path} at step {int(self.saved.get('step', 0)):,}"

    def _check_same_agent(self, saved_flags: dict) -> None:
        """A checkpoint resumes only under the agent (and optimizer) that trained it: another one's
        state does not load (or fails at its first step: Adam's 'betas' in RMSprop's state)."""
        f = self.flags
        keys = [k for k in STATE_FLAGS if k in saved_flags and hasattr(f, k)]
        differ = [k for k in keys if saved_flags[k] != getattr(f, k)]
        if not differ:
            return
        ours = describe_agent({k: getattr(f, k) for k in keys}, "optimizer" in differ)
        theirs = describe_agent(saved_flags, "optimizer" in differ)
        raise UserError(
            f"{ours} cannot resume run {f.xpid}: its checkpoint {self.path} (step "
            f"{int(self.saved.get('step', 0)):,}) was trained with {theirs}; resume it with {theirs}, or start a new "
            f"run with another --xpid (or none)"
        )

    # ------------------------------------------------------------ restore
    def restore(self, model, optimizer, scheduler) -> tuple[int, int]:
        """The checkpoint read at the start (if any) into the model, optimizer and schedule:
        ``(step, learner_steps)``, (0, 0) for a new run."""
        state = self.saved
        if state is None:
            return 0, 0
        try:
            model.load_state_dict(state["model_state_dict"])
            optimizer.load_state_dict(state["optimizer_state_dict"])
            scheduler.load_state_dict(state["scheduler_state_dict"])
        except (KeyError, RuntimeError, ValueError) as e:
            first = str(e).strip().splitlines()[0]
            raise UserError(
                f"checkpoint {self.path} does not fit this model ({first[:160]}): use another --xpid"
            ) from None
        self._take_flag_learning_rate(optimizer, scheduler)
        step = int(state.get("step", 0))
        recent = self.recent_returns()
        window = f" (last-100 return {sum(recent) / len(recent):.2f} over {len(recent)} episodes)" if recent else ""
        log.info("resumed from %s at step %d%s", self.path, step, window)
        self.saved_step = step
        return step, int(state.get("learner_steps", 0))

    def _take_flag_learning_rate(self, optimizer, scheduler) -> None:
        """A resumed run trains at this run's --learning_rate (the flags given win), not at the one
        the checkpoint's optimizer state carries; the schedule goes on from where it was."""
        wanted = float(self.flags.learning_rate)
        saved = sorted(set(float(b) for b in getattr(scheduler, "base_lrs", [])))
        if len(saved) != 1 or saved[0] == wanted or not hasattr(scheduler, "lr_lambdas"):
            return  # one rate for every group is what make_optimizer builds; anything else stays as saved
        log.info("resumed with --learning_rate %g; the checkpoint trained at %g", wanted, saved[0])
        scheduler.base_lrs = [wanted] * len(scheduler.base_lrs)
        for group, rate in zip(optimizer.param_groups, scheduler.lr_lambdas):
            group["initial_lr"] = wanted
            group["lr"] = wanted * rate(scheduler.last_epoch)
        scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]

    def restore_data_source(self, data_source) -> None:
        """A resumed run's replay (replay.tar, --checkpoint_replay), where the data source keeps one."""
        if self.saved is not None and hasattr(data_source, "restore") and self.rundir is not None:
            data_source.restore(self.rundir)

    # --------------------------------------------------------------- save
    def after_update(self, learner, data_source, previous_step: int, step: int) -> None:
        """Runs in the learner thread: model_extra.tar exactly at the update crossing the step."""
        every = self.flags.save_extra_checkpoint
        if every and previous_step < every <= step:
            self.save(learner, data_source, os.path.join(self.rundir, "model_extra.tar"))

    def recent_returns(self) -> list[float]:
        """The last-100 window the checkpoint read at the start carries (none: an empty one)."""
        return list((self.saved or {}).get("recent_returns", []))

    def save(
        self,
        learner,
        data_source,
        path: str | None = None,
        unless_stopped: bool = False,
        recent_returns: list[float] | None = None,
    ) -> None:
        """model.tar (or ``path``) of the learner's state, and the data source's (replay.tar) with model.tar;
        ``recent_returns``: the run's last-100 window, which a resumed run goes on from.
        ``unless_stopped`` (a periodic save): given up if the run stops while the learner holds its weights (an
        update that may not end: under torchrun, one waiting for a peer); the shutdown decides the final one."""
        if self.flags.disable_checkpoint or self.rundir is None:  # (under torchrun rank 0 saves)
            return
        path = path or self.path
        while not learner.lock.acquire(timeout=0.25):
            if unless_stopped and self.stop.is_set():
                return
        try:
            if learner.diverged is not None:  # the weights are not finite: the last good checkpoint stays
                log.info("not saving %s: training diverged", path)
                return
            payload = {
                "model_state_dict": {k: v.detach().cpu() for k, v in learner.model.state_dict().items()},
                "optimizer_state_dict": learner.optimizer.state_dict(),
                "scheduler_state_dict": learner.scheduler.state_dict(),
                "flags": checkpoint_file.flags_dict(self.global_flags),
                "step": learner.step,
                "learner_steps": learner.learner_steps,
            }
            if recent_returns is not None:
                payload["recent_returns"] = list(recent_returns)
            writing = path
            try:
                checkpoint_file.save(path, payload)
                if path == self.path and hasattr(data_source, "save"):
                    writing = os.path.join(self.rundir, "replay.tar")
                    data_source.save(self.rundir)
            except OSError as e:
                raise self.write_error(writing, e) from None
            if path == self.path:
                self.saved_step = learner.step
        finally:
            learner.lock.release()
        log.info("saved checkpoint %s at step %d", path, learner.step)

    def save_model(self, path: str, model, step: int, **extra) -> None:
        """A model's weights alone (model_best_val.tar), with the run's flags and ``extra``."""
        try:
            checkpoint_file.save(
                path,
                {
                    "model_state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
                    "flags": checkpoint_file.flags_dict(self.global_flags),
                    "step": step,
                    **extra,
                },
            )
        except OSError as e:
            raise self.write_error(path, e) from None

    def write_error(self, path: str, error: OSError) -> CheckpointWriteError:
        """Stops the run: one line with the path, the OS's reason, the free space, and what is kept."""
        kept = self.saved_step
        kept = f"model.tar of step {kept:,} is kept" if kept is not None else "no checkpoint had been saved yet"
        self.stop.set()
        return CheckpointWriteError(f"{checkpoint_file.describe_write_error(path, error)}; {kept}")
