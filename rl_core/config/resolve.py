"""The configuration resolver: one pure function from (command line, env package, machine) to the flags and each
value's source, parsing the command line once.

The layers, a later one winning (docs/start-here.md, "Where a value comes from"):

1. the flag's own default (``rl_core/config/flags.py``, the agents' flag groups), then the package's
   (``env.add_flags``);
2. the agent's paper (``rl_core.agents.published_defaults``);
3. the package's presets (``PRESETS``, rl_core/config/presets.py): rows keyed by the agent, then by an env pattern,
   then by the core, then (with ``--rnd``) RND's paper values and the package's rows for ``--rnd`` runs;
4. the launcher's sizing for this machine (``rl_core/config/sizing.py``), or a resumed run's;
5. the command line and its ``@FILE`` flag files.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys

from rl_core.config import flags as flags_lib
from rl_core.config.dry_run import COMMAND_LINE, FLAG_DEFAULT, SIZING
from rl_core.config.dry_run import page as dry_run_page
from rl_core.config.env_package import env_package
from rl_core.config.presets import MemoryShare, rows_in_layer
from rl_core.errors import UserError

CORE_FLAGS = ("use_lstm", "use_elstm", "use_rtrl")  # models.core_kind's flags: one core at most
HELP = ("-h", "--help")


@dataclasses.dataclass(frozen=True)
class Machine:
    """What the resolver reads of the machine: usable cores, memory, whether the learner gets a GPU, and the
    torchrun world this process is a rank of (``rl_core.runtime.distributed.WorldEnv``; None outside torchrun)."""

    cores: int
    memory_bytes: int
    cuda: bool = False
    world: object | None = None


def memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@dataclasses.dataclass
class Parsed:
    """A resolved command line: the flags, the launcher's sizing (or None), the command line with its ``@FILE`` flag
    files expanded, each flag's source, and the preset layers laid (``(source, values)``, in order)."""

    flags: argparse.Namespace
    sizing: object
    argv: list[str]
    sources: dict[str, str]
    layers: list = dataclasses.field(default_factory=list)


def make_parser(env_pkg, prog=None):
    parser = flags_lib.make_parser(prog)
    env_package(env_pkg).add_flags(parser)
    return parser


def parse_given(parser, argv: list[str]) -> dict:
    """The one parse: the flags written in ``argv`` (abbreviated ones too), with their values as parsed."""
    unset = object()
    namespace = argparse.Namespace(**{a.dest: unset for a in parser._actions if a.dest != argparse.SUPPRESS})
    parser.parse_args(argv, namespace=namespace)
    return {k: v for k, v in vars(namespace).items() if v is not unset}


def preset_layers(env_pkg, values: dict, given: dict, machine: Machine | None) -> list[tuple[str, dict]]:
    """The agent's paper values and the package's preset rows that match the run ``values`` describes (its agent,
    env, core and --rnd, the command line's ``given`` over them), each layer ``(source, values)`` in the order laid.
    A core named on the command line (or ``--feedforward``) replaces the one the presets give."""
    from models import core_kind
    from rl_core.agents import describe_agent, published_defaults

    env_pkg = env_package(env_pkg)
    run = dict(values, **given)
    agent, env, pkg, table = run["agent"], run.get("env"), env_pkg.package, env_pkg.PRESETS
    core_given = bool(run.get("feedforward")) or any(run.get(k) for k in CORE_FLAGS)

    def rows(layer: str, core=None) -> dict:
        laid = rows_in_layer(table, layer, agent, env, core, bool(run.get("rnd")))
        if core_given:
            laid = {k: v for k, v in laid.items() if k not in CORE_FLAGS}
        return {k: (v.size(machine_memory(machine)) if isinstance(v, MemoryShare) else v) for k, v in laid.items()}

    paper = published_defaults(agent)
    if core_given:
        paper = {k: v for k, v in paper.items() if k not in CORE_FLAGS}
    layers = [
        (f"paper: --agent {agent}", paper),
        (f"{pkg}: --agent {agent}", rows("agent")),
        (f"{pkg}: --agent {agent} on --env {env}", rows("env")),
    ]
    laid = {k: v for _, layer in layers for k, v in layer.items()}
    core = core_kind(argparse.Namespace(**{k: laid.get(k, run.get(k)) for k in CORE_FLAGS}))
    layers.append((f"{pkg}: --agent {agent} with a {core} core", rows("core", core)))
    if run.get("rnd"):
        from rl_core.agents.rnd import RND_DEFAULTS

        described = describe_agent(run)  # --agent NAME --rnd
        layers += [(f"paper: {described}", dict(RND_DEFAULTS)), (f"{pkg}: {described}", rows("rnd", core))]
    unknown = [k for _, layer in layers for k in layer if k not in values]
    if unknown:
        raise ValueError(f"{env_pkg.presets_name}: the presets of --agent {agent} name unknown flags {unknown}")
    return [(source, layer) for source, layer in layers if layer]


