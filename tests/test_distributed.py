"""Training under torchrun (rl_core/runtime/distributed.py): 2 ranks with gloo on this CPU, through the
real launcher, env servers and sockets; the collectives against their one-process meaning."""

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch

from rl_core import checkpoint
from rl_core.errors import UserError
from rl_core.runtime import distributed
from tests.proc_utils import REPO, alive, csv_rows, read, run, start

TORCHRUN = "torch.distributed.run"  # torchrun's module: python -m torch.distributed.run == torchrun


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(tmp_path, *args, nproc=2, output="out", timeout=300, extra=()):
    return run(TORCHRUN, "--standalone", f"--nproc_per_node={nproc}", *extra, "-m", "torchbeast_gym.polybeast",
               *args, f"--savedir={tmp_path}", output=str(tmp_path / output), timeout=timeout)


def run_dirs(tmp_path) -> list[str]:
    return sorted(d for d in os.listdir(tmp_path) if os.path.isdir(tmp_path / d))


# ------------------------------------------------------------------------ rank flags
def test_each_rank_takes_its_share_of_the_runs_totals():
    import argparse

    flags = argparse.Namespace(num_actors=16, num_servers=4, batch_size=8, replay_buffer_size=1001,
                               replay_buffer_min_size=200, random_init_steps=0, rnd_init_steps=1024,
                               num_learner_threads=1, checkpoint_replay=False)
    world = distributed.WorldEnv(rank=1, world_size=2, local_rank=1, local_world_size=2)
    mine = distributed.rank_flags(flags, world)
    assert (mine.num_actors, mine.num_servers, mine.batch_size) == (8, 2, 4)
    assert (mine.replay_buffer_size, mine.replay_buffer_min_size, mine.rnd_init_steps) == (501, 100, 512)
    assert mine.random_init_steps == 0 and mine.server_offset == 2  # rank 1's servers: global indices 2, 3
    assert flags.num_actors == 16  # the run's own flags are untouched
    with pytest.raises(UserError, match=r"--num_actors 16 does not divide among the 3 ranks.*multiple of 3"):
        distributed.rank_flags(flags, distributed.WorldEnv(0, 3, 0, 3))


def test_the_learning_rate_decays_with_the_global_steps():
    """A rank's batch is 1/W of the run's: its schedule still reaches 0 at --total_steps of all ranks' steps."""
    import argparse

    from rl_core.optim import make_optimizer

    flags = argparse.Namespace(num_actors=8, num_servers=2, batch_size=8, unroll_length=10, total_steps=800,
                               learning_rate=1e-3, epsilon=1e-8, optimizer="adam", lr_decay="linear",
                               num_learner_threads=1, checkpoint_replay=False)
    mine = distributed.rank_flags(flags, distributed.WorldEnv(0, 2, 0, 2))
    rates = []
    for f in (flags, mine):
        optimizer, scheduler = make_optimizer(f, [torch.nn.Parameter(torch.zeros(1))])
        for _ in range(5):  # 5 batches: 400 global steps, half the budget
            optimizer.step()
            scheduler.step()
        rates.append(scheduler.get_last_lr()[0])
    assert rates == [pytest.approx(5e-4), pytest.approx(5e-4)]
    with pytest.raises(UserError, match=r"--num_minibatches 8 > each rank's batch of 4 unrolls"):
        distributed.rank_flags(argparse.Namespace(**vars(flags), num_minibatches=8, batch_mode="shuffle"),
                               distributed.WorldEnv(0, 2, 0, 2))


def test_the_world_is_read_from_torchruns_environment():
    assert distributed.world_from_environ({}) is None
    assert distributed.world_from_environ({"WORLD_SIZE": "1", "RANK": "0"}) is None  # one process: as without
    world = distributed.world_from_environ({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1",
                                            "LOCAL_WORLD_SIZE": "2"})
    assert world == distributed.WorldEnv(rank=3, world_size=4, local_rank=1, local_world_size=2)


