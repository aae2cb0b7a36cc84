"""--acting_process (rl_core/runtime/acting_process.py): acting and inference in a child process, through the real
launcher, env servers and sockets; its slots and statistics in process."""

import argparse
import math
import os
import pickle
import queue
import signal
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from rl_core.runtime.acting_process import (
    DeviceSyncedLock,
    FileLock,
    SlotQueue,
    UnrollSlots,
    _error_from,
    _recv,
    _send,
    weights_lock,
)
from rl_core.runtime.parts import wants_acting_process
from rl_core.runtime.actors import RunStats
from rl_core.errors import EnvServerError, RunFailure, UserError
from tests.proc_utils import alive, children, comm, csv_rows, read, run, server_pids, sockets_left, start, wait_for

GYM = "torchbeast_gym.polybeast"


def flags(tmp_path, **overrides):
    values = {
        "env": "CartPole-v1",
        "num_actors": 8,
        "num_servers": 2,
        "batch_size": 8,
        "unroll_length": 20,
        "pipes_basename": f"unix:{tmp_path}/pipe",
        "savedir": str(tmp_path / "runs"),
        "xpid": "run",
        "log_interval": 1,
        "test_episodes": 4,
    }
    values.update(overrides)
    return ["--acting_process", *[f"--{k}={v}" for k, v in values.items()]]


def last_inference_batch(rows: list[dict]) -> float:
    """The mean inference batch of the last row whose interval counted one.  The row written at shutdown may count
    none: the learner can still take unrolls that arrived, and were counted, in the interval before it."""
    counted = [float(r["inference_batch"]) for r in rows if not math.isnan(float(r["inference_batch"]))]
    assert counted, "no row counted an inference batch"
    return counted[-1]


def acting_and_servers(pid: int) -> tuple[list[int], list[int]]:
    """The launcher's acting process and env servers (multiprocessing's resource tracker aside)."""
    return [k for k in children(pid) if comm(k) == "actor-loop"], server_pids(pid)


def test_a_sequence_goes_through_a_slot_with_the_statistics_gathered_since_the_last():
    ctx = mp.get_context("spawn")
    fields = {"obs": ((4,), np.float32), "action": ((), np.int64)}
    slots = UnrollSlots(fields, length=3, num_envs=2, state_template=(torch.zeros(2, 5),), n=1)
    free_r, free_w = ctx.Pipe(duplex=False)
    out_r, out_w = ctx.Pipe(duplex=False)
    _send(free_w, 0)
    stats, counts = RunStats(), [2, 32]
    stats.env_steps, stats.reconnects = 40, 1
    stats.add_episodes([{"return": 9.0, "length": 9}])
    slot_queue = SlotQueue(slots, free_r, out_w, stats, counts)
    unroll = {"obs": torch.randn(4, 2, 4), "action": torch.arange(8).reshape(4, 2)}
    state = (torch.randn(2, 5),)
    slot_queue.put_nowait((unroll, state))
    assert _recv(out_r) == ["unroll", 0, [[{"return": 9.0, "length": 9}], 40, 0, 1, 2, 32]]
    for name in unroll:
        torch.testing.assert_close(slots.fields[0][name], unroll[name])
    torch.testing.assert_close(slots.states[0][0], state[0])
    try:
        slot_queue.put_nowait((unroll, state))  # no free slot: a full queue to the acting loop
        raise AssertionError("no queue.Full")
    except queue.Full:
        pass
    stats.env_steps = 56
    assert slot_queue.deltas() == [[], 16, 0, 0, 0, 0]  # since the last message


