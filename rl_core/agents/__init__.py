"""Agents by name (``--agent NAME``), their flags and the checks of those flags.

``impala`` is IMPALA as torchbeast trains it; ``vpg``, ``ppo``, ``awr``, ``vmpo`` and
``vtrace`` are the configurable on-policy agent (SEED RL's ``policy_gradient``
agent, Andrychowicz et al. 2020) with that policy loss; ``r2d2`` is recurrent
distributed Q-learning from prioritized sequence replay (Kapturowski et al. 2019); ``sac`` is
soft actor-critic from uniform replay, box or discrete actions (Haarnoja et al. 2018,
Christodoulou 2019).  ``--rnd`` wraps ``impala`` or an on-policy agent in the RND add-on
(``rl_core/agents/rnd.py``: an intrinsic reward stream and its value head; Burda et al. 2018).
A new agent is a module here and a line in ``AGENTS``, ``ACTION_KINDS`` and ``TRAITS`` (what the core asks
of it before it is built: ``rl_core/agents/traits.py``); the runtime never names one.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rl_core.agents.traits import AgentTraits

if TYPE_CHECKING:  # flags are parsed in env servers too, which never import torch
    from rl_core.agents.base import Agent
    from rl_core.env_spec import EnvSpec

ON_POLICY = ("vpg", "ppo", "awr", "vmpo", "vtrace")
REPLAY = ("r2d2", "sac")
AGENTS = ("impala", *ON_POLICY, *REPLAY)
# The action spaces each agent takes ("box": a Box of shape [D]).
ACTION_KINDS = {"impala": ("discrete",), **{name: ("discrete", "box") for name in ON_POLICY},
                "r2d2": ("discrete",), "sac": ("discrete", "box")}
_REPLAY_SIZES = ("replay_buffer_size", "replay_buffer_min_size")
TRAITS = {
    "impala": AgentTraits(replays=False, sizing="scaled", lag_bounds_envs=True),
    **{name: AgentTraits(replays=False, sizing="on_policy") for name in ON_POLICY},
    "r2d2": AgentTraits(replays=True, sizing="scaled", rank_shares=_REPLAY_SIZES),
    "sac": AgentTraits(replays=True, sizing="fixed", rank_shares=(*_REPLAY_SIZES, "random_init_steps"),
                       recurrent=False),
}
RND_RANK_SHARES = ("rnd_init_steps",)  # --rnd's run totals (its random start), beside the inner agent's


def agent_traits(flags_or_name) -> AgentTraits:
    """The traits of ``--agent`` (its name, or the flags)."""
    return TRAITS[flags_or_name if isinstance(flags_or_name, str) else flags_or_name.agent]


def rank_shares() -> tuple[str, ...]:
    """Every flag an agent (or --rnd) counts as a run total: under torchrun each rank takes 1/W of it, whatever
    the run's agent (one that does not read a flag is unaffected by its share)."""
    names = [name for traits in TRAITS.values() for name in traits.rank_shares] + list(RND_RANK_SHARES)
    return tuple(dict.fromkeys(names))


def check_rank_flags(flags, share, world_size: int) -> None:
    """One rank's share of the run's flags (``share``: its 1/W of --batch_size) that the agent cannot learn from:
    a UserError naming the flags and the fix (``check_flags`` checks the run's own)."""
    from rl_core.errors import UserError

    minibatches = flags.num_minibatches
    if minibatches > share.batch_size and not flags.batch_mode.startswith("split"):
        raise UserError(f"--num_minibatches {minibatches} > each rank's batch of {share.batch_size} unrolls "
                        f"(--batch_size {flags.batch_size} over {world_size} ranks), and --batch_mode "
                        f"{flags.batch_mode} keeps unrolls whole: raise --batch_size to {minibatches * world_size} "
                        f"or more, or lower --num_minibatches")


# The flags a checkpoint's state depends on beyond the model's shape: under other values it does not load (or
# fails at its first step: Adam's 'betas' in RMSprop's state).
STATE_FLAGS = ("agent", "rnd", "optimizer")


def describe_agent(values: dict, optimizer: bool = False) -> str:
    """``--agent NAME [--rnd] [--optimizer X]`` of the flag values ``values`` (``optimizer``: name it too)."""
    text = f"--agent {values.get('agent')}" + (" --rnd" if values.get("rnd") else "")
    return text + (f" --optimizer {values['optimizer']}" if optimizer else "")


