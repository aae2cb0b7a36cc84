"""scripts/recycling_probe.py: a checkpoint's policy, recycled as a run's learner recycles, and how far it moved."""

import pytest
import torch

from rl_core.records import checkpoint_file
from rl_core.agents import make_agent
from rl_core.data.env_spec import EnvSpec
from rl_core.runtime.entry import parse_flags
from tests.proc_utils import load_script
from torchbeast_atari import env as atari

# Not processes: each test plays Breakout with a Breakout checkpoint's model (whole games in the first), 10-40 s
# on 2 loaded cores: kept out of the fast tier with the process tests.
pytestmark = pytest.mark.multiprocess


def _saved_run(tmp_path) -> str:
    """A model.tar as a Breakout run with the package's defaults writes it (untrained weights)."""
    flags = parse_flags(atari, ["--env", "BreakoutNoFrameskip-v4"])
    probe = atari.make_env(flags, 0)
    spec = EnvSpec.of_env(probe.reset(seed=0)[0], probe.action_space)
    probe.close()
    torch.manual_seed(0)
    model = make_agent(flags, spec).build_model()
    path = str(tmp_path / "model.tar")
    torch.save({"flags": checkpoint_file.flags_dict(flags), "model_state_dict": model.state_dict(), "step": 160}, path)
    return path


def test_the_run_is_rebuilt_and_its_play_kept(tmp_path):
    script = load_script("recycling_probe")
    flags, agent, model, step = script.load(_saved_run(tmp_path))
    assert (flags.env, flags.batch_size, flags.recycle_tau, step) == ("BreakoutNoFrameskip-v4", 8, 0.025, 160)
    kept = script.keep_inputs(flags, agent, model, envs=2, steps=30, seed=1)
    assert kept["obs"].shape == (30, 2, 4, 84, 84) and kept["obs"].dtype == torch.uint8
    assert kept["done"][0].all() and not kept["done"][1:3].any()  # a first step, then the game goes on
    logp, value = script.outputs(model, kept, chunk=7)  # chunked as one pass
    full, _ = model(kept, ())
    torch.testing.assert_close(logp, torch.log_softmax(full["policy_logits"], -1))
    torch.testing.assert_close(value, full["baseline"])
    returns = script.game_returns(flags, agent, model, envs=2, games=2, seed=1)  # whole games: 5 lives each
    assert len(returns) == 2 and returns == script.game_returns(flags, agent, model, envs=2, games=2, seed=1)


def test_a_silent_unit_recycled_leaves_the_policy_and_a_live_one_removed_moves_it(tmp_path):
    script = load_script("recycling_probe")
    flags, agent, model, _ = script.load(_saved_run(tmp_path))
    kept = script.keep_inputs(flags, agent, model, envs=2, steps=21, seed=1)
    with torch.no_grad():
        model.stem.conv3.bias[0] = -1e3  # channel 0 of conv3 never fires: dormant on every frame
    before = script.outputs(model, kept)
    frames = kept["obs"].flatten(0, 1)
    recycled, counts = script.recycled_copy(model, frames, 0.0, seed=0)  # tau 0: only units silent on the frames
    assert counts == [0, 0, 1] and not torch.equal(recycled.stem.conv3.weight[0], model.stem.conv3.weight[0])
    change = script.policy_change(before, script.outputs(recycled, kept))
    assert change["kl_max"] < 1e-9 and change["greedy_changed"] == 0.0 and change["value_change"] < 1e-5
    # a unit that fires, its outgoing weights scaled up, then cut off as recycling cuts a dormant one
    live = int(torch.relu(model.stem.trunk(frames.float() / 255)).mean((0, 2, 3)).argmax())
    cut = script.recycled_copy(model, frames, flags.recycle_tau, seed=0)[0]
    with torch.no_grad():
        columns = slice(live * 49, (live + 1) * 49)  # conv3's 7 x 7 positions of that channel in fc's input
        model.stem.fc.weight[:, columns] *= 50
        cut.stem.fc.weight[:, columns] = 0
    moved = script.policy_change(script.outputs(model, kept), script.outputs(cut, kept))
    # (the policy head starts small, orthogonal gain 0.01: the logits move less than the value)
    assert moved["kl_mean"] > 1e-5 and moved["value_change"] > 0.1
