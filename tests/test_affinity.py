"""--cpu_affinity (rl_core/runtime/affinity.py): where the learner process, the acting processes and the env servers
run.  Through the real launcher: tests/test_acting_process.py's run with a killed server."""

import argparse
import os
import subprocess
import sys

import pytest

from rl_core.runtime import affinity


def test_the_learner_takes_the_first_cores_of_its_threads_and_the_others_the_rest():
    assert affinity.split({3, 1, 2, 0}, 1) == ([0], [1, 2, 3])
    assert affinity.split([0, 1, 2, 3, 4, 5], 2) == ([0, 1], [2, 3, 4, 5])
    assert affinity.split({0, 1}, 2) is None  # its threads take every core: nothing splits
    assert affinity.split({0}, 1) is None


@pytest.mark.parametrize(
    "given, package, cores_env, acting, wanted",
    [
        (None, True, None, True, True),  # unset: the env package's CPU_AFFINITY (torchbeast_gym's)
        (None, False, None, True, False),  # (Atari's: its learner alone on a core bounds the run)
        (None, True, "2", True, False),  # $POLYBEAST_CORES says how many cores, not which
        (True, False, "2", True, True),
        (False, True, None, True, False),
        (True, True, None, False, False),  # the learner process acts: nothing to split off
    ],
)
def test_when_a_run_is_pinned(monkeypatch, given, package, cores_env, acting, wanted):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    if cores_env is None:
        monkeypatch.delenv("POLYBEAST_CORES", raising=False)
    else:
        monkeypatch.setenv("POLYBEAST_CORES", cores_env)
    pinning = affinity.plan(argparse.Namespace(cpu_affinity=given), acting, 1, package)
    assert (pinning is not None) == wanted
    if wanted:
        assert (pinning.learner, pinning.others) == ([0], [1, 2, 3])


class Servers:
    def __init__(self, pids):
        self._pids, self.cpus = pids, None

    def pids(self):
        return self._pids


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to split")
def test_apply_pins_every_process_and_release_gives_the_learner_its_cores_back():
    cores = sorted(os.sched_getaffinity(0))
    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    try:
        pinning = affinity.Pinning(cores[:1], cores[1:])
        servers = Servers([sleepers[1].pid])
        assert pinning.apply([sleepers[0].pid], servers)
        assert os.sched_getaffinity(0) == set(cores[:1])
        assert all(os.sched_getaffinity(int(t)) == set(cores[:1]) for t in os.listdir("/proc/self/task"))
        assert [os.sched_getaffinity(p.pid) for p in sleepers] == [set(cores[1:])] * 2
        assert servers.cpus == cores[1:]  # a restarted server is pinned there too (Supervisor._start)
        pinning.release()
        assert os.sched_getaffinity(0) == set(cores)
    finally:
        os.sched_setaffinity(0, cores)
        for p in sleepers:
            p.kill()
            p.wait()


def test_a_host_that_refuses_affinity_leaves_the_run_as_it_was(monkeypatch, caplog):
    before = os.sched_getaffinity(0)

    def refuse(pid, cores):
        raise PermissionError("not allowed")

    monkeypatch.setattr(os, "sched_setaffinity", refuse)
    assert not affinity.Pinning([0], [1]).apply([], None)
    assert "--cpu_affinity: this host refused it" in caplog.text
    assert os.sched_getaffinity(0) == before
