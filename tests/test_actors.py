"""Actor thread, inference batcher and unroll batching against a real env server."""

import queue
import selectors
import socket
import threading
import time
import types

import gymnasium as gym
import numpy as np
import pytest
import torch

from models.mlp import MLPStem
from models.policy import ActorCritic
from models.recurrent import make_core
from rl_core.agents import make_agent
from rl_core.config.flags import make_parser
from rl_core.runtime import transport as tp
from rl_core.runtime.acting_loop import ActingLoop
from rl_core.runtime.actors import ActorThread, RunStats, connect_server
from rl_core.runtime.inference import answer, inference_loop
from rl_core.runtime.inference import InferenceBatcher, Request
from rl_core.runtime.env_server import EnvServer
from rl_core.runtime.learner import Publisher, inference_copy
from rl_core.data.batch import POLICY_VERSION
from rl_core.data.unroll_batcher import UnrollBatcher
from rl_core.runtime.threads import ErrorBox, start_thread

T, K = 5, 3


def flags(**kw):
    base = dict(
        unroll_length=T,
        connect_timeout=5,
        max_message_bytes=1 << 20,
        env_timeout=300.0,
        num_actors=K,
        shared_memory=True,
    )
    base.update(kw)
    return types.SimpleNamespace(**base)


class Recorder(gym.Wrapper):
    """CartPole that records every action it receives and every obs it returns; ``max_steps``
    cuts episodes short (a time limit), so that episodes end inside every unroll."""

    def __init__(self, log, max_steps=None):
        super().__init__(gym.make("CartPole-v1", max_episode_steps=max_steps))
        self.log = log

    def reset(self, **kw):
        obs, info = self.env.reset(**kw)
        self.log.append(("reset", None, obs.copy()))
        return obs, info

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        self.log.append(("step", int(action), obs.copy(), r, term or trunc))
        return obs, r, term, trunc, info


