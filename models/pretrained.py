"""A pretrained vision stem: --load_conv_net_from, --not_load_fc, --freeze_conv, --freeze_fc.

One meaning for every core (the published code froze fc with --freeze_conv, and only
for its RTRL model): "conv" is the stem's convolutional trunk, "fc" the stem's fully
connected layer; the core and the heads are never loaded or frozen here.
"""

from __future__ import annotations

from torch import nn

from rl_core.records import checkpoint_file
from rl_core.errors import UserError

STEM = "stem."
STEM_FC = "stem.fc."


def _is_fc(name: str) -> bool:
    return name.startswith(STEM_FC)


def _is_conv(name: str) -> bool:
    return name.startswith(STEM) and not _is_fc(name)


def load_stem(model: nn.Module, path: str, load_fc: bool = True) -> list[str]:
    """Copy the stem's conv (and fc unless ``load_fc`` is False) weights from a checkpoint."""
    saved = checkpoint_file.load(path, fix="pass --load_conv_net_from the model.tar of a run").get("model_state_dict")
    if saved is None:
        raise UserError(f"--load_conv_net_from {path}: no model_state_dict in it; pass a model.tar of a run")
    own = model.state_dict()
    wanted = [k for k in own if _is_conv(k) or (load_fc and _is_fc(k))]
    missing = [k for k in wanted if k not in saved]
    mismatched = [k for k in wanted if k in saved and saved[k].shape != own[k].shape]
    if missing or mismatched:
        what = f"missing {missing[:3]}" if missing else f"shapes differ for {mismatched[:3]}"
        raise UserError(f"--load_conv_net_from {path}: its stem does not fit this model ({what}); check --model")
    model.load_state_dict({k: saved[k] for k in wanted}, strict=False)
    return wanted


def freeze(model: nn.Module, conv: bool, fc: bool) -> list[str]:
    frozen = []
    for name, param in model.named_parameters():
        if (conv and _is_conv(name)) or (fc and _is_fc(name)):
            param.requires_grad_(False)
            frozen.append(name)
    return frozen


def apply_flags(model: nn.Module, flags) -> None:
    """Load and freeze what the flags say (before the optimizer is built)."""
    has_image_stem = hasattr(model.stem, "fc")
    wants = flags.load_conv_net_from or flags.freeze_conv or flags.freeze_fc
    if wants and not has_image_stem:
        raise UserError("--load_conv_net_from/--freeze_conv/--freeze_fc need an image stem (--model atari|resnet)")
    if flags.load_conv_net_from:
        load_stem(model, flags.load_conv_net_from, load_fc=not flags.not_load_fc)
    freeze(model, conv=flags.freeze_conv, fc=flags.freeze_fc)
