"""ActorCritic: the one-hot last action reaches the core and heads unless --no_last_action; a
bfloat16 stem on an inference copy (--inference_precision)."""

from __future__ import annotations

import copy

import pytest
import torch

from models import build_model
from rl_core.data.env_spec import DiscreteActions, EnvSpec, Observation
from rl_core.config.flags import make_parser

SPEC = EnvSpec(Observation((3,), "<f4"), DiscreteActions(4))


def outputs(model, last_action):
    T, B = 5, 3
    g = torch.Generator().manual_seed(0)
    inputs = {
        "obs": torch.rand(T, B, 3, generator=g),
        "reward": torch.randn(T, B, generator=g),
        "done": torch.zeros(T, B, dtype=torch.bool),
        "last_action": last_action,
    }
    out, _ = model(inputs, model.initial_state(B))
    return out


@pytest.mark.parametrize("flags", [[], ["--value_net=separate"], ["--use_lstm"], ["--use_rtrl"]])
def test_no_last_action_removes_it_from_every_input(flags):
    torch.manual_seed(0)
    with_action = build_model(make_parser().parse_args(flags), SPEC)
    torch.manual_seed(0)
    without = build_model(make_parser().parse_args([*flags, "--no_last_action"]), SPEC)
    a0, a1 = torch.zeros(5, 3, dtype=torch.long), torch.full((5, 3), 3, dtype=torch.long)

    # By default the last action changes both heads' outputs ...
    out0, out1 = outputs(with_action, a0), outputs(with_action, a1)
    for key in ("policy_logits", "baseline"):
        assert not torch.allclose(out0[key], out1[key]), key
    # ... with --no_last_action it is not an input at all: 4 fewer input units, same outputs.
    assert without.core_input_size == with_action.core_input_size - 4 == without.stem.out_size + 1
    if without.core is not None:
        assert without.core.input_size == without.core_input_size
    out0, out1 = outputs(without, a0), outputs(without, a1)
    for key in ("policy_logits", "baseline"):
        assert torch.equal(out0[key], out1[key]), key


@pytest.mark.parametrize("flags", [[], ["--value_net=separate"], ["--use_lstm"], ["--use_rtrl"]])
def test_a_new_episode_sees_no_reward_and_no_last_action_of_the_old_one(flags):
    """At a step with done=True (obs[t] is the new episode's first observation) the stored reward and
    action belong to the episode that ended: the model zeroes both there, and only there."""
    torch.manual_seed(0)
    model = build_model(make_parser().parse_args(flags), SPEC)
    T, B = 6, 4
    g = torch.Generator().manual_seed(1)
    done = torch.zeros(T, B, dtype=torch.bool)
    done[2, :2] = done[4, 1:3] = True
    inputs = {
        "obs": torch.rand(T, B, 3, generator=g),
        "reward": 3 * torch.randn(T, B, generator=g),
        "done": done,
        "last_action": torch.randint(0, 4, (T, B), generator=g),
    }

    def run(**changes):
        out, _ = model(dict(inputs, **changes), model.initial_state(B))
        return torch.stack([out["policy_logits"].sum(-1), out["baseline"]], -1)

    base = run()
    for t, b in [(2, 0), (2, 1), (4, 2)]:  # done steps: other reward and action, same outputs at and after t
        reward, action = inputs["reward"].clone(), inputs["last_action"].clone()
        reward[t, b] += 5.0
        action[t, b] = (action[t, b] + 1) % 4
        torch.testing.assert_close(run(reward=reward, last_action=action), base, rtol=0, atol=0)
    for t, b in [(2, 2), (3, 0), (4, 0)]:  # control: on a step inside an episode each changes the output at t
        reward = inputs["reward"].clone()
        reward[t, b] = 0.5 if reward[t, b] < 0 else -0.5  # another value after clipping to [-1, 1]
        action = inputs["last_action"].clone()
        action[t, b] = (action[t, b] + 1) % 4
        assert not torch.allclose(run(reward=reward)[t, b], base[t, b])
        assert not torch.allclose(run(last_action=action)[t, b], base[t, b])


# bf16 keeps 8 significant bits: one rounding is off by at most 2^-8 relative.  A stem is a
# few roundings deep, so its features and the logits stay within 2^-6 of float32.
BF16_BOUND = 2.0**-6


