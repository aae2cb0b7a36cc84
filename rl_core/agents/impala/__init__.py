"""IMPALA as torchbeast trains it (Espeholt et al. 2018): an actor-critic whose lagging acting V-trace corrects.

Its configuration (torch-free, read by the flags' parser); the agent is ``agent.py``.
"""

from __future__ import annotations

from rl_core.agents import shared_flags
from rl_core.agents.spec import AgentSpec
from rl_core.agents.traits import AgentTraits

SPECS = (
    AgentSpec(
        name="impala",
        summary="torchbeast's V-trace learner",
        make="rl_core.agents.impala.agent:ImpalaAgent",
        traits=AgentTraits(replays=False, sizing="scaled", lag_bounds_envs=True),
        action_kinds=("discrete",),
        flag_groups=(shared_flags.learning, shared_flags.actor_critic),
        check=shared_flags.check_actor_critic,
        rnd=True,
        # the on-policy agent's advantage and value-loss choices: V-trace (rl_core/losses/impala.py) takes none
        unread=(
            "advantage",
            "gae_lambda",
            "nstep",
            "loss_reduction",
            "value_loss",
            "huber_delta",
            "value_clip",
            "advantage_normalization",
            "target_entropy",
            "kl_cost",
            "target_kl",
            "lagrange_init",
        ),
    ),
)
