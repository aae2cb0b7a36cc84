"""RND, the add-on ``--rnd`` of the agents whose spec says ``rnd=True`` (Burda et al. 2018, "Exploration by
Random Network Distillation"): an intrinsic reward stream and its value head.

Its configuration (torch-free, read by the flags' parser); the wrapper is ``agent.py``.
"""

from __future__ import annotations

import argparse
from rl_core.flag_types import ranged

# RND's published settings that hold whatever the environment (Burda et al. 2018, Table 5 and
# Section 2.3): the extrinsic return discounted by 0.999 (the intrinsic one by
# --intrinsic_discounting 0.99); the observation statistics initialised by a random agent for
# 50 rollouts of 128 steps per env before training (here 6,400 steps of 8 envs; a package may
# scale it), the predictor trained on a quarter of each batch.
RND_DEFAULTS = dict(discounting=0.999, rnd_init_steps=51_200)
RND_RANK_SHARES = ("rnd_init_steps",)  # --rnd's run totals (its random start), beside the inner agent's
MAKE = "rl_core.agents.rnd.agent:RNDAgent"


def add_flags(p: argparse.ArgumentParser) -> None:
    a = p.add_argument_group(
        "rnd (random network distillation: an add-on of impala and the on-policy agents)"
    ).add_argument
    a(
        "--rnd",
        action="store_true",
        help="Add RND's intrinsic reward (Burda et al. 2018): a predictor trained to match a fixed random network on "
        "the newest observation, its error the reward; a second value head learns the intrinsic return. "
        "Takes --agent impala, ppo, vpg, awr, vmpo or vtrace. RND runs discount the extrinsic return by 0.999.",
    )
    a(
        "--rnd_init_steps",
        type=ranged(int, "[0, inf)"),
        default=0,
        help="A fresh --rnd run first acts uniformly at random for this many steps (all envs together), training "
        "nothing: they initialise the observation statistics.",
    )
    a(
        "--intrinsic_discounting",
        type=ranged(float, "[0, 1]"),
        default=0.99,
        help="gamma_I of the intrinsic return (non-episodic) and of the forward filter that normalizes the reward.",
    )
    a(
        "--ext_coef",
        type=ranged(float, "[0, inf)"),
        default=2.0,
        help="Weight of the extrinsic advantage (0: curiosity alone).",
    )
    a(
        "--int_coef",
        type=ranged(float, "[0, inf)"),
        default=1.0,
        help="Weight of the intrinsic advantage (0: extrinsic reward alone).",
    )
    a(
        "--rnd_update_proportion",
        type=ranged(float, "(0, 1]"),
        default=0.25,
        help="Share of each batch the predictor trains on (OpenAI's proportion_of_exp_used_for_predictor_update).",
    )
    a(
        "--rnd_channels",
        type=ranged(int, "[0, inf)"),
        default=0,
        help="Image observations: RND sees the newest this many channels (the newest frame of a stack; Atari: 1), "
        "0: all of them.",
    )
    a(
        "--rnd_feature_size",
        type=ranged(int, "[1, inf)"),
        default=512,
        help="Output size of the target and the predictor.",
    )
    a(
        "--rnd_mlp_sizes",
        default="64,64,64",
        help="Vector observations: the layers of RND's MLPs, in place of the convolutions of the image networks.",
    )


def check_flags(parser: argparse.ArgumentParser, flags: argparse.Namespace, wrapped: list[str]) -> None:
    """--rnd's flags, ``wrapped`` the agents it may wrap."""
    if not flags.rnd:
        return
    if flags.agent not in wrapped:
        parser.error(
            f"--rnd is an add-on of {', '.join(wrapped[:-1])} and {wrapped[-1]}, not of --agent "
            f"{flags.agent}: choose one of those or drop --rnd"
        )
    if not flags.ext_coef and not flags.int_coef:
        parser.error("--ext_coef and --int_coef are both 0: nothing would be learned; give one a weight")
    try:
        sizes = [int(x) for x in str(flags.rnd_mlp_sizes).split(",") if x.strip()]
    except ValueError:
        sizes = [0]
    if not sizes or min(sizes) <= 0:
        parser.error(f"--rnd_mlp_sizes {flags.rnd_mlp_sizes!r}: give positive integers separated by commas")
