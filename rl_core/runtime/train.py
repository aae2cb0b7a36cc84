"""The learner process: connect to env servers, act, learn, log, checkpoint, supervise."""

from __future__ import annotations

import collections
import copy
import datetime
import logging
import math
import os
import queue
import signal
import threading
import time

import numpy as np
import torch

from rl_core import checkpoint
from rl_core.agents.impala import ImpalaAgent
from rl_core.errors import UserError
from rl_core.run_log import RunLog, setup_logging
from rl_core.runtime import transport as tp
from rl_core.runtime.actor_pool import ActorThread, RunStats, connect_server, inference_loop, spec_key
from rl_core.runtime.batcher import InferenceBatcher
from rl_core.runtime.learner import Learner, UnrollBatcher
from rl_core.runtime.threads import ErrorBox, start_thread

log = logging.getLogger("learner")


def default_xpid() -> str:
    return "torchbeast-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S")


def secret_bytes(flags) -> bytes | None:
    secret = flags.server_secret or os.environ.get("POLYBEAST_SECRET")
    return secret.encode() if secret else None


def select_device(flags) -> torch.device:
    if not flags.disable_cuda and torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


class Training:
    """Everything one training run holds; ``run()`` returns the exit status."""

    def __init__(self, flags, env_pkg, supervisor=None):
        self.flags = flags
        self.env_pkg = env_pkg
        self.supervisor = supervisor
        self.stop = threading.Event()
        self.errors = ErrorBox(self.stop)
        self.threads: list[threading.Thread] = []
        self.connections: list[tp.Connection] = []
        self.interrupted = False

    # -------------------------------------------------------------- setup
    def _signals(self) -> None:
        def handler(signum, frame):
            if self.stop.is_set() and self.interrupted:
                raise KeyboardInterrupt
            self.interrupted = True
            log.info("received %s: stopping (final checkpoint, then exit)", signal.Signals(signum).name)
            self.stop.set()

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, handler)
            signal.signal(signal.SIGTERM, handler)

    def _connect_all(self) -> dict:
        f = self.flags
        secret = secret_bytes(f)
        addresses = [tp.server_address(f.pipes_basename, i) for i in range(f.num_servers)]
        if addresses[0].kind == "tcp" and not secret:
            raise UserError("TCP env servers need a shared secret: pass --server_secret or set POLYBEAST_SECRET")
        specs = []
        on_retry = self.supervisor.poll if self.supervisor is not None else None
        for address in addresses:
            conn, spec = connect_server(address, f, secret, self.stop, on_retry)
            self.connections.append(conn)
            specs.append(spec)
        K = f.num_actors // f.num_servers
        for i, spec in enumerate(specs):
            if spec["num_envs"] != K:
                raise UserError(
                    f"env server {i} hosts {spec['num_envs']} envs but --num_actors/--num_servers = {K}: "
                    f"start the servers with the learner's flags"
                )
            if spec_key(spec) != spec_key(specs[0]):
                raise UserError(f"env servers 0 and {i} host different environments: {specs[0]} vs {spec}")
        self.addresses, self.secret = addresses, secret
        return specs[0]

    def _check_num_actions(self, spec: dict) -> None:
        f = self.flags
        if spec["action"]["kind"] == "discrete":
            n = spec["action"]["n"]
            if f.num_actions is None:
                f.num_actions = n
            elif f.num_actions != n:
                raise UserError(f"--num_actions {f.num_actions} disagrees with the env's {n} actions: drop the flag")

    # ---------------------------------------------------------------- run
    def run(self) -> int:
        f = self.flags
        f.xpid = f.xpid or default_xpid()
        self.rundir = os.path.join(os.path.expanduser(f.savedir), f.xpid)
        os.makedirs(self.rundir, exist_ok=True)
        setup_logging(self.rundir)
        self.run_log = RunLog(self.rundir, f)
        self.checkpoint_path = os.path.join(self.rundir, "model.tar")
        self._signals()
        reason, status = "finished", 0
        try:
            self._run()
            if self.errors.error is not None:
                raise self.errors.error
            if self.interrupted:
                reason = "interrupted"
        except tp.Stopped:
            reason = "interrupted"
        except UserError as e:
            reason, status = f"error: {e}", 2
            log.error("error: %s", e)
        except BaseException as e:  # noqa: BLE001
            where = self.errors.thread_name or threading.current_thread().name
            text = self.errors.text if self.errors.error is e else None
            reason, status = f"error in {where}: {type(e).__name__}: {e}", 1
            if text is None:
                log.exception("error in %s", where)
            else:
                log.error("error in thread %s:\n%s", where, text)
        finally:
            self._shutdown(save=status == 0 and getattr(self, "learner", None) is not None)
            self.run_log.finish(success=status == 0 and reason == "finished", reason=reason)
        if status == 0:
            log.info("%s at step %d; run directory %s", reason, getattr(self, "learner", None) and self.learner.step or 0, self.rundir)
        return status

    def _run(self) -> None:
        f = self.flags
        torch.manual_seed(f.seed)
        np.random.seed(f.seed)
        if f.torch_threads:
            torch.set_num_threads(f.torch_threads)
        if self.supervisor is not None:
            self.supervisor.start_all()
        spec = self._connect_all()
        self._check_num_actions(spec)
        self.spec = spec
        self.run_log.write_meta(flags=checkpoint.flags_dict(f), env_spec=spec)
        self.device = select_device(f)
        from models import build_model

        from models.pretrained import apply_flags

        model = build_model(f, spec)
        apply_flags(model, f)
        model = model.to(self.device)
        inference_model = copy.deepcopy(model)
        inference_model.eval()
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.RMSprop(
            trainable, lr=f.learning_rate, momentum=f.momentum, eps=f.epsilon, alpha=f.alpha
        )
        steps_per_update = f.unroll_length * f.batch_size

        def lr_lambda(epoch):
            return 1 - min(epoch * steps_per_update, f.total_steps) / f.total_steps

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
        step, learner_steps = self._maybe_resume(model, optimizer, scheduler)
        inference_model.load_state_dict(model.state_dict())
        log.info("model on %s: %s", self.device, model)

        K = spec["num_envs"]
        queue_size = f.max_learner_queue_size or max(2, 2 * math.ceil(f.batch_size / K))
        self.learner_queue = queue.Queue(maxsize=queue_size)
        self.stats = RunStats()
        max_batch = f.max_inference_batch_size or f.num_actors
        self.batcher = InferenceBatcher(max_batch, f.inference_batch_timeout_ms / 1000.0)
        inference_lock = threading.Lock()
        self.learner = Learner(
            f, model, inference_model, inference_lock, ImpalaAgent(f), optimizer, scheduler,
            UnrollBatcher(self.learner_queue, f.batch_size), self.device, self.stop, step=step,
        )
        self.learner.learner_steps = learner_steps
        if step >= f.total_steps:
            log.info("checkpoint is already at step %d >= --total_steps %d", step, f.total_steps)
            return

        def initial_state(batch_size):
            return inference_model.initial_state(batch_size, device=self.device)

        for i in range(f.num_inference_threads):
            self.threads.append(start_thread(
                f"inference-{i}",
                lambda: inference_loop(self.batcher, inference_model, inference_lock, self.device, self.stop),
                self.errors,
            ))
        for i, (address, conn) in enumerate(zip(self.addresses, self.connections)):
            actor = ActorThread(i, address, conn, spec, f, self.secret, self.batcher, self.learner_queue,
                                initial_state, self.stats, self.stop)
            self.threads.append(start_thread(f"actor-{i}", actor.run, self.errors))
            self.connections[i] = actor  # closed through the actor at shutdown
        for i in range(f.num_learner_threads):
            self.threads.append(start_thread(f"learner-{i}", self.learner.loop, self.errors))
        self._supervise()

    def _maybe_resume(self, model, optimizer, scheduler) -> int:
        """Load model.tar of this xpid if there is one: (step, learner_steps)."""
        if not os.path.exists(self.checkpoint_path):
            return 0, 0
        state = checkpoint.load(self.checkpoint_path)
        try:
            model.load_state_dict(state["model_state_dict"])
            optimizer.load_state_dict(state["optimizer_state_dict"])
            scheduler.load_state_dict(state["scheduler_state_dict"])
        except (KeyError, RuntimeError, ValueError) as e:
            first = str(e).strip().splitlines()[0]
            raise UserError(
                f"checkpoint {self.checkpoint_path} does not fit this model ({first[:160]}): use another --xpid"
            ) from None
        step = int(state.get("step", 0))
        log.info("resumed from %s at step %d", self.checkpoint_path, step)
        return step, int(state.get("learner_steps", 0))

    def save_checkpoint(self) -> None:
        if self.flags.disable_checkpoint:
            return
        learner = self.learner
        with learner.lock:
            payload = {
                "model_state_dict": {k: v.detach().cpu() for k, v in learner.model.state_dict().items()},
                "optimizer_state_dict": learner.optimizer.state_dict(),
                "scheduler_state_dict": learner.scheduler.state_dict(),
                "flags": checkpoint.flags_dict(self.flags),
                "step": learner.step,
                "learner_steps": learner.learner_steps,
            }
            checkpoint.save(self.checkpoint_path, payload)
        log.info("saved checkpoint %s at step %d", self.checkpoint_path, learner.step)

    # ------------------------------------------------------- supervision
    def _supervise(self) -> None:
        f = self.flags
        start = last_log = last_ckpt = time.monotonic()
        self.start_time = start
        self._last = (start, self.learner.step)
        self._returns = collections.deque(maxlen=100)
        while not self.stop.is_set():
            self.stop.wait(0.25)
            if self.supervisor is not None:
                try:
                    self.supervisor.poll(env_error_reported=self.errors.error is not None)
                except BaseException as e:  # noqa: BLE001
                    self.errors.put("supervisor", e)
            now = time.monotonic()
            if now - last_log >= f.log_interval:
                last_log = now
                self.log_tick()
            if not f.disable_checkpoint and now - last_ckpt >= f.checkpoint_every * 60:
                last_ckpt = now
                self.save_checkpoint()

    def log_tick(self) -> None:
        f, learner = self.flags, self.learner
        now = time.monotonic()
        step = learner.step
        last_time, last_step = self._last
        sps = (step - last_step) / max(now - last_time, 1e-9)
        self._last = (now, step)
        episodes = self.stats.take_episodes()
        returns = [e["return"] for e in episodes]
        self._returns.extend(returns)
        batches, envs = self.batcher.batches, self.batcher.batched_envs
        self.batcher.batches = self.batcher.batched_envs = 0
        row = {
            "step": step,
            "time": round(now - self.start_time, 3),
            "sps": round(sps, 1),
            "episodes": len(episodes),
            "mean_episode_return": float(np.mean(returns)) if returns else float("nan"),
            "mean_episode_length": float(np.mean([e["length"] for e in episodes])) if episodes else float("nan"),
            "return_last_100": float(np.mean(self._returns)) if self._returns else float("nan"),
            "inference_batch": envs / batches if batches else float("nan"),
            "learner_queue": self.learner_queue.qsize(),
            "dropped_unrolls": self.stats.dropped_unrolls,
            "server_restarts": self.supervisor.restarts if self.supervisor else 0,
            "env_steps": self.stats.env_steps,
        }
        row.update(learner.take_stats())
        stat_names = sorted({k for e in episodes for k in e if k.startswith("stat/")})
        for name in stat_names:
            row[name] = float(np.mean([e[name] for e in episodes if name in e]))
        self.run_log.log_row(row)
        pct = 100.0 * step / f.total_steps
        eta = (f.total_steps - step) / sps if sps > 0 else float("inf")
        ret = f"{row['return_last_100']:.2f}" if self._returns else "n/a"
        loss = row.get("total_loss")
        log.info(
            "Step %d/%d (%.1f%%) @ %.0f SPS, ETA %s. Return %s (last %d ep). Loss %s. "
            "Inference batch %.1f envs, learner queue %d/%d, dropped unrolls %d.",
            step, f.total_steps, pct, sps, format_duration(eta) if math.isfinite(eta) else "?",
            ret, len(self._returns), f"{loss:.3f}" if loss is not None else "n/a",
            row["inference_batch"] if batches else 0.0, row["learner_queue"], self.learner_queue.maxsize,
            row["dropped_unrolls"],
        )

    # ---------------------------------------------------------- shutdown
    def _shutdown(self, save: bool) -> None:
        self.stop.set()
        deadline = time.monotonic() + 5.0
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in self.threads if t.is_alive()]
        if alive:
            log.warning("threads still running at shutdown: %s", ", ".join(alive))
        if getattr(self, "learner", None) is not None and hasattr(self, "start_time"):
            try:
                self.log_tick()
            except Exception:  # noqa: BLE001 - the run is ending anyway
                log.exception("final log tick failed")
        if save:
            try:
                self.save_checkpoint()
            except Exception:  # noqa: BLE001
                log.exception("final checkpoint failed; the previous one is kept")
        for item in self.connections:
            conn = item.conn if isinstance(item, ActorThread) else item
            conn.close()
        if self.supervisor is not None:
            self.supervisor.stop_all()


def train(flags, env_pkg, supervisor=None) -> int:
    return Training(flags, env_pkg, supervisor).run()