@pytest.mark.multiprocess
def test_the_weights_lock_excludes_another_process_and_leaves_no_file():
    lock = FileLock()
    assert lock.path.startswith(f"/proc/{os.getpid()}/fd/") and os.readlink(lock.path).endswith("(deleted)")
    probe = (
        "import fcntl, os, sys\n"
        "fd = os.open(sys.argv[1], os.O_RDWR)\n"
        "try:\n"
        "    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "    print('taken')\n"
        "except BlockingIOError:\n"
        "    print('held')\n"
    )
    with lock:
        held = subprocess.run([sys.executable, "-c", probe, lock.path], capture_output=True, text=True, timeout=30)
    free = subprocess.run([sys.executable, "-c", probe, lock.path], capture_output=True, text=True, timeout=30)
    assert (held.stdout.strip(), free.stdout.strip()) == ("held", "taken")


def test_on_a_gpu_the_weights_lock_waits_for_its_holders_kernels_before_letting_go(monkeypatch):
    """Across processes a device's streams order nothing: the learner's copy of the weights and the child's forward
    must be finished on the GPU while the lock is still held (a CPU run's lock does not sync)."""
    events = []

    class Recording:
        def __enter__(self):
            events.append("acquire")

        def __exit__(self, *exc):
            events.append("release")

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append(f"sync {device}"))
    with DeviceSyncedLock(Recording(), "cuda:1"):
        events.append("forward")
    assert events == ["acquire", "forward", "sync cuda:1", "release"]
    assert type(weights_lock(torch.device("cpu"))) is FileLock
    lock = weights_lock(torch.device("cuda", 0))
    assert type(lock) is DeviceSyncedLock and lock.device == "cuda:0"
    # the child gets it pickled: its own open of the learner's lock file, the same device
    theirs = pickle.loads(pickle.dumps(lock))
    assert (type(theirs.lock), theirs.lock.path, theirs.device) == (FileLock, lock.lock.path, "cuda:0")


@pytest.mark.parametrize(
    "given, device, wanted",
    [(None, "cpu", True), (None, "cuda", False), (True, "cuda", True), (False, "cpu", False)],
)
def test_a_gpu_learner_acts_in_its_own_process_when_asked(given, device, wanted):
    flags = argparse.Namespace(acting_process=given, acting_processes=1, deterministic=False, num_servers=2)
    assert wants_acting_process(flags, torch.device(device), None) is wanted


def test_the_childs_errors_are_raised_as_their_own_classes():
    assert type(_error_from("EnvServerError", "env 0 raised")) is EnvServerError
    assert type(_error_from("UserError", "bad")) is UserError
    error = _error_from("ZeroDivisionError", "division by zero")
    assert type(error) is RunFailure and "ZeroDivisionError: division by zero" in str(error)


@pytest.mark.multiprocess
def test_it_trains_and_a_killed_server_rejoins_while_the_learner_process_only_learns(tmp_path):
    """... with --cpu_affinity (rl_core/runtime/affinity.py): the learner process on its one torch thread's core,
    the acting process and the servers, the restarted one too, on the others."""
    out = str(tmp_path / "out")
    proc = start(GYM, *flags(tmp_path, total_steps=120_000), "--cpu_affinity", output=out)
    cores = sorted(os.sched_getaffinity(0))
    learner_cores, other_cores = (set(cores[:1]), set(cores[1:])) if len(cores) > 1 else (set(cores), set(cores))
    try:
        rows_path = str(tmp_path / "runs" / "run" / "logs.csv")
        wait_for(lambda: csv_rows(rows_path) and int(csv_rows(rows_path)[-1]["step"]) > 0, 60, "training to start")
        acting, servers = wait_for(
            lambda: all(map(len, acting_and_servers(proc.pid))) and acting_and_servers(proc.pid), 10, "the children"
        )
        assert len(acting) == 1 and len(servers) == 2
        assert {frozenset(os.sched_getaffinity(int(t))) for t in os.listdir(f"/proc/{proc.pid}/task")} == {
            frozenset(learner_cores)
        }
        assert [os.sched_getaffinity(p) for p in acting + servers] == [other_cores] * 3
        os.kill(servers[0], signal.SIGKILL)
        wait_for(lambda: "dropped its unroll in flight; reconnecting" in read(out), 30, "the acting loop to notice")
        restarted = wait_for(
            lambda: [p for p in server_pids(proc.pid) if p not in servers], 30, "the server to be restarted"
        )
        assert os.sched_getaffinity(restarted[0]) == other_cores
        proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = read(out)
    assert proc.returncode == 0, text[-3000:]
    assert f"acting and central inference in process {acting[0]} (--acting_process)" in text
    if len(cores) > 1:
        assert "cpu affinity: the learner process on core " in text
    rows = csv_rows(rows_path)
    assert int(rows[-1]["step"]) >= 120_000
    assert int(rows[-1]["server_restarts"]) == 1 and int(rows[-1]["dropped_unrolls"]) >= 1
    assert float(rows[-1]["return_last_100"]) > 100  # learned: a random policy's CartPole return is about 22
    assert last_inference_batch(rows) > 0  # the child's inference batches reach the logs
    assert not alive(acting[0]) and not sockets_left(tmp_path)
    assert "Traceback" not in text


