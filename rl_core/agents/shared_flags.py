"""The flag groups several agents read (each agent's own flags live in its folder; torch-free)."""

from __future__ import annotations

import argparse
from rl_core.flag_types import ranged


def learning(p: argparse.ArgumentParser) -> None:
    """Every agent's optimizer, schedule and initialisation."""
    a = p.add_argument_group("every agent: the optimizer and the initialisation").add_argument
    a(
        "--optimizer",
        default="rmsprop",
        choices=["rmsprop", "adam"],
        help="rmsprop (IMPALA's: --alpha, --momentum, --epsilon) or adam (--epsilon is Adam's eps).",
    )
    a("--lr_decay", default="linear", choices=["linear", "none"], help="Learning rate: linear decay to 0, or constant.")
    a("--init", default="default", choices=["default", "orthogonal"], help="Weight initialisation.")
    a(
        "--policy_init_scale",
        type=ranged(float, "[0, inf)"),
        default=0.01,
        help="--init orthogonal: gain of the last policy layer.",
    )


def actor_critic(p: argparse.ArgumentParser) -> None:
    """impala's and the on-policy agents': passes, minibatches, advantages, the value loss, normalizers and the
    entropy and KL terms."""
    a = p.add_argument_group("actor-critics (impala and the on-policy agents vpg, ppo, awr, vmpo, vtrace)").add_argument
    a(
        "--entropy_decay",
        default="none",
        choices=["none", "linear"],
        help="impala and the on-policy agents: --entropy_cost constant, or decaying linearly to 0 over --total_steps "
        "with the learning rate's schedule (a wide policy early, a sharp one at the end).",
    )
    a(
        "--num_epochs",
        type=ranged(int, "[1, inf)"),
        default=1,
        help="Passes over each learner batch (impala too: each pass one optimizer step, V-trace correcting the lag).",
    )
    a("--num_minibatches", type=ranged(int, "[1, inf)"), default=1, help="Minibatches (optimizer steps) per pass.")
    a(
        "--stem_value",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="With a recurrent core: a second value head, linear on the core's input (the stem's features), learning "
        "the env's return beside the core's and adding no policy gradient, so the stem gets a gradient that does "
        "not pass through the core's gates (without it an Atari stem's features grow until they saturate them).",
    )
    a(
        "--batch_mode",
        default="shuffle",
        choices=["repeat", "shuffle", "split", "split_with_advantage_recomputation"],
        help="SEED RL's: the same unroll minibatches every pass (repeat), unrolls shuffled every pass (shuffle), "
        "advantages computed once and transitions shuffled (split; feedforward models), or split with the "
        "advantages recomputed every pass.",
    )
    a("--advantage", default="gae", choices=["gae", "vtrace", "nstep"], help="Advantage estimator.")
    a("--gae_lambda", type=ranged(float, "[0, 1]"), default=0.95, help="GAE lambda.")
    a(
        "--nstep",
        type=ranged(int, "[0, inf)"),
        default=0,
        help="--advantage nstep: steps before bootstrapping (0: to the unroll's end).",
    )
    a(
        "--loss_reduction",
        default="mean",
        choices=["mean", "sum"],
        help="Per-step loss terms are averaged (SEED, PPO) or summed (torchbeast's IMPALA).",
    )
    a("--value_loss", default="mse", choices=["mse", "huber"], help="Value loss.")
    a("--huber_delta", type=ranged(float, "(0, inf)"), default=1.0, help="Huber loss delta.")
    a("--value_clip", type=ranged(float, "[0, inf)"), default=0.0, help="PPO-style value clipping epsilon (0: off).")
    a(
        "--advantage_normalization",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="Normalize advantages per minibatch.",
    )
    a(
        "--value_normalization",
        default="none",
        choices=["none", "popart", "return_std"],
        help="Value head predicts normalized values: PopArt (mean and std) or the return's std.",
    )
    a(
        "--popart_beta",
        type=ranged(float, "[0, 1)"),
        default=0.0,
        help="Step size of the value normalizer's moving averages, updated once per learner batch (0: the "
        "average over every target so far, as SEED RL's AverageMeanStd).",
    )
    a(
        "--obs_normalization",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="Normalize observations by running mean/std (kept in the checkpoint).",
    )
    a("--obs_clip", type=ranged(float, "(0, inf)"), default=10.0, help="Normalized observations are clipped to +-this.")
    a(
        "--target_entropy",
        type=ranged(float, "finite"),
        default=None,
        help="Entropy floor with a Lagrange multiplier (default: the fixed --entropy_cost).",
    )
    a("--kl_cost", type=ranged(float, "[0, inf)"), default=0.0, help="Fixed cost of KL(behaviour || policy).")
    a(
        "--target_kl",
        type=ranged(float, "(0, inf)"),
        default=None,
        help="KL(behaviour || policy) bound with a Lagrange multiplier.",
    )
    a(
        "--lagrange_init",
        type=ranged(float, "(0, inf)"),
        default=1.0,
        help="Initial value of the entropy / KL Lagrange multipliers.",
    )


