"""The configurable on-policy agent (SEED RL's ``policy_gradient`` agent, Andrychowicz et al. 2020), one --agent
per policy loss: ``vpg``, ``ppo`` (Schulman et al. 2017), ``awr`` (Peng et al. 2019), ``vmpo`` (Song et al.
2020), ``vtrace`` (Espeholt et al. 2018).

Its configuration (torch-free, read by the flags' parser); the agent is ``agent.py``.
"""

from __future__ import annotations

import argparse

from rl_core.agents import shared_flags
from rl_core.agents.spec import AgentSpec
from rl_core.agents.traits import AgentTraits
from rl_core.flag_types import ranged

ON_POLICY = ("vpg", "ppo", "awr", "vmpo", "vtrace")
SUMMARIES = {
    "vpg": "vanilla policy gradient",
    "ppo": "PPO's clipped surrogate",
    "awr": "advantage-weighted regression",
    "vmpo": "V-MPO",
    "vtrace": "V-trace policy gradient",
}


def add_flags(p: argparse.ArgumentParser) -> None:
    a = p.add_argument_group("on-policy losses (ppo, awr, vmpo)").add_argument
    a("--ppo_clip", type=ranged(float, "(0, inf)"), default=0.2, help="PPO's clipping epsilon.")
    a(
        "--ppo_clip_decay",
        default="none",
        choices=["none", "linear"],
        help="PPO's clipping epsilon: constant, or decaying linearly to 0 over --total_steps with the learning "
        "rate's schedule (rl-baselines3-zoo's clip_range: lin_0.2).",
    )
    a("--awr_beta", type=ranged(float, "(0, inf)"), default=1.0, help="AWR temperature beta in exp(A / beta).")
    a("--awr_max_weight", type=ranged(float, "(0, inf)"), default=20.0, help="AWR weight clip.")
    a(
        "--vmpo_eps_eta",
        type=ranged(float, "(0, inf)"),
        default=0.01,
        help="V-MPO: bound epsilon_eta of the temperature's dual.",
    )
    a("--vmpo_eps_alpha", type=ranged(float, "(0, inf)"), default=0.005, help="V-MPO: KL bound epsilon_alpha.")
    a("--vmpo_init_temperature", type=ranged(float, "(0, inf)"), default=1.0, help="V-MPO: initial temperature eta.")
    a("--vmpo_init_alpha", type=ranged(float, "(0, inf)"), default=5.0, help="V-MPO: initial KL multiplier alpha.")


def check_flags(parser: argparse.ArgumentParser, flags: argparse.Namespace) -> None:
    from models import core_kind

    shared_flags.check_actor_critic(parser, flags)
    split = flags.batch_mode.startswith("split")
    if split and core_kind(flags) is not None:
        parser.error(
            f"--batch_mode {flags.batch_mode} splits unrolls into transitions, which a recurrent core "
            f"cannot learn from: use --batch_mode shuffle or repeat"
        )
    if not split and flags.num_minibatches > flags.batch_size:
        parser.error(
            f"--num_minibatches {flags.num_minibatches} > --batch_size {flags.batch_size}: "
            f"--batch_mode {flags.batch_mode} keeps unrolls whole"
        )
    if split and flags.num_minibatches > flags.batch_size * flags.unroll_length:
        parser.error("--num_minibatches exceeds the transitions in a batch (batch_size * unroll_length)")
    if flags.initial_std <= flags.min_std:
        parser.error(f"--min_std ({flags.min_std}) must be below --initial_std ({flags.initial_std})")
    if flags.agent == "vmpo" and flags.target_kl is not None:
        parser.error("--agent vmpo bounds the KL with --vmpo_eps_alpha: drop --target_kl")


def on_policy_defaults(agent: str, ppo: dict, ppo_only: tuple[str, ...] = (), vtrace_advantages: bool = True) -> dict:
    """A package's defaults for an on-policy ``agent`` from its PPO defaults ``ppo``: PPO takes them; vpg, awr,
    vmpo and vtrace take them less ``ppo_only`` with one pass per batch (vtrace: V-trace advantages, unless
    ``vtrace_advantages`` is False); any other agent: none."""
    if agent == "ppo":
        return dict(ppo)
    if agent not in ON_POLICY:
        return {}
    variant = {k: v for k, v in ppo.items() if k not in ppo_only}
    return dict(
        variant,
        num_epochs=1,
        num_minibatches=1,
        **({"advantage": "vtrace"} if agent == "vtrace" and vtrace_advantages else {}),
    )


SPECS = tuple(
    AgentSpec(
        name=name,
        summary=f"the on-policy agent with {SUMMARIES[name]}",
        make="rl_core.agents.policy_gradient.agent:PolicyGradientAgent",
        traits=AgentTraits(replays=False, sizing="on_policy"),
        action_kinds=("discrete", "box"),
        flag_groups=(shared_flags.learning, shared_flags.actor_critic, add_flags, shared_flags.continuous),
        check=check_flags,
        rnd=True,
    )
    for name in ON_POLICY
)
