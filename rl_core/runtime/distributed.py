"""Training on several processes (GPUs, hosts) with torch.distributed, started by torchrun.

Each rank is a whole polybeast learner: its own env servers (or its share of --pipes_basename's TCP
servers), its own central inference and a replica of the model on its own device (``LOCAL_RANK``).
The flags keep their one-process meaning: ``--num_actors``, ``--num_servers`` and ``--batch_size`` are
the run's totals, each rank takes 1/W of them (``rank_flags``), and ``--total_steps`` and every step
figure count global agent steps.  So a run learns per global step as the same run on one process does,
and a checkpoint written at world size N resumes at any M.

What keeps the replicas equal (all collectives run in the learner thread, in the same order on every
rank; the main thread only joins those of the start):

* the start: rank 0's checkpoint reaches every rank as bytes (``share_checkpoint``; loaded with
  ``weights_only=True``), then rank 0's parameters and buffers are broadcast (``broadcast_module``);
* every optimizer step: the gradients are averaged (``average_gradients``: one all-reduce of the
  flattened gradients, DistributedDataParallel's reduction without its overlap with the backward pass,
  because an agent's update may call parts of the model that a DDP wrapper's forward does not see
  (SAC's critics, RND's predictor) and skip parameters in some losses), so each rank's optimizer takes
  the same step;
* statistics: ``Group.all_reduce_sum`` (through ``rl_core.numerics.collectives``, where ``start`` makes the group
  the active one) merges the moments of RunningMeanStd and ValueNormalizer (PopArt) updates and those of
  each minibatch's advantages (``advantage_moments``: an epoch's minibatches in one all-reduce), and
  ``any_rank`` the decisions an agent takes from its batch (RND's random start);
* every learner batch: ``agree`` sums the ranks' new env steps and ORs their wish to stop, so every
  rank leaves its loop after the same batch (a signal, an error, ``--total_steps``);
* --deterministic (``rl_core.runtime.lockstep``): each rank acts and learns in turn in one thread, and the
  ranks agree before every batch (a rank enters the agreement once it holds a batch or stops), learning
  a batch only when every rank holds one, so that the job's collectives come in one order and two runs of
  one torchrun command write the same rows.

Replay (R2D2, SAC) stays per rank: each rank's replay holds its own envs' steps, and samples
``--batch_size / W`` of them per batch.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import logging
import math
import os
import re
import time

import torch
from torch import nn

from rl_core import agents
from rl_core.numerics.collectives import set_active
from rl_core.errors import RunFailure, UserError
from rl_core.errors import Stopped

log = logging.getLogger("learner")

# The run's totals that each rank takes 1/W of: these must divide by W; the agents' own are rounded up
# (``rl_core.agents.rank_shares``).
EXACT_SHARES = ("num_actors", "num_servers", "batch_size")
# How long a collective waits for a peer: longer than any startup or learner batch, short enough that
# a job whose peer hangs ends on its own.  $POLYBEAST_DIST_TIMEOUT (seconds) overrides.
DEFAULT_TIMEOUT_S = 600.0
# torchrun gives a rank it stops (its own signal, or a peer that died) 30 s between SIGTERM and SIGKILL: a
# rank's shutdown waits at most PEER_WAIT_S for its learner thread to meet its peers, so that its final
# checkpoint and last line come before the SIGKILL; one still alive STUCK_AFTER_S after the signal prints
# every thread's stack (faulthandler) before torchrun kills it.
TORCHRUN_GRACE_S = 30.0
PEER_WAIT_S = 15.0
STUCK_AFTER_S = TORCHRUN_GRACE_S - 5.0


@dataclasses.dataclass(frozen=True)
class WorldEnv:
    """torchrun's environment: this process's rank among ``world_size``."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int


def world_from_environ(environ=os.environ) -> WorldEnv | None:
    """The torchrun world this process belongs to, or None outside torchrun or with one process."""
    try:
        world = int(environ.get("WORLD_SIZE", "1"))
    except ValueError:
        return None
    if world <= 1 or "RANK" not in environ:
        return None
    return WorldEnv(
        rank=int(environ["RANK"]),
        world_size=world,
        local_rank=int(environ.get("LOCAL_RANK", "0")),
        local_world_size=int(environ.get("LOCAL_WORLD_SIZE", "1")),
    )


