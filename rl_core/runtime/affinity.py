"""CPU affinity of a run's processes on one host (``--cpu_affinity``): the learner process on as many cores as it
has torch threads, the acting processes and the env servers this process started on the others, as sample-factory
pins its workers (its ``--set_workers_cpu_affinity``).

An acting process and its servers hand over every step (shared memory, a wake-up each way): on the same cores the
steps stay in those cores' caches and the wake-ups need no other core, and the learner's update keeps its core's
caches to itself.  That pays where the envs are cheap beside the learner's update: on 2 cores (docs/experiments/
throughput.md) CartPole and an env that costs nothing 1.1-1.2x the steps/s unpinned, where Pong lost (0.88-0.96x: its
learner, alone on its core, then bounds the run), so an env package opts in (its ``CPU_AFFINITY``: torchbeast_gym).
Nothing splits where the learner's threads take every core (Procgen's learner on 2 cores)."""

from __future__ import annotations

import logging
import os

log = logging.getLogger("learner")


def split(cores: set[int] | list[int], learner_threads: int) -> tuple[list[int], list[int]] | None:
    """(the learner process's cores, the other processes') out of ``cores``: the first ``learner_threads`` of them
    and the rest; None where the learner's threads take every core."""
    ordered = sorted(cores)
    if learner_threads < 1 or learner_threads >= len(ordered):
        return None
    return ordered[:learner_threads], ordered[learner_threads:]


def pin(pid: int, cores: list[int]) -> None:
    """Every thread of process ``pid`` onto ``cores`` (threads it starts later inherit their creator's); a thread
    or process that ended meanwhile is skipped."""
    try:
        threads = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        threads = [pid]
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cores)
        except ProcessLookupError:
            pass


class Pinning:
    """The run's placement: ``apply`` once the acting processes are started, ``release`` at the end (the final test
    runs on every core the learner process had).  A host that refuses affinity leaves the run as it was, one warning."""

    def __init__(self, learner: list[int], others: list[int]):
        self.learner, self.others = learner, others
        self._before = os.sched_getaffinity(0)

    def apply(self, acting_pids: list[int], supervisor) -> bool:
        try:
            pin(os.getpid(), self.learner)
            for pid in acting_pids:
                pin(pid, self.others)
            if supervisor is not None:
                supervisor.cpus = self.others  # (a restarted server too)
                for pid in supervisor.pids():
                    pin(pid, self.others)
        except OSError as e:
            log.warning("--cpu_affinity: this host refused it (%s); the processes stay where the OS puts them", e)
            self.release()
            return False
        log.info(
            "cpu affinity: the learner process on core%s %s, the acting process%s and env servers on %s "
            "(--no-cpu_affinity: where the OS puts them)",
            "s" if len(self.learner) > 1 else "",
            _cores(self.learner),
            "es" if len(acting_pids) > 1 else "",
            _cores(self.others),
        )
        return True

    def release(self) -> None:
        try:
            pin(os.getpid(), sorted(self._before))
        except OSError:
            pass


def _cores(cores: list[int]) -> str:
    if len(cores) > 2 and cores == list(range(cores[0], cores[-1] + 1)):
        return f"{cores[0]}-{cores[-1]}"
    return ",".join(str(c) for c in cores)


def plan(flags, acting_process: bool, learner_threads: int, package_default: bool) -> Pinning | None:
    """The placement ``--cpu_affinity`` asks for: with acting processes (the learner process then only learns), on
    the cores this process may use.  Unset: the env package's ``CPU_AFFINITY`` (``package_default``), but not where
    ``$POLYBEAST_CORES`` says how many cores there are (a CPU-quota container's mask lists cores it cannot all use).
    (No acting process runs under torchrun.)"""
    from rl_core.config.sizing import CORES_ENV

    wanted = flags.cpu_affinity
    if wanted is None:
        wanted = package_default and os.environ.get(CORES_ENV) is None
    if not wanted or not acting_process:
        return None
    cores = split(os.sched_getaffinity(0), learner_threads)
    return Pinning(*cores) if cores is not None else None
