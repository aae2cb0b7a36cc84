"""Recurrent cores through the full runtime (launcher, 2 env servers, sockets) on a memory task.

``tests.memory_env:Memory-v0``: a cue at an episode's first step must be acted on
after 10 blank steps (12 steps an episode, return +1 if the action names the cue,
-1 if not, so chance is 0).  LSTM (with the package's defaults), eLSTM (TBPTT) and eLSTM (RTRL) solve it; the
feedforward agent stays at chance; and, as the control that shows what RTRL adds,
the same eLSTM trained by TBPTT with the RTRL run's 4-step unrolls, where no unroll
holds both the cue and the query, learns far less of it in the same budget.
Every run leaves the last action out of the model's input (--no_last_action), so
that the only memory is the core's state (see tests/memory_env.py).
"""

import pytest

from tests.proc_utils import csv_rows
from tests.test_learning import PYTEST_TIMEOUT_S, run_to_the_end

pytestmark = [pytest.mark.learning, pytest.mark.multiprocess]

ENV = "tests.memory_env:Memory-v0"
EPISODE_LENGTH = 12  # cue, 10 blank steps, query
SOLVED = 0.9  # mean return of the last 100 episodes; with +-1 rewards, 95% correct

# Shared by every run, chosen by sweeps over seeds (first with the same model and loss
# in one process; then through this runtime): 16 envs, batch 16, entropy cost 0.01,
# the learning rate decaying linearly to 0, and --epsilon=1e-4 instead of torchbeast's
# 0.01: the gradient that reaches the memory path is tiny at first; with eps=0.01
# RMSprop's steps are about lr*g/eps and stall on that plateau (LSTM, 256 stem: 13 of
# 16 seeds), with 1e-4 RMSprop normalises them (LSTM 20 of 20, eLSTM 12 of 12; through
# the runtime LSTM and eLSTM 6 of 6 each).
COMMON_FLAGS = [
    f"--env={ENV}",
    "--num_actors=16",
    "--num_servers=2",
    "--batch_size=16",
    "--hidden_size=64",
    "--epsilon=1e-4",
    "--entropy_cost=0.01",
    "--seed=1",
    "--log_interval=1",
    "--disable_checkpoint",
    # An agent that sees its own last action can carry the cue in its actions (repeat
    # one for 11 steps), which policy gradient learns with no gradient through time:
    # with the last action in its input the TBPTT control below once solved the task
    # in CI (return_last_100 0.96 at 127k steps).  Without it the feedforward agent's
    # query-step policy cannot depend on the cue at all, and a recurrent agent can
    # recall the cue only from its core's state.  With this flag, 10 of 10 LSTM, 10 of 10
    # eLSTM and 20 of 20 RTRL eLSTM runs solved the task with the flags below.
    "--no_last_action",
]

# TBPTT cuts the gradient at unroll boundaries, so the LSTM and the eLSTM get unrolls
# of one episode: all envs start together and episodes have a fixed length, so each
# 12-step unroll holds exactly one episode, cue and query included.  Through the
# runtime, with --no_last_action, 10 of 10 LSTM runs first solved the task within 80k
# steps (8 within 45k) and 10 of 10 eLSTM runs within 26k.
# --mlp_sizes=256: one wide tanh layer.  The core's gate pre-activations sum over all
# stem features, so with 256 of them some units start with forget gates of 0.7-0.8 on
# blank steps and carry the cue across 11 steps at a few percent of its size; with the
# default 64,64 stem every forget gate starts near 0.5, about 0.5^11 of the cue
# survives, and learning starts with a plateau of random length (LSTM, with eps 1e-4:
# 5 of 8 seeds solved).
TBPTT = [f"--unroll_length={EPISODE_LENGTH}", "--mlp_sizes=256", "--learning_rate=0.002", "--total_steps=200000"]

