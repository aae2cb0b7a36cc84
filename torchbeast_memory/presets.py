"""torchbeast_memory's flag defaults (rl_core/config/env_package.py reads ``agent_defaults`` and ``core_defaults``
here).  Data only: no torch, no popgym; the measurements behind each value are in docs/experiments/memory.md."""

from __future__ import annotations

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


def agent_defaults(agent: str) -> dict:
    """IMPALA's defaults for memory tasks; the other agents get only the shared ones (their papers' where
    rl_core/agents gives them; PPO's live in the packages, and this one has none yet)."""
    return dict(IMPALA_DEFAULTS) if agent == "impala" else {}


def env_defaults(agent: str, env: str) -> dict:
    """IMPALA's on MiniGrid's envs (``MiniGrid-...``), where rewards come once an episode."""
    return dict(MINIGRID_IMPALA_DEFAULTS) if agent == "impala" and env.startswith("MiniGrid-") else {}
