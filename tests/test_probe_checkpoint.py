"""scripts/probe_checkpoint.py: the optimizer's step shares and the stem's live channels from a checkpoint."""

import torch

from models.vision import AtariNetStem
from tests.proc_utils import load_script


def _checkpoint(stem: AtariNetStem, gradient_scale: float) -> dict:
    """A checkpoint as the learner saves it: the model under ``stem.``, RMSprop's state after one step."""
    model = torch.nn.Module()
    model.stem = stem
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3, alpha=0.99, eps=0.01)
    for p in model.parameters():
        p.grad = torch.full_like(p, gradient_scale)
    optimizer.step()
    return {"step": 160, "model_state_dict": model.state_dict(), "optimizer_state_dict": optimizer.state_dict()}


def test_step_share_is_sqrt_v_over_sqrt_v_plus_eps():
    script = load_script("probe_checkpoint")
    # one step of gradient g leaves v = 0.01 g^2: sqrt(v) = 0.1 g
    lines = script.optimizer_report(_checkpoint(AtariNetStem((4, 84, 84)), gradient_scale=1.0))
    assert len(lines) == 8 and lines[0].split()[0] == "stem.conv1.weight"
    for line in lines:
        assert "median sqrt(v) 1.00e-01" in line and "step share 0.91" in line  # 0.1 / (0.1 + 0.01)
    small = script.optimizer_report(_checkpoint(AtariNetStem((4, 84, 84)), gradient_scale=0.01))
    assert all("median sqrt(v) 1.00e-03" in line and "step share 0.09" in line for line in small)


def test_a_conv1_channel_that_never_fires_on_pong_is_counted_dead():
    script = load_script("probe_checkpoint")
    frames = script.random_play_frames("PongNoFrameskip-v4", count=10)
    assert frames.shape == (10, 4, 84, 84) and 0.0 <= frames.min() and frames.max() <= 1.0
    stem = AtariNetStem((4, 84, 84))
    with torch.no_grad():
        stem.conv1.bias[:] = 1.0  # every channel fires on the background...
        stem.conv1.bias[:3] = -1e3  # ...but these three, never
    state = _checkpoint(stem, gradient_scale=0.0)["model_state_dict"]
    lines = script.stem_report(state, frames)
    assert lines[0] == "  conv1: 29 of 32 channels fire on some frame"
    assert [line.split(":")[0].strip() for line in lines] == ["conv1", "conv2", "conv3"]


def test_parameters_are_numbered_not_misnamed_when_the_state_dict_holds_buffers():
    script = load_script("probe_checkpoint")
    checkpoint = _checkpoint(AtariNetStem((4, 84, 84)), gradient_scale=1.0)
    checkpoint["model_state_dict"] = {"obs_mean": torch.zeros(4), **checkpoint["model_state_dict"]}
    lines = script.optimizer_report(checkpoint)
    assert [line.split()[:2] for line in lines[:2]] == [["parameter", "0"], ["parameter", "1"]]
