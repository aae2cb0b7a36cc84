"""The replay data path: chunks from the learner queue into the replay, time-major batches with
their indices, IS weights and states out of it, and the replay ratio held in both directions."""

from __future__ import annotations

import queue
import threading
import time
import types

import numpy as np
import pytest
import torch

from rl_core.data.replay_source import ReplaySource
from rl_core.runtime.threads import ErrorBox, start_thread
from rl_core.data.batch import POLICY_VERSION
from tests.proc_utils import wait_for

L1, K, B, T = 7, 4, 8, 4  # sequences of 7 steps from 4 envs; batches of 8 sequences, 4 trained steps each
STRIDE = 2


def make_flags(**kw):
    base = dict(
        batch_size=B,
        unroll_length=T,
        replay_ratio=2.0,
        replay_buffer_size=64,
        replay_buffer_min_size=12,
        priority_exponent=0.9,
        importance_sampling_exponent=0.6,
        checkpoint_replay=False,
        replay_frame_stack=False,
    )
    base.update(kw)
    return types.SimpleNamespace(**base)


def chunk(i):
    """K sequences [L1, K]; every value names the chunk and the env, the state too."""
    ids = torch.tensor([100 * i + k for k in range(K)], dtype=torch.float32)
    unroll = {
        "obs": ids.view(1, K, 1).expand(L1, K, 3).clone(),
        "reward": ids.expand(L1, K).clone(),
        "done": torch.zeros(L1, K, dtype=torch.bool),
        "action": torch.zeros(L1, K, dtype=torch.int64),
    }
    return unroll, (ids.view(K, 1).expand(K, 5).clone(),)


def test_batches_are_time_major_with_state_indices_and_weights():
    q = queue.Queue()
    source = ReplaySource(q, make_flags(), stride=STRIDE, seed=0)
    for i in range(5):  # learning starts at the 3rd (12 sequences); 2 more give rho I - S = 32: two batches
        source.insert(*chunk(i))
    assert len(source.replay) == 20 and source.take_new_steps() == 5 * K * STRIDE
    batch, (state,) = source.next_batch(threading.Event())
    assert batch["obs"].shape == (L1, B, 3) and batch["reward"].shape == (L1, B)
    assert batch["replay/index"].shape == (B,) and batch["replay/weight"].shape == (B,)
    assert batch["replay/weight"].max().item() == pytest.approx(1.0)
    for b in range(B):  # each column and its state are one stored sequence
        assert (batch["reward"][:, b] == batch["reward"][0, b]).all()
        assert state[b, 0].item() == batch["reward"][0, b].item()
    source.update_priorities(batch["replay/index"][:1], np.array([1e6]))
    batch, _ = source.next_batch(threading.Event())
    assert (batch["replay/index"] == batch["replay/index"][0]).float().mean() > 0.5  # that one dominates


def test_learner_waits_for_min_size_and_for_the_ratio():
    q = queue.Queue()
    flags = make_flags()
    source = ReplaySource(q, flags, stride=STRIDE, seed=0)
    stop = threading.Event()
    got = []
    start_thread("learner", lambda: [got.append(source.next_batch(stop)) for _ in range(100)], ErrorBox(stop))

    def may_sample():  # (the learner thread waits while this is false: no batch comes until an insert)
        with source.cond:
            return source._may_sample()

    source.insert(*chunk(0))
    source.insert(*chunk(1))
    time.sleep(0.3)
    assert got == [] and not may_sample()  # 8 sequences < min size 12
    source.insert(*chunk(2))  # 12: learning starts, counting inserts from here
    wait_for(lambda: got, 60, "the first batch")  # (a loaded machine may take its time)
    assert len(got) == 1 and not may_sample()  # budget rho*0 - 0 = 0 >= 0: one batch, then S = 32 > 0
    for i in range(3, 5):  # each chunk: I += K*STRIDE = 8 env steps -> rho I += 16, a batch trains B*T = 32
        source.insert(*chunk(i))
    wait_for(lambda: len(got) >= 2, 60, "the second batch")
    assert len(got) == 2 and not may_sample()  # rho I = 32 >= S = 32 allowed one more
    assert source.trained_steps == 2 * B * T
    stop.set()


