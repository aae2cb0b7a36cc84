"""How big a run is when its command line does not say: env servers, envs and IMPALA's batch.

``size_run`` is a pure function of the machine (usable cores, a GPU learner or not), the agent (its traits,
``rl_core.agents.agent_traits``), the envs per server the package asks for, the package's defaults for that
agent and the flags given on the command line; the resolver (``rl_core/config/resolve.py: size``) calls it for
the launcher and lays what it chose under the flags given, so that explicit flags always win.  The rule:

* Up to ``BASE_CORES`` (2) usable cores, the machine every package's defaults were sized and
  measured on, nothing changes: each flag not given takes the package's default for the agent.
* On more cores, one env server per core the learner leaves: it keeps ``GPU_RESERVE`` (2) cores with
  a GPU learner (learner, inference and actor threads), half the cores without one (the learner and
  central inference then compute on them).  Each server steps the package's ``ENVS_PER_SERVER``
  envs with a GPU learner, half as many without: enough per round trip for central inference to run
  large batches while the servers step (Atari's 32: docs/scaling.md).  Never fewer servers or envs than the
  package's defaults.
* Per agent (its traits' ``sizing``): ``impala`` and ``r2d2`` take that layout, "scaled".  IMPALA's envs
  (``lag_bounds_envs``) stay at most ``MAX_LAG`` batches, ``MAX_LAG x batch_size``, so that an unroll waits
  at most about that many learner steps (V-trace corrects the lag), and its batch stays the package's: the
  batch is a learning hyperparameter, not a speed knob (docs/experiments/impala.md).  R2D2 learns from its replay at --replay_ratio; its batch is the
  paper's.  The on-policy agents' batch (envs x unroll steps per
  update) is their published hyperparameter and an env beyond it only waits with an unroll of a stale
  policy, so their envs ("on_policy") stay at most ``max(defaults, batch_size)`` (a --batch_size given
  raises them) and the gain is more servers for them.  ``sac`` keeps its defaults ("fixed"): each env
  step feeds learner updates at --replay_ratio, so its speed is the learner's.  Packages of small envs
  (``torchbeast_gym``, or any package without an ``ENVS_PER_SERVER``) keep their defaults: an env step
  of microseconds gains nothing from more servers, only round trips.
* On more than 2 cores, the "scaled" agents' server processes step their envs as the package's
  ``SERVER_SPLITS`` servers in turn (``--server_splits``; sample-factory's double-buffered sampling): one
  steps while the other's actions make the round trip through central inference.  ``--num_servers`` counts
  the servers (the learner's connections).  No package sets ``SERVER_SPLITS`` above 1: end to end it did not
  pay (docs/scaling.md).  Given --num_servers or --server_splits, the sizing splits nothing.
* Constraints: ``num_actors`` a multiple of ``num_servers`` and of ``games`` (Procgen's --multi_env).

``usable_cores()`` is ``len(os.sched_getaffinity(0))``, or ``$POLYBEAST_CORES`` where set: for tests,
and for containers whose CPU quota is below the cores their affinity shows.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from rl_core.agents import agent_traits

BASE_CORES = 2
GPU_RESERVE = 2
CORES_ENV = "POLYBEAST_CORES"
MAX_LAG = 8  # batches of envs at most, where the lag bounds the envs: an unroll waits ~that many learner steps
SIZED_FLAGS = ("num_servers", "num_actors", "batch_size")
OVERRIDE = "set --num_servers/--num_actors/--batch_size to override"


@dataclass(frozen=True)
class Sizing:
    num_servers: int
    num_actors: int
    batch_size: int
    reason: str  # why, for the run's sizing line ("" when every value was given)
    auto: tuple[str, ...] = ()  # the flags of SIZED_FLAGS not given on the command line (and server_splits, if split)
    cores: int = 0
    gpu: bool = False
    server_splits: int = 1  # servers per process (not a total: a torchrun rank's is the run's)

    def values(self) -> dict:
        values = {"num_servers": self.num_servers, "num_actors": self.num_actors, "batch_size": self.batch_size}
        if "server_splits" in self.auto:
            values["server_splits"] = self.server_splits
        return values

    def record(self) -> dict:
        """What meta.json keeps (``sizing``)."""
        return {**self.values(), "auto": list(self.auto), "cores": self.cores, "gpu": self.gpu, "reason": self.reason}


def usable_cores() -> int:
    """The cores this process may run on; ``$POLYBEAST_CORES`` overrides (tests, CPU-quota containers)."""
    value = os.environ.get(CORES_ENV)
    if value:
        try:
            cores = int(value)
        except ValueError:
            cores = 0
        if cores < 1:
            from rl_core.errors import UserError

            raise UserError(f"${CORES_ENV}={value!r}: give the number of usable cores, a positive integer")
        return cores
    return len(os.sched_getaffinity(0))


def free_cores(cores: int, gpu: bool) -> int:
    """Cores left to env servers once the learner process has its own."""
    reserve = GPU_RESERVE if gpu else max(GPU_RESERVE, cores // 2)
    return max(1, cores - reserve)


def _envs_per_server(k: int | None, gpu: bool) -> int | None:
    """A server's envs: the package's ``k`` (its ``ENVS_PER_SERVER``; None: it has none) with a GPU learner, half
    as many without one (at least 1)."""
    if k is None:
        return None
    return k if gpu else max(1, k // 2)


def _layout(servers: int, actors: int) -> str:
    per = actors // servers
    return f"{servers} env server{'s' if servers != 1 else ''} x {per} env{'s' if per != 1 else ''} = {actors}"


def _largest_divisor(n: int, at_most: int) -> int:
    return max(d for d in range(1, min(n, max(1, at_most)) + 1) if n % d == 0)


def _round_up(k: int, step: int) -> int:
    return -(-k // step) * step


def size_run(
    cores: int,
    gpu: bool,
    agent: str,
    envs_per_server: int | None,
    defaults: dict,
    given: dict,
    games: int = 1,
    server_splits: int = 1,
) -> Sizing:
    """(num_servers, num_actors, batch_size, reason) for a run.

    ``envs_per_server``: the package's ``ENVS_PER_SERVER``, the envs a server steps with a GPU learner (None:
    the package has none, its envs are too cheap for more servers to pay); ``defaults``: the package's
    values for ``agent`` of num_servers, num_actors, batch_size, unroll_length and total_steps; ``given``: the flags written on the command line (any subset,
    their values); ``games``: num_actors must be a multiple of it (Procgen's --multi_env); ``server_splits``: the
    package's ``SERVER_SPLITS``, the servers a process steps in turn on more than 2 cores."""
    value = {k: given.get(k, defaults[k]) for k in (*SIZED_FLAGS, "unroll_length", "total_steps")}
    auto = tuple(k for k in SIZED_FLAGS if k not in given)
    device = "cuda" if gpu else "cpu"
    machine = f"{cores} usable core{'s' if cores != 1 else ''}, learner on {device}, --agent {agent}"

    def result(servers, actors, batch, why, splits=1) -> Sizing:
        chosen = auto + (("server_splits",) if splits > 1 else ())
        return Sizing(servers, actors, batch, why if auto else "", chosen, cores, gpu, splits)

    def keep(why) -> Sizing:
        return result(
            value["num_servers"],
            value["num_actors"],
            value["batch_size"],
            f"the package's defaults ({machine}: {why}); {OVERRIDE}",
        )

    k = _envs_per_server(envs_per_server, gpu)
    if cores <= BASE_CORES:
        return keep("what they were sized for")
    if k is None:
        return keep("its envs take microseconds a step: more servers would add round trips, not speed")
    traits = agent_traits(agent)
    if traits.sizing == "fixed":
        return keep("its env steps are bound by learner updates at --replay_ratio")
    why = []
    splits = 1
    servers, actors = value["num_servers"], value["num_actors"]
    if {"num_servers", "num_actors"} & set(auto):
        free = free_cores(cores, gpu)
        room = max(defaults["num_servers"], free)  # servers the machine has a core for, never fewer than the defaults
        if traits.sizing == "scaled":
            cap = MAX_LAG * value["batch_size"] if traits.lag_bounds_envs else None
            servers, actors = _scaled_layout(value, given, defaults, room, free * k, k, games, cap)
            why.append(
                f"{_layout(servers, actors)}"
                + (f" (a core each, {cores - free} left to the learner)" if servers == free else "")
                + (
                    f", at most {MAX_LAG} batches of {value['batch_size']} (an unroll waits at most ~{MAX_LAG} "
                    f"learner steps)"
                    if cap is not None and actors < servers * k
                    else ""
                )
            )
            if (
                {"num_servers", "server_splits"}.isdisjoint(given)
                and server_splits > 1
                and actors % (servers * server_splits) == 0
            ):
                splits = server_splits
                servers *= splits
                why[-1] += (
                    f", each process {splits} servers of {actors // servers} envs stepped in turn (one "
                    f"steps while the other's actions are in flight): --num_servers {servers} "
                    f"--server_splits {splits}"
                )
        else:
            servers, actors = _on_policy_layout(value, given, defaults, room, free * k, games)
            why.append(
                f"{_layout(servers, actors)}, within one --batch_size of {value['batch_size']} unrolls "
                f"(more envs would act on a stale policy)"
            )
    batch = value["batch_size"]
    if (servers, actors, batch) == (value["num_servers"], value["num_actors"], value["batch_size"]):
        return keep("no more to gain on this machine")
    return result(servers, actors, batch, f"chosen for {machine}: {'; '.join(why)}; {OVERRIDE}", splits)


def _scaled_layout(value, given, defaults, room, target, k, games, cap=None) -> tuple[int, int]:
    """The "scaled" agents (IMPALA, R2D2): ``room`` servers of ``k`` envs (at least the defaults' envs); where
    ``cap`` is given (IMPALA: ``MAX_LAG`` batches), at most that many envs but never fewer than the defaults'."""
    if "num_actors" in given:
        actors = value["num_actors"]
        return _largest_divisor(actors, room), actors
    if "num_servers" in given:
        servers = value["num_servers"]
        per = max(k, math.ceil(defaults["num_actors"] / servers))
    else:
        servers = room
        per = math.ceil(max(defaults["num_actors"], target) / servers)
    step = games // math.gcd(servers, games)
    if cap is not None and servers * per > cap:
        if "num_servers" not in given:
            servers = min(servers, max(defaults["num_servers"], cap // step))
        step = games // math.gcd(servers, games)
        per = max(_round_up(math.ceil(defaults["num_actors"] / servers), step), cap // servers // step * step)
    per = _round_up(per, step)
    return servers, servers * per


def _on_policy_layout(value, given, defaults, room, target, games) -> tuple[int, int]:
    """The "on_policy" agents: at most a batch of envs (or the defaults' envs), on as many servers as fit."""
    cap = max(defaults["num_actors"], value["batch_size"])
    if "num_actors" in given:
        actors = value["num_actors"]
        return _largest_divisor(actors, room), actors
    wanted = max(defaults["num_actors"], min(target, cap))
    if "num_servers" in given:
        servers = value["num_servers"]
        step = servers * games // math.gcd(servers, games)
        return servers, max(step, wanted // step * step)
    actors = max(games, wanted // games * games)
    return _largest_divisor(actors, room), actors
