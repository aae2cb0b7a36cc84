"""The three entry points every environment package exposes, written once.

An environment package's ``env.py`` (its interface: rl_core/config/env_package.py) is checked here once and
wrapped in an ``EnvPackage``; its ``polybeast.py``, ``polybeast_env.py`` and ``polybeast_learner.py``
call ``launcher_main``, ``env_main`` and ``learner_main`` with it.
"""

from __future__ import annotations

import os

# OpenMP threads that spin-wait stall when env servers share the cores (an AtariNet update on
# 2 threads beside one busy process: 0.84 s spinning, 0.38 s sleeping).  Set before torch loads;
# an OMP_WAIT_POLICY of the user's wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import dataclasses
import json
import math
import logging
import secrets
import signal
import sys
import threading

from rl_core.config import flags as flags_lib
from rl_core.config.env_package import EnvPackage, env_package
from rl_core.errors import UserError
from rl_core.records.run_log import setup_logging
from rl_core.runtime.allocator import keep_freed_memory
from rl_core.runtime import transport as tp
from rl_core.runtime.supervisor import FAILURE_FILE_ENV

log = logging.getLogger("entry")


def make_parser(env_pkg, prog=None):
    parser = flags_lib.make_parser(prog)
    env_package(env_pkg).add_flags(parser)
    return parser


CORE_FLAGS = ("use_lstm", "use_quasi_lstm", "use_rtrl")  # models.core_kind's flags: one core at most


def apply_agent_defaults(env_pkg, parser, argv) -> list[tuple[str, dict]]:
    """The agent's published defaults (``rl_core.agents.published_defaults``), the package's for the
    chosen --agent (``env_pkg.agent_defaults(name)``), on the chosen --env (``env_pkg.env_defaults(name, env)``), with a
    recurrent core, for that (``env_pkg.core_defaults(name, core)``), and with --rnd RND's
    (``rl_core.agents.rnd.RND_DEFAULTS``, then ``env_pkg.rnd_defaults(name)``), under the flags given on the
    command line: the agent and core are read first, then their defaults are set.  A core named on the command
    line (or ``--feedforward``) replaces the one a package's defaults give.  Returns the layers, each
    ``(source, values)``, in the order they were laid (a later one wins)."""
    from models import core_kind
    from rl_core.agents import published_defaults

    env_pkg = env_package(env_pkg)
    # --help is left out here, so that the help printed by the full parse shows these defaults
    known, _ = parser.parse_known_args([a for a in argv if a not in ("-h", "--help")])
    agent, pkg = known.agent, env_pkg.package
    layers = [
        (f"paper: --agent {agent}", published_defaults(agent)),  # the agent's paper, under the package's own
        (f"{pkg}: --agent {agent}", env_pkg.agent_defaults(agent)),
        (f"{pkg}: --agent {agent} on --env {known.env}", env_pkg.env_defaults(agent, known.env)),
    ]
    if known.feedforward or any(getattr(known, k) for k in CORE_FLAGS):  # a core named on the command line
        layers = [
            (source, {k: v for k, v in values.items() if k not in CORE_FLAGS})  # replaces the package's
            for source, values in layers
        ]
    laid = {k: v for _, values in layers for k, v in values.items()}
    core = core_kind(argparse.Namespace(**{k: laid.get(k, getattr(known, k)) for k in CORE_FLAGS}))
    layers.append((f"{pkg}: --agent {agent} with a {core} core", env_pkg.core_defaults(agent, core)))
    if known.rnd:  # then RND's: the paper's, and the package's for RND runs
        from rl_core.agents import describe_agent
        from rl_core.agents.rnd import RND_DEFAULTS

        run = describe_agent(vars(known))  # --agent NAME --rnd
        layers += [(f"paper: {run}", dict(RND_DEFAULTS)), (f"{pkg}: {run}", env_pkg.rnd_defaults(agent))]
    defaults = {k: v for _, values in layers for k, v in values.items()}
    unknown = [k for k in defaults if not hasattr(known, k)]
    if unknown:
        raise ValueError(f"{env_pkg.presets_name}: the defaults of --agent {agent} name unknown flags {unknown}")
    parser.set_defaults(**defaults)
    return [(source, values) for source, values in layers if values]