def test_acting_waits_for_a_learner_that_is_behind():
    """The feeder inserts only while rho I <= S + 2 B T: with no learner the queue fills and stays full."""
    q = queue.Queue(maxsize=2)
    flags = make_flags(replay_ratio=1.0)
    source = ReplaySource(q, flags, stride=STRIDE, seed=0)
    stop = threading.Event()
    start_thread("feeder", lambda: source.feed(stop), ErrorBox(stop))

    def feeder_stopped():  # (the feeder takes no chunk from the queue while this is true)
        with source.cond:
            return not source._may_insert()

    puts = 0  # chunks put until the queue is full and the feeder stopped (told by its state, not by a timeout)
    while not (q.full() and feeder_stopped()):
        if q.full():  # the feeder takes one next, or has just stopped
            wait_for(lambda: not q.full() or feeder_stopped(), 60, "the feeder to take a chunk or stop")
            continue
        q.put(chunk(puts))
        puts += 1
    # min size 12 = 3 chunks, then rho I may run 2 B T = 64 steps ahead = 8 chunks of 8 steps: 9 more
    # (the 9th makes 72 > 64 and stops the feeder), and 2 waiting in the full queue
    time.sleep(0.3)
    assert len(source.replay) == 12 * 4 and puts == 12 + 2 and q.qsize() == 2
    before = len(source.replay)
    for _ in range(3):  # the learner trains 3 batches (96 steps): the feeder goes on
        source.next_batch(stop)
    wait_for(lambda: len(source.replay) > before, 60, "the feeder to go on")
    assert source.steps_at_start is not None
    assert (
        flags.replay_ratio * (source.inserted_steps - source.steps_at_start)
        <= source.trained_steps + 2 * B * T + K * STRIDE
    )
    stop.set()


def test_replay_checkpoint_round_trip(tmp_path):
    flags = make_flags(checkpoint_replay=True)
    source = ReplaySource(queue.Queue(), flags, stride=STRIDE, seed=3)
    for i in range(6):  # learning starts at the 3rd chunk; 3 more: rho I - S = 48, room for two batches
        source.insert(*chunk(i))
    source.next_batch(threading.Event())
    source.save(str(tmp_path))
    restored = ReplaySource(queue.Queue(), flags, stride=STRIDE, seed=99)
    restored.restore(str(tmp_path))
    assert len(restored.replay) == 24 and restored.trained_steps == source.trained_steps
    assert restored.steps_at_start == source.steps_at_start and restored.inserted_steps == source.inserted_steps
    a, sa = source.next_batch(threading.Event())
    b, sb = restored.next_batch(threading.Event())
    for key in a:
        torch.testing.assert_close(a[key], b[key])
    torch.testing.assert_close(sa[0], sb[0])
    # without --checkpoint_replay nothing is written, and a resume starts empty
    fresh = ReplaySource(queue.Queue(), make_flags(), stride=STRIDE)
    fresh.restore(str(tmp_path))
    assert len(fresh.replay) == 0 and fresh.steps_at_start is None


def with_versions(i):
    """``chunk(i)`` with the actors' policy versions: 10 i + t at step t."""
    unroll, state = chunk(i)
    unroll[POLICY_VERSION] = (10 * i + torch.arange(L1, dtype=torch.int32)).view(L1, 1).expand(L1, K).clone()
    return unroll, state


