"""ActorCritic's inputs: the one-hot last action reaches the core and heads unless --no_last_action."""

from __future__ import annotations

import pytest
import torch

from models import build_model
from rl_core.flags import make_parser

SPEC = {"obs_shape": [3], "action": {"kind": "discrete", "n": 4}}


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
