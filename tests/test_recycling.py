"""ReDo's recycling of dormant units (models/recycling.py) and the learner's --recycle_period."""

import numpy as np
import pytest
import torch

from models.init import orthogonal_init
from models.policy import ActorCritic
from models.recycling import RecyclePair, dormant_scores, recycle_dormant
from models.vision import AtariNetStem


@pytest.fixture(scope="module")
def pong_frames():
    """160 uint8 observations [4, 84, 84] of random play on real Pong."""
    from torchbeast_atari.env import create_env

    env = create_env("PongNoFrameskip-v4", seed=1)
    env.reset(seed=1)
    rng = np.random.default_rng(0)
    frames = []
    for _ in range(160):
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(6)))
        frames.append(np.asarray(obs))
        if terminated or truncated:
            env.reset()
    env.close()
    return torch.from_numpy(np.stack(frames))


def model_with_dead_filters(dead=(0, 3, 7, 20)):
    torch.manual_seed(0)
    model = ActorCritic(AtariNetStem((4, 84, 84)), num_actions=6)
    orthogonal_init(model)
    with torch.no_grad():
        for c in dead:  # silent on every frame in [0, 1]: every weight negative, bias below
            model.stem.conv1.weight[c] = -model.stem.conv1.weight[c].abs()
            model.stem.conv1.bias[c] = -1.0
    return model


def inputs(frames):
    T, B = 4, frames.shape[0] // 4
    return {
        "obs": frames[: T * B].view(T, B, *frames.shape[1:]),
        "done": torch.zeros(T, B, dtype=torch.bool),
        "reward": torch.zeros(T, B),
        "last_action": torch.zeros(T, B, dtype=torch.int64),
    }


def test_scores_follow_redos_definition():
    """s_i = E|h_i| / ((1/H) sum_k E|h_k|), the expectation over the batch and every position."""
    torch.manual_seed(0)
    h = torch.relu(torch.randn(6, 5, 3, 4))
    h[:, 2] = 0
    per_unit = [
        sum(abs(float(h[n, i, y, x])) for n in range(6) for y in range(3) for x in range(4)) / 72 for i in range(5)
    ]
    mean = sum(per_unit) / 5
    expected = torch.tensor([p / mean for p in per_unit])
    torch.testing.assert_close(dormant_scores(h), expected)
    assert dormant_scores(h)[2] == 0
    assert torch.all(dormant_scores(torch.zeros(4, 3)) == 0)


def test_recycling_silent_units_keeps_the_function(pong_frames):
    """tau 0 recycles the units silent on the frames scored; on those frames the model then computes
    exactly what it did (their outgoing weights are zero; a recycled conv2 filter reads the fresh conv1
    filters, and conv3 reads it through zeroed columns)."""
    model = model_with_dead_filters()
    model.eval()
    with torch.no_grad():
        before, _ = model(inputs(pong_frames))
    counts = recycle_dormant(model.recycle_pairs(pong_frames), tau=0.0)
    assert counts["0"] >= 4 and counts["1"] > 0 and counts["2"] > 0
    with torch.no_grad():
        after, _ = model(inputs(pong_frames))
    for key in before:
        torch.testing.assert_close(after[key], before[key], rtol=0, atol=1e-6)


def test_recycled_filters_are_centred_at_the_live_norm_and_fire(pong_frames):
    """ReDo's tau (0.025): dormant, not only silent; the fresh filters are centred, at the live ones' mean
    norm, bias 0, their outgoing weights zero, and they fire on frames they were not scored on."""
    model = model_with_dead_filters()
    pairs = model.recycle_pairs(pong_frames[:80])
    dormant = dormant_scores(pairs[0].activation) <= 0.025
    assert dormant[[0, 3, 7, 20]].all()
    conv2_kept = dormant_scores(pairs[1].activation) > 0.025
    recycle_dormant(pairs, tau=0.025)
    conv1, conv2 = model.stem.conv1, model.stem.conv2
    recycled, live = dormant.nonzero().flatten(), (~dormant).nonzero().flatten()
    assert torch.all(conv2.weight[conv2_kept][:, recycled] == 0)
    norms = conv1.weight.detach().flatten(1).norm(dim=1)
    torch.testing.assert_close(norms[recycled], torch.full((len(recycled),), float(norms[live].mean())))
    assert conv1.weight[recycled].flatten(1).mean(1).abs().max() < 1e-6
    assert torch.all(conv1.bias[recycled] == 0)
    awake = (model.recycle_pairs(pong_frames[80:])[0].activation > 0).flatten(2).any(2).any(0)
    assert awake[recycled].all()


