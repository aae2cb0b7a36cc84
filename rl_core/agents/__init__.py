"""Agents by name (``--agent NAME``), their flags and the checks of those flags.

``impala`` is IMPALA as torchbeast trains it; ``vpg``, ``ppo``, ``awr``, ``vmpo`` and
``vtrace`` are the configurable on-policy agent (SEED RL's ``policy_gradient``
agent, Andrychowicz et al. 2020) with that policy loss.  A new agent is a module
here and a line in ``AGENTS``; the runtime never names one.
"""

from __future__ import annotations

import argparse

from rl_core.agents.base import Agent

ON_POLICY = ("vpg", "ppo", "awr", "vmpo", "vtrace")
AGENTS = ("impala", *ON_POLICY)


def make_agent(flags, spec: dict) -> Agent:
    name = getattr(flags, "agent", "impala")
    if name == "impala":
        from rl_core.agents.impala import ImpalaAgent

        return ImpalaAgent(flags, spec)
    if name in ON_POLICY:
        from rl_core.agents.policy_gradient import PolicyGradientAgent

        return PolicyGradientAgent(flags, spec)
    raise ValueError(f"unknown agent {name!r}")


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent", default="impala", choices=AGENTS,
                   help="impala (torchbeast's V-trace learner), or the configurable on-policy agent with the "
                        "policy loss vpg | ppo | awr | vmpo | vtrace. Each environment package has defaults "
                        "per agent; flags given explicitly win.")
    g = p.add_argument_group("on-policy agents (vpg, ppo, awr, vmpo, vtrace)")
    a = g.add_argument
    a("--optimizer", default="rmsprop", choices=["rmsprop", "adam"],
      help="rmsprop (IMPALA's: --alpha, --momentum, --epsilon) or adam (--epsilon is Adam's eps).")
    a("--lr_decay", default="linear", choices=["linear", "none"], help="Learning rate: linear decay to 0, or constant.")
    a("--num_epochs", type=int, default=1, help="Passes over each learner batch.")
    a("--num_minibatches", type=int, default=1, help="Minibatches (optimizer steps) per pass.")
    a("--batch_mode", default="shuffle", choices=["repeat", "shuffle", "split", "split_with_advantage_recomputation"],
      help="SEED RL's: the same unroll minibatches every pass (repeat), unrolls shuffled every pass (shuffle), "
           "advantages computed once and transitions shuffled (split; feedforward models), or split with the "
           "advantages recomputed every pass.")
    a("--advantage", default="gae", choices=["gae", "vtrace", "nstep"], help="Advantage estimator.")
    a("--gae_lambda", type=float, default=0.95, help="GAE lambda.")
    a("--nstep", type=int, default=0, help="--advantage nstep: steps before bootstrapping (0: to the unroll's end).")
    a("--loss_reduction", default="mean", choices=["mean", "sum"],
      help="Per-step loss terms are averaged (SEED, PPO) or summed (torchbeast's IMPALA).")
    a("--ppo_clip", type=float, default=0.2, help="PPO's clipping epsilon.")
    a("--awr_beta", type=float, default=1.0, help="AWR temperature beta in exp(A / beta).")
    a("--awr_max_weight", type=float, default=20.0, help="AWR weight clip.")
    a("--vmpo_eps_eta", type=float, default=0.01, help="V-MPO: bound epsilon_eta of the temperature's dual.")
    a("--vmpo_eps_alpha", type=float, default=0.005, help="V-MPO: KL bound epsilon_alpha.")
    a("--vmpo_init_temperature", type=float, default=1.0, help="V-MPO: initial temperature eta.")
    a("--vmpo_init_alpha", type=float, default=5.0, help="V-MPO: initial KL multiplier alpha.")
    a("--value_loss", default="mse", choices=["mse", "huber"], help="Value loss.")
    a("--huber_delta", type=float, default=1.0, help="Huber loss delta.")
    a("--value_clip", type=float, default=0.0, help="PPO-style value clipping epsilon (0: off).")
    a("--advantage_normalization", action=argparse.BooleanOptionalAction, default=False,
      help="Normalize advantages per minibatch.")
    a("--value_normalization", default="none", choices=["none", "popart", "return_std"],
      help="Value head predicts normalized values: PopArt (mean and std) or the return's std.")
    a("--popart_beta", type=float, default=0.0,
      help="Step size of the value normalizer's moving averages, updated once per learner batch (0: the "
           "average over every target so far, as SEED RL's AverageMeanStd).")
    a("--obs_normalization", action=argparse.BooleanOptionalAction, default=False,
      help="Normalize observations by running mean/std (kept in the checkpoint).")
    a("--obs_clip", type=float, default=10.0, help="Normalized observations are clipped to +-this.")
    a("--target_entropy", type=float, default=None,
      help="Entropy floor with a Lagrange multiplier (default: the fixed --entropy_cost).")
    a("--kl_cost", type=float, default=0.0, help="Fixed cost of KL(behaviour || policy).")
    a("--target_kl", type=float, default=None, help="KL(behaviour || policy) bound with a Lagrange multiplier.")
    a("--lagrange_init", type=float, default=1.0, help="Initial value of the entropy / KL Lagrange multipliers.")
    g = p.add_argument_group("continuous actions (Box action spaces)")
    a = g.add_argument
    a("--squash", action=argparse.BooleanOptionalAction, default=False,
      help="tanh-squash the Gaussian policy into the env's bounds (else the env server clips).")
    a("--std_kind", default="softplus", choices=["softplus", "exp"], help="Policy std from its parameter.")
    a("--min_std", type=float, default=1e-3, help="Minimum policy std.")
    a("--initial_std", type=float, default=1.0, help="Initial policy std.")
    a("--state_dependent_std", action=argparse.BooleanOptionalAction, default=False,
      help="The std is an output of the network (else a learned vector).")
    a("--init", default="default", choices=["default", "orthogonal"], help="Weight initialisation.")
    a("--policy_init_scale", type=float, default=0.01, help="--init orthogonal: gain of the last policy layer.")


def check_flags(parser: argparse.ArgumentParser, flags) -> None:
    name = flags.agent
    if name == "impala":
        return
    from models import core_kind

    split = flags.batch_mode.startswith("split")
    if split and core_kind(flags) is not None:
        parser.error(f"--batch_mode {flags.batch_mode} splits unrolls into transitions, which a recurrent core "
                     f"cannot learn from: use --batch_mode shuffle or repeat")
    if not split and flags.num_minibatches > flags.batch_size:
        parser.error(f"--num_minibatches {flags.num_minibatches} > --batch_size {flags.batch_size}: "
                     f"--batch_mode {flags.batch_mode} keeps unrolls whole")
    if split and flags.num_minibatches > flags.batch_size * flags.unroll_length:
        parser.error("--num_minibatches exceeds the transitions in a batch (batch_size * unroll_length)")
    if flags.initial_std <= flags.min_std:
        parser.error(f"--min_std ({flags.min_std}) must be below --initial_std ({flags.initial_std})")
    if name == "vmpo" and flags.target_kl is not None:
        parser.error("--agent vmpo bounds the KL with --vmpo_eps_alpha: drop --target_kl")