def check_actor_critic(parser: argparse.ArgumentParser, flags: argparse.Namespace) -> None:
    """The actor-critic flags that contradict each other, whatever the agent."""
    if flags.stem_value and not (flags.use_lstm or flags.use_elstm or flags.use_rtrl):
        parser.error(
            "--stem_value adds a value head on the stem's features beside a recurrent core's; without one the "
            "model's heads read the stem already: add --use_lstm / --use_elstm / --use_rtrl, or drop --stem_value"
        )
    if flags.entropy_decay != "none" and getattr(flags, "target_entropy", None) is not None:
        parser.error(
            "--target_entropy learns the entropy's multiplier in place of --entropy_cost, so there is no "
            "cost for --entropy_decay to schedule: drop one of them"
        )


def continuous(p: argparse.ArgumentParser) -> None:
    """The Gaussian policy of Box action spaces (the on-policy agents and sac)."""
    a = p.add_argument_group("continuous actions (Box action spaces)").add_argument
    a(
        "--squash",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="tanh-squash the Gaussian policy into the env's bounds (else the env server clips).",
    )
    a("--std_kind", default="softplus", choices=["softplus", "exp"], help="Policy std from its parameter.")
    a("--min_std", type=ranged(float, "(0, inf)"), default=1e-3, help="Minimum policy std.")
    a("--initial_std", type=ranged(float, "(0, inf)"), default=1.0, help="Initial policy std.")
    a(
        "--state_dependent_std",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="The std is an output of the network (else a learned vector).",
    )


def replay(p: argparse.ArgumentParser) -> None:
    """The replay of r2d2 and sac: its size, its start, its ratio to acting, its checkpoint."""
    a = p.add_argument_group("replay (r2d2: sequences; sac: transitions)").add_argument
    a(
        "--replay_buffer_size",
        type=ranged(int, "[1, inf)"),
        default=2000,
        help="Replay capacity: r2d2 in sequences (Procgen: 1.5 MB a sequence of 121 steps, DMLab 2.5 MB; Atari "
        "keeps each frame once, 0.87 MB), sac in transitions; the log's replay_mb shows the allocation.",
    )
    a(
        "--replay_buffer_min_size",
        type=ranged(int, "[1, inf)"),
        default=100,
        help="Replay content before learning starts: r2d2 sequences, sac transitions.",
    )
    a(
        "--replay_ratio",
        type=ranged(float, "(0, inf)"),
        default=1.5,
        help="Trained steps (r2d2: batch_size x unroll_length per learner step; sac: batch_size transitions) per "
        "env step inserted, held in both directions: the learner waits for data, acting waits for a learner "
        "that is behind.",
    )
    a(
        "--checkpoint_replay",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="Save the replay buffer (replay.tar, beside model.tar; can be GBs) with every checkpoint, and "
        "restore it on resume (without it a resumed run refills the replay before learning).",
    )


def check_replay(parser: argparse.ArgumentParser, flags: argparse.Namespace) -> None:
    """A replay that learning would never start from."""
    if flags.replay_buffer_min_size > flags.replay_buffer_size:
        parser.error(
            f"--replay_buffer_min_size {flags.replay_buffer_min_size} exceeds --replay_buffer_size "
            f"{flags.replay_buffer_size}: learning would never start"
        )