@pytest.mark.parametrize(
    "shared,acting",
    [(True, "loop"), (False, "loop"), (True, "threads")],
    ids=["shm-loop", "socket-loop", "shm-threads"],
)
@pytest.mark.parametrize(
    "core,max_steps", [(None, None), ("lstm", None), ("elstm", None), ("rtrl_elstm", None), (None, 3), ("lstm", 4)]
)
def test_unrolls_overlap_by_one_step_and_align_actions(tmp_path, core, max_steps, shared, acting):
    """Through shared memory or the socket, acted by one loop (rl_core/runtime/acting_loop.py) or by an actor
    thread beside an inference thread: the stored unrolls are what the envs saw and did."""
    logs = [[] for _ in range(K)]
    address = tp.Address("unix", path=str(tmp_path / "srv.0"))
    server = EnvServer(address, [lambda i=i: Recorder(logs[i], max_steps) for i in range(K)], seeds=list(range(K)))
    server_stop = threading.Event()
    threading.Thread(target=server.serve_forever, args=(server_stop,), daemon=True).start()

    torch.manual_seed(0)
    stem = MLPStem((4,), (16,))
    model = ActorCritic(stem, num_actions=2, core=make_core(core, stem.out_size + 3, 8) if core else None)
    stop = threading.Event()
    errors = ErrorBox(stop)
    batcher = InferenceBatcher(max_batch_size=K, timeout_s=0.001)
    learner_queue = queue.Queue(maxsize=3)
    conn, spec = connect_server(address, flags(shared_memory=shared), None)
    stats = RunStats()
    agent = make_agent(make_parser().parse_args(["--agent=impala", f"--unroll_length={T}"]), spec)
    actor = ActorThread(
        0,
        address,
        conn,
        spec,
        flags(),
        None,
        batcher,
        learner_queue,
        lambda n: model.initial_state(n),
        stats,
        stop,
        agent,
    )
    if acting == "loop":
        copy = inference_copy(model)
        loop = ActingLoop(
            [actor],
            lambda requests: answer(requests, copy, threading.Lock(), "cpu", agent),
            learner_queue,
            stop,
            K,
            0.001,
            lambda name, target: start_thread(name, target, errors),
        )
        start_thread("actor-loop", loop.run, errors)
    else:
        start_thread(
            "inference",
            lambda: inference_loop(batcher, inference_copy(model), threading.Lock(), "cpu", stop, agent),
            errors,
        )
        start_thread("actor", actor.run, errors)
    unrolls = [learner_queue.get(timeout=20) for _ in range(3)]
    stop.set()
    server_stop.set()
    assert errors.error is None
    assert (actor.conn.shared is not None) == shared  # the steps came through shared memory, or the socket

    for (u1, _), (u2, _) in zip(unrolls, unrolls[1:]):
        assert u1["obs"].shape == (T + 1, K, 4)
        for key in u1:
            torch.testing.assert_close(u2[key][0], u1[key][T])  # overlap by one step

    # Stitch the three unrolls into one timeline and compare with what the envs saw.
    timeline = {k: torch.cat([unrolls[0][0][k]] + [u[k][1:] for u, _ in unrolls[1:]]) for k in unrolls[0][0]}
    steps = 3 * T
    for slot in range(K):
        events = logs[slot]
        assert events[0][0] == "reset"
        np.testing.assert_array_equal(timeline["obs"][0, slot].numpy(), events[0][2])
        i = 1
        for t in range(1, steps + 1):
            kind, action, obs, reward, ended = events[i]
            assert kind == "step"
            assert timeline["action"][t, slot].item() == action  # index t holds the action that led to obs[t]
            assert timeline["reward"][t, slot].item() == reward  # ... and its reward, the old episode's last
            assert bool(timeline["done"][t, slot]) == ended
            if ended:
                i += 1
                assert events[i][0] == "reset"
                obs = events[i][2]  # obs[t] is the next episode's first observation
            np.testing.assert_array_equal(timeline["obs"][t, slot].numpy(), obs)
            i += 1
        if max_steps:  # episode ends inside every unroll, on every env
            assert all(timeline["done"][1 + T * u : 1 + T * (u + 1), slot].any() for u in range(3))
    # The behaviour logits stored at t are the model's output on obs[t-1]: the learner,
    # starting each unroll from the agent state stored at its start, reproduces them.
    for unroll, state in unrolls:
        with torch.no_grad():
            inputs = {
                "obs": unroll["obs"],
                "reward": unroll["reward"],
                "done": unroll["done"],
                "last_action": unroll["action"],
            }
            out, _ = model(inputs, state)
        torch.testing.assert_close(unroll["policy_logits"][1:], out["policy_logits"][:-1], rtol=1e-5, atol=1e-5)
        assert len(state) == len(model.initial_state(K)) and all(s.shape[0] == K for s in state)
    # The stored state of the second unroll is not the initial one (it was carried), unless feedforward.
    if core:
        assert any(not torch.equal(a, b) for a, b in zip(unrolls[1][1], model.initial_state(K)))
    assert stats.env_steps >= steps * K


class PendulumRecorder(gym.Wrapper):
    """Pendulum (a Box action) recording the actions it receives."""

    def __init__(self, log):
        super().__init__(gym.make("Pendulum-v1", max_episode_steps=7))  # truncations inside the unrolls
        self.log = log

    def step(self, action):
        self.log.append(np.array(action, copy=True))
        return self.env.step(action)