def test_conv_read_through_flatten_zeroes_its_block_of_fc_columns(pong_frames):
    model = model_with_dead_filters(dead=())
    stem = model.stem
    with torch.no_grad():
        stem.conv3.weight[5] = -stem.conv3.weight[5].abs()
        stem.conv3.bias[5] = -10.0
    pairs = stem.recycle_pairs(pong_frames[:80])
    hw = pairs[2].activation.shape[-2] * pairs[2].activation.shape[-1]
    assert pairs[2].columns_per_unit == hw == 49
    before = stem(pong_frames[:80])
    assert recycle_dormant([pairs[2]], tau=0.0)["0"] >= 1
    assert torch.all(stem.fc.weight[:, 5 * hw : 6 * hw] == 0)
    assert stem.fc.weight[:, : 5 * hw].abs().sum() > 0 and stem.fc.weight[:, 6 * hw :].abs().sum() > 0
    torch.testing.assert_close(stem(pong_frames[:80]), before, rtol=0, atol=1e-6)


@pytest.mark.parametrize("optimizer_name", ["rmsprop", "adam"])
def test_optimizer_state_of_recycled_weights(pong_frames, optimizer_name):
    """Second moments of the fresh weights: the median of the live ones' (no first step of many learning
    rates); momenta zeroed, in the outgoing columns too."""
    model = model_with_dead_filters()
    params = list(model.parameters())
    optimizer = (
        torch.optim.RMSprop(params, lr=1e-3, momentum=0.9)
        if optimizer_name == "rmsprop"
        else torch.optim.Adam(params, lr=1e-3)
    )
    out, _ = model(inputs(pong_frames[:40]))
    (out["policy_logits"].pow(2).sum() + out["baseline"].pow(2).sum()).backward()
    optimizer.step()
    conv1, conv2 = model.stem.conv1, model.stem.conv2
    for p in (conv1.weight, conv2.weight):  # some state everywhere, dead filters' included
        for value in optimizer.state[p].values():
            if value.shape == p.shape:
                value.add_(torch.rand_like(value))
    pairs = model.recycle_pairs(pong_frames[:80])
    firing = (pairs[0].activation > 0).flatten(2).any(2).any(0)
    recycle_dormant(pairs, tau=0.025, optimizer=optimizer)
    dead, live = (~firing).nonzero().flatten(), firing.nonzero().flatten()
    second = "square_avg" if optimizer_name == "rmsprop" else "exp_avg_sq"
    first = "momentum_buffer" if optimizer_name == "rmsprop" else "exp_avg"
    state1, state2 = optimizer.state[conv1.weight], optimizer.state[conv2.weight]
    assert torch.all(state1[second][dead] == state1[second][live].median())
    assert torch.all(state1[first][dead] == 0) and state1[first][live].abs().sum() > 0
    assert torch.all(state2[first][:, dead] == 0) and state2[first][:, live].abs().sum() > 0
    assert torch.all(state2[second][:, dead] > 0)  # the next layer's second moments are its own: kept


def test_nothing_dormant_or_everything_dormant_changes_nothing():
    torch.manual_seed(0)
    layer, nxt = torch.nn.Linear(5, 4), torch.nn.Linear(4, 3)
    weights = [layer.weight.clone(), nxt.weight.clone()]
    h = torch.relu(layer(torch.randn(10, 5))) + 1.0  # every unit active
    assert recycle_dormant([RecyclePair(layer, nxt, h)], tau=0.1) == {"0": 0}
    assert recycle_dormant([RecyclePair(layer, nxt, torch.zeros(10, 4))], tau=0.1) == {"0": 4}
    assert torch.equal(layer.weight, weights[0]) and torch.equal(nxt.weight, weights[1])