# RTRL carries the gradient of the cell parameters across unroll boundaries in its
# traces, so it learns from 4-step unrolls, where the cue and the query always lie in
# different unrolls.  Layers in front of the core learn only from gradients truncated
# at the unroll start (as in R2AC, RTRL covers the one recurrent layer), so with the
# 256-unit stem nothing but the cue's own unroll shapes the stem's features of the two
# cues, and in some runs they drift together: at lr 0.002, 2 of 10 runs ended at
# chance, and in both the distance between the two cues' stem features fell from 6.4
# to 1-2 within 40k steps (the core's gate inputs from the cue shrank 10-fold); in the
# runs that stayed solved it stayed at 6.3-6.5.  At lr 0.001 it is rarer (14 of 14 here
# stayed solved) but happened in CI.  So this run and its control feed the observation
# straight into the core (--mlp_sizes= empty): every weight that carries the cue is
# then an RTRL-trained cell parameter.  --forget_bias=1 starts the forget gates at
# sigmoid(1) = 0.73, so some of the cue survives the 11 steps from the start; with
# 0 (gates at 0.5) learning began after a plateau (first solved at 56k-180k steps,
# 1 of 10 not within 300k).  With these flags (and --no_last_action), 20 of 20 runs
# first solved the task at 33k-64k steps, never fell below 0.9 after, and ended with
# a mean return >= 0.989 over their last 20%.
SHORT = ["--unroll_length=4", "--mlp_sizes=", "--forget_bias=1", "--learning_rate=0.002", "--total_steps=200000"]

RUNS = {
    "feedforward": TBPTT,
    # the LSTM by TBPTT: test_package_defaults_with_an_lstm_solve_the_memory_task below
    "elstm": ["--use_elstm", *TBPTT],
    "rtrl_elstm": ["--use_rtrl", *SHORT],
    "elstm_unroll4": ["--use_elstm", *SHORT],  # control: the RTRL run's flags, trained by TBPTT
}
# The control's unrolls never hold both the cue and the query, so no gradient links
# them.  Truncated gradients still shape the cell, though: raising the forget gates
# within the query's unroll keeps what the state held at that unroll's start, the
# cue's fading trace included, so the control can drift towards the task (over the
# last 20% of 30 runs its mean return was -0.02 to 0.29 in 29 and 0.54 in one).  What
# it does not do is learn at RTRL's pace, which is R2AC's claim.  The measure is the
# mean return of every episode of the run (the area under the learning curve): RTRL
# with the same flags 0.79-0.86 over 20 runs (over its first 100k steps 0.54-0.71),
# the control -0.01 to 0.20 over 30.  So the control is held below 0.5.
CONTROL = "elstm_unroll4"
AT_CHANCE = {"feedforward"}


def train(tmp_path, name: str):
    # the learning runs' deadline (tests/test_learning.py): a fixed step budget, beside the other pytest
    # worker's trainings on 2 cores; a run past it fails naming its progress
    result, wall = run_to_the_end(tmp_path, name, *COMMON_FLAGS, *RUNS[name])
    assert result.returncode == 0, result.stdout[-3000:]
    rows = csv_rows(str(tmp_path / name / "logs.csv"))
    assert rows, result.stdout[-3000:]
    return rows, wall


def mean_return_after(rows, step: int) -> float:
    """Mean return of every episode logged from ``step`` on (thousands of episodes)."""
    late = [r for r in rows if int(r["step"]) >= step and int(r["episodes"]) > 0]
    n = sum(int(r["episodes"]) for r in late)
    return sum(float(r["mean_episode_return"]) * int(r["episodes"]) for r in late) / n