# ------------------------------------------------------------- collectives, 2 processes
def _collectives_worker(rank: int, port: int, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2")
    from rl_core.normalization import RunningMeanStd, ValueNormalizer

    group = distributed.start(distributed.world_from_environ(), torch.device("cpu"))
    try:
        data = torch.Generator().manual_seed(7)
        x = torch.randn(2, 50, 3, generator=data, dtype=torch.float64) * torch.tensor([1.0, 3.0, 0.5]) + 2.0
        targets = torch.randn(2, 40, generator=data, dtype=torch.float64) * 5.0 + 1.0
        rms = RunningMeanStd(3)
        rms.update(x[rank, : 20 + 30 * rank])  # unequal shares: 20 and 50 samples
        popart = ValueNormalizer("popart", beta=0.1)
        head = torch.nn.Linear(4, 1)
        torch.manual_seed(0)
        head.reset_parameters()
        popart.update(targets[rank], head=head)
        # gradients: a parameter each rank sees a different loss of, one only rank 1 reaches
        w = torch.nn.Parameter(torch.ones(3))
        v = torch.nn.Parameter(torch.ones(2))
        loss = (w * (rank + 1.0)).sum() + (v.sum() * 4.0 if rank == 1 else 0.0)
        loss.backward()
        mean_loss = group.average_gradients([w, v], loss)
        # plain lists through the queue: a tensor would be shared by a file descriptor that dies with this process
        results.put((rank, rms.mean.tolist(), rms.var.tolist(), float(rms.count), float(popart.mu), float(popart.nu),
                     head.weight.detach().tolist(), w.grad.tolist(), v.grad.tolist(), float(mean_loss),
                     group.any_rank(rank == 1),
                     dataclasses.astuple(group.agree(rank == 0, 10 + rank, 2 * rank, 100 * rank)),
                     group.gather_episodes([{"return": 5.0, "length": 7}, {"return": -1.5, "length": 3}][:2 * rank],
                                           [0, 2])))
    finally:
        distributed.stop(group)


def test_statistics_and_gradients_are_those_of_all_ranks_data():
    """RunningMeanStd and PopArt merge every rank's samples (as one process given all of them would); the
    gradient is the ranks' mean; any_rank and agree see every rank; episodes reach rank 0."""
    import multiprocessing as mp

    from rl_core.normalization import RunningMeanStd, ValueNormalizer

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_collectives_worker, args=(r, port, results)) for r in range(2)]
    for p in procs:
        p.start()
    got = sorted([results.get(timeout=120) for _ in procs], key=lambda r: r[0])
    for p in procs:
        p.join(30)
        assert p.exitcode == 0
    data = torch.Generator().manual_seed(7)
    x = torch.randn(2, 50, 3, generator=data, dtype=torch.float64) * torch.tensor([1.0, 3.0, 0.5]) + 2.0
    targets = torch.randn(2, 40, generator=data, dtype=torch.float64) * 5.0 + 1.0
    reference = RunningMeanStd(3)
    reference.update(torch.cat([x[0, :20], x[1, :50]]))
    popart = ValueNormalizer("popart", beta=0.1)
    head = torch.nn.Linear(4, 1)
    torch.manual_seed(0)
    head.reset_parameters()
    popart.update(targets.reshape(-1), head=head)
    for rank, mean, var, count, mu, nu, weight, w_grad, v_grad, mean_loss, anyone, agreed, episodes in got:
        mean, var = torch.tensor(mean, dtype=torch.float64), torch.tensor(var, dtype=torch.float64)
        weight, w_grad, v_grad = torch.tensor(weight), torch.tensor(w_grad), torch.tensor(v_grad)
        torch.testing.assert_close(mean, reference.mean, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(var, reference.var, rtol=1e-9, atol=1e-12)
        assert count == pytest.approx(float(reference.count))
        assert (mu, nu) == (pytest.approx(float(popart.mu), rel=1e-12), pytest.approx(float(popart.nu), rel=1e-12))
        torch.testing.assert_close(weight, head.weight.detach())
        torch.testing.assert_close(w_grad, torch.full((3,), 1.5))  # mean of 1 and 2
        torch.testing.assert_close(v_grad, torch.full((2,), 2.0))  # mean of 0 (unreached) and 4
        assert mean_loss == pytest.approx((3.0 + 6.0 + 8.0) / 2)
        assert anyone is True
        # rank 0 stops; the steps of both; rank 1 has 2 episodes and sends its 100 env steps
        assert agreed == ([0], 21, [0, 2], 100)
        # rank 1's episodes reach rank 0's logs
        assert episodes == ([{"return": 5.0, "length": 7}, {"return": -1.5, "length": 3}] if rank == 0 else [])


# ---------------------------------------------------------------- whole runs, 2 ranks
AGENTS = {
    "impala": ["--env=CartPole-v1", "--agent=impala", "--total_steps=6000"],
    "ppo": ["--env=CartPole-v1", "--agent=ppo", "--total_steps=6000"],
    "r2d2": ["--env=CartPole-v1", "--agent=r2d2", "--total_steps=6000"],
    "sac": ["--env=Pendulum-v1", "--agent=sac", "--total_steps=1500", "--random_init_steps=500",
            "--replay_buffer_min_size=500"],
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_two_ranks_train_one_run_and_one_rank_resumes_it(tmp_path, agent):
    """torchrun --standalone --nproc_per_node 2: exit 0, one run directory, the global step count reaches
    --total_steps, the replicas end with identical parameters; the checkpoint resumes on 1 process."""
    args = [*AGENTS[agent], "--disable_final_test", "--xpid=run", "--log_interval=1"]
    result = torchrun(tmp_path, *args)
    assert result.returncode == 0, result.stdout[-4000:]
    assert run_dirs(tmp_path) == ["run"]  # rank 1 wrote nothing of its own
    total = int(next(a for a in args if a.startswith("--total_steps")).split("=")[1])
    rows = csv_rows(str(tmp_path / "run" / "logs.csv"))
    assert int(rows[-1]["step"]) >= total
    assert int(rows[-1]["env_steps"]) >= int(rows[-1]["step"])  # both ranks' envs' steps, as the step count
    saved = checkpoint.load(str(tmp_path / "run" / "model.tar"))
    assert saved["step"] == int(rows[-1]["step"]) and saved["flags"]["num_actors"] % 2 == 0
    out = read(str(tmp_path / "run" / "out.log"))
    assert "replicas: the 2 ranks' parameters are identical" in out
    assert "over 2 ranks" in out  # the progress line: global SPS over the world
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["distributed"] == {"world_size": 2, "backend": "gloo"}
    assert "rank 1: finished at step" in result.stdout

    more = total + (1000 if agent == "sac" else 3000)
    result = run("torchbeast_gym.polybeast", *[a for a in args if not a.startswith("--total_steps")],
                 f"--total_steps={more}", f"--savedir={tmp_path}", output=str(tmp_path / "resume"), timeout=300)
    assert result.returncode == 0, result.stdout[-4000:]
    assert f"resuming {tmp_path / 'run' / 'model.tar'} at step {saved['step']:,}" in result.stdout
    assert int(csv_rows(str(tmp_path / "run" / "logs.csv"))[-1]["step"]) >= more


@pytest.mark.timeout(600)
def test_a_one_process_checkpoint_resumes_on_two_ranks(tmp_path):
    args = ["--env=CartPole-v1", "--agent=impala", "--disable_final_test", "--xpid=run"]
    result = run("torchbeast_gym.polybeast", *args, "--total_steps=3000", f"--savedir={tmp_path}",
                 output=str(tmp_path / "first"), timeout=300)
    assert result.returncode == 0, result.stdout[-3000:]
    step = checkpoint.load(str(tmp_path / "run" / "model.tar"))["step"]
    result = torchrun(tmp_path, *args, "--total_steps=6000")
    assert result.returncode == 0, result.stdout[-4000:]
    assert f"resuming {tmp_path / 'run' / 'model.tar'} at step {step:,}" in result.stdout
    assert f"resumed from rank 0's {tmp_path / 'run' / 'model.tar'} at step {step}" in result.stdout  # rank 1
    # the one process's single env server (the package's default) became one per rank
    assert "then --num_servers 2 to divide among the ranks" in result.stdout, result.stdout[-3000:]
    assert checkpoint.load(str(tmp_path / "run" / "model.tar"))["step"] >= 6000


@pytest.mark.timeout(600)
def test_two_nodes_meet_through_a_c10d_rendezvous(tmp_path):
    """Two torchrun launches, --nnodes 2 --node_rank 0 and 1, joined at 127.0.0.1: one run, both exit 0."""
    port = free_port()
    procs = []
    for node in (0, 1):
        procs.append(start(TORCHRUN, "--nnodes=2", f"--node_rank={node}", "--nproc_per_node=1",
                           "--rdzv_backend=c10d", f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=two-nodes",
                           "-m", "torchbeast_gym.polybeast", "--env=CartPole-v1", "--agent=ppo",
                           "--total_steps=4000", "--disable_final_test", "--xpid=run", f"--savedir={tmp_path}",
                           output=str(tmp_path / f"node{node}")))
    for proc in procs:
        proc.wait(timeout=300)
    outputs = [read(str(tmp_path / f"node{node}")) for node in (0, 1)]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    assert run_dirs(tmp_path) == ["run"]
    assert "replicas: the 2 ranks' parameters are identical" in read(str(tmp_path / "run" / "out.log"))
    assert checkpoint.load(str(tmp_path / "run" / "model.tar"))["step"] >= 4000


# --------------------------------------------------------------------------- faults
def _start_long_run(tmp_path, *extra):
    return start(TORCHRUN, "--standalone", "--nproc_per_node=2", "-m", "torchbeast_gym.polybeast",
                 "--env=CartPole-v1", "--agent=impala", "--total_steps=100000000", "--disable_final_test",
                 "--xpid=run", f"--savedir={tmp_path}", *extra, output=str(tmp_path / "out"),
                 start_new_session=True)


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout} s")


def _rank_pids(output: str) -> dict[int, int]:
    pids = {}
    for line in read(output).splitlines():
        if "torchrun: rank " in line:
            pids[int(line.split("torchrun: rank ")[1].split()[0])] = int(line.split(":")[1].split()[0])
    return pids


def _server_pids(output: str) -> list[int]:
    return [int(line.split(":")[1].split()[0]) for line in read(output).splitlines() if "env_server" in line and
            "envs at" in line]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_a_signal_ends_every_rank_with_a_checkpoint_and_no_orphans(tmp_path, how):
    """Ctrl-C (SIGINT to the terminal's process group: torchrun and the ranks) or SIGTERM to torchrun alone
    (a scheduler), which passes it on to the ranks."""
    proc = _start_long_run(tmp_path)
    out = str(tmp_path / "out")
    try:
        _wait_for(lambda: "Step " in read(out), 120, "training did not start")
        ranks, servers = _rank_pids(out), _server_pids(out)
        assert len(ranks) == 2 and len(servers) == 2
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = read(out)
    assert "rank 1: interrupted at step" in text, text[-3000:]
    assert "interrupted at step" in read(str(tmp_path / "run" / "out.log"))
    saved = checkpoint.load(str(tmp_path / "run" / "model.tar"))
    assert saved["step"] > 0
    _wait_for(lambda: not any(alive(p) for p in [*ranks.values(), *servers]), 15, "processes were left running")


@pytest.mark.timeout(300)
def test_a_rank_that_dies_ends_the_job_naming_it_and_the_checkpoint_stays_loadable(tmp_path):
    proc = _start_long_run(tmp_path, "--checkpoint_every=0.02")
    out = str(tmp_path / "out")
    try:
        _wait_for(lambda: "saved checkpoint" in read(out), 120, "no checkpoint was saved")
        ranks, servers = _rank_pids(out), _server_pids(out)
        os.kill(ranks[1], signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0
    rank0 = [line for line in read(out).splitlines() if line.startswith(f"[ERROR:{ranks[0]} ")]
    assert rank0 and "error: rank 1 of this 2-rank torchrun job is gone" in rank0[-1], read(out)[-3000:]
    saved = checkpoint.load(str(tmp_path / "run" / "model.tar"))  # whole, and loadable safely
    assert saved["step"] > 0
    _wait_for(lambda: not any(alive(p) for p in [*ranks.values(), *servers]), 15, "processes were left running")


def test_a_total_that_does_not_divide_among_the_ranks_is_refused_in_one_line(tmp_path):
    result = torchrun(tmp_path, "--env=CartPole-v1", "--agent=impala", "--num_actors=6", "--num_servers=3",
                      "--total_steps=1000", timeout=120)
    assert result.returncode != 0
    assert "error: --num_servers 3 does not divide among the 2 ranks of this torchrun job: give a multiple of 2" \
        in result.stdout
    assert run_dirs(tmp_path) == []  # refused before anything was written
