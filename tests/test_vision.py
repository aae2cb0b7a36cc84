import pytest
import torch

from models.vision import AtariNetStem, ResNetStem

OBS_SHAPES = [(4, 84, 84), (3, 64, 64), (3, 72, 96)]

# Flattened conv output sizes worked out by hand from the layer arithmetic.
ATARI_CONV = {
    (4, 84, 84): 64 * 7 * 7,  # 84 -> 20 -> 9 -> 7 (torchbeast's 3136)
    (3, 64, 64): 64 * 4 * 4,  # 64 -> 15 -> 6 -> 4
    (3, 72, 96): 64 * 5 * 8,  # 72 -> 17 -> 7 -> 5, 96 -> 23 -> 10 -> 8
}
RESNET_CONV = {
    (4, 84, 84): 32 * 11 * 11,  # 84 -> 42 -> 21 -> 11 (torchbeast's 3872)
    (3, 64, 64): 32 * 8 * 8,  # 64 -> 32 -> 16 -> 8
    (3, 72, 96): 32 * 9 * 12,  # 72 -> 36 -> 18 -> 9, 96 -> 48 -> 24 -> 12
}


@pytest.mark.parametrize("obs_shape", OBS_SHAPES)
@pytest.mark.parametrize(
    "stem_cls,out_size,conv_sizes", [(AtariNetStem, 512, ATARI_CONV), (ResNetStem, 256, RESNET_CONV)]
)
def test_output_shape_and_fc_size(stem_cls, out_size, conv_sizes, obs_shape):
    torch.manual_seed(0)
    stem = stem_cls(obs_shape)
    assert stem.out_size == out_size
    assert stem.fc.in_features == conv_sizes[obs_shape]
    assert stem.fc.out_features == out_size
    obs = torch.randint(0, 256, (5, *obs_shape), dtype=torch.uint8)
    with torch.no_grad():
        out = stem(obs)
    assert out.shape == (5, out_size)
    assert out.dtype == torch.float32
    assert (out >= 0).all()  # ends in ReLU
    assert out.abs().sum() > 0


@pytest.mark.parametrize("stem_cls", [AtariNetStem, ResNetStem])
def test_uint8_is_scaled_by_1_over_255(stem_cls):
    torch.manual_seed(0)
    stem = stem_cls((3, 64, 64))
    obs = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
    with torch.no_grad():
        from_uint8 = stem(obs)
        from_float = stem(obs.float() / 255.0)
        unscaled = stem(obs.float())
    torch.testing.assert_close(from_uint8, from_float)
    assert not torch.allclose(from_uint8, unscaled)
    # The scale is folded into the first conv's weights: their gradients are those of x / 255 too.
    grads = []
    for x in (obs, obs.float() / 255.0):
        stem.zero_grad()
        stem(x).square().sum().backward()
        grads.append([p.grad.clone() for p in stem.parameters()])
    for from_uint8_grad, from_float_grad in zip(*grads):
        torch.testing.assert_close(from_uint8_grad, from_float_grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("stem_cls", [AtariNetStem, ResNetStem])
def test_leading_dims_and_wrong_shape(stem_cls):
    stem = stem_cls((4, 84, 84))
    obs = torch.zeros(3, 2, 4, 84, 84, dtype=torch.uint8)
    with torch.no_grad():
        assert stem(obs).shape == (3, 2, stem.out_size)
    with pytest.raises(ValueError):
        stem(torch.zeros(2, 3, 64, 64, dtype=torch.uint8))


def test_gradients_reach_first_conv():
    stem = ResNetStem((3, 72, 96))
    stem(torch.rand(2, 3, 72, 96)).sum().backward()
    first = stem.stages[0].conv.weight
    assert first.grad is not None and first.grad.abs().sum() > 0


def test_the_atari_impala_default_init_lets_the_stem_see_pong():
    """With PyTorch's default init the AtariNet stem is blind to Pong (its features hardly vary
    across frames: the biases dominate after four ReLU layers), and IMPALA's value head stayed at 0.5%
    explained variance for 1.4M steps.  The package's IMPALA default (orthogonal, gain sqrt 2, biases 0)
    keeps the frames' differences: measured 36x the default init's spread."""
    import numpy as np

    from models import build_model
    from rl_core.data.env_spec import DiscreteActions, EnvSpec, Observation
    from rl_core.runtime import entry
    from torchbeast_atari import env as atari

    pong = atari.create_env("PongNoFrameskip-v4", 0)
    pong.reset()
    rng = np.random.default_rng(0)
    frames = torch.from_numpy(np.stack([pong.step(int(rng.integers(6)))[0] for _ in range(80)]))
    spec = EnvSpec(Observation((4, 84, 84), "|u1"), DiscreteActions(6))

    def spread(argv):
        flags = entry.parse_flags(atari, argv)
        torch.manual_seed(0)
        with torch.no_grad():
            return build_model(flags, spec).stem(frames).std(0).mean().item(), flags.init

    package, init = spread(["--agent=impala"])
    torch_default, _ = spread(["--agent=impala", "--init=default"])
    assert init == "orthogonal"
    assert package > 10 * torch_default, (package, torch_default)