@pytest.mark.multiprocess
def test_an_env_exception_in_the_child_ends_the_run_with_its_traceback(tmp_path):
    result = run(
        GYM,
        *flags(tmp_path, env="tests.crashing_env:Crashing-v0", total_steps=10**9),
        output=str(tmp_path / "out"),
        timeout=90,
    )
    assert result.returncode == 1
    assert "boom: the env broke at its step 300" in result.stdout
    assert "crashing_env.py" in result.stdout  # the env's traceback reached the learner process
    assert not sockets_left(tmp_path)


@pytest.mark.multiprocess
def test_sigint_checkpoints_and_a_killed_learner_leaves_no_acting_process(tmp_path):
    out = str(tmp_path / "out")
    proc = start(GYM, *flags(tmp_path, total_steps=10**9), output=out)
    try:
        rows_path = str(tmp_path / "runs" / "run" / "logs.csv")
        wait_for(lambda: csv_rows(rows_path) and int(csv_rows(rows_path)[-1]["step"]) > 0, 60, "training to start")
        acting, _ = acting_and_servers(proc.pid)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = read(out)
    assert proc.returncode == 0, text[-3000:]
    assert "Traceback" not in text and "reconnecting" not in text  # the child stopped before the servers did
    assert acting and not alive(acting[0])
    assert torch.load(tmp_path / "runs" / "run" / "model.tar", weights_only=True)["step"] > 0

    (tmp_path / "b").mkdir()
    shm_before = set(os.listdir("/dev/shm"))
    proc = start(GYM, *flags(tmp_path / "b", total_steps=10**9), output=str(tmp_path / "out_b"))
    try:
        rows_path = str(tmp_path / "b" / "runs" / "run" / "logs.csv")
        wait_for(lambda: csv_rows(rows_path) and int(csv_rows(rows_path)[-1]["step"]) > 0, 60, "training to start")
        acting, servers = acting_and_servers(proc.pid)
        proc.kill()  # kill -9: the children are left to notice
        proc.wait(timeout=10)
        wait_for(lambda: not any(alive(p) for p in acting + servers), 15, "the children to exit by themselves")
    finally:
        if proc.poll() is None:
            proc.kill()
    # shared memory (memfds, torch's shared tensors) and the weights' lock have no names: nothing is left
    assert set(os.listdir("/dev/shm")) <= shm_before
    assert not [name for name in os.listdir(tempfile.gettempdir()) if name.startswith("polybeast-weights-")]
    assert not [name for name in os.listdir(tmp_path / "b") if name.startswith("pipe")]