@pytest.mark.parametrize("env,squash", [("cartpole", False), ("pendulum", False), ("pendulum", True)])
def test_ppo_unrolls_store_what_the_learner_needs(tmp_path, env, squash):
    """--agent ppo: the store keeps the action (int64 or float32 [D]), the behaviour log-probability,
    distribution parameters and value; the learner reproduces them from the unroll; box actions
    reach the env clipped to its bounds; Pendulum's time limit arrives as truncated, not terminal."""
    logs = [[] for _ in range(K)]
    make = (lambda i: Recorder(logs[i])) if env == "cartpole" else (lambda i: PendulumRecorder(logs[i]))
    address = tp.Address("unix", path=str(tmp_path / "srv.0"))
    server = EnvServer(address, [lambda i=i: make(i) for i in range(K)], seeds=list(range(K)))
    server_stop = threading.Event()
    threading.Thread(target=server.serve_forever, args=(server_stop,), daemon=True).start()
    conn, spec = connect_server(address, flags(), None)
    args = ["--agent=ppo", "--mlp_sizes=16", f"--unroll_length={T}", "--initial_std=3"]
    if squash:
        args.append("--squash")
    agent = make_agent(make_parser().parse_args(args), spec)
    torch.manual_seed(0)
    model = agent.build_model()
    stop = threading.Event()
    errors = ErrorBox(stop)
    batcher = InferenceBatcher(max_batch_size=K, timeout_s=0.001)
    learner_queue = queue.Queue(maxsize=3)
    actor = ActorThread(
        0,
        address,
        conn,
        spec,
        flags(),
        None,
        batcher,
        learner_queue,
        lambda n: model.initial_state(n),
        RunStats(),
        stop,
        agent,
    )
    start_thread(
        "inference",
        lambda: inference_loop(batcher, inference_copy(model), threading.Lock(), "cpu", stop, agent),
        errors,
    )
    start_thread("actor", actor.run, errors)
    unrolls = [learner_queue.get(timeout=20) for _ in range(3)]
    stop.set()
    server_stop.set()
    assert errors.error is None
    for unroll, state in unrolls:
        if env == "cartpole":
            assert unroll["action"].dtype == torch.int64 and unroll["action"].shape == (T + 1, K)
            assert set(unroll) >= {"policy_logits", "log_prob", "baseline", "truncated"}
        else:
            assert unroll["action"].dtype == torch.float32 and unroll["action"].shape == (T + 1, K, 1)
            assert set(unroll) >= {"policy_mean", "policy_std", "log_prob", "baseline", "truncated"}
        with torch.no_grad():
            inputs = {
                "obs": unroll["obs"],
                "reward": unroll["reward"],
                "done": unroll["done"],
                "last_action": unroll["action"],
            }
            out, _ = model(inputs, state)
            dist = agent.distribution({k: out[k][:-1] for k in agent.param_keys})
            torch.testing.assert_close(
                dist.log_prob(unroll["action"][1:]), unroll["log_prob"][1:], rtol=1e-4, atol=1e-4
            )
        torch.testing.assert_close(unroll["baseline"][1:], out["baseline"][:-1], rtol=1e-5, atol=1e-5)
    if env == "pendulum":
        sent = np.concatenate([np.stack(log) for log in logs])
        assert sent.min() >= -2.0 and sent.max() <= 2.0  # clipped (or squashed) to Pendulum's bounds
        stored = torch.cat([u["action"][1:] for u, _ in unrolls])
        if not squash:  # a std of 3 puts samples outside [-2, 2]: stored unclipped, sent clipped
            assert stored.abs().max() > 2.0
        truncated = torch.cat([u["truncated"][1:] for u, _ in unrolls])
        done = torch.cat([u["done"][1:] for u, _ in unrolls])
        assert truncated.any() and torch.equal(truncated, done)  # every Pendulum end is a time limit


