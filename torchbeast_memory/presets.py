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


def agent_defaults(agent: str) -> dict:
    """IMPALA's defaults for memory tasks; the other agents keep their papers' (rl_core/agents/)."""
    return dict(IMPALA_DEFAULTS) if agent == "impala" else {}
