"""Model assembly from flags and the env spec (the spec travels from the env server)."""

from __future__ import annotations

from rl_core.data.env_spec import ActionSpace, DiscreteActions, EnvSpec
from rl_core.errors import UserError


def core_kind(flags) -> str | None:
    """--use_lstm / --use_elstm (--use_elstm) / --use_rtrl -> make_core's kind, None: feedforward."""
    if flags.use_rtrl:
        return "rtrl_elstm"
    if flags.use_elstm:
        return "elstm"
    if flags.use_lstm:
        return "lstm"
    return None


def resnet_channels(flags) -> tuple[int, ...]:
    """--resnet_channels "16,32,32" -> (16, 32, 32); one line naming the flag if it is not positive integers."""
    text = str(flags.resnet_channels)
    try:
        channels = tuple(int(c) for c in text.split(",") if c.strip())
    except ValueError:
        channels = ()
    if not channels or min(channels) <= 0:
        raise UserError(f"--resnet_channels {text!r}: give positive integers separated by commas, e.g. 16,32,32")
    return channels


def build_stem(flags, obs_shape: tuple):
    import torch  # here, not at the top: env servers read core_kind and resnet_channels without torch

    from models.mlp import MLPStem
    from models.vision import AtariNetStem, GridStem, MinAtarStem, ResNetStem

    if len(obs_shape) == 1:
        sizes = tuple(int(s) for s in str(flags.mlp_sizes).split(",") if s)
        return MLPStem(obs_shape, sizes)
    if len(obs_shape) == 3:
        if flags.model == "resnet":
            stem = ResNetStem(obs_shape, channels=resnet_channels(flags))
        elif flags.model == "grid":
            return GridStem(obs_shape)
        elif flags.model == "minatar":
            return MinAtarStem(obs_shape)
        else:
            stem = AtariNetStem(obs_shape)
        return stem.to(memory_format=torch.channels_last)  # conv weights to match the inputs
    raise UserError(f"observation shape {obs_shape} has no stem: vectors take the MLP, [C, H, W] images the CNNs")


def action_size(action: ActionSpace) -> int:
    """Width of an action: A for discrete actions (fed one-hot), D for a box of shape [D]."""
    if isinstance(action, DiscreteActions):
        return action.n
    if len(action.shape) == 1:
        return action.shape[0]
    raise UserError(f"action space {action.to_json()} is not supported: Discrete, or a Box of shape [D]")


def build_model(flags, spec: EnvSpec):
    """The actor-critic for the env spec: a categorical head for discrete actions, a Gaussian
    one for box actions; observation / value normalizers and orthogonal init if the flags ask."""
    from functools import partial

    from models.heads import GaussianHead
    from models.policy import ActorCritic, core_input_size
    from models.recurrent import make_core

    obs_shape = spec.obs.shape
    action = spec.action
    n = action_size(action)
    stem = build_stem(flags, obs_shape)
    kind = core_kind(flags)
    last_action_input = not flags.no_last_action
    core = None
    if kind is not None:
        core = make_core(
            kind,
            input_size=core_input_size(stem.out_size, n, last_action_input),
            hidden_size=flags.hidden_size,
            forget_bias=flags.forget_bias,
        )
    value_stem = None
    if flags.value_net == "separate" and kind is None and len(obs_shape) == 1:
        value_stem = build_stem(flags, obs_shape)
    head = None
    if not spec.discrete:
        head = partial(
            GaussianHead,
            action_dim=n,
            std_kind=flags.std_kind,
            min_std=flags.min_std,
            initial_std=flags.initial_std,
            state_dependent=flags.state_dependent_std,
        )
    obs_normalizer = value_normalizer = None
    if flags.obs_normalization:
        from rl_core.numerics.normalization import RunningMeanStd

        obs_normalizer = RunningMeanStd(obs_shape)
    if flags.value_normalization != "none":
        from rl_core.numerics.normalization import ValueNormalizer

        value_normalizer = ValueNormalizer(flags.value_normalization, beta=flags.popart_beta)
    model = ActorCritic(
        stem,
        n,
        core=core,
        value_stem=value_stem,
        last_action_input=last_action_input,
        policy_head=head,
        obs_normalizer=obs_normalizer,
        obs_clip=flags.obs_clip,
        value_normalizer=value_normalizer,
        stem_value=bool(getattr(flags, "stem_value", False)),
    )
    if flags.init == "orthogonal":
        from models.init import orthogonal_init

        orthogonal_init(model, policy_scale=flags.policy_init_scale)
    return model
