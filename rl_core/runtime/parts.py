"""Every part of a training run, built and wired in one place (``build_parts``), then started as threads
(``start_threads``) or as --deterministic's one lockstep thread (``start_lockstep``)."""

from __future__ import annotations

import dataclasses
import logging
import os
import queue
import threading

import torch

from rl_core.evaluation import episodes
from rl_core.agents import make_agent
from rl_core.data.env_spec import EnvSpec
from rl_core.errors import UserError
from rl_core.runtime import distributed
from rl_core.runtime import transport as tp
from rl_core.runtime.acting_loop import ActingLoop
from rl_core.runtime.acting_process import ActingProcess, weights_lock
from rl_core.runtime.actors import ActorThread, RunStats, connect_server, spec_key
from rl_core.runtime.inference import answer, inference_loop
from rl_core.runtime.inference import InferenceBatcher
from rl_core.runtime.device import inference_precision
from rl_core.runtime.learner import Learner, Weights, inference_copy, publish
from rl_core.runtime.lockstep import Lockstep
from rl_core.runtime.recycler import Recycler
from rl_core.runtime.threads import start_thread

log = logging.getLogger("learner")


def secret_bytes(flags) -> bytes | None:
    secret = flags.server_secret or os.environ.get("POLYBEAST_SECRET")
    return secret.encode() if secret else None


@dataclasses.dataclass
class ServerLinks:
    """The env servers this process talks to: their addresses, the TCP secret, the spec they agree on."""

    addresses: list
    secret: bytes | None
    spec: EnvSpec


def connect_servers(flags, supervisor, stop: threading.Event, connections: list) -> ServerLinks:
    """Connect to every server of this process (under torchrun: its share, from --server_offset), appending each
    connection to ``connections`` as it opens (closed at shutdown), and check that they agree."""
    f = flags
    secret = secret_bytes(f)
    offset = getattr(f, "server_offset", 0)  # (not a flag: under torchrun, this rank's first server)
    addresses = [tp.server_address(f.pipes_basename, offset + i) for i in range(f.num_servers)]
    if addresses[0].kind == "tcp" and not secret:
        raise UserError("TCP env servers need a shared secret: pass --server_secret or set POLYBEAST_SECRET")
    specs = []
    on_retry = supervisor.poll if supervisor is not None else None
    for address in addresses:
        conn, spec = connect_server(address, f, secret, stop, on_retry)
        connections.append(conn)
        specs.append(spec)
    K = f.num_actors // f.num_servers
    for i, spec in enumerate(specs):
        if spec.num_envs != K:
            raise UserError(
                f"env server {offset + i} hosts {spec.num_envs} envs but --num_actors/--num_servers = {K}: "
                f"start the servers with the learner's flags"
            )
        if spec_key(spec) != spec_key(specs[0]):
            raise UserError(
                f"env servers {offset} and {offset + i} host different environments: "
                f"{specs[0].to_json()} vs {spec.to_json()}"
            )
    return ServerLinks(addresses, secret, specs[0])


def check_num_actions(flags, spec: EnvSpec) -> None:
    """--num_actions, if given, must be the env's; if not, it is set from the env."""
    if spec.discrete:
        n = spec.num_actions
        if flags.num_actions is None:
            flags.num_actions = n
        elif flags.num_actions != n:
            raise UserError(f"--num_actions {flags.num_actions} disagrees with the env's {n} actions: drop the flag")


def check_can_record(env_pkg, flags) -> None:
    """--record_video fails at the start, not at the first validation or the final test."""
    try:
        env = episodes.make_test_env_fn(env_pkg, flags, {}, record=True)(0)
        obs, _ = env.reset(seed=0)
        frame = episodes.frame_of(env, obs)
        env.close()
    except Exception as e:  # noqa: BLE001
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UserError(f"--record_video: the env cannot render frames ({first[:200]})") from None
    if frame is None:
        raise UserError("--record_video: the env gives neither rgb_array frames nor image observations")


