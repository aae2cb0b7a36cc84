"""``--dry_run``'s page: the flags a run reads, grouped by where each value came from, a sentinel's meaning beside it.

``--dry_run`` (``--dry_run=read``) shows the flags the chosen agent, core and env package read: the runtime's, the
package's, the chosen agent's flag groups (``AgentSpec.flag_groups``), RND's with ``--rnd`` and the core's with one;
``--dry_run=all`` every flag.
"""

from __future__ import annotations

import re

from rl_core.config.flags import FlagParser

FLAG_DEFAULT, COMMAND_LINE, SIZING = "flag default", "command line", "sizing: this machine"  # sources
CORE_ONLY = ("hidden_size", "forget_bias", "stem_value")  # read only where a recurrent core is built (models/)
RMSPROP_ONLY = ("alpha", "momentum")  # RMSprop's own (rl_core/numerics/optim.py)
SENTINEL = re.compile(r"\((0|0\.0|-1|none): ([^)]*)\)")  # a help text's "(0: what zero means)"


def group_dests(groups) -> set[str]:
    """The flags that ``groups`` (functions that add flags to a parser) add."""
    parser = FlagParser(add_help=False)
    for group in dict.fromkeys(groups):
        group(parser)
    return {a.dest for a in parser._actions}


def read_flags(parser, flags) -> set[str]:
    """The flags of ``parser`` that a run of ``flags`` reads: every flag but other agents' groups, RND's without
    --rnd and a core's without one."""
    from models import core_kind
    from rl_core.agents import SPECS, agent_spec
    from rl_core.agents import rnd as rnd_config

    spec = agent_spec(flags)
    every_agents = group_dests(group for spec in SPECS.values() for group in spec.flag_groups)
    unread = (every_agents - group_dests(spec.flag_groups)) | set(spec.unread)
    if not flags.rnd:
        unread |= group_dests([rnd_config.add_flags]) - {"rnd"}
    if core_kind(flags) is None:
        unread |= set(CORE_ONLY)
    if flags.optimizer != "rmsprop":
        unread |= set(RMSPROP_ONLY)
    return {a.dest for a in parser._actions if a.dest not in unread and a.dest != "help"}


def order_of_sources(sources: dict[str, str]) -> list[str]:
    """Sources in the order a reader asks "who set this": the command line and flag files, the package's presets,
    the papers', the sizing, the package's defaults of shared flags, the flags' own defaults."""
    found = list(dict.fromkeys(sources.values()))

    def rank(source: str) -> int:
        if source == COMMAND_LINE or source.startswith("flag file "):
            return 0
        if source == SIZING:
            return 3
        if source == FLAG_DEFAULT:
            return 5
        if source.startswith("paper: "):
            return 2
        return 1 if ": " in source else 4  # a package's preset row, or the package's own default

    return sorted(found, key=lambda s: (rank(s), found.index(s)))


def sentinel_note(parser, dest: str, value) -> str:
    """What a sentinel value means, from the flag's help: ``--test_episodes=0`` -> "the protocol's"."""
    action = next((a for a in parser._actions if a.dest == dest), None)
    for written, meaning in SENTINEL.findall(getattr(action, "help", None) or ""):
        if value is None if written == "none" else _equal(value, written):
            return f"  ({written}: {meaning})"
    return ""


def _equal(value, written: str) -> bool:
    try:
        return float(value) == float(written)
    except (TypeError, ValueError):
        return False


def page(parser, flags, sources: dict[str, str], sizing, env_pkg, raw_argv: list[str]) -> str:
    """The configuration page ``--dry_run`` prints."""
    from rl_core.agents import describe_agent

    every = flags.dry_run == "all"
    shown = {k for k in vars(flags) if k != "server_secret"}
    if not every:
        shown &= read_flags(parser, flags)
    hidden = len(vars(flags)) - 1 - len(shown)
    lines = [
        f"{parser.prog}: the configuration of {describe_agent(vars(flags))} on {flags.env or 'the default env'}",
        "  "
        + ("every flag" if every else f"the {len(shown)} flags this run reads ({hidden} others: --dry_run=all)")
        + ", grouped by where each value came from",
    ]
    by_source: dict[str, list[str]] = {}
    for key in sorted(shown):
        by_source.setdefault(sources.get(key, FLAG_DEFAULT), []).append(key)
    for source in order_of_sources({k: sources.get(k, FLAG_DEFAULT) for k in shown}):
        lines.append(f"{source}:")
        for key in by_source[source]:
            value = getattr(flags, key)
            lines.append(f"  --{key}={value}{sentinel_note(parser, key, value)}")
    if sizing is not None and sizing.reason:
        lines.append(f"sizing: {sizing.reason}")
    return "\n".join(lines) + "\n"