@pytest.mark.parametrize(
    "model_flags",
    [["--model=atari"], ["--model=resnet", "--use_lstm"], ["--model=atari", "--use_rtrl"], ["--value_net=separate"]],
)
def test_bfloat16_stem_inference_copy(model_flags):
    """set_stem_dtype(bfloat16): the stem(s) compute in bf16; the core, its state and the heads stay
    float32; the copy follows the float32 weights the learner publishes into it."""
    torch.manual_seed(0)
    image = "--value_net=separate" not in model_flags
    spec = EnvSpec(Observation((4, 84, 84), "|u1"), DiscreteActions(6)) if image else SPEC
    model = build_model(make_parser().parse_args(model_flags), spec)
    inference = copy.deepcopy(model)
    inference.set_stem_dtype(torch.bfloat16)
    stems = ("stem.", "value_stem.")
    for name, p in inference.named_parameters():
        assert p.dtype == (torch.bfloat16 if name.startswith(stems) else torch.float32), name

    T, B = 3, 2
    obs = torch.randint(0, 256, (T, B, 4, 84, 84), dtype=torch.uint8) if image else torch.rand(T, B, 3)
    inputs = {
        "obs": obs,
        "reward": torch.randn(T, B),
        "done": torch.tensor([[True, False]] * T),
        "last_action": torch.randint(0, spec.num_actions, (T, B)),
    }
    state = tuple(torch.randn_like(s) for s in model.initial_state(B))
    with torch.no_grad():
        full, full_state = model(inputs, state)
        half, half_state = inference(inputs, state)
        full_features = model.stem(obs.flatten(0, 1))
        half_features = inference.stem(obs.flatten(0, 1))
    assert half_features.dtype == torch.bfloat16
    assert (half_features.float() - full_features).norm() <= BF16_BOUND * full_features.norm()
    for key in ("policy_logits", "baseline"):
        assert half[key].dtype == torch.float32
        assert not torch.equal(half[key], full[key])  # bf16 is in use
        assert (half[key] - full[key]).abs().max() <= BF16_BOUND * full[key].abs().max()
    assert len(half_state) == len(full_state)
    assert all(s.dtype == torch.float32 for s in half_state)

    # Publishing the learner's float32 weights (the learner's own publish_weights) rounds the stem to bf16.
    import threading

    from rl_core.runtime.learner import Publisher

    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)
    Publisher(model, inference, threading.Lock())(1)  # what Learner.publish_weights calls (version: its batch count)
    torch.testing.assert_close(
        inference.stem.state_dict(), {k: v.bfloat16() for k, v in model.stem.state_dict().items()}, rtol=0, atol=0
    )
    assert torch.equal(inference.policy.weight, model.policy.weight)


@pytest.mark.parametrize("core", ["--use_lstm", "--use_rtrl"])
def test_the_stem_value_head_reads_the_cores_input(core):
    """``stem_baseline`` is a linear head on [features, reward, last action]: its gradient reaches the stem and
    never the core; a feedforward model has no such head (its heads read the stem already)."""
    torch.manual_seed(0)
    model = build_model(make_parser().parse_args([core, "--stem_value"]), SPEC)
    out = outputs(model, torch.zeros(5, 3, dtype=torch.long))
    assert out["stem_baseline"].shape == out["baseline"].shape == (5, 3)
    g = torch.Generator().manual_seed(0)
    inputs = {
        "obs": torch.rand(5, 3, 3, generator=g),
        "reward": torch.randn(5, 3, generator=g),
        "done": torch.zeros(5, 3, dtype=torch.bool),
        "last_action": torch.zeros(5, 3, dtype=torch.long),
    }
    core_in, _, _ = model.core_input(inputs)
    torch.testing.assert_close(out["stem_baseline"], model.stem_baseline(core_in).squeeze(-1))
    model.zero_grad()
    out["stem_baseline"].sum().backward()
    assert all(p.grad is None or not p.grad.any() for p in model.core.parameters())
    assert all(p.grad is not None and p.grad.any() for n, p in model.stem.named_parameters() if n.endswith("weight"))
    assert build_model(make_parser().parse_args([core]), SPEC).stem_baseline is None
    with pytest.raises(ValueError, match="recurrent core"):
        type(model)(model.stem, 4, stem_value=True)
