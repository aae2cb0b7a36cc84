"""The learner process's run, phase by phase: the run directory and its checkpoint, the announcement, the
parts built and started (rl_core/runtime/parts.py), supervision until done, the shutdown, the final test and
the exit status.  Each phase's work lives in its own module; this one says their order."""

from __future__ import annotations

import logging
import os
import threading
import time

import numpy as np
import torch

from rl_core.records import checkpoint_file
from rl_core.agents import agent_traits
from rl_core.errors import CheckpointWriteError, RunFailure, UserError
from rl_core.records.run_dir import open_run_dir, put_back_meta, read_meta
from rl_core.records.run_log import RunLog, setup_logging
from rl_core.runtime import affinity, distributed
from rl_core.runtime.allocator import keep_freed_memory
from rl_core.runtime.checkpointing import Checkpoints
from rl_core.runtime.device import select_device, set_torch_threads
from rl_core.runtime.outcome import FINISHED, INTERRUPTED, Outcome, after_shutdown, outcome_of_error
from rl_core.runtime.parts import (
    Parts,
    build_parts,
    check_can_record,
    check_num_actions,
    connect_servers,
    start_lockstep,
    start_threads,
)
from rl_core.runtime.progress import (
    Progress,
    announce_rank,
    announce_sizing,
    announce_sources,
    describe_core,
    sizing_record,
)
from rl_core.runtime.signals import StopSignals
from rl_core.runtime.threads import ErrorBox, where_they_wait
from rl_core.runtime.validation import Validation, run_final_test

log = logging.getLogger("learner")
# the threads that run the job's collectives (rl_core/runtime/parts.py names them): at shutdown under torchrun they
# get PEER_WAIT_S to meet their peers
MEETS_PEERS = ("learner", "lockstep")