def machine_memory(machine: Machine | None) -> int:
    return machine.memory_bytes if machine is not None else memory_bytes()


def flag_defaults(parser) -> dict:
    """Every flag's default, as the parser holds it (a package's ``set_defaults`` included); an old name's alias
    (``flags.Renamed``, no default of its own) gives none."""
    values = {}
    for action in parser._actions:
        if action.dest != argparse.SUPPRESS and action.default is not argparse.SUPPRESS:
            values.setdefault(action.dest, parser._defaults.get(action.dest, action.default))
    for dest, value in parser._defaults.items():  # set_defaults of a name no flag has: argparse keeps it too
        values.setdefault(dest, value)
    return values


def package_defaults(env_pkg, argv: list[str], machine: Machine | None = None) -> dict:
    """Every flag's value before the sizing and the command line: the flag defaults under the preset layers of the
    run ``argv`` names (its agent, env, core, --rnd)."""
    parser = make_parser(env_pkg)
    given = parse_given(parser, argv)
    values = flag_defaults(parser)
    for _, layer in preset_layers(env_pkg, values, given, machine):
        values.update(layer)
    return values


def resolve(
    env_pkg, argv=None, machine: Machine | None = None, prog=None, parser=None, auto_size=False, checks=True
) -> Parsed:
    """The flags of ``argv`` (``sys.argv[1:]`` when None) for ``env_pkg`` on ``machine``: parsed once, laid over the
    layers above, checked (``checks`` False: not checked, for tests of the layers alone).  ``auto_size`` (the launcher): the flags not
    given are sized to the machine.  ``--dry_run`` prints the configuration page and exits 0; ``--help`` prints the
    flags with the values this command line resolves to."""
    env_pkg = env_package(env_pkg)
    parser = parser or make_parser(env_pkg, prog)
    raw = sys.argv[1:] if argv is None else list(argv)
    try:
        argv = flags_lib.expand_flag_files(raw)
    except UserError as e:
        parser.error(str(e))
    wants_help = any(a in HELP for a in argv)
    given = parse_given(parser, [a for a in argv if a not in HELP])
    values = flag_defaults(parser)
    layers = preset_layers(env_pkg, values, given, machine)
    for _, layer in layers:
        values.update(layer)
    values = typed(parser, values)
    sizing = size(env_pkg, values, given, machine) if auto_size else None
    if sizing is not None:
        values.update({k: v for k, v in sizing.values().items() if k in sizing.auto})
    values.update(given)
    if wants_help:
        parser.set_defaults(**values)
        parser.print_help()
        sys.exit(0)
    flags = argparse.Namespace(**values)
    from rl_core.config.flag_ranges import check_ranges

    if checks:
        check_ranges(parser, flags)
        flags_lib.check(parser, flags)
        env_pkg.check_flags(parser, flags)
        check_action_kind(env_pkg, parser, flags)
    sources = flag_sources(env_pkg, parser, raw, layers, sizing)
    if flags.dry_run:
        print(dry_run_page(parser, flags, sources, sizing, env_pkg, raw), end="")
        sys.exit(0)
    return Parsed(flags, sizing, argv, sources, layers)


def typed(parser, values: dict) -> dict:
    """``values`` with each string a flag's type converts made that type, as argparse does to string defaults."""
    out = dict(values)
    for action in parser._actions:
        value = out.get(action.dest)
        if isinstance(value, str) and callable(action.type) and action.dest != argparse.SUPPRESS:
            out[action.dest] = parser._get_value(action, value)
    return out