def test_too_little_shared_memory_for_the_slots_is_one_line(tmp_path):
    from rl_core.runtime.acting_process import check_shared_memory

    fields = {"obs": ((4, 84, 84), np.uint8)}
    check_shared_memory(fields, 20, 16, 8, str(tmp_path))  # this machine's disk has room for 72 MB
    try:
        check_shared_memory(fields, 20, 16, 10**7, str(tmp_path))
        raise AssertionError("not refused")
    except UserError as e:
        assert "--acting_process needs" in str(e) and "--shm-size" in str(e) and "\n" not in str(e)


def test_the_servers_are_shared_out_evenly_among_the_acting_processes():
    from rl_core.runtime.parts import acting_shares

    assert acting_shares(list(range(4)), 2) == [[0, 1], [2, 3]]
    assert acting_shares(list(range(5)), 2) == [[0, 1], [2, 3, 4]]
    assert acting_shares(list(range(3)), 3) == [[0], [1], [2]]
    assert acting_shares(list(range(2)), 1) == [[0, 1]]


@pytest.mark.multiprocess
def test_two_acting_processes_each_act_for_their_share_and_a_killed_learner_leaves_neither(tmp_path):
    """--acting_processes 2 over 4 servers: two children named actor-loop-0 and -1, each for two servers (their
    env ids, hence their seeds and exploration, those of the servers' places in the run); the run learns and a
    SIGINT ends it cleanly; kill -9 of the learner leaves neither child."""
    out = str(tmp_path / "out")
    proc = start(GYM, *flags(tmp_path, num_servers=4, acting_processes=2, total_steps=10**9), output=out)
    try:
        rows_path = str(tmp_path / "runs" / "run" / "logs.csv")
        wait_for(lambda: csv_rows(rows_path) and int(csv_rows(rows_path)[-1]["step"]) >= 40_000, 120, "training")
        acting = sorted(k for k in children(proc.pid) if comm(k).startswith("actor-loop"))
        assert sorted(comm(k) for k in acting) == ["actor-loop-0", "actor-loop-1"]
        assert len(server_pids(proc.pid)) == 4
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = read(out)
    assert proc.returncode == 0, text[-3000:]
    for i, servers in enumerate(("0, 1", "2, 3")):
        assert f"acting and central inference for env servers {servers} in process {acting[i]} " in text
    assert "Traceback" not in text and not any(alive(p) for p in acting)
    rows = csv_rows(rows_path)
    assert float(rows[-1]["return_last_100"]) > 40  # learning: a random policy's CartPole return is about 22
    assert 2 < last_inference_batch(rows) <= 4  # each child batches its own two servers' 2 + 2 envs alone

    (tmp_path / "b").mkdir()
    proc = start(GYM, *flags(tmp_path / "b", num_servers=4, acting_processes=2, total_steps=10**9), output=out + "b")
    try:
        rows_path = str(tmp_path / "b" / "runs" / "run" / "logs.csv")
        wait_for(lambda: csv_rows(rows_path) and int(csv_rows(rows_path)[-1]["step"]) > 0, 60, "training to start")
        acting = [k for k in children(proc.pid) if comm(k).startswith("actor-loop")]
        proc.kill()
        proc.wait(timeout=10)
        wait_for(lambda: not any(alive(p) for p in acting), 15, "the acting processes to exit by themselves")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(acting) == 2


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--acting_processes=3", "--num_servers=2"], "--acting_processes 3 is more than the run's 2 env servers"),
        (["--acting_processes=2", "--deterministic"], "--acting_processes 2 needs the acting process"),
        (["--acting_processes=2", "--no-acting_process"], "--acting_processes 2 needs the acting process"),
    ],
)
def test_acting_processes_it_cannot_have_are_one_line(tmp_path, extra, words):
    result = run(GYM, *flags(tmp_path, total_steps=1000)[1:], *extra, output=str(tmp_path / "out"), timeout=60)
    assert result.returncode == 2, result.stdout[-2000:]
    lines = [line for line in result.stdout.splitlines() if "error" in line]
    assert len(lines) == 1 and words in lines[0], result.stdout[-2000:]