@dataclasses.dataclass
class Parts:
    """A training process's parts, wired: the agent and its model on ``device``, central inference, the actors
    (one per env server), the learner queue, the data source and the learner; ``peers``: the other torchrun
    ranks (None in one process)."""

    agent: object
    device: torch.device
    inference_model: torch.nn.Module
    inference_lock: threading.Lock
    learner_queue: queue.Queue
    stats: RunStats
    batcher: InferenceBatcher
    data_source: object
    learner: Learner
    actors: list[ActorThread]
    peers: distributed.Peers | None
    acting_process: bool  # acting and inference in a child process (rl_core/runtime/acting_process.py)
    acting_pids: list[int] = dataclasses.field(default_factory=list)  # the children, once started


def _recycler(flags, model, optimizer) -> Recycler | None:
    """--recycle_period's Recycler (None at 0)."""
    return (
        Recycler(model, optimizer, flags.recycle_period, flags.recycle_tau, flags.seed)
        if flags.recycle_period
        else None
    )


def build_parts(
    flags,
    links: ServerLinks,
    connections: list,
    device: torch.device,
    checkpoints,
    group: distributed.Group | None,
    stop: threading.Event,
) -> Parts:
    """The agent, its model (resumed from ``checkpoints``; under torchrun rank 0's weights on every rank), central
    inference, the learner and its data source, and an actor per server connection (which then owns it: an actor
    may reconnect)."""
    from models.pretrained import apply_flags

    f, spec = flags, links.spec
    agent = make_agent(f, spec)
    model = agent.build_model()
    apply_flags(model, f)
    model = model.to(device)
    inference_model = inference_copy(model)
    inference_model.eval()
    precision = inference_precision(f, device)
    if precision != torch.float32:
        inference_model.set_stem_dtype(precision)
        log.info("central inference runs the stem in %s", f.inference_precision)
    optimizer, scheduler = agent.make_optimizer(model)
    step, learner_steps = checkpoints.restore(model, optimizer, scheduler)
    if group is not None:
        group.broadcast_module(model)  # every replica starts from rank 0's weights
        torch.manual_seed(f.seed + group.rank)  # and acts and samples minibatches with its own draws
    acting_process = wants_acting_process(f, device, group)
    if acting_process:
        # read and written across processes (rl_core/runtime/acting_process.py; a GPU's tensors through CUDA IPC)
        inference_model.share_memory()
        inference_model.policy_version = torch.zeros((), dtype=torch.int64).share_memory_()
        inference_lock = weights_lock(device)
    else:
        inference_lock = threading.Lock()
    publish(model, inference_model, inference_lock, version=learner_steps)
    if group is None or group.is_writer:  # (rank 0 alone under torchrun: the ranks' models are the same)
        log.info("model on %s: %s", device, model)

    K = spec.num_envs
    queue_size = f.max_learner_queue_size or agent.learner_queue_size(K)
    # (--deterministic: the lockstep thread learns from what a round puts in before it acts again)
    learner_queue = queue.Queue(maxsize=0 if f.deterministic else queue_size)
    stats = RunStats()
    batcher = InferenceBatcher(f.max_inference_batch_size or f.num_actors, f.inference_batch_timeout_ms / 1000.0)
    # (a replay's batches sampled ahead in pinned memory: the copy to the GPU is async)
    data_source = agent.make_data_source(learner_queue, pin=device.type == "cuda")
    checkpoints.restore_data_source(data_source)
    learner = Learner(
        f,
        agent,
        Weights(model, optimizer, scheduler, inference_model, inference_lock),
        data_source,
        device,
        stop,
        start=(step, learner_steps),
        group=group,
        on_step=lambda before, after: checkpoints.after_update(learner, data_source, before, after),
        saved_step=lambda: checkpoints.saved_step,
        recycler=_recycler(f, model, optimizer),
    )

    def initial_state(batch_size):
        return inference_model.initial_state(batch_size, device=device)

    actors = [
        ActorThread(i, address, conn, spec, f, links.secret, batcher, learner_queue, initial_state, stats, stop, agent)
        for i, (address, conn) in enumerate(zip(links.addresses, connections))
    ]
    peers = distributed.Peers(group, stats) if group is not None else None
    return Parts(
        agent,
        device,
        inference_model,
        inference_lock,
        learner_queue,
        stats,
        batcher,
        data_source,
        learner,
        actors,
        peers,
        acting_process,
    )


