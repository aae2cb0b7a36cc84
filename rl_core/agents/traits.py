"""What the runtime, the sizing and the rank split know of an agent before it is built: its traits.

Each agent declares them in the registry (``rl_core.agents.TRAITS``); the core asks
``rl_core.agents.agent_traits(flags or name)`` and never names an agent.  Torch-free, as the flags'
checks in env servers read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class AgentTraits:
    """``replays``: it learns from a replay of past sequences, not from batches of the latest unrolls.

    ``sizing``: how ``rl_core/config/sizing.py`` lays its envs out on more cores: ``"scaled"``, a server per free
    core, each of the package's envs per server; ``"on_policy"``, at most one batch of envs (more would act
    on a stale policy), spread over the servers; ``"fixed"``, the package's defaults (its env steps are
    bound by learner updates at --replay_ratio).

    ``lag_bounds_envs``: its envs, where the sizing chooses them, stay at most ``sizing.MAX_LAG`` batches, so that
    an unroll waits at most about that many learner steps (V-trace corrects the lag); its batch stays the
    package's (a learning hyperparameter: IMPALA's batch grown to 56 with the envs learned Pong several times
    slower per step than B=8, docs/experiments/impala.md).

    ``rank_shares``: its flags that count the run's totals (replay sizes, random steps): under torchrun
    each rank takes 1/W of them (``rl_core/runtime/distributed.py``).

    ``recurrent``: its networks take a recurrent core (--use_lstm, --use_elstm, --use_rtrl); False: feedforward only.
    """

    replays: bool
    sizing: Literal["scaled", "on_policy", "fixed"]
    lag_bounds_envs: bool = False
    rank_shares: tuple[str, ...] = ()
    recurrent: bool = True
