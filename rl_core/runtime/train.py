"""The learner process: connect to env servers, act, learn, log, checkpoint, supervise."""

from __future__ import annotations

import collections
import copy
import logging
import math
import os
import queue
import signal
import threading
import time

import numpy as np
import torch

from rl_core import checkpoint, evaluation, seen_sets
from rl_core.agents import make_agent
from rl_core.errors import CheckpointWriteError, RunFailure, UserError
from rl_core.run_dir import RunDirLock, new_run_dir
from rl_core.run_log import RunLog, setup_logging
from rl_core.runtime import distributed
from rl_core.runtime import transport as tp
from rl_core.runtime.actor_pool import ActorThread, RunStats, answer, connect_server, inference_loop, spec_key
from rl_core.runtime.allocator import keep_freed_memory
from rl_core.runtime.batcher import InferenceBatcher
from rl_core.runtime.learner import Learner, inference_copy, publish
from rl_core.runtime.lockstep import Lockstep
from rl_core.runtime.threads import ErrorBox, start_thread

log = logging.getLogger("learner")


def secret_bytes(flags) -> bytes | None:
    secret = flags.server_secret or os.environ.get("POLYBEAST_SECRET")
    return secret.encode() if secret else None


def select_device(flags, world: distributed.WorldEnv | None = None) -> torch.device:
    """The learner's device: the GPU of this rank's LOCAL_RANK under torchrun, the (current) GPU, or the CPU.  A host
    with fewer GPUs than torchrun ranks ends the rank with one line, exit 2, before anything is written."""
    if not flags.disable_cuda and torch.cuda.is_available():
        if world is not None:
            gpu = distributed.local_gpu(world, torch.cuda.device_count())  # (UserError: more ranks than GPUs)
            torch.cuda.set_device(gpu)
            return torch.device("cuda", gpu)
        return torch.device("cuda")
    return torch.device("cpu")


def inference_precision(flags, device: torch.device) -> torch.dtype:
    """The dtype of --inference_precision; warns where bfloat16 would be emulated (slower)."""
    if flags.inference_precision == "float32":
        return torch.float32
    if device.type == "cpu":
        try:
            with open("/proc/cpuinfo") as f:
                cpu_flags = set(f.read().split())
        except OSError:
            cpu_flags = set()
        if not cpu_flags & {"avx512_bf16", "amx_bf16"}:
            log.warning("--inference_precision=bfloat16: this CPU has no native bf16 (avx512_bf16 or amx_bf16), "
                        "so inference may be slower than float32")
    return torch.bfloat16


