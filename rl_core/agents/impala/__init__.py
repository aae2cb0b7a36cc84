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
    ),
)