@pytest.mark.timeout(PYTEST_TIMEOUT_S)
@pytest.mark.parametrize("name", list(RUNS))
def test_memory_task(tmp_path, name):
    rows, wall = train(tmp_path, name)
    total_steps = int(next(f for f in RUNS[name] if f.startswith("--total_steps=")).split("=")[1])
    final_step = int(rows[-1]["step"])
    assert total_steps <= final_step < total_steps + 16 * EPISODE_LENGTH
    returns, episodes = [], 0  # (step, return_last_100) once 100 episodes have ended
    for r in rows:
        episodes += int(r["episodes"])
        if episodes >= 100:
            returns.append((int(r["step"]), float(r["return_last_100"])))
    reached = [step for step, ret in returns if ret >= SOLVED]
    last_fifth = mean_return_after(rows, total_steps * 4 // 5)
    whole_run = mean_return_after(rows, 0)
    print(
        f"\nmemory task, {name}: return_last_100 {returns[-1][1]:.2f} at step {final_step}; "
        f">= {SOLVED} first at step {reached[0] if reached else None}; "
        f"mean return over the last 20% {last_fifth:.3f}, over the run {whole_run:.3f}; wall {wall:.0f} s"
    )
    if name in AT_CHANCE:
        # Chance is 0.  Over 100 episodes its standard deviation is 0.1, so 0.5 is 5 sigma;
        # over the last 20% of the run (thousands of episodes) 0.1 is far beyond noise.
        assert max(ret for _, ret in returns) < 0.5, f"{name} beat chance: {returns}"
        assert abs(last_fifth) < 0.1, f"{name} is not at chance at the end: {last_fifth:.3f}"
    elif name == CONTROL:
        assert whole_run < 0.5, f"{name} learned the task about as fast as RTRL: {whole_run:.3f}, {returns}"
    else:
        assert reached, f"{name}: return_last_100 never reached {SOLVED}: {returns[-5:]}"
        assert returns[-1][1] >= SOLVED, f"{name} did not stay solved: {returns[-5:]}"
        # The same, measured over thousands of episodes rather than 100.
        assert last_fifth >= 0.95, f"{name} is not solved at the end: {last_fifth:.3f}"


@pytest.mark.timeout(PYTEST_TIMEOUT_S)
def test_package_defaults_with_an_lstm_solve_the_memory_task(tmp_path):
    """torchbeast_gym's defaults with nothing but the env, a core and --no_last_action (the task's
    point: memory in the core only): its recurrent defaults (RMSprop eps 1e-4, lr 0.002, batch 16,
    forget gates biased by 1, a stem of 256) solve it (chance is 0; that a feedforward agent stays there is this module's control above)."""
    from rl_core.runtime.entry import parse_flags
    import torchbeast_gym.env as gym_pkg

    recurrent = parse_flags(gym_pkg, ["--use_lstm"])
    assert (
        recurrent.epsilon,
        recurrent.learning_rate,
        recurrent.batch_size,
        recurrent.forget_bias,
        recurrent.mlp_sizes,
    ) == (1e-4, 0.002, 16, 1.0, "256")
    assert parse_flags(gym_pkg, ["--use_lstm", "--epsilon=0.01"]).epsilon == 0.01  # explicit flags win
    feedforward = parse_flags(gym_pkg, [])
    assert (feedforward.epsilon, feedforward.learning_rate, feedforward.batch_size, feedforward.mlp_sizes) == (
        0.01,
        0.003,
        8,
        "64,64",
    )
    result, _ = run_to_the_end(
        tmp_path,
        "defaults",
        f"--env={ENV}",
        "--use_lstm",
        "--no_last_action",
        "--seed=1",
        "--total_steps=200000",
        "--log_interval=1",
        "--disable_checkpoint",
        "--disable_final_test",
    )
    assert result.returncode == 0, result.stdout[-3000:]
    rows = csv_rows(str(tmp_path / "defaults" / "logs.csv"))
    returns = [float(r["return_last_100"]) for r in rows if r["return_last_100"] != "nan"]
    print(f"\nmemory task, package defaults + LSTM: last-100 mean {returns[-1]:.2f}")
    assert returns[-1] >= SOLVED, returns[-5:]