def auto_torch_threads(flags) -> int:
    """Intra-op threads for the learner process: the cores the env servers leave.

    Env servers on this machine (unix sockets) keep one core each busy; OpenMP threads
    competing with them for cores spin and stall (on 2 cores with one busy process, an
    AtariNet update took 0.43 s on 1 thread and 1.06 s on 2).  TCP servers run elsewhere.
    """
    from rl_core.sizing import usable_cores

    cores = usable_cores()
    world = distributed.world_from_environ()
    if world is not None:  # the ranks on this host share its cores
        cores = max(1, cores // max(1, world.local_world_size))
    if tp.parse_address(flags.pipes_basename).kind == "unix":
        return max(1, cores - flags.num_servers)
    return cores


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


class Training:
    """Everything one training run holds; ``run()`` returns the exit status."""

    def __init__(self, flags, env_pkg, supervisor=None, sizing=None):
        self.flags = flags
        # Under torchrun each rank trains with its share of the run's totals (``self.flags``, set in ``run``);
        # meta.json and checkpoints record the run's own flags, whatever the world size.
        self.global_flags = flags
        self.world = distributed.world_from_environ()
        self.group: distributed.Group | None = None
        self.env_pkg = env_pkg
        self.supervisor = supervisor
        self.sizing = sizing  # rl_core.sizing.Sizing: what the launcher chose and why; None: the flags as given
        self.stop = threading.Event()
        self.test_stop = threading.Event()
        self.errors = ErrorBox(self.stop)
        self.validation: Validation | None = None
        self.threads: list[threading.Thread] = []
        self.connections: list[tp.Connection] = []
        self.interrupted = False
        self.saved: dict | None = None  # the checkpoint of this run directory, read at the start
        self._env_steps_sent = 0  # (under torchrun, a rank other than 0: its env steps told to rank 0 so far)
        self.save_error: CheckpointWriteError | None = None  # the final checkpoint's, if it failed
        self.signum = 0  # the signal that stopped the run

    # -------------------------------------------------------------- setup
    def _signals(self) -> None:
        first_signal = [0.0]

        def handler(signum, frame):
            now = time.monotonic()
            if self.interrupted:
                # The same signal often arrives twice (terminal process group, `timeout`):
                # only a repeat a second later means "stop now".
                if now - first_signal[0] > 1.0:
                    self._force_exit(signum)
                return
            first_signal[0] = now
            self.interrupted, self.signum = True, signum
            log.info("received %s: stopping (final checkpoint, then exit)", signal.Signals(signum).name)
            self.stop.set()
            self.test_stop.set()
            if self.validation is not None:
                self.validation.abort.set()

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, handler)
            signal.signal(signal.SIGTERM, handler)

    def _force_exit(self, signum) -> None:
        """A second Ctrl-C: no final checkpoint, but no server or socket file left behind."""
        log.warning("received %s again: exiting now without a final checkpoint", signal.Signals(signum).name)
        if self.supervisor is not None:
            self.supervisor.stop_all(timeout=2.0)
        logging.shutdown()
        os._exit(130)

    def _connect_all(self) -> dict:
        f = self.flags
        secret = secret_bytes(f)
        offset = getattr(f, "server_offset", 0)  # under torchrun: this rank's share of the servers
        addresses = [tp.server_address(f.pipes_basename, offset + i) for i in range(f.num_servers)]
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
                    f"env server {offset + i} hosts {spec['num_envs']} envs but --num_actors/--num_servers = {K}: "
                    f"start the servers with the learner's flags"
                )
            if spec_key(spec) != spec_key(specs[0]):
                raise UserError(f"env servers {offset} and {offset + i} host different environments: "
                                f"{specs[0]} vs {spec}")
        self.addresses, self.secret = addresses, secret
        return specs[0]

    def _check_can_record(self) -> None:
        """--record_video fails at the start, not at the first validation or the final test."""
        try:
            env = evaluation.make_test_env_fn(self.env_pkg, self.flags, {}, record=True)(0)
            obs, _ = env.reset(seed=0)
            frame = evaluation.frame_of(env, obs)
            env.close()
        except Exception as e:  # noqa: BLE001
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise UserError(f"--record_video: the env cannot render frames ({first[:200]})") from None
        if frame is None:
            raise UserError("--record_video: the env gives neither rgb_array frames nor image observations")

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
        setup_logging(None)  # the console only: a refused run writes nothing into the run directory
        if self.world is not None:
            try:
                self.flags = distributed.rank_flags(self.global_flags, self.world)
                if self.flags.deterministic:
                    raise UserError("--deterministic runs one process: run it without torchrun, or drop the flag")
                self.device = select_device(self.flags, self.world)
            except UserError as e:
                log.error("error: %s", e)
                return 2
            self.group = distributed.start(self.world, self.device)
            if not self.group.is_writer:
                return self._run_follower()
        self.run_dir_lock = None
        try:
            self._open_run_dir()
        except UserError as e:
            log.error("error: %s", e)
            if self.run_dir_lock is not None:
                self.run_dir_lock.release()
            if self.group is not None:
                self.group.share_checkpoint(None, refused=True)
            return 2
        if self.group is not None:
            self.group.share_checkpoint(self.saved)
        try:
            return self._run_locked()
        finally:
            self.run_dir_lock.release()

    def _run_follower(self) -> int:
        """A rank other than 0: it trains as rank 0 does, from rank 0's checkpoint, and writes no file; rank 0
        writes the run directory."""
        self.rundir = None
        f = self.global_flags
        path = os.path.join(os.path.expanduser(f.savedir), f.xpid or "<new run>", "model.tar")
        self.checkpoint_path = f"rank 0's {path}"
        try:
            self.saved = self.group.share_checkpoint(None)
        except RunFailure as e:
            log.error("error: %s", e)
            return 1
        self._announce()
        self._signals()
        reason, status, one_line = self._train()
        if one_line:
            log.error("%s", one_line)
        if status == 0:
            log.info("rank %d: %s at step %d", self.group.rank, reason,
                     getattr(self, "learner", None) and self.learner.step or 0)
        return status

    def _open_run_dir(self) -> None:
        """The run directory, made or taken (locked), and its checkpoint read and checked against the
        flags, before anything in it is written."""
        f = self.flags
        savedir = os.path.expanduser(f.savedir)
        try:
            if f.xpid:
                self.rundir = os.path.join(savedir, f.xpid)
                os.makedirs(self.rundir, exist_ok=True)
            else:
                f.xpid, self.rundir = new_run_dir(savedir)
            self.run_dir_lock = RunDirLock(self.rundir)
        except OSError as e:
            raise UserError(f"cannot create the run directory under --savedir {savedir}: "
                            f"{e.strerror or e}: choose another --savedir") from None
        self.checkpoint_path = os.path.join(self.rundir, "model.tar")
        # A checkpoint to resume is read (and refused, in one line) before any server starts.
        self.saved = checkpoint.load(self.checkpoint_path) if os.path.exists(self.checkpoint_path) else None
        if self.saved is not None:
            self._check_same_agent(self.saved.get("flags", {}))

    def _check_same_agent(self, saved_flags: dict) -> None:
        """A checkpoint resumes only under the agent (and optimizer) that trained it: another one's
        state does not load (or fails at its first step: Adam's 'betas' in RMSprop's state)."""
        f = self.flags
        keys = [k for k in ("agent", "rnd", "optimizer") if k in saved_flags and hasattr(f, k)]
        differ = [k for k in keys if saved_flags[k] != getattr(f, k)]
        if not differ:
            return

        def describe(values) -> str:
            text = f"--agent {values.get('agent')}" + (" --rnd" if values.get("rnd") else "")
            return text + (f" --optimizer {values['optimizer']}" if "optimizer" in differ else "")

        ours = describe({k: getattr(f, k, None) for k in keys})
        theirs = describe(saved_flags)
        raise UserError(
            f"{ours} cannot resume run {f.xpid}: its checkpoint {self.checkpoint_path} (step "
            f"{int(self.saved.get('step', 0)):,}) was trained with {theirs}; resume it with {theirs}, or start a new "
            f"run with another --xpid (or none)")

    def _announce(self) -> None:
        """The first lines of every run: where it writes, on what, and how big it is."""
        f = self.flags
        if self.saved is not None:
            state = f"resuming {self.checkpoint_path} at step {int(self.saved.get('step', 0)):,}"
        else:
            state = "new run"
        if self.rundir is not None:
            log.info("run directory: %s (%s)", self.rundir, state)
        if self.group is None:
            self.device = select_device(f)
        else:
            g = self.global_flags
            log.info("torchrun: %s on %s; this rank: %d of the run's %d envs on %d of its %d env servers "
                     "(from server %d), batches of %d of its %d", self.group.describe(), self.device, f.num_actors,
                     g.num_actors, f.num_servers, g.num_servers, f.server_offset, f.batch_size, g.batch_size)
        name = f" ({torch.cuda.get_device_name(self.device)})" if self.device.type == "cuda" else ""
        threads = f.torch_threads or auto_torch_threads(f)
        torch.set_num_threads(threads)
        log.info("device: %s%s, %d torch intra-op thread%s", self.device, name, threads, "s" if threads != 1 else "")
        from rl_core.agents import REPLAY

        f = self.global_flags  # the run's totals (under torchrun each rank takes its share, said above)
        K = f.num_actors // f.num_servers
        if f.agent in REPLAY:
            batch = f"learner batches of {f.batch_size} from the replay (unrolls of {f.unroll_length} steps)"
        else:
            per = f.batch_size * f.unroll_length
            batch = (f"learner batches of {f.batch_size} x {f.unroll_length} = {per:,} steps "
                     f"(~{math.ceil(f.total_steps / per):,} batches)")
        servers = f"{f.num_servers} env server" + ("s" if f.num_servers != 1 else "")
        why = f"; {self.sizing.reason}" if self.sizing is not None and self.sizing.reason else ""
        log.info("sizing: --agent %s, %d envs on %s (%d each), %s, --total_steps %s%s",
                 f.agent, f.num_actors, servers, K, batch, f"{f.total_steps:,}", why)

    def _sizing_record(self) -> dict:
        """meta.json's ``sizing``: the values used, which of them the launcher chose (``auto``) and why."""
        f = self.global_flags
        record = self.sizing.record() if self.sizing is not None else {"auto": [], "reason": ""}
        return {**record, "num_servers": f.num_servers, "num_actors": f.num_actors, "batch_size": f.batch_size}

    def _run_locked(self) -> int:
        f = self.flags
        previous_meta = None  # a resumed run's record, put back if this attempt is refused
        if self.saved is not None and os.path.exists(os.path.join(self.rundir, "meta.json")):
            with open(os.path.join(self.rundir, "meta.json"), "rb") as meta:
                previous_meta = (meta.read(), os.fstat(meta.fileno()))
        self.run_dir_lock.record_holder()
        setup_logging(self.rundir)
        self._announce()
        for name in checkpoint.remove_partial_writes(self.rundir):  # no save is under way: the lock is held
            log.info("removed %s, the partial write of a checkpoint that a killed run left", name)
        try:
            self.run_log = RunLog(self.rundir, self.global_flags)
        except UserError as e:  # wandb could not start
            log.error("error: %s", e)
            self._restore_meta(previous_meta)
            return 2
        self.run_log.write_meta(sizing=self._sizing_record())
        if self.group is not None:
            self.run_log.write_meta(distributed={"world_size": self.group.size, "backend": self.group.backend})
        self._signals()
        reason, status, one_line = self._train()
        trained = getattr(self, "learner", None) is not None and hasattr(self, "start_time")
        if one_line:
            log.error("%s", one_line)
        if status == 0 and reason == "finished" and trained and not f.disable_final_test:
            try:
                self.run_final_test()
            except UserError as e:
                reason, status = f"error: {e}", 2
                log.error("error: %s", e)
            except Exception as e:  # noqa: BLE001
                reason, status = f"error in the final test: {type(e).__name__}: {e}", 1
                log.exception("error in the final test")
        if status == 2 and previous_meta is not None and not hasattr(self, "start_time"):
            # a refused resume (the checkpoint does not fit the model): the run's record stays as it was
            self.run_log.close()
            self._restore_meta(previous_meta)
        else:
            self.run_log.finish(success=status == 0 and reason == "finished", reason=reason)
        if status == 0:
            log.info("%s at step %d; run directory %s", reason, getattr(self, "learner", None) and self.learner.step or 0, self.rundir)
        return status

    def _train(self) -> tuple[str, int, str | None]:
        """Train until done, stopped or failed, then shut down (the final checkpoint on rank 0):
        ``(reason, exit status, the error line a user reads last)``."""
        reason, status = "finished", 0
        one_line = None  # the error a user reads last, after the shutdown's own log lines
        try:
            self._run()
            if self.errors.error is not None:
                raise self.errors.error
            if self.interrupted:
                reason = "interrupted"
        except tp.Stopped:
            reason = "interrupted"
        except (UserError, RunFailure) as e:
            reason, status = f"error: {e}", 2 if isinstance(e, UserError) else 1
            one_line = reason
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
        if status == 0 and self.save_error is not None:  # the final checkpoint could not be written
            reason, status = f"error: {self.save_error}", 1
            one_line = reason
        if status == 0 and self.group is not None and isinstance(self.errors.error, RunFailure):
            # a peer lost while this rank was stopping (torchrun signals the others when one dies)
            reason, status = f"error: {self.errors.error}", 1
            one_line = reason
        learner = getattr(self, "learner", None)
        if self.group is not None and learner is not None:
            if status == 0 and reason == "finished" and learner.peers_stopping:
                ranks = ", ".join(map(str, learner.peers_stopping))
                reason = f"stopped with rank {ranks} (a signal or an error there: its log says which)"
            if learner.parameter_difference is not None and self.rundir is not None:
                difference = learner.parameter_difference
                (log.info if difference == 0 else log.warning)(
                    "replicas: the %d ranks' parameters %s", self.group.size,
                    "are identical" if difference == 0 else f"differ by up to {difference:.3g}")
        if reason == "interrupted" and getattr(self, "learner", None) is None:
            status = 128 + (self.signum or signal.SIGINT)  # stopped before anything was trained: not a success
            log.info("interrupted before training began: nothing was trained or saved (exit status %d)", status)
        return reason, status, one_line

    def _restore_meta(self, previous: tuple[bytes, os.stat_result] | None) -> None:
        """meta.json as the run being resumed left it (bytes and times), when this attempt was refused."""
        if previous is not None:
            data, stat = previous
            path = os.path.join(self.rundir, "meta.json")
            with open(path + ".tmp", "wb") as meta:
                meta.write(data)
            os.utime(path + ".tmp", ns=(stat.st_atime_ns, stat.st_mtime_ns))
            os.replace(path + ".tmp", path)

    def _run(self) -> None:
        f = self.flags
        torch.manual_seed(f.seed)
        np.random.seed(f.seed)
        if f.deterministic:  # (CUDA: cuBLAS's reproducible workspace, as torch's reproducibility notes ask)
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True, warn_only=True)
        keep_freed_memory()
        saved = self.saved
        if self.supervisor is not None:
            self.supervisor.start_all()
        spec = self._connect_all()
        self._check_num_actions(spec)
        if f.record_video:
            self._check_can_record()
        self.spec = spec
        if self.rundir is not None:
            self.run_log.write_meta(flags=checkpoint.flags_dict(self.global_flags), env_spec=spec)
        from models.pretrained import apply_flags

        self.agent = agent = make_agent(f, spec)
        model = agent.build_model()
        apply_flags(model, f)
        model = model.to(self.device)
        inference_model = inference_copy(model)
        inference_model.eval()
        precision = inference_precision(f, self.device)
        if precision != torch.float32:
            inference_model.set_stem_dtype(precision)
            log.info("central inference runs the stem in %s", f.inference_precision)
        optimizer, scheduler = agent.make_optimizer(model)
        step, learner_steps = self._maybe_resume(saved, model, optimizer, scheduler)
        if self.group is not None:
            self.group.broadcast_module(model)  # every replica starts from rank 0's weights
            torch.manual_seed(f.seed + self.group.rank)  # and acts and samples minibatches with its own draws
        publish(model, inference_model, threading.Lock(), version=learner_steps)
        if self.rundir is not None:  # (rank 0 alone under torchrun: the ranks' models are the same)
            log.info("model on %s: %s", self.device, model)

        K = spec["num_envs"]
        queue_size = f.max_learner_queue_size or agent.learner_queue_size(K)
        # (--deterministic: the lockstep thread learns from what a round puts in before it acts again)
        self.learner_queue = queue.Queue(maxsize=0 if f.deterministic else queue_size)
        self.stats = RunStats()
        max_batch = f.max_inference_batch_size or f.num_actors
        self.batcher = InferenceBatcher(max_batch, f.inference_batch_timeout_ms / 1000.0)
        inference_lock = threading.Lock()
        self.data_source = agent.make_data_source(self.learner_queue)
        if self.device.type == "cuda" and hasattr(self.data_source, "pin"):
            self.data_source.pin = True  # sampled batches in pinned memory: the copy to the GPU is async
        if saved is not None and hasattr(self.data_source, "restore") and self.rundir is not None:
            self.data_source.restore(self.rundir)
        self.learner = Learner(
            f, model, inference_model, inference_lock, agent, optimizer, scheduler,
            self.data_source, self.device, self.stop, step=step, group=self.group,
        )
        self.learner.learner_steps = learner_steps
        self.learner.last_saved_step = step if saved is not None else None
        self.learner.on_step = self._after_update
        if self.group is not None:  # every rank's episodes and env steps reach rank 0's logs
            if self.rundir is None:
                self.learner.take_episodes = self.stats.take_episodes
                self.learner.take_env_steps = self._env_steps_since
            else:
                self.learner.add_episodes = self.stats.add_episodes
        if step >= f.total_steps:
            log.info("checkpoint is already at step %d >= --total_steps %d", step, f.total_steps)
            return

        def initial_state(batch_size):
            return inference_model.initial_state(batch_size, device=self.device)

        actors = [ActorThread(i, address, conn, spec, f, self.secret, self.batcher, self.learner_queue, initial_state,
                              self.stats, self.stop, agent)
                  for i, (address, conn) in enumerate(zip(self.addresses, self.connections))]
        self.connections = actors  # closed through the actors at shutdown
        self._begin_logs()
        if f.deterministic:
            self._start_lockstep(actors, inference_model, inference_lock)
        else:
            self._start_threads(actors, inference_model, inference_lock)
        self._supervise()

    def _start_threads(self, actors: list[ActorThread], inference_model, inference_lock) -> None:
        """The asynchronous runtime: inference, an actor per server, the data source's and the learner's threads."""
        f, agent = self.flags, self.agent
        for i in range(f.num_inference_threads):
            self.threads.append(start_thread(
                f"inference-{i}",
                lambda: inference_loop(self.batcher, inference_model, inference_lock, self.device, self.stop, agent),
                self.errors,
            ))
        for i, actor in enumerate(actors):
            self.threads.append(start_thread(f"actor-{i}", actor.run, self.errors))
        for name, target in getattr(self.data_source, "threads", lambda: [])():
            self.threads.append(start_thread(name, lambda target=target: target(self.stop), self.errors))
        for i in range(f.num_learner_threads):
            self.threads.append(start_thread(f"learner-{i}", self.learner.loop, self.errors))

    def _start_lockstep(self, actors: list[ActorThread], inference_model, inference_lock) -> None:
        """--deterministic: one thread acts and learns in turn (rl_core/runtime/lockstep.py)."""
        f, batcher = self.flags, self.batcher

        def infer(requests):
            answer(requests, inference_model, inference_lock, self.device, self.agent)
            batcher.batches += 1
            batcher.batched_envs += sum(r.size for r in requests)

        def after_batch(before: int, after: int) -> None:
            if self.rundir is not None and before // f.log_step_interval < after // f.log_step_interval:
                self.log_tick()

        log.info("--deterministic: acting and learning alternate in one thread; a logs.csv row every %s steps",
                 f"{f.log_step_interval:,}")
        lockstep = Lockstep(actors, infer, self.learner, self.data_source, self.learner_queue, self.stop,
                            f.total_steps, after_batch)
        self.threads.append(start_thread("lockstep", lockstep.run, self.errors))

    def _env_steps_since(self) -> int:
        """The env steps this rank's actors received since the last call (sent to rank 0 with each batch)."""
        total = self.stats.env_steps
        since, self._env_steps_sent = total - self._env_steps_sent, total
        return since

    def _maybe_resume(self, state: dict | None, model, optimizer, scheduler) -> tuple[int, int]:
        """Restore model.tar of this xpid (already read) if there is one: (step, learner_steps)."""
        if state is None:
            return 0, 0
        try:
            model.load_state_dict(state["model_state_dict"])
            optimizer.load_state_dict(state["optimizer_state_dict"])
            scheduler.load_state_dict(state["scheduler_state_dict"])
        except (KeyError, RuntimeError, ValueError) as e:
            first = str(e).strip().splitlines()[0]
            raise UserError(
                f"checkpoint {self.checkpoint_path} does not fit this model ({first[:160]}): use another --xpid"
            ) from None
        self._take_flag_learning_rate(optimizer, scheduler)
        step = int(state.get("step", 0))
        log.info("resumed from %s at step %d", self.checkpoint_path, step)
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

    def _after_update(self, previous_step: int, step: int) -> None:
        """Runs in the learner thread: model_extra.tar exactly at the update crossing the step."""
        every = self.flags.save_extra_checkpoint
        if every and previous_step < every <= step:
            self.save_checkpoint(os.path.join(self.rundir, "model_extra.tar"))

    def save_checkpoint(self, path: str | None = None) -> None:
        if self.flags.disable_checkpoint or self.rundir is None:  # (under torchrun rank 0 saves)
            return
        path = path or self.checkpoint_path
        learner = self.learner
        with learner.lock:
            if learner.diverged is not None:  # the weights are not finite: the last good checkpoint stays
                log.info("not saving %s: training diverged", path)
                return
            payload = {
                "model_state_dict": {k: v.detach().cpu() for k, v in learner.model.state_dict().items()},
                "optimizer_state_dict": learner.optimizer.state_dict(),
                "scheduler_state_dict": learner.scheduler.state_dict(),
                "flags": checkpoint.flags_dict(self.global_flags),
                "step": learner.step,
                "learner_steps": learner.learner_steps,
            }
            writing = path
            try:
                checkpoint.save(path, payload)
                if path == self.checkpoint_path and hasattr(self.data_source, "save"):
                    writing = os.path.join(self.rundir, "replay.tar")
                    self.data_source.save(self.rundir)
            except OSError as e:
                raise self._write_error(writing, e) from None
            if path == self.checkpoint_path:
                learner.last_saved_step = learner.step
        log.info("saved checkpoint %s at step %d", path, learner.step)

    def _write_error(self, path: str, error: OSError) -> CheckpointWriteError:
        """Stops the run: one line with the path, the OS's reason, the free space, and what is kept."""
        kept = self.learner.last_saved_step
        kept = f"model.tar of step {kept:,} is kept" if kept is not None else "no checkpoint had been saved yet"
        self.stop.set()
        return CheckpointWriteError(f"{checkpoint.describe_write_error(path, error)}; {kept}")

    # ------------------------------------------------------- supervision
    def _wait_and_poll(self) -> None:
        """A quarter of a second of the main thread's loop: the heartbeat under torchrun, the servers polled."""
        self.stop.wait(0.25)
        if self.group is not None:
            self.group.beat()
        if self.supervisor is not None:
            try:
                self.supervisor.poll(env_error_reported=self.errors.error is not None)
            except BaseException as e:  # noqa: BLE001
                self.errors.put("supervisor", e)

    def _begin_logs(self) -> None:
        """The logs' counters at the start of training (before any thread that writes a row starts)."""
        self.start_time = start = time.monotonic()
        if self.rundir is None:  # a torchrun rank other than 0: rank 0 logs
            return
        self._last = (start, self.learner.step)
        self._rows = 0
        self._last_learn = (self.learner.learn_seconds, self.learner.learner_steps)
        self._returns = collections.deque(maxlen=100)
        self.seen_sets = seen_sets.SeenSets(self.rundir)
        self.validation = Validation(self)

    def _supervise(self) -> None:
        f = self.flags
        if self.rundir is None:  # a torchrun rank other than 0: its servers only; rank 0 logs and saves
            while not self.stop.is_set():
                self._wait_and_poll()
            return
        last_log = last_ckpt = self.start_time
        while not self.stop.is_set():
            self._wait_and_poll()
            now = time.monotonic()
            self.validation.poll(now)
            if not f.deterministic and now - last_log >= f.log_interval:
                last_log = now
                self.log_tick()
            if not f.disable_checkpoint and now - last_ckpt >= f.checkpoint_every * 60:
                last_ckpt = now
                self.save_checkpoint()
        if self.errors.error is None and not self.interrupted and self.learner.step >= f.total_steps:
            self.validation.finish()

    def log_tick(self) -> None:
        f, learner = self.flags, self.learner
        now = time.monotonic()
        step = learner.step
        last_time, last_step = self._last
        if self._rows and step == last_step:
            # nothing learned since the last row (e.g. the final tick): one row per step, as wandb keeps;
            # the sets seen (rooms) still take the episodes that ended since, so the run's file is whole
            with self.stats.lock:
                pending = list(self.stats.episodes)
            self.seen_sets.update(pending, step)
            return
        self._rows += 1
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
            "env_steps": self.stats.env_steps + learner.peer_env_steps,  # every rank's, under torchrun
        }
        learn_seconds, learner_steps = learner.learn_seconds, learner.learner_steps
        last_learn, last_updates = self._last_learn
        self._last_learn = (learn_seconds, learner_steps)
        updates = learner_steps - last_updates
        row["learner_busy"] = round((learn_seconds - last_learn) / max(now - last_time, 1e-9), 3)
        row["update_ms"] = round(1e3 * (learn_seconds - last_learn) / updates, 1) if updates else float("nan")
        row.update(learner.take_stats())
        if hasattr(self.data_source, "log_stats"):
            row.update(self.data_source.log_stats())
        if hasattr(self.agent, "log_stats"):
            row.update(self.agent.log_stats())
        if self.validation is not None:
            row["valid_mean_return"] = self.validation.take_for_row()
        row.update(self.seen_sets.update(episodes, step))
        stat_names = sorted({k for e in episodes for k in e if k.startswith("stat/") and not seen_sets.is_mask(k)})
        for name in stat_names:
            row[name] = float(np.mean([e[name] for e in episodes if name in e]))
        self.run_log.log_row(row)
        pct = 100.0 * step / f.total_steps
        eta = (f.total_steps - step) / sps if sps > 0 else float("inf")
        ret = f"{row['return_last_100']:.2f}" if self._returns else "n/a"
        loss = row.get("total_loss")
        world = f" over {self.group.size} ranks" if self.group is not None else ""  # steps and SPS: global
        log.info(
            "Step %d/%d (%.1f%%) @ %.0f SPS%s, ETA %s. Return %s (last %d ep). Loss %s. "
            "Inference batch %.1f envs, learner queue %d/%d, dropped unrolls %d.",
            step, f.total_steps, pct, sps, world, format_duration(eta) if math.isfinite(eta) else "?",
            ret, len(self._returns), f"{loss:.3f}" if loss is not None else "n/a",
            row["inference_batch"] if batches else 0.0, row["learner_queue"], self.learner_queue.maxsize,
            row["dropped_unrolls"],
        )

    # ---------------------------------------------------------- shutdown
    def _shutdown(self, save: bool) -> None:
        self.stop.set()
        learner = getattr(self, "learner", None)
        if learner is not None and (self.interrupted or not save) and self.group is None:
            learner.abort.set()  # an update under way gives up, its step untaken: the thread ends at once
        if self.validation is not None:
            self.validation.abort.set()
        if self.supervisor is not None:
            self.supervisor.terminate_all()  # the servers end while the threads are joined
        deadline = time.monotonic() + 5.0
        for thread in self.threads:
            # under torchrun the learner thread finishes its batch and meets its peers before it ends
            wait = 60.0 if self.group is not None and thread.name.startswith("learner") else 0.0
            thread.join(max(0.0, deadline - time.monotonic(), wait))
        alive = [t.name for t in self.threads if t.is_alive()]
        if alive:
            log.warning("threads still running at shutdown: %s", ", ".join(alive))
        if getattr(self, "learner", None) is not None and hasattr(self, "start_time") and self.rundir is not None:
            try:
                self.log_tick()
            except Exception:  # noqa: BLE001 - the run is ending anyway
                log.exception("final log tick failed")
        if save and self.rundir is not None:
            try:
                self.save_checkpoint()
            except CheckpointWriteError as e:
                self.save_error = e
            except Exception:  # noqa: BLE001
                log.exception("final checkpoint failed; the previous one is kept")
        for item in self.connections:
            conn = item.conn if isinstance(item, ActorThread) else item
            conn.close()
        if self.supervisor is not None:
            self.supervisor.stop_all()


    # -------------------------------------------------------- final test
    def run_final_test(self) -> None:
        """The package's final-test protocol on the trained model: final_test.json, logs, wandb summary."""
        f = self.flags
        log.info("final test of the model at step %d", self.learner.step)
        record = os.path.join(self.rundir, "test_first_episode") if f.record_video else None
        result = evaluation.final_test(self.learner.model, self.env_pkg, f, self.device, record, self.test_stop,
                                       agent=self.agent)
        if self.test_stop.is_set():
            log.info("final test interrupted: nothing written")
            return
        result.update(step=self.learner.step, xpid=f.xpid, checkpoint=self.checkpoint_path)
        evaluation.write_json(os.path.join(self.rundir, "final_test.json"), result)
        report_final_test(result, self.run_log, self.learner.step)


