"""benchmarks/agents.py's synthetic data: what an agent's data source takes from real actors."""

import numpy as np
import pytest
import torch

from benchmarks.agents import synthetic_unroll
from rl_core.data import frame_stacks
from rl_core.agents import make_agent
from rl_core.runtime.entry import parse_flags
from rl_core.runtime.evaluate_checkpoint import local_spec


@pytest.fixture(scope="module")
def atari():
    import torchbeast_atari.env as pkg

    f = parse_flags(pkg, ["--agent", "r2d2"])
    env = pkg.make_env(f, 0)
    spec = local_spec(env)
    env.close()
    return f, spec, make_agent(f, spec)


def test_frame_stack_unrolls_are_what_replay_frame_stack_stores(atari):
    f, spec, agent = atari
    assert f.replay_frame_stack  # Atari's R2D2 stores frame stacks once per frame
    unroll = synthetic_unroll(agent, spec, 3, np.random.default_rng(0), frame_stack=True)
    obs = unroll["obs"].transpose(0, 1).numpy()  # [K, L+1, C, H, W]
    assert obs.shape[2:] == tuple(spec.obs.shape) and obs.dtype == np.dtype(spec.obs.dtype)
    frames, index = frame_stacks.encode(obs)  # raises NotFrameStacks if they were not
    assert np.array_equal(frame_stacks.decode(torch.from_numpy(frames), torch.from_numpy(index)).numpy(), obs)
    # step t+1's stack is step t's shifted by one frame
    assert np.array_equal(obs[:, 1:, :-1], obs[:, :-1, 1:])


def test_unrolls_without_frame_stacks_are_not_stacks(atari):
    _, spec, agent = atari
    obs = synthetic_unroll(agent, spec, 3, np.random.default_rng(0))["obs"].transpose(0, 1).numpy()
    with pytest.raises(frame_stacks.NotFrameStacks):
        frame_stacks.encode(obs)
