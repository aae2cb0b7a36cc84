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

import logging
import secrets
import signal
import sys
import threading

from rl_core.config.env_package import EnvPackage, env_package
from rl_core.config.resolve import Machine, Parsed, make_parser, memory_bytes, resolve
from rl_core.errors import UserError
from rl_core.records.run_log import setup_logging
from rl_core.runtime.allocator import keep_freed_memory
from rl_core.runtime import transport as tp
from rl_core.runtime.supervisor import FAILURE_FILE_ENV

log = logging.getLogger("entry")


def this_machine(cuda: bool = False) -> Machine:
    """The machine the resolver reads: usable cores, memory, the torchrun world; ``cuda``: whether a GPU learner is
    possible (asked only by the launcher, whose sizing depends on it: it imports torch)."""
    from rl_core.config.sizing import usable_cores
    from rl_core.runtime.distributed import world_from_environ

    if cuda:
        import torch

        cuda = torch.cuda.is_available()
    return Machine(usable_cores(), memory_bytes(), cuda, world_from_environ())


def parse_flags(env_pkg, argv=None, prog=None, parser=None):
    """Parse and check; ``--dry_run`` prints the configuration page and exits 0."""
    return parse_command_line(env_pkg, argv, prog, parser).flags


def parse_command_line(env_pkg, argv=None, prog=None, parser=None, auto_size=False) -> Parsed:
    """``rl_core.config.resolve.resolve`` on this machine; with ``auto_size`` (the launcher) the flags not given are
    sized to it first."""
    return resolve(env_pkg, argv, this_machine(cuda=auto_size), prog, parser, auto_size)


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
