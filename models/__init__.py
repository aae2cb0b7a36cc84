"""Model assembly from flags and the env spec (the spec travels from the env server)."""

from __future__ import annotations

from rl_core.errors import UserError


def build_model(flags, spec: dict):
    from models.mlp import MLPStem
    from models.policy import ActorCritic

    obs_shape = tuple(spec["obs_shape"])
    action = spec["action"]
    if action["kind"] != "discrete":
        raise UserError(f"action space {action['kind']} needs an agent with continuous actions; IMPALA takes discrete ones")
    value_stem = None
    if len(obs_shape) == 1:
        sizes = tuple(int(s) for s in str(flags.mlp_sizes).split(",") if s)
        stem = MLPStem(obs_shape, sizes)
        if flags.value_net == "separate":
            value_stem = MLPStem(obs_shape, sizes)
    else:
        raise UserError(f"observation shape {obs_shape} has no stem yet: vector observations take the MLP")
    return ActorCritic(stem, action["n"], core=None, value_stem=value_stem)