def test_each_step_stores_the_version_of_the_weights_that_chose_its_action(tmp_path):
    """Weights published as version v (``Publisher``) are what the next inference pass runs and the
    version its steps store (int32 [T+1, K]); the reset step that starts the run stores 0, and an
    unroll's first step is the previous one's last, version included."""
    address = tp.Address("unix", path=str(tmp_path / "srv.0"))
    server = EnvServer(address, [lambda: gym.make("CartPole-v1") for _ in range(K)], seeds=list(range(K)))
    server_stop = threading.Event()
    threading.Thread(target=server.serve_forever, args=(server_stop,), daemon=True).start()
    conn, spec = connect_server(address, flags(), None)
    agent = make_agent(make_parser().parse_args(["--agent=impala", "--mlp_sizes=16", f"--unroll_length={T}"]), spec)
    model = agent.build_model()
    inference, lock = inference_copy(model), threading.Lock()
    assert inference.policy_version == 0
    publish = Publisher(model, inference, lock)
    actor = ActorThread(
        0,
        address,
        conn,
        spec,
        flags(),
        None,
        None,
        None,
        lambda n: inference.initial_state(n),
        RunStats(),
        threading.Event(),
        agent,
    )
    unrolls = []
    try:
        actor.begin()
        for t in range(1, 2 * T + 1):  # (the lockstep runtime's order: rl_core/runtime/lockstep.py)
            with torch.no_grad():  # the version's weights: a baseline of t whatever the input
                model.baseline.weight.zero_()
                model.baseline.bias.fill_(float(t))
            publish(7 * t)
            request = Request(actor.inputs(), actor.state, K)
            answer([request], inference, lock, "cpu", agent)
            assert request.result[3] == 7 * t
            torch.testing.assert_close(
                request.result[1]["baseline"], np.full(K, float(t), np.float32), check_dtype=False
            )  # ... and ran the weights of that version
            actor.send(request.result[0])
            finished = actor.receive(*request.result)
            if finished is not None:
                unrolls.append(finished[0])
    finally:
        server_stop.set()
        actor.conn.close()
    first, second = unrolls
    assert first[POLICY_VERSION].dtype == torch.int32 and first[POLICY_VERSION].shape == (T + 1, K)
    assert first[POLICY_VERSION][:, 0].tolist() == [0] + [7 * t for t in range(1, T + 1)]
    assert second[POLICY_VERSION][:, 0].tolist() == [7 * t for t in range(T, 2 * T + 1)]
    assert all(torch.equal(u[POLICY_VERSION], u[POLICY_VERSION][:, :1].expand(T + 1, K)) for u in unrolls)


def test_inference_batcher_merges_requests_up_to_max():
    batcher = InferenceBatcher(max_batch_size=8, timeout_s=0.05)
    stop = threading.Event()
    requests = [batcher.submit({"x": torch.zeros(1, 3)}, (), 3) for _ in range(3)]
    batch = batcher.get_batch(stop)
    assert [r.size for r in batch] == [3, 3]  # 9 envs would exceed 8
    assert batcher.get_batch(stop) == [requests[2]]


def test_unroll_batcher_cuts_chunks_into_batches_of_b():
    q = queue.Queue()
    for i in range(5):  # 5 chunks of K=3 columns = 15 columns
        q.put(({"x": torch.full((T + 1, 3), float(i))}, (torch.full((3, 2), float(i)),)))
    batcher = UnrollBatcher(q, batch_size=4)
    stop = threading.Event()
    columns = []
    for _ in range(3):
        batch, (state,) = batcher.next_batch(stop)
        assert batch["x"].shape == (T + 1, 4) and state.shape == (4, 2)
        torch.testing.assert_close(batch["x"][0], state[:, 0])  # state travels with its column
        columns += batch["x"][0].tolist()
    assert columns == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]


def test_handshake_reset_by_a_dying_server_is_retried(tmp_path):
    """A connection accepted into the backlog of a server that dies is reset: retry, don't fail."""
    import os
    import socket
    import time

    path = str(tmp_path / "srv.0")
    dying = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dying.bind(path)
    dying.listen(4)
    result = {}

    def connect():
        try:
            result["conn"], result["spec"] = connect_server(
                tp.Address("unix", path=path), flags(connect_timeout=15), None
            )
        except Exception as e:  # noqa: BLE001 - reported below
            result["error"] = e

    client = threading.Thread(target=connect)
    client.start()
    time.sleep(0.5)  # the client waits for HELLO in the dying server's backlog
    dying.close()  # ... which resets it
    os.unlink(path)
    server = EnvServer(tp.Address("unix", path=path), [lambda: gym.make("CartPole-v1")] * 2, seeds=[0, 1])
    stop = threading.Event()
    threading.Thread(target=server.serve_forever, args=(stop,), daemon=True).start()
    client.join(20)
    stop.set()
    assert "error" not in result, result.get("error")
    assert result["spec"].num_envs == 2
    result["conn"].close()


