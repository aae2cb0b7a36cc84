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


def test_the_core_report_shows_features_that_saturate_an_elstms_gates():
    """fc units that never fire are counted; features 100 times larger put the eLSTM's gate pre-activations
    100 times further out (W x + b with b = 0)."""
    from models.elstm import ELSTMCore

    script = load_script("probe_checkpoint")
    frames = script.random_play_frames("PongNoFrameskip-v4", count=10)
    torch.manual_seed(0)
    stem = AtariNetStem((4, 84, 84))
    core = ELSTMCore(stem.out_size + 7, 16)
    with torch.no_grad():
        stem.fc.bias[:100] = -1e3  # never fire
        core.b_z.zero_()
        core.b_f.zero_()
    reports = []
    for scale in (1.0, 100.0):
        with torch.no_grad():
            stem.fc.weight.mul_(scale)
            stem.fc.bias[100:] = 0.0
        state = {**{f"stem.{k}": v for k, v in stem.state_dict().items()}}
        state.update({f"core.{k}": v for k, v in core.state_dict().items()})
        reports.append(script.core_report(state, frames))
    small, large = reports
    assert small[0].startswith("  fc: ") and int(small[0].split()[1]) <= 412
    pre = [[float(line.split()[-4]) for line in lines[1:]] for lines in (small, large)]
    assert len(pre[0]) == 2 and all(abs(b / a - 100) < 1 for a, b in zip(*pre)), pre