def given_flags(parser, argv) -> dict:
    """The flags written on the command line (abbreviated ones too), with their values as parsed."""
    unset = object()
    namespace = argparse.Namespace(**{a.dest: unset for a in parser._actions if a.dest != argparse.SUPPRESS})
    parser.parse_known_args([a for a in argv if a not in ("-h", "--help")], namespace=namespace)
    return {k: v for k, v in vars(namespace).items() if v is not unset}


def apply_sizing(env_pkg, parser, argv):
    """The launcher's sizing (``rl_core.config.sizing``): --num_servers, --num_actors and --batch_size for this
    machine, the agent and the package, set as defaults under the flags given (which always win).
    A resumed run (--xpid of a run directory with a model.tar) keeps what its meta.json says was sized
    when it started.  Returns the ``Sizing``, or None for --mode test (the checkpoint's flags)."""
    from rl_core.config import sizing as sizing_lib

    env_pkg = env_package(env_pkg)
    known, _ = parser.parse_known_args([a for a in argv if a not in ("-h", "--help")])
    if known.mode != "train":
        return None
    keys = (*sizing_lib.SIZED_FLAGS, "server_splits", "unroll_length", "total_steps")
    given = {k: v for k, v in given_flags(parser, argv).items() if k in keys}
    defaults = {k: parser.get_default(k) for k in keys}
    sizing = _resumed_sizing(known, given, defaults)
    if sizing is None:
        from rl_core.runtime.distributed import world_from_environ
        from rl_core.runtime.device import select_device

        games = env_pkg.num_actors_multiple(known)
        gpu = select_device(known).type == "cuda"
        world = world_from_environ()
        envs_per_server = env_pkg.ENVS_PER_SERVER
        if world is None:
            sizing = sizing_lib.size_run(
                sizing_lib.usable_cores(),
                gpu,
                known.agent,
                envs_per_server,
                defaults,
                given,
                games,
                env_pkg.SERVER_SPLITS,
            )
        else:
            sizing = _sized_per_rank(
                sizing_lib, world, gpu, known.agent, envs_per_server, defaults, given, games, env_pkg.SERVER_SPLITS
            )
    parser.set_defaults(**{k: v for k, v in sizing.values().items() if k in sizing.auto})
    return sizing