def agents_for(action_kind: str, rnd: bool = False) -> list[str]:
    """The --agent names that take ``action_kind`` actions (with ``--rnd``: those RND wraps)."""
    return [name for name in AGENTS if action_kind in ACTION_KINDS[name] and not (rnd and name in REPLAY)]


def action_space_refusal(name: str, kind: str, rnd: bool = False, has: str | None = None) -> str | None:
    """The one line refusing ``--agent name`` on an env of ``kind`` ("discrete" or "box") actions, naming every
    agent that fits (``has``: how the env's actions read, where known); None when the agent takes them."""
    if kind in ACTION_KINDS.get(name, (kind,)):
        return None
    fits = agents_for(kind, rnd)
    takes = " or ".join(ACTION_KINDS[name])
    has = has or ("discrete actions" if kind == "discrete" else "box (continuous) actions")
    choices = ", ".join(fits[:-1]) + f" or {fits[-1]}" if len(fits) > 1 else fits[0]
    return f"--agent {name} takes {takes} actions; this env has {has}: use --agent {choices}" + (
        " (with --rnd)" if rnd else "")


def check_action_space(flags, spec: EnvSpec) -> None:
    """One line naming every agent that fits when ``--agent`` does not take the env's action space."""
    from rl_core.errors import UserError

    action = spec.action
    has = "discrete actions" if spec.discrete else f"a Box action space of shape {list(action.shape)}"
    refusal = action_space_refusal(flags.agent, action.kind, bool(flags.rnd), has)
    if refusal:
        raise UserError(refusal)


# R2D2's published settings (Kapturowski et al. 2019, Table 2; SEED RL's Atari R2D2): Adam 1e-4 with
# eps 1e-3, gradient norm clip 40, batches of 64 sequences of 80 steps after a 40-step burn-in,
# 5-step double-Q targets with gamma 0.997 and value rescaling instead of reward clipping, the
# target network copied every 2,500 learner steps, each env step replayed 1.5 times (SEED).  A
# package's own defaults (``agent_defaults``) go over these.
R2D2_DEFAULTS = dict(
    optimizer="adam", learning_rate=1e-4, epsilon=1e-3, lr_decay="none", grad_norm_clipping=40.0,
    reward_clipping="none", batch_size=64, unroll_length=80, burn_in=40, n_steps=5, discounting=0.997,
    target_update_period=2500, replay_ratio=1.5, hidden_size=512, dueling_hidden_size=512,
    replay_buffer_min_size=200,
)


# SAC's published settings (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications",
# Table 1): Adam 3e-4 for the actor, the critics and the temperature, batches of 256 transitions,
# a replay of 1e6, one gradient step per env step (each transition sampled 256 times on average;
# SEED RL's MuJoCo SAC samples each 4 times with hundreds of actors), tau 0.005, gamma 0.99, two
# hidden layers of 256, no gradient clipping, target entropy -|A|; 10,000 uniformly random steps
# before learning (softlearning's n_initial_exploration_steps).  Sequences of 8 steps travel to
# the replay (storage only: a transition reaches the learner at most 8 steps after it happened).
SAC_DEFAULTS = dict(
    optimizer="adam", learning_rate=3e-4, epsilon=1e-8, lr_decay="none", grad_norm_clipping=0.0,
    reward_clipping="none", batch_size=256, unroll_length=8, replay_buffer_size=1_000_000,
    replay_buffer_min_size=10_000, random_init_steps=10_000, replay_ratio=256.0, discounting=0.99,
    mlp_sizes="256,256", squash=True, std_kind="exp", min_std=1e-4,
)


# Discrete SAC on Atari (Christodoulou 2019, Table 2): batches of 64, one update every 4 env steps
# (each transition sampled 16 times), 20,000 random steps first, target entropy 0.98 log|A|, the
# DQN network (here the stem's fc 512 and no further hidden layer), rewards clipped.  The paper copies
# its targets every 8,000 steps; here they follow by Polyak averaging (tau 0.005).  The replay is
# 200,000 transitions (the paper's 1e6 of Atari frames is 7 GB even with each frame kept once).
# Image packages (Atari, Procgen, DMLab) take these for --agent sac.
SAC_DISCRETE_IMAGE_DEFAULTS = dict(
    batch_size=64, replay_ratio=16.0, random_init_steps=20_000, replay_buffer_min_size=20_000,
    replay_buffer_size=200_000, target_entropy_ratio=0.98, mlp_sizes="", reward_clipping="abs_one",
)


