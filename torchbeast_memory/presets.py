"""torchbeast_memory's presets: flag values per agent and env family, as a table (``PRESETS``,
rl_core/config/presets.py).  Data only: no torch, no popgym; the measurements behind each value are in
docs/experiments/memory.md."""

from __future__ import annotations

from rl_core.config.presets import Preset

from rl_core.agents.r2d2 import R2D2_SMALL_TASK_DEFAULTS

# IMPALA (the R2AC agent) on POPGym and MiniGrid memory tasks: docs/experiments/memory.md.
IMPALA_DEFAULTS = dict(
    num_actors=16,
    num_servers=1,
    batch_size=16,
    unroll_length=20,
    learning_rate=0.002,
    epsilon=1e-4,
    entropy_cost=1e-4,
    forget_bias=1.0,
    mlp_sizes="256",
    hidden_size=256,
    total_steps=5_000_000,
)


# IMPALA on MiniGrid's rooms, over the above: they pay once, at the end (up to 1), where POPGym pays +-1/48 to
# +-1/414 a step.  At POPGym's entropy cost (1e-4) the 3-action policy collapsed within 40k steps and turned in place
# (return 0.00 on MemoryS13); at 0.01 and lr 0.0005 it kept exploring (0.4-0.6): docs/experiments/memory.md
# (MiniGrid-MemoryS13).
MINIGRID_IMPALA_DEFAULTS = dict(learning_rate=0.0005, entropy_cost=0.01)

# IMPALA on POPGym's card tasks, over IMPALA_DEFAULTS: the cards are dealt whatever the agent answers, so an answer
# changes its own reward and nothing after it, and every discount has the same best policy.  At 0 the advantage is
# r_t - V(x_t); at 0.99 each step's target also sums the later answers' rewards (+-1/48 each, at random to this
# answer) to the unroll's end.  Measured (docs/experiments/memory.md, "Discount 0"): RepeatPreviousEasy's LSTM
# first reached 0.5 within 110k-210k steps on seeds 1-4 (in lockstep) where at 0.99 it took 390k to past 1M;
# CountRecallEasy's reached 0.86 at 15M with no other flag where at 0.99 it stayed at -0.78.
CARD_TASK_IMPALA_DEFAULTS = dict(discounting=0.0)

# IMPALA on RepeatFirst, over the above: no stem, the one-hot card, reward and last action straight into the core.
# The first card must survive 400 steps; a stem in front of the core, trained by gradients truncated at each unroll's
# start, let the cards' features drift together: RepeatFirstMedium stayed at chance in four runs with the stem and was
# learned (final test 1.00) by the LSTM, the eLSTM and RTRL's eLSTM without it, on seeds 1 and 2
# (docs/experiments/memory.md, "RepeatFirstMedium with no stem").
REPEAT_FIRST_IMPALA_DEFAULTS = dict(mlp_sizes="")


# R2D2 (with --use_lstm, the paper's recurrent agent) at the small-task scale, read by its greedy validation, with
# Adam's epsilon at 1e-6 where the paper's is 1e-3: POPGym pays +-1/48 a step, so the TD errors and gradients are
# about 1e-2 and 1e-5, far below 1e-3, which then sets Adam's step (lr g / eps: plain SGD at a tiny rate).  On
# RepeatPreviousEasy (1M budget) the greedy validation was 0.17 / 0.23 at 250k / 500k steps with 1e-3 and 1.00 / 1.00
# with 1e-6: docs/experiments/r2d2.md (R2D2 with an LSTM on the memory tasks).
R2D2_DEFAULTS = dict(
    R2D2_SMALL_TASK_DEFAULTS, epsilon=1e-6, mlp_sizes="256", valid_num_episodes=32, total_steps=5_000_000
)


# R2D2 in MiniGrid's Memory rooms, over the above: trained on 99 fixed layouts (recurrent-ppo-truncated-bptt's
# training set; validation and the final test play fresh ones).  On fresh layouts only the episodes that start in
# front of the cue (1 in 6 on MemoryS9) reward remembering it, and in 750k steps (MemoryS9, 3x3 view) the choice after
# the cue stayed at chance (P(success | seen) 0.48-0.53); on 99 layouts the start cell hints at the answer (its
# layouts' majority is right in 59% of them), so carrying what the start showed pays in every episode: P(success |
# seen) 0.85 at 200k, the look back learned by 400k (the cue seen in 84% of episodes), the greedy validation on fresh
# layouts 0.88 at 500k: docs/experiments/r2d2.md (MemoryS9).
MINIGRID_MEMORY_R2D2_DEFAULTS = dict(num_levels=99)


# IMPALA's and R2D2's values for memory tasks; IMPALA's on MiniGrid's envs, where rewards come once an episode, R2D2's
# in its Memory rooms, and IMPALA's and R2D2's on POPGym's card tasks, whose deal does not depend on the answers (a
# Q-value is the answer's own reward).  The other agents get only the shared ones (their papers' where rl_core/agents
# gives them).
PRESETS = (
    Preset(IMPALA_DEFAULTS, agents="impala"),
    Preset(R2D2_DEFAULTS, agents="r2d2"),
    Preset(MINIGRID_IMPALA_DEFAULTS, agents="impala", env="MiniGrid-*"),
    Preset(MINIGRID_MEMORY_R2D2_DEFAULTS, agents="r2d2", env="MiniGrid-Memory*"),
    Preset(CARD_TASK_IMPALA_DEFAULTS, agents=("impala", "r2d2"), env="popgym-RepeatPrevious*"),
    Preset(CARD_TASK_IMPALA_DEFAULTS, agents=("impala", "r2d2"), env="popgym-RepeatFirst*"),
    Preset(CARD_TASK_IMPALA_DEFAULTS, agents=("impala", "r2d2"), env="popgym-CountRecall*"),
    Preset(REPEAT_FIRST_IMPALA_DEFAULTS, agents="impala", env="popgym-RepeatFirst*"),
)