def rank_flags(flags, world: WorldEnv):
    """This rank's copy of the flags: its share of the run's totals (see the module's docstring).  A total
    that does not divide by the world size is a UserError naming it."""
    import copy

    W = world.world_size
    mine = copy.copy(flags)
    for name in EXACT_SHARES:
        value = getattr(flags, name)
        if value % W:
            raise UserError(
                f"--{name} {value} does not divide among the {W} ranks of this torchrun job: give a "
                f"multiple of {W} (it is the run's total; each rank takes 1/{W})"
            )
        setattr(mine, name, value // W)
    for name in agents.rank_shares():
        if getattr(flags, name):
            setattr(mine, name, max(1, math.ceil(getattr(flags, name) / W)))
    agents.check_rank_flags(flags, mine, W)
    if flags.num_learner_threads != 1:
        raise UserError(
            "--num_learner_threads must be 1 under torchrun: each rank's learner thread runs the "
            "job's collectives in order (drop the flag)"
        )
    if flags.checkpoint_replay:
        raise UserError(
            "--checkpoint_replay is not supported under torchrun: each rank's replay is its own "
            "(drop the flag; a resumed run refills its replays)"
        )
    if mine.num_servers % flags.server_splits:
        raise UserError(
            f"--num_servers {flags.num_servers} gives each of the {W} ranks {mine.num_servers} servers, "
            f"not a multiple of --server_splits {flags.server_splits}: give a multiple of "
            f"{W * flags.server_splits}"
        )
    mine.server_offset = world.rank * mine.num_servers  # this rank's servers: global indices from here
    mine.world_size = W  # (the learning-rate schedule counts the steps of all ranks' batches)
    return mine


def local_gpu(world: WorldEnv, device_count: int) -> int:
    """The GPU of this rank among the ``device_count`` this host shows: its LOCAL_RANK.  A host with fewer GPUs
    than ranks is a UserError: NCCL refuses two ranks on one GPU (a traceback, once every rank has started)."""
    ranks = max(world.local_world_size, world.local_rank + 1)
    if ranks > device_count:
        gpus = f"{device_count} GPU" + ("" if device_count == 1 else "s")
        fewer = f" (--nproc_per_node {device_count})" if device_count else ""
        raise UserError(
            f"this host has {gpus} for {ranks} torchrun ranks (--nproc_per_node {ranks}): give at most "
            f"1 rank per GPU{fewer}, or pass --disable_cuda to train on the CPU"
        )
    return world.local_rank


def timeout_s() -> float:
    try:
        return float(os.environ.get("POLYBEAST_DIST_TIMEOUT", DEFAULT_TIMEOUT_S))
    except ValueError:
        return DEFAULT_TIMEOUT_S


@dataclasses.dataclass(frozen=True)
class Agreement:
    """What the ranks agreed on before a batch (``Group.agree``)."""

    stopping: list[int]  # the ranks that want to stop: all stop after this agreement
    new_steps: int  # the agent steps all ranks' learners took in: the global step count grows by it
    episodes: list[int]  # per rank, the finished episodes it sends to rank 0 (``gather_episodes``)
    env_steps: int  # the env steps the ranks other than 0 received (rank 0's logs add them)
    ready: list[int]  # the ranks that hold a batch (--deterministic's lockstep learns when all do)


class Group:
    """The process group of a torchrun job, and the few collectives a run needs."""

    def __init__(self, world: WorldEnv, device: torch.device):
        import torch.distributed as dist

        self.dist = dist
        self.rank, self.size = world.rank, world.world_size
        self.backend = "nccl" if device.type == "cuda" else "gloo"
        timeout = datetime.timedelta(seconds=timeout_s())
        kwargs = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(self.backend, timeout=timeout, **kwargs)
        # small control messages (steps, stop, the checkpoint's bytes) on the CPU, whatever the backend
        self.cpu = dist.new_group(backend="gloo", timeout=timeout) if self.backend != "gloo" else None
        # torchrun's key-value store (hosted by its agent, not by a rank): each rank's heartbeat, so that a
        # rank whose peer vanished can name it
        try:
            self.store = dist.distributed_c10d._get_default_store()
        except Exception:  # noqa: BLE001 - naming a lost rank is a nicety
            self.store = None
        self._beats = 0

    def beat(self) -> None:
        """Called about once a second by each rank's main thread: this rank is alive."""
        if self.store is not None:
            self._beats += 1
            try:
                self.store.set(f"polybeast/alive/{self.rank}", str(self._beats))
            except Exception:  # noqa: BLE001
                pass

    def _silent_ranks(self, wait: float = 2.5) -> list[int]:
        """The peers whose heartbeat did not move for ``wait`` seconds ([] when it cannot be told)."""
        if self.store is None:
            return []
        others = [r for r in range(self.size) if r != self.rank]

        def read(r):  # (a missing key would make get() wait for it)
            key = f"polybeast/alive/{r}"
            return self.store.get(key) if self.store.check([key]) else None

        try:
            before = {r: read(r) for r in others}
            time.sleep(wait)
            after = {r: read(r) for r in others}
        except Exception:  # noqa: BLE001 - the store went with the job
            return []
        return [r for r in others if before[r] == after[r]]

    def _lost(self, error: Exception) -> RunFailure:
        silent = self._silent_ranks()
        who = f"rank {', '.join(map(str, silent))}" if silent else "a peer rank"
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        first = re.sub(r"^\[[^\]]*\] ", "", first).split(". This is typically")[0][:200]  # gloo's source path
        return RunFailure(
            f"{who} of this {self.size}-rank torchrun job is gone ({first}): its log and torchrun's "
            f"summary say why; this rank stops too, and the run directory's last model.tar stays "
            f"loadable (resume with --xpid, at any world size)"
        )

    def unanswered(self, where: str) -> RunFailure:
        """The failure of a rank whose learner thread still waits ``PEER_WAIT_S`` after the stop (``where``: the
        calls it waits in): a peer that neither answers nor left (hung, stopped)."""
        silent = self._silent_ranks()
        who = f"rank {', '.join(map(str, silent))}" if silent else "a peer rank"
        return RunFailure(
            f"{who} of this {self.size}-rank torchrun job did not stop with this rank within "
            f"{PEER_WAIT_S:.0f} s (hung or stopped; this rank's learner waits in {where}): no final "
            f"checkpoint, and the run directory's last model.tar stays loadable (resume with --xpid, "
            f"at any world size)"
        )

    def _collective(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except RuntimeError as e:  # DistBackendError and gloo's transport errors: a peer left
            raise self._lost(e) from None

    @property
    def is_writer(self) -> bool:
        return self.rank == 0

    def describe(self) -> str:
        return f"rank {self.rank} of {self.size} ({self.backend})"

    # ------------------------------------------------------------- the start
    def share_checkpoint(self, payload: dict | None, refused: bool = False) -> dict | None:
        """Rank 0's checkpoint (or None) on every rank, as bytes loaded with ``weights_only=True``.  A run
        rank 0 refused (``refused``) ends on every rank: RunFailure on the others."""
        if self.rank == 0:
            data = b""
            if payload is not None and not refused:
                buffer = io.BytesIO()
                torch.save(payload, buffer)
                data = buffer.getvalue()
            header = torch.tensor([len(data), int(refused)], dtype=torch.int64)
        else:
            header = torch.zeros(2, dtype=torch.int64)
        self._collective(self.dist.broadcast, header, 0, group=self.cpu)
        size, refused = int(header[0]), bool(header[1])
        if refused:
            raise RunFailure("rank 0 refused the run (its log says why): nothing was started")
        if size == 0:
            return None
        blob = (
            torch.frombuffer(bytearray(data), dtype=torch.uint8)
            if self.rank == 0
            else torch.empty(size, dtype=torch.uint8)
        )
        self._collective(self.dist.broadcast, blob, 0, group=self.cpu)
        if self.rank == 0:
            return payload
        return torch.load(io.BytesIO(blob.numpy().tobytes()), map_location="cpu", weights_only=True)

    @torch.no_grad()
    def broadcast_module(self, module: nn.Module) -> None:
        """Rank 0's parameters and buffers into every rank's module."""
        tensors = list(module.parameters()) + list(module.buffers())
        for dtype in sorted({t.dtype for t in tensors}, key=str):
            group = [t for t in tensors if t.dtype == dtype]
            flat = torch.cat([t.reshape(-1) for t in group])
            self._collective(self.dist.broadcast, flat, 0)
            for t, part in zip(group, torch.split(flat, [t.numel() for t in group])):
                t.copy_(part.view_as(t))

    # ------------------------------------------------------- every update
    @torch.no_grad()
    def average_gradients(self, params: list[torch.Tensor], loss: torch.Tensor) -> torch.Tensor:
        """Every parameter's gradient replaced by its mean over the ranks (a missing gradient counts as
        zeros), in one all-reduce with the loss; returns the ranks' mean loss."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads] + [loss.detach().float().reshape(1)])
        self._collective(self.dist.all_reduce, flat)
        flat.div_(self.size)
        for p, g, part in zip(params, grads, torch.split(flat[:-1], [g.numel() for g in grads])):
            if p.grad is None:
                p.grad = g
            p.grad.copy_(part.view_as(p))
        return flat[-1]

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """The sum over the ranks of ``tensor`` (a new tensor; float64 statistics keep their precision)."""
        out = tensor.detach().clone()
        if out.device.type == "cpu" and self.cpu is not None:
            self._collective(self.dist.all_reduce, out, group=self.cpu)
        else:
            self._collective(self.dist.all_reduce, out)
        return out

    def any_rank(self, flag: bool) -> bool:
        value = torch.tensor([int(bool(flag))], dtype=torch.int64)
        self._collective(self.dist.all_reduce, value, group=self.cpu)
        return bool(value.item())

    def agree(
        self, stopping: bool, new_steps: int, episodes: int = 0, env_steps: int = 0, ready: bool = True
    ) -> Agreement:
        """Once per learner batch (--deterministic: once per check for one), on every rank, one all-reduce: the
        ranks that want to stop, the steps all ranks' learners took in since the last call, each rank's count
        of finished ``episodes`` to send to rank 0, the env steps the other ranks' actors received
        (``env_steps``: 0 from rank 0), and the ranks that hold a batch (``ready``)."""
        W = self.size
        value = torch.zeros(3 * W + 2, dtype=torch.int64)
        value[self.rank] = int(bool(stopping))
        value[W + self.rank] = int(episodes)
        value[2 * W + self.rank] = int(bool(ready))
        value[-2] = int(env_steps)
        value[-1] = int(new_steps)
        self._collective(self.dist.all_reduce, value, group=self.cpu)
        return Agreement(
            stopping=[r for r in range(W) if value[r]],
            new_steps=int(value[-1]),
            episodes=value[W : 2 * W].tolist(),
            env_steps=int(value[-2]),
            ready=[r for r in range(W) if value[2 * W + r]],
        )

    def gather_episodes(self, episodes: list[dict], counts: list[int]) -> list[dict]:
        """The finished episodes of every rank (``counts``: how many each has, from ``agree``) on rank 0, as
        ``{"return", "length"}``: the run's episode figures are those of all envs.  Other ranks get []."""
        most = max(counts)
        mine = torch.zeros(most, 2, dtype=torch.float64)
        for i, episode in enumerate(episodes[:most]):
            mine[i, 0], mine[i, 1] = float(episode["return"]), float(episode["length"])
        everyone = [torch.zeros_like(mine) for _ in range(self.size)]
        self._collective(self.dist.all_gather, everyone, mine, group=self.cpu)
        if self.rank != 0:
            return []
        return [
            {"return": float(v[0]), "length": int(v[1])}
            for r, values in enumerate(everyone)
            if r != 0
            for v in values[: counts[r]]
        ]

    @torch.no_grad()
    def parameter_difference(self, module: nn.Module) -> float:
        """The largest absolute difference between this rank's parameters and rank 0's, over all ranks."""
        flat = torch.cat([p.detach().reshape(-1).float() for p in module.parameters()])
        reference = flat.clone()
        self._collective(self.dist.broadcast, reference, 0)
        difference = (flat - reference).abs().max().reshape(1) if flat.numel() else torch.zeros(1)
        self._collective(self.dist.all_reduce, difference, op=self.dist.ReduceOp.MAX)
        return float(difference.item())

    def close(self) -> None:
        try:
            self.dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - the job is ending; a peer that died already broke the group
            pass


def report_if_stuck() -> None:
    """Armed when a rank is told to stop: every thread's stack on stderr if the process is still alive
    ``STUCK_AFTER_S`` later (a hang: the dump says where), before torchrun's SIGKILL."""
    import faulthandler
    import sys

    faulthandler.dump_traceback_later(STUCK_AFTER_S, exit=False, file=sys.stderr)


def start(world: WorldEnv, device: torch.device) -> Group:
    group = Group(world, device)
    set_active(group)
    return group


def stop(group: Group | None) -> None:
    if group is not None:
        set_active(None)
        group.close()


class Peers:
    """The learner's loop under torchrun and what the ranks tell one another with each batch: before each
    batch the ranks agree (one all-reduce) on the env steps they took and on whether any wants to stop, so
    that all leave after the same batch and none is left waiting in a collective; the other ranks' episodes
    and env steps reach rank 0's logs (``stats``: this rank's ``RunStats``).  At the end the replicas'
    parameters are compared."""

    def __init__(self, group: Group, stats):
        self.group = group
        self.stats = stats
        self.env_steps = 0  # (rank 0: the other ranks' env steps, for the logs)
        self.stopping: list[int] = []  # the ranks whose wish to stop ended the loop
        self.parameter_difference: float | None = None  # across the ranks, once the loop has ended
        self._env_steps_sent = 0  # (a rank other than 0: its env steps told to rank 0 so far)

    def _outgoing(self) -> tuple[list[dict], int]:
        """A rank other than 0: the episodes that ended and the env steps its actors received since the last
        batch (rank 0 keeps its own)."""
        if self.group.is_writer:
            return [], 0
        total = self.stats.env_steps
        since, self._env_steps_sent = total - self._env_steps_sent, total
        return self.stats.take_episodes(), since

    def exchange(self, stopping: bool, new_steps: int, ready: bool = True) -> Agreement:
        """One agreement (``Group.agree``) and what rides on it: the other ranks' episodes and env steps into
        rank 0's logs, and the ranks whose wish to stop ends the loop (``stopping``)."""
        group = self.group
        episodes, env_steps = self._outgoing()
        agreed = group.agree(stopping, new_steps, len(episodes), env_steps, ready)
        self.env_steps += agreed.env_steps
        if any(agreed.episodes):
            others = group.gather_episodes(episodes, agreed.episodes)
            if others and group.is_writer:
                self.stats.add_episodes(others)
        if agreed.stopping:
            self.stopping = [r for r in agreed.stopping if r != group.rank]
        return agreed

    def loop(self, learner) -> None:
        f, source = learner.flags, learner.data_source
        while True:
            batch = state = None
            if not learner.stop.is_set():
                try:
                    batch, state = source.next_batch(learner.stop)
                except Stopped:
                    batch = None
            agreed = self.exchange(batch is None, source.take_new_steps() if batch else 0)
            if agreed.stopping:
                break
            batch, state, versions = learner.to_device(batch, state)
            learner.learn(batch, state, agreed.new_steps, versions)
            if learner.step >= f.total_steps:
                break
        self.finish(learner)

    def finish(self, learner) -> None:
        """After the ranks' last agreement: the replicas compared (``report_replicas``), the learner stopped."""
        self.parameter_difference = self.group.parameter_difference(learner.model)
        learner.stop.set()

    def report_replicas(self) -> None:
        """The log line of the replicas' largest parameter difference at the end (rank 0's log)."""
        difference = self.parameter_difference
        if difference is None:
            return
        (log.info if difference == 0 else log.warning)(
            "replicas: the %d ranks' parameters %s",
            self.group.size,
            "are identical" if difference == 0 else f"differ by up to {difference:.3g}",
        )