@pytest.mark.parametrize("window", [None, 2])
def test_policy_versions_travel_with_their_sequences(window):
    """The learner's policy lag of a replay batch is the age of its data: each column's versions are those its
    steps were stored with (whole sequences, or SAC's windows of 2 consecutive steps)."""
    source = ReplaySource(queue.Queue(), make_flags(), stride=STRIDE, seed=0, window=window)
    for i in range(5):
        source.insert(*with_versions(i))
    batch, _ = source.next_batch(threading.Event())
    versions, chunks = batch[POLICY_VERSION], (batch["reward"][0] // 100).to(torch.int32)
    assert versions.dtype == torch.int32 and versions.shape == (window or L1, B)
    first = versions[0] - 10 * chunks  # the step of each column's first row: 0, or a window's offset
    steps = torch.arange(versions.shape[0], dtype=torch.int32).view(-1, 1)
    assert torch.equal(versions, 10 * chunks + first + steps)
    assert (first == 0).all() if window is None else ((first >= 0) & (first <= L1 - window)).all()


def test_a_replay_saved_without_policy_versions_is_restored_and_they_are_left_out(tmp_path):
    flags = make_flags(checkpoint_replay=True)
    old = ReplaySource(queue.Queue(), flags, stride=STRIDE, seed=3)
    for i in range(6):
        old.insert(*chunk(i))  # (a replay.tar of before the field)
    old.save(str(tmp_path))
    restored = ReplaySource(queue.Queue(), flags, stride=STRIDE, seed=3)
    restored.restore(str(tmp_path))
    restored.insert(*with_versions(6))
    batch, _ = restored.next_batch(threading.Event())
    assert POLICY_VERSION not in batch and len(restored.replay) == 28


def atari_sequences(n: int, length: int, seed: int = 0) -> np.ndarray:
    """n sequences of `length` real Pong frame stacks [4, 84, 84], an episode start inside each
    (the env's reset fills the stack with its reset frame)."""
    from torchbeast_atari.env import create_env

    env = create_env("PongNoFrameskip-v4", seed=seed)
    rng = np.random.default_rng(seed)
    out = np.empty((n, length, 4, 84, 84), np.uint8)
    obs, _ = env.reset(seed=seed)
    for i in range(n):
        restart = int(rng.integers(1, length))
        for t in range(length):
            if t == restart:
                obs, _ = env.reset()
            out[i, t] = obs
            obs, *_ = env.step(int(rng.integers(6)))
    return out


def test_frame_stacks_are_stored_once_and_restored_exactly():
    from rl_core.data import frame_stacks

    obs = atari_sequences(3, 25)
    frames, index = frame_stacks.encode(obs)
    assert frames.shape == (3, 25 + 3, 84, 84) and index.shape == (3, 25, 4)
    assert frames.nbytes / obs.nbytes == pytest.approx(28 / 100)
    np.testing.assert_array_equal(frame_stacks.decode(torch.from_numpy(frames), torch.from_numpy(index)).numpy(), obs)
    # RGB images are not frame stacks: refused, not stored wrongly
    rgb = np.random.default_rng(0).integers(0, 255, (2, 5, 3, 64, 64), dtype=np.uint8)
    with pytest.raises(frame_stacks.NotFrameStacks):
        frame_stacks.encode(rgb)


def test_replay_with_frame_stacks_returns_the_observations_inserted():
    flags = make_flags(replay_frame_stack=True, replay_buffer_min_size=2, batch_size=2, replay_ratio=100.0)
    source = ReplaySource(queue.Queue(), flags, stride=STRIDE, seed=0)
    obs = atari_sequences(2, L1, seed=1)  # K = 2 envs
    unroll = {
        "obs": torch.from_numpy(obs).transpose(0, 1).contiguous(),
        "reward": torch.zeros(L1, 2),
        "done": torch.zeros(L1, 2, dtype=torch.bool),
        "action": torch.zeros(L1, 2, dtype=torch.int64),
    }
    source.insert(unroll, ())
    assert source.replay.nbytes / flags.replay_buffer_size < 0.5 * obs[0].nbytes  # per sequence: (L+3) / 4(L+1) frames
    batch, _ = source.next_batch(threading.Event())
    for b, i in enumerate(batch["replay/index"].tolist()):
        np.testing.assert_array_equal(batch["obs"][:, b].numpy(), obs[i])
    from rl_core.errors import RunFailure

    rgb = {**unroll, "obs": torch.randint(0, 255, (L1, 2, 3, 8, 8), dtype=torch.uint8)}
    with pytest.raises(RunFailure, match="--no-replay_frame_stack"):
        ReplaySource(queue.Queue(), flags, stride=STRIDE).insert(rgb, ())