def _infer(parts: Parts):
    """One inference pass for a list of requests, counted in the logs' inference batch."""
    p = parts

    def infer(requests):
        answer(requests, p.inference_model, p.inference_lock, p.device, p.agent)
        p.batcher.count(sum(r.size for r in requests))

    return infer


def wants_acting_process(flags, device: torch.device, group) -> bool:
    """Acting in a process of its own: --acting_process (on a GPU learner too: the child infers on its GPU), or
    unset where central inference runs on the CPU in one process; never under --deterministic (its lockstep thread
    acts).  Asked for where it cannot run: one line."""
    wanted = _wants_acting_process(flags, device, group)
    n = flags.acting_processes
    if n > 1 and not wanted:
        why = "--deterministic acts in its one thread" if flags.deterministic else "the acting process is off here"
        raise UserError(f"--acting_processes {n} needs the acting process, and {why}: drop --acting_processes")
    if n > flags.num_servers:
        raise UserError(
            f"--acting_processes {n} is more than the run's {flags.num_servers} env servers (each acting process acts "
            f"for at least one): give at most {flags.num_servers}, or more --num_servers"
        )
    return wanted


def _wants_acting_process(flags, device: torch.device, group) -> bool:
    if flags.deterministic:
        return False
    if flags.acting_process is None:
        return device.type == "cpu" and group is None
    if flags.acting_process and group is not None:
        raise UserError("--acting_process is not available under torchrun yet: drop it")
    return flags.acting_process


def acting_shares(actors: list, n: int) -> list[list]:
    """The servers' connections in ``n`` contiguous shares as even as they go (at most one share per connection)."""
    n = min(n, len(actors))
    bounds = [round(i * len(actors) / n) for i in range(n + 1)]
    return [actors[a:b] for a, b in zip(bounds, bounds[1:])]


def start_threads(parts: Parts, flags, errors, stop: threading.Event) -> list[threading.Thread]:
    """The asynchronous runtime: acting (one loop for every server, or --no-acting_loop: an actor thread per
    server and inference threads), the data source's and the learner's threads."""
    p, threads = parts, []
    if p.acting_process:
        for i, share in enumerate(acting_shares(p.actors, flags.acting_processes)):
            process = ActingProcess(p, share, i, flags, stop)
            threads.extend(process.start(lambda name, target: start_thread(name, target, errors)))
            p.acting_pids.append(process.process.pid)
    elif flags.acting_loop:
        loop = ActingLoop(
            p.actors,
            _infer(p),
            p.learner_queue,
            stop,
            flags.max_inference_batch_size or flags.num_actors,
            flags.inference_batch_timeout_ms / 1000.0,
            lambda name, target: threads.append(start_thread(name, target, errors)),
        )
        threads.append(start_thread("actor-loop", loop.run, errors))
    else:
        for i in range(flags.num_inference_threads):
            threads.append(
                start_thread(
                    f"inference-{i}",
                    lambda: inference_loop(p.batcher, p.inference_model, p.inference_lock, p.device, stop, p.agent),
                    errors,
                )
            )
        for i, actor in enumerate(p.actors):
            threads.append(start_thread(f"actor-{i}", actor.run, errors))
    for name, target in getattr(p.data_source, "threads", lambda: [])():
        threads.append(start_thread(name, lambda target=target: target(stop), errors))
    loop = p.learner.loop if p.peers is None else (lambda: p.peers.loop(p.learner))
    for i in range(flags.num_learner_threads):
        threads.append(start_thread(f"learner-{i}", loop, errors))
    return threads


def start_lockstep(parts: Parts, flags, errors, stop: threading.Event, after_batch) -> threading.Thread:
    """--deterministic: one thread acts and learns in turn (rl_core/runtime/lockstep.py); ``after_batch(step
    before, step after)`` after each learned batch."""
    p = parts
    infer = _infer(p)
    log.info(
        "--deterministic: acting and learning alternate in one thread; a logs.csv row every %s steps",
        f"{flags.log_step_interval:,}",
    )
    lockstep = Lockstep(
        p.actors, infer, p.learner, p.data_source, p.learner_queue, stop, flags.total_steps, after_batch, p.peers
    )
    return start_thread("lockstep", lockstep.run, errors)