# RND's published settings that hold whatever the environment (Burda et al. 2018, Table 5 and
# Section 2.3): the extrinsic return discounted by 0.999 (the intrinsic one by
# --intrinsic_discounting 0.99); the observation statistics initialised by a random agent for
# 50 rollouts of 128 steps per env before training (here 6,400 steps of 8 envs; a package may
# scale it), the predictor trained on a quarter of each batch.
RND_DEFAULTS = dict(discounting=0.999, rnd_init_steps=51_200)


def published_defaults(name: str) -> dict:
    """Flag defaults an agent brings from its paper, whatever the environment package."""
    return dict({"r2d2": R2D2_DEFAULTS, "sac": SAC_DEFAULTS}.get(name, {}))


def on_policy_defaults(agent: str, ppo: dict, ppo_only: tuple[str, ...] = (), vtrace_advantages: bool = True) -> dict:
    """A package's defaults for an on-policy ``agent`` from its PPO defaults ``ppo``: PPO takes them; vpg, awr,
    vmpo and vtrace take them less ``ppo_only`` with one pass per batch (vtrace: V-trace advantages, unless
    ``vtrace_advantages`` is False); any other agent: none."""
    if agent == "ppo":
        return dict(ppo)
    if agent not in ON_POLICY:
        return {}
    variant = {k: v for k, v in ppo.items() if k not in ppo_only}
    return dict(variant, num_epochs=1, num_minibatches=1,
                **({"advantage": "vtrace"} if agent == "vtrace" and vtrace_advantages else {}))


def make_agent(flags, spec: EnvSpec) -> Agent:
    check_action_space(flags, spec)  # every agent, from ACTION_KINDS: one line naming the agents that fit
    agent = _make_agent(flags, spec)
    if flags.rnd:
        from rl_core.agents.rnd import RNDAgent

        return RNDAgent(flags, spec, agent)
    return agent


