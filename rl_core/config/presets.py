"""A package's presets as a table: rows of flag values, each keyed by (agent, env pattern, core, rnd).

A package's ``presets.py`` defines ``PRESETS``, a tuple of :class:`Preset` rows and nothing that runs: no ``if``,
no machine reads.  The resolver (``rl_core/config/resolve.py``) lays the rows that match a run in four layers, in
this order, a later value winning: rows keyed by agent alone, rows keyed by an env pattern, rows keyed by a core,
rows of ``--rnd`` runs; within a layer, in the table's order.  A value that depends on the machine is a
:class:`MemoryShare`, which the resolver turns into a number from the machine it is given.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Mapping

ANY = "*"
RECURRENT = "recurrent"  # a core key: any recurrent core (lstm, elstm, rtrl_elstm)
FEEDFORWARD = "feedforward"  # a core key: no core

LAYERS = ("agent", "env", "core", "rnd")  # the order rows are laid in (a later one wins)


@dataclass(frozen=True)
class MemoryShare:
    """A flag value sized to the machine: as many items of ``item_bytes`` as fit in ``share`` of its memory, at
    least ``minimum``."""

    share: float
    item_bytes: int
    minimum: int = 0

    def size(self, memory_bytes: int) -> int:
        return max(self.minimum, int(self.share * memory_bytes) // self.item_bytes)


@dataclass(frozen=True)
class Preset:
    """One row: ``values`` for the runs its key matches.  ``agents``: agent names, or ``"*"``; ``env``: a shell
    pattern on ``--env`` (``fnmatch``), or ``"*"``; ``core``: ``"*"``, ``"recurrent"``, ``"feedforward"`` or a core
    kind (``models.core_kind``); ``rnd``: True for ``--rnd`` runs only, None for any."""

    values: Mapping[str, object]
    agents: tuple[str, ...] | str = ANY
    env: str = ANY
    core: str = ANY
    rnd: bool | None = None
    why: str = field(default="", compare=False)  # where the evidence is (a docs/ page)

    def __post_init__(self):
        if isinstance(self.agents, str) and self.agents != ANY:
            object.__setattr__(self, "agents", (self.agents,))

    @property
    def layer(self) -> str:
        """Which of ``LAYERS`` the row is laid in: its most specific key."""
        if self.rnd:
            return "rnd"
        if self.core != ANY:
            return "core"
        return "env" if self.env != ANY else "agent"

    def matches_agent(self, agent: str) -> bool:
        return self.agents == ANY or agent in self.agents

    def matches(self, agent: str, env: str | None, core: str | None, rnd: bool) -> bool:
        """Whether the row applies to a run of ``agent`` on ``env`` with ``core`` (None: feedforward)."""
        if not self.matches_agent(agent):
            return False
        if self.env != ANY and not fnmatch.fnmatchcase(env or "", self.env):
            return False
        if self.core == RECURRENT and core is None:
            return False
        if self.core == FEEDFORWARD and core is not None:
            return False
        if self.core not in (ANY, RECURRENT, FEEDFORWARD) and self.core != core:
            return False
        return not self.rnd or rnd


def rows_in_layer(table, layer: str, agent: str, env: str | None, core: str | None, rnd: bool) -> dict:
    """The values of ``table``'s rows of ``layer`` that match the run, laid in the table's order."""
    values: dict = {}
    for row in table:
        if row.layer == layer and row.matches(agent, env, core, rnd):
            values.update(row.values)
    return values


def check_table(table, name: str) -> None:
    """A table's rows are ``Preset``s whose keys are of the kinds above: a wrong one is named in one line."""
    from rl_core.errors import UserError

    for i, row in enumerate(table):
        if not isinstance(row, Preset):
            raise UserError(f"{name}.PRESETS[{i}] is {type(row).__name__}, not a rl_core.config.presets.Preset")
        if not isinstance(row.values, Mapping):
            raise UserError(f"{name}.PRESETS[{i}].values must be a mapping of flag names to values")


def on_policy_rows(ppo: Mapping[str, object], ppo_only: tuple[str, ...] = (), vtrace_advantages: bool = True):
    """Rows for the configurable on-policy agent from a package's PPO values (``rl_core.agents.policy_gradient.
    on_policy_defaults``): PPO takes them, VPG, AWR, V-MPO and V-trace take them less ``ppo_only`` with one pass
    per batch."""
    from rl_core.agents.policy_gradient import ON_POLICY, on_policy_defaults

    return tuple(
        Preset(on_policy_defaults(agent, dict(ppo), ppo_only, vtrace_advantages), agents=agent) for agent in ON_POLICY
    )