def report_final_test(result: dict, run_log, step: int) -> None:
    evaluation.log_result(result, "final test")
    scalars, summary = {}, {}
    for group, g in result["groups"].items():
        scalars[f"final_test/{group}_mean"] = g["mean"]
        summary.update({f"final_test/{group}/mean": g["mean"], f"final_test/{group}/std": g["std"],
                        f"final_test/{group}/runs": g["runs"]})
        for task, mean in g.get("tasks", {}).items():
            scalars[f"final_test/{group}_{task}_mean"] = mean
            summary[f"final_test/{group}/{task}/mean"] = mean
    run_log.log_scalars(scalars, step)
    run_log.set_summary(summary)
    if result.get("video"):
        run_log.log_video("video/test", result["video"], step)


class Validation:
    """Validation during training on a frozen copy of the weights, in its own thread.

    Triggered every --validate_every minutes and whenever the step count crosses a
    multiple of --validate_step_every; one at a time (a trigger while one runs is
    skipped).  When training reaches --total_steps the running validation is awaited
    and one due at the last step is run, so every crossing is either validated or
    logged as skipped.  Keeps model_best_val.tar.
    """

    def __init__(self, training: Training):
        self.t = training
        f = training.flags
        self.enabled = not f.disable_validation and (f.validate_every > 0 or f.validate_step_every > 0)
        self.last_time = time.monotonic()
        self.last_step = training.learner.step
        self.thread: threading.Thread | None = None
        self.abort = threading.Event()  # an error, a signal: the running validation gives up
        self.result: dict | None = None
        self.for_row = float("nan")
        self.count = 0
        self.best_path = os.path.join(training.rundir, "model_best_val.tar")
        self.best = float("-inf")
        if os.path.exists(self.best_path):
            self.best = float(checkpoint.load(self.best_path).get("valid_return", float("-inf")))

    def take_for_row(self) -> float:
        value, self.for_row = self.for_row, float("nan")
        return value

    def poll(self, now: float) -> None:
        if not self.enabled:
            return
        self._collect()
        f, step = self.t.flags, self.t.learner.step
        due = f.validate_every > 0 and now - self.last_time >= f.validate_every * 60
        due = due or evaluation.crossed(self.last_step, step, f.validate_step_every)
        self.last_step = step
        if due:
            self.last_time = now
            self._start()

    def finish(self) -> None:
        """Training reached --total_steps: wait for the running validation, then run the one the last
        step made due; both are recorded before the run ends."""
        if not self.enabled:
            return
        f, step = self.t.flags, self.t.learner.step
        due = evaluation.crossed(self.last_step, step, f.validate_step_every)
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
        t, f = self.t, self.t.flags
        if self.thread is not None and self.thread.is_alive():
            log.info("validation still running: skipping this one")
            return
        with t.learner.lock:  # a consistent snapshot; the learner goes on at once
            model = copy.deepcopy(t.learner.model)
            step = t.learner.step
        model.eval()
        record = f.record_video and self.count == 0
        self.count += 1

        def run():
            frames = evaluation.Recording() if record else None
            result = evaluation.validate(model, t.env_pkg, f, t.device, frames, self.abort, t.agent)
            video = None
            if frames:
                from rl_core.video import write_video

                video = write_video(frames, os.path.join(t.rundir, "valid_first_episode"), fps=frames.fps)
            if result is not None:
                self.result = dict(result, step=step, model=model, video=video)

        log.info("validation of the model at step %d started", step)
        self.thread = start_thread("validation", run, t.errors)
        t.threads.append(self.thread)

    def _collect(self) -> None:
        result, self.result = self.result, None
        if result is None:
            return
        t = self.t
        mean = result["mean_return"]
        log.info("validation at step %d: mean return %.2f over %d episodes", result["step"], mean,
                 result["episodes"])
        self.for_row = mean
        scalars = {"valid/mean_return": mean}
        for task, task_mean in result["tasks"].items():
            log.info("validation at step %d, %s: mean return %.2f", result["step"], task, task_mean)
            scalars[f"valid/return_{task}"] = task_mean
        t.run_log.log_scalars(scalars, t.learner.step)
        if result["video"]:
            t.run_log.log_video("video/valid", result["video"], t.learner.step)
        if mean > self.best:
            self.best = mean
            try:
                checkpoint.save(self.best_path, {
                    "model_state_dict": {k: v.detach().cpu() for k, v in result["model"].state_dict().items()},
                    "flags": checkpoint.flags_dict(t.global_flags), "step": result["step"], "valid_return": mean,
                })
            except OSError as e:
                raise t._write_error(self.best_path, e) from None
            log.info("new best validation return %.2f: saved %s", mean, self.best_path)


def train(flags, env_pkg, supervisor=None, sizing=None) -> int:
    training = Training(flags, env_pkg, supervisor, sizing)
    status = training.run()
    if not any(thread.is_alive() for thread in training.threads):
        distributed.stop(training.group)
    if any(thread.is_alive() for thread in training.threads):
        # A thread still inside a torch op would abort interpreter finalization
        # ("terminate called without an active exception"): everything is saved, leave now.
        logging.shutdown()
        os._exit(status)
    return status