def size(env_pkg, values: dict, given: dict, machine: Machine | None):
    """The launcher's sizing (``rl_core.config.sizing``): --num_servers, --num_actors and --batch_size for the
    machine, the agent and the package, for the flags not given.  A resumed run (--xpid of a run directory with a
    model.tar) keeps what its meta.json says was sized when it started.  None for --mode test."""
    from rl_core.config import sizing as sizing_lib

    run = dict(values, **given)
    if run["mode"] != "train":
        return None
    machine = machine or Machine(sizing_lib.usable_cores(), memory_bytes())
    keys = (*sizing_lib.SIZED_FLAGS, "server_splits", "unroll_length", "total_steps")
    given_sized = {k: v for k, v in given.items() if k in keys}
    defaults = {k: values[k] for k in keys}
    known = argparse.Namespace(**run)
    sized = resumed_sizing(known, given_sized, defaults, machine.world)
    if sized is not None:
        return sized
    games = env_pkg.num_actors_multiple(known)
    gpu = machine.cuda and not run.get("disable_cuda")
    args = (gpu, run["agent"], env_pkg.ENVS_PER_SERVER, defaults, given_sized, games, env_pkg.SERVER_SPLITS)
    if machine.world is None:
        return sizing_lib.size_run(machine.cores, *args)
    return sized_per_rank(sizing_lib, machine, *args)


