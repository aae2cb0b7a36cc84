"""What an agent declares of itself: its ``AgentSpec``, read before the agent is built (torch-free).

An agent is a folder (or a module) of ``rl_core/agents`` or of any installed package: its ``__init__``
defines ``SPECS``, a tuple of ``AgentSpec``, and nothing that imports torch, since the flags are parsed in
env servers too; the agent's class, named by ``make`` as ``"module:Class"``, is imported only when a run
builds it.  The registry (``rl_core/agents/__init__.py``) lists the folders, and reads any installed
package's under the entry-point group ``rl_core.agents`` (docs/start-here.md, "Add an agent").
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass, field
from typing import Callable

from rl_core.agents.traits import AgentTraits

FlagGroup = Callable[[argparse.ArgumentParser], None]
FlagCheck = Callable[[argparse.ArgumentParser, argparse.Namespace], None]


@dataclass(frozen=True)
class AgentSpec:
    """``name``: its --agent name; ``summary``: what it is, for --agent's help.

    ``make``: ``"module:Class"``, the agent (``rl_core.agents.base.Agent``), built as ``Class(flags, spec)``.
    ``traits``: what the runtime and the sizing ask of it (``rl_core.agents.traits``).  ``action_kinds``: the
    action spaces it takes (``"discrete"``, ``"box"``).  ``defaults``: its paper's flag values, whatever the
    env package (a package's presets go over them).  ``flag_groups``: the functions adding the flags it reads
    (groups shared with other agents are added once; every registered agent's flags are in every parser, so
    that a package's presets may set any of them).  ``check``: its flags' consistency, refused with
    ``parser.error`` in one line (its numeric flags' ranges are declared with them: ``rl_core/flag_types.py``).
    ``rnd``: whether ``--rnd`` may wrap it.
    ``unread``: flags of its groups and of the runtime's loss group that it never reads (``--dry_run`` leaves
    them out).
    """

    name: str
    summary: str
    make: str
    traits: AgentTraits
    action_kinds: tuple[str, ...] = ("discrete",)
    defaults: dict = field(default_factory=dict)
    flag_groups: tuple[FlagGroup, ...] = ()
    check: FlagCheck | None = None
    rnd: bool = False
    unread: tuple[str, ...] = ()

    def agent_class(self) -> type:
        """The agent's class (imports its module, and torch)."""
        module, _, name = self.make.partition(":")
        return getattr(importlib.import_module(module), name)