def _make_agent(flags, spec: EnvSpec) -> Agent:
    name = flags.agent
    if name == "impala":
        from rl_core.agents.impala import ImpalaAgent

        return ImpalaAgent(flags, spec)
    if name in ON_POLICY:
        from rl_core.agents.policy_gradient import PolicyGradientAgent

        return PolicyGradientAgent(flags, spec)
    if name == "r2d2":
        from rl_core.agents.r2d2 import R2D2Agent

        return R2D2Agent(flags, spec)
    if name == "sac":
        from rl_core.agents.sac import SACAgent

        return SACAgent(flags, spec)
    raise ValueError(f"unknown agent {name!r}")


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent", default="impala", choices=AGENTS,
                   help="impala (torchbeast's V-trace learner), or the configurable on-policy agent with the "
                        "policy loss vpg | ppo | awr | vmpo | vtrace, or r2d2 (recurrent Q-learning from "
                        "prioritized sequence replay), or sac (soft actor-critic, box or discrete actions). Each environment package has defaults "
                        "per agent; flags given explicitly win.")
    g = p.add_argument_group("on-policy agents (vpg, ppo, awr, vmpo, vtrace)")
    a = g.add_argument
    a("--optimizer", default="rmsprop", choices=["rmsprop", "adam"],
      help="rmsprop (IMPALA's: --alpha, --momentum, --epsilon) or adam (--epsilon is Adam's eps).")
    a("--lr_decay", default="linear", choices=["linear", "none"], help="Learning rate: linear decay to 0, or constant.")
    a("--entropy_decay", default="none", choices=["none", "linear"],
      help="impala and the on-policy agents: --entropy_cost constant, or decaying linearly to 0 over --total_steps "
           "with the learning rate's schedule (a wide policy early, a sharp one at the end).")
    a("--num_epochs", type=int, default=1,
      help="Passes over each learner batch (impala too: each pass one optimizer step, V-trace correcting the lag).")
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
    a("--ppo_clip_decay", default="none", choices=["none", "linear"],
      help="PPO's clipping epsilon: constant, or decaying linearly to 0 over --total_steps with the learning "
           "rate's schedule (rl-baselines3-zoo's clip_range: lin_0.2).")
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
    g = p.add_argument_group("rnd (random network distillation: an add-on of impala and the on-policy agents)")
    a = g.add_argument
    a("--rnd", action="store_true",
      help="Add RND's intrinsic reward (Burda et al. 2018): a predictor trained to match a fixed random network on "
           "the newest observation, its error the reward; a second value head learns the intrinsic return. "
           "Takes --agent impala, ppo, vpg, awr, vmpo or vtrace. RND runs discount the extrinsic return by 0.999.")
    a("--rnd_init_steps", type=int, default=0,
      help="A fresh --rnd run first acts uniformly at random for this many steps (all envs together), training "
           "nothing: they initialise the observation statistics.")
    a("--intrinsic_discounting", type=float, default=0.99,
      help="gamma_I of the intrinsic return (non-episodic) and of the forward filter that normalizes the reward.")
    a("--ext_coef", type=float, default=2.0, help="Weight of the extrinsic advantage (0: curiosity alone).")
    a("--int_coef", type=float, default=1.0, help="Weight of the intrinsic advantage (0: extrinsic reward alone).")
    a("--rnd_update_proportion", type=float, default=0.25,
      help="Share of each batch the predictor trains on (OpenAI's proportion_of_exp_used_for_predictor_update).")
    a("--rnd_channels", type=int, default=0,
      help="Image observations: RND sees the newest this many channels (the newest frame of a stack; Atari: 1), "
           "0: all of them.")
    a("--rnd_feature_size", type=int, default=512, help="Output size of the target and the predictor.")
    a("--rnd_mlp_sizes", default="64,64,64",
      help="Vector observations: the layers of RND's MLPs, in place of the convolutions of the image networks.")
    g = p.add_argument_group("r2d2 (prioritized sequence replay) and the replay of sac")
    a = g.add_argument
    a("--burn_in", type=int, default=40,
      help="Steps before each training sequence of --unroll_length that only warm up the recurrent state "
           "(no gradient); a stored sequence holds burn_in + unroll_length + 1 steps.")
    a("--sequence_stride", type=int, default=0,
      help="New steps between consecutive stored sequences of an env (0: unroll_length / 2, so that training "
           "sequences overlap by half, as in R2D2).")
    a("--replay_buffer_size", type=int, default=2000,
      help="Replay capacity: r2d2 in sequences (Procgen: 1.5 MB a sequence of 121 steps, DMLab 2.5 MB; Atari "
           "keeps each frame once, 0.87 MB), sac in transitions; the log's replay_mb shows the allocation.")
    a("--replay_buffer_min_size", type=int, default=100,
      help="Replay content before learning starts: r2d2 sequences, sac transitions.")
    a("--priority_exponent", type=float, default=0.9, help="Priority exponent alpha: P(i) ~ p_i^alpha.")
    a("--importance_sampling_exponent", type=float, default=0.6,
      help="Importance-sampling exponent beta: w_i ~ (N P(i))^-beta, normalized by the batch's maximum.")
    a("--priority_eta", type=float, default=0.9, help="Sequence priority eta max|delta| + (1 - eta) mean|delta|.")
    a("--replay_ratio", type=float, default=1.5,
      help="Trained steps (r2d2: batch_size x unroll_length per learner step; sac: batch_size transitions) per "
           "env step inserted, held in both directions: the learner waits for data, acting waits for a learner "
           "that is behind.")
    a("--n_steps", type=int, default=5, help="n of the n-step double-Q targets.")
    a("--value_function_rescaling_epsilon", type=float, default=1e-3, help="epsilon of h(x) (0: no epsilon x).")
    a("--target_update_period", type=int, default=2500, help="Learner steps between target network copies.")
    a("--eval_epsilon", type=float, default=1e-3, help="epsilon-greedy rate of validation and the final test.")
    a("--epsilon_base", type=float, default=0.4, help="Env i of N explores with base^(1 + alpha i / (N - 1)).")
    a("--epsilon_alpha", type=float, default=7.0, help="alpha of the per-env epsilons (Ape-X).")
    a("--dueling_hidden_size", type=int, default=512, help="Hidden layer of each dueling stream.")
    a("--replay_frame_stack", action=argparse.BooleanOptionalAction, default=False,
      help="Observations are frame stacks [C, H, W] shifting by a frame a step (Atari's): the replay keeps "
           "each frame once, not C times (Atari's default).")
    a("--checkpoint_replay", action=argparse.BooleanOptionalAction, default=False,
      help="Save the replay buffer (replay.tar, beside model.tar; can be GBs) with every checkpoint, and "
           "restore it on resume (without it a resumed run refills the replay before learning).")
    g = p.add_argument_group("sac (soft actor-critic from uniform replay; --replay_buffer_size, "
                             "--replay_buffer_min_size, --batch_size count transitions, --replay_ratio samples)")
    a = g.add_argument
    a("--polyak_tau", type=float, default=0.005, help="Target critics move by tau towards the critics every learner step.")
    a("--random_init_steps", type=int, default=0,
      help="A fresh run's first steps (all envs together) take uniformly random actions.")
    a("--learn_temperature", action=argparse.BooleanOptionalAction, default=True,
      help="Learn alpha towards --target_entropy (else alpha is --entropy_cost).")
    a("--initial_temperature", type=float, default=1.0, help="alpha at the start when it is learned.")
    a("--target_entropy_ratio", type=float, default=0.98,
      help="Discrete actions: the target entropy is this times log|A| unless --target_entropy is given "
           "(box actions: -|A|).")
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
    if flags.rnd:
        if name in REPLAY:
            parser.error(f"--rnd is an add-on of impala and the on-policy agents (ppo, vpg, awr, vmpo, vtrace), "
                         f"not of --agent {name}: choose one of those or drop --rnd")
        if not flags.ext_coef and not flags.int_coef:
            parser.error("--ext_coef and --int_coef are both 0: nothing would be learned; give one a weight")
        try:
            sizes = [int(x) for x in str(flags.rnd_mlp_sizes).split(",") if x.strip()]
        except ValueError:
            sizes = [0]
        if not sizes or min(sizes) <= 0:
            parser.error(f"--rnd_mlp_sizes {flags.rnd_mlp_sizes!r}: give positive integers separated by commas")
    if flags.entropy_decay != "none" and name in REPLAY:
        what = "learns its temperature or keeps --entropy_cost" if name == "sac" else "has no entropy term"
        parser.error(f"--entropy_decay schedules the entropy cost of impala and the on-policy agents; --agent {name} "
                     f"{what}: drop --entropy_decay")
    if flags.entropy_decay != "none" and getattr(flags, "target_entropy", None) is not None:
        parser.error("--target_entropy learns the entropy's multiplier in place of --entropy_cost, so there is no "
                     "cost for --entropy_decay to schedule: drop one of them")
    from models import core_kind

    if not agent_traits(flags).recurrent and core_kind(flags) is not None:
        parser.error(f"--agent {name}'s networks are feedforward: drop --use_lstm / --use_quasi_lstm / --use_rtrl")
    if name == "impala":
        return
    if name == "sac":
        if not flags.squash:
            parser.error("--agent sac samples a tanh-squashed Gaussian (its log-probabilities carry the tanh "
                         "correction): drop --no-squash")
        if flags.replay_buffer_min_size > flags.replay_buffer_size:
            parser.error(f"--replay_buffer_min_size {flags.replay_buffer_min_size} exceeds --replay_buffer_size "
                         f"{flags.replay_buffer_size}: learning would never start")
        if not flags.learn_temperature and flags.entropy_cost <= 0:
            parser.error("--no-learn_temperature fixes alpha at --entropy_cost, which must be > 0")
        return
    if name in REPLAY:
        if flags.replay_buffer_min_size > flags.replay_buffer_size:
            parser.error(f"--replay_buffer_min_size {flags.replay_buffer_min_size} exceeds --replay_buffer_size "
                         f"{flags.replay_buffer_size}: learning would never start")
        if flags.batch_size > flags.replay_buffer_min_size:
            parser.error(f"--batch_size {flags.batch_size} exceeds --replay_buffer_min_size "
                         f"{flags.replay_buffer_min_size}: raise the minimum or lower the batch")
        if flags.sequence_stride > flags.burn_in + flags.unroll_length:
            parser.error("--sequence_stride exceeds the stored sequence (burn_in + unroll_length): steps would "
                         "never be stored")
        return
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
