"""Model assembly from flags and the env spec (the spec travels from the env server)."""

from __future__ import annotations

import torch

from rl_core.errors import UserError


def core_kind(flags) -> str | None:
    """--use_lstm / --use_quasi_lstm (--use_elstm) / --use_rtrl -> make_core's kind, None: feedforward."""
    if getattr(flags, "use_rtrl", False):
        return "rtrl_elstm"
    if getattr(flags, "use_quasi_lstm", False):
        return "elstm"
    if getattr(flags, "use_lstm", False):
        return "lstm"
    return None


def build_stem(flags, obs_shape: tuple):
    from models.mlp import MLPStem
    from models.vision import AtariNetStem, ResNetStem

    if len(obs_shape) == 1:
        sizes = tuple(int(s) for s in str(flags.mlp_sizes).split(",") if s)
        return MLPStem(obs_shape, sizes)
    if len(obs_shape) == 3:
        stem = {"atari": AtariNetStem, "resnet": ResNetStem}[flags.model](obs_shape)
        return stem.to(memory_format=torch.channels_last)  # conv weights to match the inputs
    raise UserError(f"observation shape {obs_shape} has no stem: vectors take the MLP, [C, H, W] images the CNNs")


def build_model(flags, spec: dict):
    from models.policy import ActorCritic, core_input_size
    from models.recurrent import make_core

    obs_shape = tuple(spec["obs_shape"])
    action = spec["action"]
    if action["kind"] != "discrete":
        raise UserError(f"action space {action['kind']} needs an agent with continuous actions; IMPALA takes discrete ones")
    stem = build_stem(flags, obs_shape)
    kind = core_kind(flags)
    last_action_input = not getattr(flags, "no_last_action", False)
    core = None
    if kind is not None:
        core = make_core(kind, input_size=core_input_size(stem.out_size, action["n"], last_action_input),
                         hidden_size=flags.hidden_size,
                         forget_bias=getattr(flags, "forget_bias", 0.0))
    value_stem = None
    if flags.value_net == "separate" and kind is None and len(obs_shape) == 1:
        value_stem = build_stem(flags, obs_shape)
    return ActorCritic(stem, action["n"], core=core, value_stem=value_stem, last_action_input=last_action_input)