def test_start_thread_names_the_os_thread():
    """top -H, py-spy and the throughput benchmark's per-role CPU split read these names."""
    stop = threading.Event()
    seen = {}

    def body():
        with open(f"/proc/self/task/{threading.get_native_id()}/comm") as f:
            seen["comm"] = f.read().strip()
        stop.set()

    start_thread("inference-0", body, ErrorBox(stop)).join(5)
    assert seen == {"comm": "inference-0"}


@pytest.mark.parametrize("core", [None, "lstm"])
def test_r2d2_sequences_overlap_by_their_stride_and_carry_the_state_of_their_first_step(tmp_path, core):
    """--agent r2d2: every `stride` steps an env hands over burn_in + T + 1 steps; consecutive
    sequences share all but `stride` of them, in order, and each carries the state that read its
    first observation (the learner, stepping the previous sequence from its state, reaches it)."""
    burn, T_, stride = 3, 4, 2
    logs = [[] for _ in range(K)]
    address = tp.Address("unix", path=str(tmp_path / "srv.0"))
    server = EnvServer(address, [lambda i=i: Recorder(logs[i], 5) for i in range(K)], seeds=list(range(K)))
    server_stop = threading.Event()
    threading.Thread(target=server.serve_forever, args=(server_stop,), daemon=True).start()
    conn, spec = connect_server(address, flags(), None)
    args = [
        "--agent=r2d2",
        "--mlp_sizes=16",
        "--hidden_size=8",
        "--dueling_hidden_size=8",
        f"--burn_in={burn}",
        f"--unroll_length={T_}",
        f"--sequence_stride={stride}",
        f"--num_actors={2 * K}",
    ]
    if core:
        args.append("--use_lstm")
    agent = make_agent(make_parser().parse_args(args), spec)
    assert agent.sequence() == (burn + T_, stride)
    torch.manual_seed(0)
    model = agent.build_model()
    stop = threading.Event()
    errors = ErrorBox(stop)
    batcher = InferenceBatcher(max_batch_size=K, timeout_s=0.001)
    learner_queue = queue.Queue(maxsize=4)
    seen_inputs = []

    def act(model_, inputs, state, greedy=False):
        seen_inputs.append(inputs["epsilon"].clone())
        return type(agent).act(agent, model_, inputs, state, greedy)

    agent.act = act
    # server 1 of 2 (env ids K..2K-1)
    actor = ActorThread(
        1,
        address,
        conn,
        spec,
        flags(num_actors=2 * K),
        None,
        batcher,
        learner_queue,
        lambda n: model.initial_state(n),
        RunStats(),
        stop,
        agent,
    )
    start_thread(
        "inference",
        lambda: inference_loop(batcher, inference_copy(model), threading.Lock(), "cpu", stop, agent),
        errors,
    )
    start_thread("actor", actor.run, errors)
    seqs = [learner_queue.get(timeout=20) for _ in range(4)]
    stop.set()
    server_stop.set()
    assert errors.error is None
    L = burn + T_
    for (u1, s1), (u2, s2) in zip(seqs, seqs[1:]):
        assert u1["obs"].shape == (L + 1, K, 4)
        for key in u1:
            torch.testing.assert_close(u2[key][: L + 1 - stride], u1[key][stride:])
        with torch.no_grad():
            inputs = {
                "obs": u1["obs"][:stride],
                "reward": u1["reward"][:stride],
                "done": u1["done"][:stride],
                "last_action": u1["action"][:stride],
            }
            _, state = model(inputs, s1)
        for a, b in zip(state, s2):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert all(u["done"].any() for u, _ in seqs)  # 5-step episodes end inside every sequence
    # The stitched timeline is what the envs saw, step for step.
    timeline_actions = torch.cat([seqs[0][0]["action"]] + [u["action"][L + 1 - stride :] for u, _ in seqs[1:]])
    for slot in range(K):
        sent = [e[1] for e in logs[slot] if e[0] == "step"]
        assert timeline_actions[1:, slot].tolist() == sent[: timeline_actions.shape[0] - 1]
    # Every request of this server's envs carried their own epsilons, 0.4^(1 + 7 i / (N - 1)) for i = K..2K-1.
    from rl_core.losses.r2d2 import ape_x_epsilons

    expected = ape_x_epsilons(2 * K)[K:].view(1, K)
    assert seen_inputs and all(torch.equal(e, expected) for e in seen_inputs)