def test_the_learner_recycles_every_period(pong_frames):
    """--recycle_period 2: after every second learner batch, dormant units recycled before publication;
    logs.csv's recycled_units counts them."""
    from rl_core.runtime.recycler import Recycler

    model = model_with_dead_filters()
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    recycler = Recycler(model, optimizer, period=2, tau=0.025, seed=1)
    obs = pong_frames[:84].view(21, 4, 4, 84, 84)
    assert recycler(1, obs) == {"recycled_units": 0.0}
    total = recycler(2, obs)["recycled_units"]
    assert total >= 4
    assert recycler(3, obs)["recycled_units"] == total
    firing = (model.recycle_pairs(obs[0])[0].activation > 0).flatten(2).any(2).any(0)
    assert firing[[0, 3, 7, 20]].all()
    assert recycler(4, obs)["recycled_units"] >= total


def test_a_model_without_recyclable_layers_is_refused_in_one_line():
    from models.mlp import MLPStem
    from rl_core.errors import UserError
    from rl_core.runtime.recycler import Recycler

    model = ActorCritic(MLPStem((4,)), num_actions=2)
    with pytest.raises(UserError, match="--recycle_period needs a model with recyclable layers.*MLPStem"):
        Recycler(model, None, period=10, tau=0.025, seed=0)


def test_resnet_recycles_its_blocks_first_convs_and_keeps_the_function(pong_frames):
    from models.vision import ResNetStem

    torch.manual_seed(0)
    stem = ResNetStem((4, 84, 84))
    block = stem.stages[1].res2
    with torch.no_grad():
        block.conv1.weight[3] = -block.conv1.weight[3].abs()
        block.conv1.bias[3] = -10.0
    before = stem(pong_frames[:40])
    pairs = stem.recycle_pairs(pong_frames[:40])
    assert len(pairs) == 6 and pairs[3].layer is block.conv1 and pairs[3].next_layer is block.conv2
    counts = recycle_dormant(pairs, tau=0.0)
    assert counts["3"] >= 1
    assert torch.all(block.conv2.weight[:, 3] == 0)
    torch.testing.assert_close(stem(pong_frames[:40]), before, rtol=0, atol=1e-6)


def test_under_torchrun_the_scores_count_every_ranks_inputs():
    """The per-unit means go through rl_core.numerics.collectives' all_reduce_sum, so every rank finds the units
    dormant on the ranks' inputs together: a unit silent on this rank's batch and active on another's
    is kept."""
    from rl_core.numerics import collectives

    class TwoRanks:  # this rank's means plus another rank's, on whose inputs unit 0 is active
        def all_reduce_sum(self, tensor):
            other = torch.zeros_like(tensor)
            other[0] = 1.0
            return tensor + other

        def any_rank(self, flag):
            return flag

    h = torch.ones(8, 4)
    h[:, 0] = 0
    assert dormant_scores(h)[0] == 0
    collectives.set_active(TwoRanks())
    try:
        assert dormant_scores(h)[0] > 0.5
    finally:
        collectives.set_active(None)


@pytest.mark.parametrize("frozen", ["conv", "fc"])
def test_a_frozen_stem_is_not_recycled(pong_frames, frozen):
    """--freeze_conv / --freeze_fc (a pretrained stem, models.pretrained) with --recycle_period: fresh weights in
    a frozen layer could never learn, and zeroed columns of a frozen next layer would silence a unit for good, so a
    pair with a frozen layer keeps its weights; the trainable pairs are still recycled."""
    from models.pretrained import freeze

    model = model_with_dead_filters()
    freeze(model, conv=frozen == "conv", fc=frozen == "fc")
    before = {k: v.clone() for k, v in model.stem.state_dict().items()}
    counts = recycle_dormant(model.recycle_pairs(pong_frames), tau=0.0)
    after = model.stem.state_dict()
    if frozen == "conv":  # every pair holds a frozen conv
        assert counts == {"0": 0, "1": 0, "2": 0}
        assert all(torch.equal(after[k], before[k]) for k in before)
    else:  # conv3 -> fc reads into the frozen fc: left; conv1 -> conv2 still recycled
        assert counts["2"] == 0 and torch.equal(after["fc.weight"], before["fc.weight"])
        assert counts["0"] >= 4 and not torch.equal(after["conv1.weight"], before["conv1.weight"])