def _sized_per_rank(sizing_lib, world, gpu, agent, envs_per_server, defaults, given, games, server_splits=1):
    """Sizing under torchrun: one rank's share of the machine (its cores / LOCAL_WORLD_SIZE) sized from the
    package's values divided among the ranks (rounded up), times the world size: the run's totals, each a
    multiple of the world size (on 2 cores a rank, the package's defaults, rounded up to such a multiple)."""
    import dataclasses

    W = world.world_size
    share = {k: (-(-v // W) if k in sizing_lib.SIZED_FLAGS else v) for k, v in defaults.items()}
    given_share = {k: (-(-v // W) if k in sizing_lib.SIZED_FLAGS else v) for k, v in given.items()}
    cores = max(1, sizing_lib.usable_cores() // max(1, world.local_world_size))
    per_rank = sizing_lib.size_run(cores, gpu, agent, envs_per_server, share, given_share, games, server_splits)
    totals = {
        k: (v * W if k in per_rank.auto and k in sizing_lib.SIZED_FLAGS else given.get(k, v))
        for k, v in per_rank.values().items()
    }
    reason = (f"{per_rank.reason}; " if per_rank.reason else "") + (
        f"per rank of the {W} of this torchrun job (each takes 1/{W} of the run's totals)"
    )
    return dataclasses.replace(per_rank, **totals, reason=reason)


def _resumed_sizing(known, given: dict, defaults: dict):
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
    rounded = _divisible_by_ranks(values, auto)
    if rounded:
        reason += f", then {', '.join(f'--{k} {values[k]}' for k in rounded)} to divide among the ranks"
    reason += f"; {sizing_lib.OVERRIDE}"
    return sizing_lib.Sizing(
        **values, reason=reason, auto=auto, cores=record.get("cores") or 0, gpu=bool(record.get("gpu"))
    )


def _divisible_by_ranks(values: dict, auto: tuple) -> list[str]:
    """Under torchrun, the sized values a checkpoint kept (``auto``, not given) rounded up, in place, so that
    they divide among the ranks (a one-process run's 1 server becomes 2 on 2 ranks) and the envs among the
    servers; returns the flags changed.  Outside torchrun, or with the flags given, nothing changes."""
    from rl_core.runtime.distributed import world_from_environ

    world = world_from_environ()
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


def parse_flags(env_pkg, argv=None, prog=None, parser=None):
    """Parse and check; ``--dry_run`` prints the configuration, each value with its source, and exits 0."""
    return parse_command_line(env_pkg, argv, prog, parser).flags


@dataclasses.dataclass
class Parsed:
    """A parsed command line: the flags, the launcher's sizing (or None), the command line with its ``@FILE`` flag
    files expanded, and each flag's source (``flag_sources``)."""

    flags: argparse.Namespace
    sizing: object
    argv: list[str]
    sources: dict[str, str]


def parse_command_line(env_pkg, argv=None, prog=None, parser=None, auto_size=False) -> Parsed:
    """``parse_flags``; with ``auto_size`` (the launcher) the flags not given are sized to the machine first."""
    env_pkg = env_package(env_pkg)
    parser = parser or make_parser(env_pkg, prog)
    raw = sys.argv[1:] if argv is None else list(argv)
    try:
        argv = flags_lib.expand_flag_files(raw)
    except UserError as e:
        parser.error(str(e))
    layers = apply_agent_defaults(env_pkg, parser, argv)
    sizing = apply_sizing(env_pkg, parser, argv) if auto_size else None
    flags = parser.parse_args(argv)
    from rl_core import agents
    from rl_core.config.flag_ranges import check_ranges

    check_ranges(parser, flags, dict(agents.flag_ranges(), **(env_pkg.FLAG_RANGES or {})))
    flags_lib.check(parser, flags)
    env_pkg.check_flags(parser, flags)
    check_action_kind(env_pkg, parser, flags)
    sources = flag_sources(env_pkg, parser, raw, layers, sizing)
    if flags.dry_run:
        print(f"{parser.prog}: configuration (each value's source after #)")
        for key, value in sorted(vars(flags).items()):
            if key != "server_secret":
                print(f"  --{key}={value}  # {sources.get(key, FLAG_DEFAULT)}")
        if sizing is not None and sizing.reason:
            print(f"sizing: {sizing.reason}")
        sys.exit(0)
    return Parsed(flags, sizing, argv, sources)


FLAG_DEFAULT, COMMAND_LINE, SIZING = "flag default", "command line", "sizing: this machine"


def flag_sources(env_pkg, parser, raw_argv: list[str], layers: list[tuple[str, dict]], sizing) -> dict[str, str]:
    """Where each flag's value came from, the first that gives it of: the command line or a flag file (the last
    one that names it), the launcher's sizing (where it changed the value), the layers of agent and package defaults
    (``apply_agent_defaults``, the last first), the package's own defaults of the shared flags, the flag's own
    default."""
    base = {a.dest: a.default for a in flags_lib.make_parser()._actions}
    package = {a.dest: a.default for a in make_parser(env_pkg)._actions}
    sources = {k: env_pkg.package if package.get(k, base.get(k)) != base.get(k) else FLAG_DEFAULT for k in package}
    laid = dict(package)
    for source, values in layers:
        sources.update(dict.fromkeys(values, source))
        laid.update(values)
    sized = sizing.values() if sizing is not None else {}
    sources.update(
        {k: SIZING for k in (sizing.auto if sizing is not None else ()) if sized.get(k, laid.get(k)) != laid.get(k)}
    )  # what the sizing kept stays its layer's
    for source, args in _argv_segments(raw_argv):
        sources.update(dict.fromkeys(given_flags(parser, args), source))
    return sources


def _argv_segments(raw_argv: list[str]) -> list[tuple[str, list[str]]]:
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


def _maybe_test_mode(env_pkg, flags, parser, argv) -> None:
    if flags.mode == "test":
        from rl_core.runtime.distributed import world_from_environ
        from rl_core.runtime.evaluate_checkpoint import evaluate_checkpoint

        world = world_from_environ()
        if world is not None and world.rank != 0:  # one evaluation, not one per rank
            sys.exit(0)

        sys.exit(evaluate_checkpoint(flags, env_pkg, parser, argv))


def own_argv(parsed: Parsed, argv: list[str] | None) -> list[str]:
    """The command line that ran, its ``@FILE`` flag files expanded; where it is the process's own (``argv``
    None), ``sys.argv`` holds it too, so that meta.json records the flags that ran and the servers get them."""
    if argv is None:
        sys.argv[1:] = parsed.argv
    return parsed.argv


def _fail(message: str) -> "NoReturn":  # noqa: F821
    print(f"error: {message}", file=sys.stderr, flush=True)
    report = os.environ.get(FAILURE_FILE_ENV)
    if report:  # a server started by a supervisor: its reason becomes the launcher's last line
        try:
            with open(report, "w") as f:
                f.write(message)
        except OSError:
            pass
    sys.exit(2)


def env_main(env_pkg, argv=None) -> None:
    """``python -m <pkg>.polybeast_env``: one server with --server_index, else all of them."""
    env_pkg = _checked(env_pkg)
    parsed = parse_command_line(env_pkg, argv, prog=f"python -m {env_pkg.package}.polybeast_env")
    flags, argv = parsed.flags, own_argv(parsed, argv)
    flags.pipes_basename = flags.pipes_basename or SHARED_BASENAME
    setup_logging(None)
    if flags.server_index is None:
        _run_all_servers(env_pkg, flags, argv)
        return
    from rl_core.envs.seeds import env_seed
    from rl_core.runtime.env_server import (
        ENV_ERROR_EXIT_CODE,
        EnvError,
        EnvServer,
        install_termination_handlers,
        serve_splits,
        watch_parent,
    )

    install_termination_handlers()
    first = flags.server_index
    secret = flags.server_secret or os.environ.get("POLYBEAST_SECRET")
    servers = []
    try:
        K = flags.num_actors // flags.num_servers
        lock = threading.Lock() if flags.server_splits > 1 else None  # the splits step in turn
        for i in range(first, first + flags.server_splits):
            address = tp.server_address(flags.pipes_basename, i)
            if address.kind == "tcp" and not secret:
                raise UserError("a TCP env server needs a shared secret: pass --server_secret or set POLYBEAST_SECRET")
            seeds = [env_seed(flags.seed, i, slot) for slot in range(K)]
            fns = [(lambda s=s: env_pkg.make_env(flags, s)) for s in seeds]
            try:
                servers.append(
                    EnvServer(
                        address,
                        fns,
                        seeds,
                        server_index=i,
                        secret=secret.encode() if secret else None,
                        max_bytes=flags.max_message_bytes,
                        env_name=flags.env or "",
                        stall_warn_s=flags.env_timeout / 2,
                        step_lock=lock,
                    )
                )
            except (UserError, EnvError):
                raise
            except Exception as e:  # noqa: BLE001 - before serving anything: the setup is at fault
                first_line = (str(e).strip().splitlines() or [""])[0][:300]
                raise UserError(
                    f"{flags.env}: the environment could not be created ({type(e).__name__}: {first_line})"
                ) from None
        parent = os.environ.get("POLYBEAST_PARENT_PID")
        if parent:
            watch_parent(int(parent), lambda: [server.remove_socket_file() for server in servers])
        serve_splits(servers)
    except UserError as e:
        for server in servers:
            server.close()
        _fail(str(e))
    except EnvError:
        sys.exit(ENV_ERROR_EXIT_CODE)


def _run_all_servers(env_pkg, flags, argv) -> None:
    """Start --num_servers single-server processes and keep them running until signalled."""
    from rl_core.runtime.supervisor import ServerSupervisor

    module = f"{env_pkg.package}.polybeast_env"
    # The secret reaches the servers through the environment, not their command line.
    server_argv = _without_flag(argv, "--server_secret")
    supervisor = ServerSupervisor(
        module, server_argv, flags.num_servers, flags.pipes_basename, flags.server_secret, splits=flags.server_splits
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    supervisor.start_all()
    try:
        while not stop.wait(0.5):
            supervisor.poll()
    except (UserError, RuntimeError) as e:
        supervisor.stop_all()
        _fail(str(e))
    supervisor.stop_all()


def learner_main(env_pkg, argv=None) -> None:
    """``python -m <pkg>.polybeast_learner``: the learner alone, against running servers."""
    keep_freed_memory()  # before any thread starts (rl_core/runtime/allocator.py)
    from rl_core.runtime.train import train

    env_pkg = _checked(env_pkg)
    parser = make_parser(env_pkg, prog=f"python -m {env_pkg.package}.polybeast_learner")
    parsed = parse_command_line(env_pkg, argv, parser=parser)
    flags, argv = parsed.flags, own_argv(parsed, argv)
    flags.pipes_basename = flags.pipes_basename or SHARED_BASENAME
    _hide_secrets_from_own_argv()
    _maybe_test_mode(env_pkg, flags, parser, argv)
    sys.exit(train(flags, env_pkg, sources=parsed.sources))


def launcher_main(env_pkg, argv=None) -> None:
    """``python -m <pkg>.polybeast``: env servers as child processes plus the learner."""
    keep_freed_memory()  # before any thread starts (rl_core/runtime/allocator.py)
    from rl_core.runtime.supervisor import ServerSupervisor
    from rl_core.runtime.train import train

    env_pkg = _checked(env_pkg)
    parser = make_parser(env_pkg, prog=f"python -m {env_pkg.package}.polybeast")
    parsed = parse_command_line(env_pkg, argv, parser=parser, auto_size=True)
    flags, sizing, argv = parsed.flags, parsed.sizing, own_argv(parsed, argv)
    _hide_secrets_from_own_argv()
    _maybe_test_mode(env_pkg, flags, parser, argv)
    if flags.pipes_basename is None:  # this run's own: two runs started with defaults never meet
        flags.pipes_basename = f"{SHARED_BASENAME}-{os.getpid()}"
        argv = [*_without_flag(argv, "--pipes_basename"), "--pipes_basename", flags.pipes_basename]
    try:
        first = tp.server_address(flags.pipes_basename, 0)
    except UserError as e:
        _fail(str(e))
    if first.kind == "unix" and not os.path.isdir(os.path.dirname(os.path.abspath(first.path))):
        _fail(
            f"--pipes_basename {flags.pipes_basename}: the directory "
            f"{os.path.dirname(os.path.abspath(first.path))} does not exist: create it or choose another"
        )
    if first.kind == "tcp" and not (flags.server_secret or os.environ.get("POLYBEAST_SECRET")):
        flags.server_secret = secrets.token_hex(32)
    module = f"{env_pkg.package}.polybeast_env"
    # The secret reaches the servers through the environment, not their command line; what the
    # launcher sized (not on its command line) is added to theirs.
    server_argv = _without_flag(argv, "--server_secret")
    server_argv += [f"--{k}={getattr(flags, k)}" for k in (sizing.auto if sizing else ())]
    # under torchrun each rank starts its share of the run's servers (rl_core/runtime/distributed.py)
    from rl_core.runtime.distributed import rank_flags, world_from_environ

    world = world_from_environ()
    try:
        mine = rank_flags(flags, world) if world is not None else flags
    except UserError as e:  # a total that does not divide among the ranks: before any server starts
        _fail(str(e))
    supervisor = ServerSupervisor(
        module,
        server_argv,
        mine.num_servers,
        flags.pipes_basename,
        flags.server_secret,
        getattr(mine, "server_offset", 0),
        flags.server_splits,
    )
    sys.exit(train(flags, env_pkg, supervisor, sizing, parsed.sources))


def _checked(env_pkg) -> EnvPackage:
    """The package checked once, at an entry point: what it lacks ends the process in one line."""
    try:
        return env_package(env_pkg)
    except UserError as e:
        _fail(str(e))


SHARED_BASENAME = "unix:/tmp/polybeast"  # where polybeast_env and polybeast_learner started apart meet


def _hide_secrets_from_own_argv() -> None:
    """Redact secrets in ``sys.argv`` once parsed: wandb (and anything else) that records the
    command line sees ``--server_secret <redacted>``.  (The OS still shows the real command line
    to this machine's users: prefer $POLYBEAST_SECRET.)"""
    from rl_core.records.checkpoint_file import redact_argv

    sys.argv[:] = redact_argv(sys.argv)


def _without_flag(argv: list[str], name: str) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == name:
            skip = True
            continue
        if arg.startswith(name + "="):
            continue
        out.append(arg)
    return out