def test_the_acting_loop_holds_back_a_server_whose_unroll_the_full_queue_refuses_and_stops_promptly(tmp_path):
    """Two servers, a learner queue of one that nobody reads: the loop hands over what fits and holds each
    server's next sequence (its envs wait, unstepped) instead of dropping it; once the learner takes one,
    acting goes on; stop ends the loop within its poll."""
    servers, actors = [], []
    torch.manual_seed(0)
    stem = MLPStem((4,), (16,))
    model = ActorCritic(stem, num_actions=2)
    stop = threading.Event()
    errors = ErrorBox(stop)
    learner_queue = queue.Queue(maxsize=1)
    stats = RunStats()
    agent = None
    for i in range(2):
        address = tp.Address("unix", path=str(tmp_path / f"srv.{i}"))
        server = EnvServer(address, [lambda: gym.make("CartPole-v1")] * K, seeds=list(range(K)))
        server_stop = threading.Event()
        threading.Thread(target=server.serve_forever, args=(server_stop,), daemon=True).start()
        servers.append(server_stop)
        conn, spec = connect_server(address, flags(), None)
        agent = agent or make_agent(make_parser().parse_args(["--agent=impala", f"--unroll_length={T}"]), spec)
        actors.append(
            ActorThread(
                i, address, conn, spec, flags(), None, None, learner_queue, model.initial_state, stats, stop, agent
            )
        )
    copy = inference_copy(model)
    loop = ActingLoop(
        actors,
        lambda requests: answer(requests, copy, threading.Lock(), "cpu", agent),
        learner_queue,
        stop,
        2 * K,
        0.001,
        lambda name, target: start_thread(name, target, errors),
    )
    thread = start_thread("actor-loop", loop.run, errors)
    deadline = time.monotonic() + 20
    while len(loop.held) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert learner_queue.full() and len(loop.held) == 2  # both servers' next sequences held, none dropped
    steps = stats.env_steps
    time.sleep(0.3)
    assert stats.env_steps == steps  # held servers do not step
    first = learner_queue.get(timeout=1)
    second = learner_queue.get(timeout=5)  # a held sequence moved in once there was room
    assert first[0]["obs"].shape == second[0]["obs"].shape == (T + 1, K, 4)
    assert stats.dropped_unrolls == 0 and errors.error is None
    stop.set()
    thread.join(2)
    assert not thread.is_alive()
    for server_stop in servers:
        server_stop.set()


def test_waiting_for_the_rest_of_a_batch_does_not_spin_on_a_server_already_arrived():
    """One server's step is in, the other's is not: the loop waits up to the batch's timeout for it asleep in the
    selector, not by asking again and again a level-triggered selector that still finds the first readable."""

    class Server:  # what the wait reads of an ActorThread
        def __init__(self, conn):
            self.conn, self.K = conn, K

    pairs = [socket.socketpair() for _ in range(2)]
    actors = [Server(ours) for ours, _ in pairs]
    loop = ActingLoop(actors, None, queue.Queue(), threading.Event(), 2 * K, 0.2, None)
    for actor in actors:
        loop.in_flight[actor] = (None, time.monotonic())
        loop.selector.register(actor.conn, selectors.EVENT_READ, actor)
    pairs[0][1].send(b"step")  # the first server's message has begun to arrive
    cpu, wall = time.thread_time(), time.monotonic()
    arrived = loop._wait()
    cpu, wall = time.thread_time() - cpu, time.monotonic() - wall
    assert arrived == [actors[0]] and wall >= 0.19  # it waited the batch's 0.2 s for the second server ...
    assert cpu < 0.05, f"{cpu:.3f} s of CPU in a 0.2 s wait"  # ... asleep
    assert [key.data for key in loop.selector.get_map().values()] == [actors[1]]  # the arrived one is out
    for a, b in pairs:
        a.close()
        b.close()
