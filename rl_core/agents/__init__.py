"""The agents by name (``--agent NAME``): a short table of the folders that declare them, and what the
runtime, the flags and the sizing ask of it (torch-free: flags are parsed in env servers too).

Each folder's ``__init__`` declares its agents as ``SPECS`` (``rl_core/agents/spec.py``: flags, checks,
traits, action kinds, paper defaults, the class) and its ``agent.py`` is the agent; an installed package adds
its own under the entry-point group ``rl_core.agents`` (``name = "module"``).  ``--rnd`` wraps the agents
whose spec allows it in the RND add-on (``rl_core/agents/rnd``).  The runtime never names an agent.
"""

from __future__ import annotations

import argparse
import importlib
from importlib import metadata
from typing import TYPE_CHECKING

from rl_core.agents import rnd as rnd_config
from rl_core.agents.policy_gradient import ON_POLICY  # noqa: F401  (the configurable on-policy agent's losses)
from rl_core.agents.rnd import RND_RANK_SHARES
from rl_core.agents.spec import AgentSpec
from rl_core.agents.traits import AgentTraits

if TYPE_CHECKING:  # flags are parsed in env servers too, which never import torch
    from rl_core.agents.base import Agent
    from rl_core.data.env_spec import EnvSpec

# The agents' folders, in --agent's order.
BUILTIN = ("rl_core.agents.impala", "rl_core.agents.policy_gradient", "rl_core.agents.r2d2", "rl_core.agents.sac")
ENTRY_POINT_GROUP = "rl_core.agents"


def _load_specs() -> dict[str, AgentSpec]:
    modules = list(BUILTIN) + [ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)]
    specs: dict[str, AgentSpec] = {}
    for name in modules:
        for spec in importlib.import_module(name).SPECS:
            if spec.name in specs:
                raise ValueError(f"--agent {spec.name} is declared twice (by {name} and an earlier module)")
            specs[spec.name] = spec
    return specs


SPECS = _load_specs()
AGENTS = tuple(SPECS)
REPLAY = tuple(name for name, spec in SPECS.items() if spec.traits.replays)
ACTION_KINDS = {name: spec.action_kinds for name, spec in SPECS.items()}  # "box": a Box of shape [D]
TRAITS = {name: spec.traits for name, spec in SPECS.items()}
# The flags a checkpoint's state depends on beyond the model's shape: under other values it does not load (or
# fails at its first step: Adam's 'betas' in RMSprop's state).
STATE_FLAGS = ("agent", "rnd", "optimizer")


def agent_spec(flags_or_name) -> AgentSpec:
    """The spec of ``--agent`` (its name, or the flags)."""
    return SPECS[flags_or_name if isinstance(flags_or_name, str) else flags_or_name.agent]


def agent_traits(flags_or_name) -> AgentTraits:
    """The traits of ``--agent`` (its name, or the flags)."""
    return agent_spec(flags_or_name).traits


def rnd_wraps() -> list[str]:
    """The agents ``--rnd`` may wrap."""
    return [name for name, spec in SPECS.items() if spec.rnd]


def rank_shares() -> tuple[str, ...]:
    """Every flag an agent (or --rnd) counts as a run total: under torchrun each rank takes 1/W of it, whatever
    the run's agent (one that does not read a flag is unaffected by its share)."""
    names = [name for traits in TRAITS.values() for name in traits.rank_shares] + list(RND_RANK_SHARES)
    return tuple(dict.fromkeys(names))


def check_rank_flags(flags, share, world_size: int) -> None:
    """One rank's share of the run's flags (``share``: its 1/W of --batch_size) that the agent cannot learn from:
    a UserError naming the flags and the fix (``check_flags`` checks the run's own)."""
    from rl_core.errors import UserError

    minibatches = flags.num_minibatches
    if minibatches > share.batch_size and not flags.batch_mode.startswith("split"):
        raise UserError(
            f"--num_minibatches {minibatches} > each rank's batch of {share.batch_size} unrolls "
            f"(--batch_size {flags.batch_size} over {world_size} ranks), and --batch_mode "
            f"{flags.batch_mode} keeps unrolls whole: raise --batch_size to {minibatches * world_size} "
            f"or more, or lower --num_minibatches"
        )