def sized_per_rank(sizing_lib, machine, gpu, agent, envs_per_server, defaults, given, games, server_splits=1):
    """Sizing under torchrun: one rank's share of the machine (its cores / LOCAL_WORLD_SIZE) sized from the
    package's values divided among the ranks (rounded up), times the world size: the run's totals, each a
    multiple of the world size (on 2 cores a rank, the package's defaults, rounded up to such a multiple)."""
    world = machine.world
    W = world.world_size
    share = {k: (-(-v // W) if k in sizing_lib.SIZED_FLAGS else v) for k, v in defaults.items()}
    given_share = {k: (-(-v // W) if k in sizing_lib.SIZED_FLAGS else v) for k, v in given.items()}
    cores = max(1, machine.cores // max(1, world.local_world_size))
    per_rank = sizing_lib.size_run(cores, gpu, agent, envs_per_server, share, given_share, games, server_splits)
    totals = {
        k: (v * W if k in per_rank.auto and k in sizing_lib.SIZED_FLAGS else given.get(k, v))
        for k, v in per_rank.values().items()
    }
    reason = (f"{per_rank.reason}; " if per_rank.reason else "") + (
        f"per rank of the {W} of this torchrun job (each takes 1/{W} of the run's totals)"
    )
    return dataclasses.replace(per_rank, **totals, reason=reason)


def resumed_sizing(known, given: dict, defaults: dict, world=None):
    """The sizing a resumed run started with (its meta.json's ``sizing``), for the flags it sized itself
    and this command line does not give; None for a new run or one that recorded none."""
    from rl_core.config import sizing as sizing_lib

    if not known.xpid:
        return None
    rundir = os.path.join(os.path.expanduser(known.savedir), known.xpid)
    if not os.path.exists(os.path.join(rundir, "model.tar")):
        return None
    try:
        with open(os.path.join(rundir, "meta.json")) as f:
            record = json.load(f).get("sizing")
        taken = {k: int(record[k]) for k in record.get("auto", ()) if k in sizing_lib.SIZED_FLAGS and k not in given}
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    if not taken:
        return None
    values = {k: given.get(k, taken.get(k, defaults[k])) for k in sizing_lib.SIZED_FLAGS}
    auto = tuple(k for k in sizing_lib.SIZED_FLAGS if k not in given)
    if "server_splits" in record.get("auto", ()) and "server_splits" not in given and "num_servers" in auto:
        values["server_splits"] = int(record.get("server_splits", 1))  # the processes' split it started with
        auto += ("server_splits",)
    device = "cuda" if record.get("gpu") else "cpu"
    reason = (
        f"resuming run {known.xpid}: {', '.join(f'--{k} {v}' for k, v in taken.items())} as it was sized when "
        f"it started ({record.get('cores')} usable cores, learner on {device})"
    )
    rounded = divisible_by_ranks(values, auto, world)
    if rounded:
        reason += f", then {', '.join(f'--{k} {values[k]}' for k in rounded)} to divide among the ranks"
    reason += f"; {sizing_lib.OVERRIDE}"
    return sizing_lib.Sizing(
        **values, reason=reason, auto=auto, cores=record.get("cores") or 0, gpu=bool(record.get("gpu"))
    )


def divisible_by_ranks(values: dict, auto: tuple, world) -> list[str]:
    """Under torchrun, the sized values a checkpoint kept (``auto``, not given) rounded up, in place, so that
    they divide among the ranks (a one-process run's 1 server becomes 2 on 2 ranks) and the envs among the
    servers; returns the flags changed.  Outside torchrun, or with the flags given, nothing changes."""
    if world is None:
        return []
    W, changed = world.world_size, []

    def round_up(key: str, multiple: int) -> None:
        if key in auto and values[key] % multiple:
            values[key] = -(-values[key] // multiple) * multiple
            changed.append(key)

    round_up("num_servers", W)
    round_up("num_actors", math.lcm(W, values["num_servers"]))
    round_up("batch_size", W)
    return changed


def flag_sources(env_pkg, parser, raw_argv: list[str], layers: list[tuple[str, dict]], sizing) -> dict[str, str]:
    """Where each flag's value came from, the first that gives it of: the command line or a flag file (the last
    one that names it), the launcher's sizing (where it changed the value), the preset layers (the last first),
    the package's own defaults of the shared flags, the flag's own default."""
    base = {a.dest: a.default for a in flags_lib.make_parser()._actions}
    package = flag_defaults(parser)
    sources = {k: env_pkg.package if package.get(k, base.get(k)) != base.get(k) else FLAG_DEFAULT for k in package}
    laid = dict(package)
    for source, values in layers:
        sources.update(dict.fromkeys(values, source))
        laid.update(values)
    sized = sizing.values() if sizing is not None else {}
    sources.update(
        {k: SIZING for k in (sizing.auto if sizing is not None else ()) if sized.get(k, laid.get(k)) != laid.get(k)}
    )  # what the sizing kept stays its layer's
    for source, args in argv_segments(raw_argv):
        sources.update(dict.fromkeys(written_dests(parser, args), source))
    return sources


def written_dests(parser, args: list[str]) -> list[str]:
    """The flags ``args`` writes, read from their option strings (abbreviations too) without parsing again."""
    options = parser._option_string_actions
    dests = []
    for arg in args:
        if not arg.startswith("--") or arg == "--":
            continue
        name = arg.split("=", 1)[0]
        action = options.get(name)
        if action is None:
            matches = {options[o].dest for o in options if o.startswith(name)}
            action = options[next(o for o in options if o.startswith(name))] if len(matches) == 1 else None
        if action is not None:
            dests.append(action.dest)
    return dests


def argv_segments(raw_argv: list[str]) -> list[tuple[str, list[str]]]:
    """The command line cut where a ``@FILE`` stands: ``(source, flags)`` in order, a file's flags expanded."""
    segments: list[tuple[str, list[str]]] = []
    for arg in raw_argv:
        if arg.startswith("@") and len(arg) > 1:
            segments.append((f"flag file {arg[1:]}", flags_lib.expand_flag_files([arg])))
        elif segments and segments[-1][0] == COMMAND_LINE:
            segments[-1][1].append(arg)
        else:
            segments.append((COMMAND_LINE, [arg]))
    return segments


def check_action_kind(env_pkg, parser, flags) -> None:
    """What --dry_run accepts, a run accepts: an agent that the package's envs' actions refuse is refused here, in
    the line the learner would end with (``rl_core.agents.check_action_space``)."""
    from rl_core.agents import action_space_refusal

    kind = env_pkg.ACTION_KIND
    refusal = action_space_refusal(flags.agent, kind, bool(flags.rnd)) if kind else None
    if refusal:
        parser.error(refusal)
