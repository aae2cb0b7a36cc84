"""--load_conv_net_from / --not_load_fc / --freeze_conv / --freeze_fc: one meaning for every core."""

import argparse

import pytest
import torch

from models import build_model
from models.pretrained import apply_flags
from rl_core.records import checkpoint_file
from rl_core.agents.impala.agent import ImpalaAgent
from rl_core.data.env_spec import DiscreteActions, EnvSpec, Observation
from rl_core.errors import UserError
from rl_core.config.flags import make_parser

SPEC = EnvSpec(Observation((4, 84, 84), "|u1"), DiscreteActions(6))
CORES = {"none": {}, "lstm": {"use_lstm": True}, "elstm": {"use_elstm": True}, "rtrl": {"use_rtrl": True}}


def flags(**kw):
    """The shared parser's flags, with these values."""
    base = dict(
        model="atari",
        use_lstm=False,
        use_elstm=False,
        use_rtrl=False,
        hidden_size=32,
        mlp_sizes="64,64",
        value_net="shared",
        load_conv_net_from=None,
        not_load_fc=False,
        freeze_conv=False,
        freeze_fc=False,
        reward_clipping="abs_one",
        discounting=0.99,
        baseline_cost=0.5,
        entropy_cost=0.01,
        clip_rho_threshold=1.0,
        clip_pg_rho_threshold=1.0,
        clip_c_threshold=1.0,
        vtrace_lambda=1.0,
    )
    base.update(kw)
    return argparse.Namespace(**{**vars(make_parser().parse_args([])), **base})


def stem_params(model, part):
    return {
        k: v.clone()
        for k, v in model.state_dict().items()
        if k.startswith("stem.") and (k.startswith("stem.fc.") == (part == "fc"))
    }


@pytest.fixture
def pretrained(tmp_path):
    torch.manual_seed(0)
    model = build_model(flags(), SPEC)
    path = str(tmp_path / "model.tar")
    checkpoint_file.save(path, {"model_state_dict": model.state_dict()})
    return model, path


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("not_load_fc", [False, True])
def test_load_copies_conv_and_fc_unless_told(pretrained, core, not_load_fc):
    source, path = pretrained
    torch.manual_seed(1)
    model = build_model(flags(**CORES[core]), SPEC)
    fresh_fc = stem_params(model, "fc")
    apply_flags(model, flags(**CORES[core], load_conv_net_from=path, not_load_fc=not_load_fc))
    for k, v in stem_params(source, "conv").items():
        torch.testing.assert_close(model.state_dict()[k], v)
    expected_fc = fresh_fc if not_load_fc else stem_params(source, "fc")
    for k, v in expected_fc.items():
        torch.testing.assert_close(model.state_dict()[k], v)
    # Heads are never loaded.
    assert not torch.equal(model.policy.weight, source.policy.weight)


def random_batch(T=3, B=2, A=6):
    return {
        "obs": torch.randint(0, 255, (T + 1, B, 4, 84, 84), dtype=torch.uint8),
        "reward": torch.randn(T + 1, B),
        "done": torch.zeros(T + 1, B, dtype=torch.bool),
        "action": torch.randint(0, A, (T + 1, B)),
        "policy_logits": torch.randn(T + 1, B, A),
    }


@pytest.mark.parametrize("core", CORES)
@pytest.mark.parametrize("freeze_conv, freeze_fc", [(True, False), (False, True), (True, True)])
def test_freeze_keeps_exactly_those_weights_fixed(core, freeze_conv, freeze_fc):
    f = flags(**CORES[core], freeze_conv=freeze_conv, freeze_fc=freeze_fc)
    torch.manual_seed(2)
    model = build_model(f, SPEC)
    apply_flags(model, f)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.RMSprop([p for p in model.parameters() if p.requires_grad], lr=0.01)
    loss, _ = ImpalaAgent(f).loss(model, random_batch(), model.initial_state(2))
    loss.backward()
    optimizer.step()
    after = model.state_dict()
    for name, _ in model.named_parameters():
        is_fc = name.startswith("stem.fc.")
        is_conv = name.startswith("stem.") and not is_fc
        frozen = (freeze_conv and is_conv) or (freeze_fc and is_fc)
        assert torch.equal(before[name], after[name]) == frozen, name


def test_bad_uses_are_one_clear_error(tmp_path, pretrained):
    _, path = pretrained
    mlp_spec = EnvSpec(Observation((4,), "<f4"), DiscreteActions(2))
    with pytest.raises(UserError, match="need an image stem"):
        apply_flags(build_model(flags(), mlp_spec), flags(freeze_conv=True))
    with pytest.raises(UserError, match="does not fit this model"):
        apply_flags(build_model(flags(model="resnet"), SPEC), flags(load_conv_net_from=path))
    with pytest.raises(UserError, match="does not exist"):
        apply_flags(build_model(flags(), SPEC), flags(load_conv_net_from=str(tmp_path / "nope.tar")))