def describe_agent(values: dict, optimizer: bool = False) -> str:
    """``--agent NAME [--rnd] [--optimizer X]`` of the flag values ``values`` (``optimizer``: name it too)."""
    text = f"--agent {values.get('agent')}" + (" --rnd" if values.get("rnd") else "")
    return text + (f" --optimizer {values['optimizer']}" if optimizer else "")


def agents_for(action_kind: str, rnd: bool = False) -> list[str]:
    """The --agent names that take ``action_kind`` actions (with ``--rnd``: those RND wraps)."""
    return [name for name, spec in SPECS.items() if action_kind in spec.action_kinds and (spec.rnd or not rnd)]


def action_space_refusal(name: str, kind: str, rnd: bool = False, has: str | None = None) -> str | None:
    """The one line refusing ``--agent name`` on an env of ``kind`` ("discrete" or "box") actions, naming every
    agent that fits (``has``: how the env's actions read, where known); None when the agent takes them."""
    if kind in ACTION_KINDS.get(name, (kind,)):
        return None
    fits = agents_for(kind, rnd)
    takes = " or ".join(ACTION_KINDS[name])
    has = has or ("discrete actions" if kind == "discrete" else "box (continuous) actions")
    choices = ", ".join(fits[:-1]) + f" or {fits[-1]}" if len(fits) > 1 else fits[0]
    return f"--agent {name} takes {takes} actions; this env has {has}: use --agent {choices}" + (
        " (with --rnd)" if rnd else ""
    )


def check_action_space(flags, spec: EnvSpec) -> None:
    """One line naming every agent that fits when ``--agent`` does not take the env's action space."""
    from rl_core.errors import UserError

    action = spec.action
    has = "discrete actions" if spec.discrete else f"a Box action space of shape {list(action.shape)}"
    refusal = action_space_refusal(flags.agent, action.kind, bool(flags.rnd), has)
    if refusal:
        raise UserError(refusal)


def published_defaults(name: str) -> dict:
    """Flag defaults an agent brings from its paper, whatever the environment package."""
    return dict(SPECS[name].defaults)


def make_agent(flags, spec: EnvSpec) -> Agent:
    """The agent of ``--agent`` (wrapped in RND's add-on under ``--rnd``) for an env of ``spec``."""
    check_action_space(flags, spec)  # every agent, from its action kinds: one line naming the agents that fit
    agent = agent_spec(flags).agent_class()(flags, spec)
    if flags.rnd:
        from rl_core.agents.rnd.agent import RNDAgent

        return RNDAgent(flags, spec, agent)
    return agent


def add_flags(p: argparse.ArgumentParser) -> None:
    """--agent, and every registered agent's flag groups (each once), then RND's."""
    p.add_argument(
        "--agent",
        default=AGENTS[0],
        choices=AGENTS,
        help="; ".join(f"{name}: {spec.summary}" for name, spec in SPECS.items())
        + ". Each environment package has defaults per agent; flags given explicitly win.",
    )
    groups = dict.fromkeys(group for spec in SPECS.values() for group in spec.flag_groups)
    for group in groups:
        group(p)
    rnd_config.add_flags(p)


def check_flags(parser: argparse.ArgumentParser, flags) -> None:
    """--rnd's checks, a recurrent core on a feedforward agent, then the agent's own checks."""
    from models import core_kind

    rnd_config.check_flags(parser, flags, rnd_wraps())
    spec = agent_spec(flags)
    if not spec.traits.recurrent and core_kind(flags) is not None:
        parser.error(f"--agent {spec.name}'s networks are feedforward: drop --use_lstm / --use_elstm / --use_rtrl")
    if spec.check is not None:
        spec.check(parser, flags)