class Training:
    """One training run; ``run()`` returns the exit status.  Under torchrun rank 0 runs every phase
    (``_lead``), the other ranks train without a run directory (``_follow``)."""

    def __init__(self, flags, env_pkg, supervisor=None, sizing=None, sources=None):
        self.flags = flags
        # Under torchrun each rank trains with its share of the run's totals (``self.flags``, set in ``run``);
        # meta.json and checkpoints record the run's own flags, whatever the world size.
        self.global_flags = flags
        self.world = distributed.world_from_environ()
        self.group: distributed.Group | None = None
        self.env_pkg = env_pkg
        self.supervisor = supervisor
        self.pinning: affinity.Pinning | None = None  # --cpu_affinity's placement, once applied
        self.sizing = sizing  # rl_core.config.sizing.Sizing: what the launcher chose and why; None: the flags as given
        self.sources = sources or {}  # each flag's source (entry.flag_sources): announced, and kept in meta.json
        self.stop = threading.Event()
        self.test_stop = threading.Event()
        self.errors = ErrorBox(self.stop)
        self.signals = StopSignals(self._on_signal, self._on_force_exit)
        self.threads: list[threading.Thread] = []
        self.connections: list = []  # the servers' connections until the actors own them (``Parts.actors``)
        self.device: torch.device | None = None
        self.rundir: str | None = None  # None: a torchrun rank other than 0
        self.checkpoints: Checkpoints | None = None
        self.run_log: RunLog | None = None
        self.parts: Parts | None = None  # built: training can start
        self.validation: Validation | None = None  # (rank 0)
        self.progress: Progress | None = None  # (rank 0) made: training started
        self.save_error: CheckpointWriteError | None = None  # the final checkpoint's, if it failed

    # ------------------------------------------------------------ phases
    def run(self) -> int:
        setup_logging(None)  # the console only: a refused run writes nothing into the run directory
        if self.world is not None:
            try:
                self.flags = distributed.rank_flags(self.global_flags, self.world)
                self.device = select_device(self.flags, self.world)
            except UserError as e:
                log.error("error: %s", e)
                return 2
            self.group = distributed.start(self.world, self.device)
            if not self.group.is_writer:
                return self._follow()
        lock = None
        try:
            self.flags.xpid, self.rundir, lock = open_run_dir(self.flags.savedir, self.flags.xpid)
            self.checkpoints = Checkpoints.read(self.flags, self.global_flags, self.rundir, self.stop)
        except UserError as e:
            log.error("error: %s", e)
            if lock is not None:
                lock.release()
            if self.group is not None:
                self.group.share_checkpoint(None, refused=True)
            return 2
        if self.group is not None:
            self.group.share_checkpoint(self.checkpoints.saved)
        try:
            lock.record_holder()
            return self._lead()
        finally:
            lock.release()

    def _lead(self) -> int:
        """Rank 0 (or the one process): every phase, and the run directory's record of it."""
        f, rundir = self.flags, self.rundir
        previous_meta = read_meta(rundir) if self.checkpoints.saved is not None else None  # put back if refused
        setup_logging(rundir)
        self._announce()
        for name in checkpoint_file.remove_partial_writes(rundir):  # no save is under way: the lock is held
            log.info("removed %s, the partial write of a checkpoint that a killed run left", name)
        try:
            self.run_log = RunLog(rundir, self.global_flags)
        except UserError as e:  # wandb could not start
            log.error("error: %s", e)
            put_back_meta(rundir, previous_meta)
            return 2
        self.run_log.write_meta(sizing=sizing_record(self.global_flags, self.sizing), flag_sources=self.sources)
        if self.group is not None:
            self.run_log.write_meta(distributed={"world_size": self.group.size, "backend": self.group.backend})
        self.signals.install()
        outcome = self._train()
        if outcome.one_line:
            log.error("%s", outcome.one_line)
        if outcome.finished and self.progress is not None and not f.disable_final_test:
            outcome = self._final_test(outcome)
        if outcome.status == 2 and previous_meta is not None and self.progress is None:
            # a refused resume (the checkpoint does not fit the model): the run's record stays as it was
            self.run_log.close()
            put_back_meta(rundir, previous_meta)
        else:
            self.run_log.finish(success=outcome.finished, reason=outcome.reason)
        if outcome.status == 0:
            log.info("%s at step %d; run directory %s", outcome.reason, self._step_reached(), rundir)
        return outcome.status

    def _follow(self) -> int:
        """A rank other than 0: it trains as rank 0 does, from rank 0's checkpoint, and writes no file."""
        f = self.global_flags
        path = os.path.join(os.path.expanduser(f.savedir), f.xpid or "<new run>", "model.tar")
        try:
            saved = self.group.share_checkpoint(None)
        except RunFailure as e:
            log.error("error: %s", e)
            return 1
        self.checkpoints = Checkpoints(self.flags, f, None, f"rank 0's {path}", saved, self.stop)
        self._announce()
        self.signals.install()
        outcome = self._train()
        if outcome.one_line:
            log.error("%s", outcome.one_line)
        if outcome.status == 0:
            log.info("rank %d: %s at step %d", self.group.rank, outcome.reason, self._step_reached())
        return outcome.status

    def _announce(self) -> None:
        """The first lines of every run: where it writes, on what, and how big it is."""
        f = self.flags
        if self.rundir is not None:
            log.info("run directory: %s (%s)", self.rundir, self.checkpoints.describe())
        if self.group is None:
            self.device = select_device(f)
        else:
            announce_rank(self.group, self.device, f, self.global_flags)
        set_torch_threads(f, self.device, self.env_pkg.SERVER_CORES, self.env_pkg.LOCKSTEP_CORES)
        traits = agent_traits(self.global_flags)
        announce_sizing(self.global_flags, self.sizing, traits.replays)
        log.info("%s", describe_core(f, traits.recurrent))
        for line in announce_sources(self.global_flags, self.sources):
            log.info("%s", line)

    def _train(self) -> Outcome:
        """Train until done, stopped or failed, then shut down (the final checkpoint on rank 0)."""
        outcome = FINISHED
        try:
            if self._start():
                self._supervise()
            self.errors.raise_if_set()
            if self.signals.interrupted:
                outcome = INTERRUPTED
        except BaseException as e:  # noqa: BLE001 - every way out is an outcome
            outcome = outcome_of_error(e, self.errors)
        finally:
            self._shutdown(save=outcome.status == 0 and self.parts is not None)
        peers = self.parts.peers if self.parts is not None else None
        outcome = after_shutdown(
            outcome, self.save_error, self.errors, peers, self.parts is not None, self.signals.signum
        )
        if peers is not None and self.rundir is not None:
            peers.report_replicas()
        return outcome

    def _start(self) -> bool:
        """The servers started and connected, the parts built and their threads started; False: the checkpoint
        is already at --total_steps."""
        f = self.flags
        torch.manual_seed(f.seed)
        np.random.seed(f.seed)
        if f.deterministic:  # (CUDA: cuBLAS's reproducible workspace, as torch's reproducibility notes ask)
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True, warn_only=True)
        keep_freed_memory()
        if self.supervisor is not None:
            self.supervisor.start_all()
        links = connect_servers(f, self.supervisor, self.stop, self.connections)
        check_num_actions(f, links.spec)
        if f.record_video:
            check_can_record(self.env_pkg, f)
        if self.rundir is not None:
            self.run_log.write_meta(flags=checkpoint_file.flags_dict(self.global_flags), env_spec=links.spec.to_json())
        self.parts = parts = build_parts(
            f, links, self.connections, self.device, self.checkpoints, self.group, self.stop
        )
        if parts.learner.step >= f.total_steps:
            log.info("checkpoint is already at step %d >= --total_steps %d", parts.learner.step, f.total_steps)
            return False
        if self.rundir is not None:  # (rank 0 logs, validates and saves for every rank)
            self.validation = Validation(
                f, parts, self.env_pkg, self.run_log, self.rundir, self.checkpoints, self.errors, self.threads
            )
            self.progress = Progress(
                f, parts, self.run_log, self.rundir, self.supervisor, self.validation, self.checkpoints.recent_returns()
            )
        if f.deterministic:
            self.threads.append(start_lockstep(parts, f, self.errors, self.stop, self._after_lockstep_batch))
        else:
            self.threads.extend(start_threads(parts, f, self.errors, self.stop))
            pinning = affinity.plan(f, parts.acting_process, torch.get_num_threads(), self.env_pkg.CPU_AFFINITY)
            if pinning is not None and pinning.apply(parts.acting_pids, self.supervisor):
                self.pinning = pinning
        return True

    def _after_lockstep_batch(self, before: int, after: int) -> None:
        every = self.flags.log_step_interval
        if self.progress is not None and before // every < after // every:
            self.progress.tick()

    def _supervise(self) -> None:
        """The main thread until the run stops: the servers polled, and on rank 0 the logs, the validations and
        the periodic checkpoints."""
        f = self.flags
        if self.rundir is None:  # a torchrun rank other than 0: its servers only; rank 0 logs and saves
            while not self.stop.is_set():
                self._poll()
            return
        last_log = last_ckpt = self.progress.start_time
        while not self.stop.is_set():
            self._poll()
            now = time.monotonic()
            self.validation.poll(now)
            if not f.deterministic and now - last_log >= f.log_interval:
                last_log = now
                self.progress.tick()
            if not f.disable_checkpoint and now - last_ckpt >= f.checkpoint_every * 60:
                last_ckpt = now
                self._save(unless_stopped=True)
        if self.errors.error is None and not self.signals.interrupted and self.parts.learner.step >= f.total_steps:
            self.validation.finish()

    def _poll(self) -> None:
        """A quarter of a second of the main thread's loop: the heartbeat under torchrun, the servers polled."""
        self.stop.wait(0.25)
        if self.group is not None:
            self.group.beat()
        if self.supervisor is not None:
            try:
                self.supervisor.poll(env_error_reported=self.errors.error is not None)
            except BaseException as e:  # noqa: BLE001
                self.errors.put("supervisor", e)

    def _save(self, unless_stopped: bool = False) -> None:
        # (no Progress: a run resumed at --total_steps, which keeps its checkpoint's window)
        recent = self.progress.recent_returns() if self.progress is not None else self.checkpoints.recent_returns()
        self.checkpoints.save(
            self.parts.learner, self.parts.data_source, unless_stopped=unless_stopped, recent_returns=recent
        )

    # ------------------------------------------------------------ the end
    def _on_signal(self) -> None:
        if self.group is not None:
            distributed.report_if_stuck()
        self.stop.set()
        self.test_stop.set()
        if self.validation is not None:
            self.validation.abort.set()

    def _on_force_exit(self) -> None:
        """A second Ctrl-C: no final checkpoint, but no server or socket file left behind."""
        if self.supervisor is not None:
            self.supervisor.stop_all(timeout=2.0)

    def _shutdown(self, save: bool) -> None:
        self.stop.set()
        learner = self.parts.learner if self.parts is not None else None
        if learner is not None and (self.signals.interrupted or not save) and self.group is None:
            learner.abort.set()  # an update under way gives up, its step untaken: the thread ends at once
        if self.validation is not None:
            self.validation.abort.set()
        if self.supervisor is not None:
            self.supervisor.terminate_all()  # the servers end while the threads are joined
        deadline = time.monotonic() + 5.0
        for thread in self.threads:
            # under torchrun the learner (or lockstep) thread finishes its batch and meets its peers before it ends
            wait = distributed.PEER_WAIT_S if self.group is not None and thread.name.startswith(MEETS_PEERS) else 0.0
            thread.join(max(0.0, deadline - time.monotonic(), wait))
        alive = [t for t in self.threads if t.is_alive()]
        if alive:
            log.warning(
                "threads still running at shutdown: %s (%s)", ", ".join(t.name for t in alive), where_they_wait(alive)
            )
        waiting = [t for t in alive if t.name.startswith(MEETS_PEERS)] if self.group is not None else []
        if waiting:
            # a collective whose peer neither answers nor left: the learner holds the weights' lock
            # (a final save would wait with it); the last checkpoint stays
            save = False
            self.errors.put("learner", self.group.unanswered(where_they_wait(waiting, named=False)))
        if self.progress is not None:
            try:
                self.progress.tick()
            except Exception:
                log.exception("final log tick failed")
        if save and self.rundir is not None:
            try:
                self._save()
            except CheckpointWriteError as e:
                self.save_error = e
            except Exception:
                log.exception("final checkpoint failed; the previous one is kept")
        connections = [actor.conn for actor in self.parts.actors] if self.parts is not None else self.connections
        for conn in connections:
            conn.close()
        if self.supervisor is not None:
            self.supervisor.stop_all()
        if self.pinning is not None:  # (the final test on every core)
            self.pinning.release()

    def _final_test(self, outcome: Outcome) -> Outcome:
        try:
            run_final_test(
                self.flags, self.parts, self.env_pkg, self.run_log, self.rundir, self.checkpoints.path, self.test_stop
            )
        except UserError as e:
            log.error("error: %s", e)
            return Outcome(f"error: {e}", 2)
        except Exception as e:
            log.exception("error in the final test")
            return Outcome(f"error in the final test: {type(e).__name__}: {e}", 1)
        return outcome

    def _step_reached(self) -> int:
        return self.parts.learner.step if self.parts is not None else 0


def train(flags, env_pkg, supervisor=None, sizing=None, sources=None) -> int:
    training = Training(flags, env_pkg, supervisor, sizing, sources)
    status = training.run()
    if not any(thread.is_alive() for thread in training.threads):
        distributed.stop(training.group)
    if any(thread.is_alive() for thread in training.threads):
        # A thread still inside a torch op would abort interpreter finalization
        # ("terminate called without an active exception"): everything is saved, leave now.
        logging.shutdown()
        os._exit(status)
    return status
