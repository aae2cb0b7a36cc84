"""Training under torchrun (rl_core/runtime/distributed.py): 2 ranks on this host through the real launcher, env
servers and sockets (a GPU each, NCCL, where the host has two; else gloo on the CPU: --disable_cuda, since two
ranks on one GPU are refused); the collectives against their one-process meaning, on the CPU."""

import dataclasses
import glob
import json
import os
import re
import signal
import socket
import time

import pytest
import torch

from rl_core.records import checkpoint_file
from rl_core.errors import UserError
from rl_core.runtime import distributed
from tests.proc_utils import alive, csv_rows, last_line, read, run, start

TORCHRUN = "torch.distributed.run"  # torchrun's module: python -m torch.distributed.run == torchrun
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
# Two ranks on this host: a GPU each where it has two, else the CPU (a host with one GPU refuses two ranks).
DEVICE = [] if GPUS >= 2 else ["--disable_cuda"]
BACKEND = "nccl" if GPUS >= 2 else "gloo"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(tmp_path, *args, nproc=2, output="out", timeout=300, module="torchbeast_gym.polybeast"):
    return run(
        TORCHRUN,
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        module,
        *args,
        f"--savedir={tmp_path}",
        output=str(tmp_path / output),
        timeout=timeout,
    )


def run_dirs(tmp_path) -> list[str]:
    return sorted(d for d in os.listdir(tmp_path) if os.path.isdir(tmp_path / d))


# ------------------------------------------------------------------------ rank flags
def test_each_rank_takes_its_share_of_the_runs_totals():
    from rl_core.config.flags import make_parser

    flags = make_parser().parse_args(
        [
            "--num_actors=16",
            "--num_servers=4",
            "--batch_size=8",
            "--replay_buffer_size=1001",
            "--replay_buffer_min_size=200",
            "--random_init_steps=0",
            "--rnd_init_steps=1024",
        ]
    )
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

    from rl_core.config.flags import make_parser
    from rl_core.numerics.optim import make_optimizer

    flags = make_parser().parse_args(
        [
            "--num_actors=8",
            "--num_servers=2",
            "--batch_size=8",
            "--unroll_length=10",
            "--total_steps=800",
            "--learning_rate=1e-3",
            "--epsilon=1e-8",
            "--optimizer=adam",
            "--lr_decay=linear",
        ]
    )
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
        distributed.rank_flags(
            argparse.Namespace(**{**vars(flags), "num_minibatches": 8, "batch_mode": "shuffle"}),
            distributed.WorldEnv(0, 2, 0, 2),
        )


def test_the_world_is_read_from_torchruns_environment():
    assert distributed.world_from_environ({}) is None
    assert distributed.world_from_environ({"WORLD_SIZE": "1", "RANK": "0"}) is None  # one process: as without
    world = distributed.world_from_environ({"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"})
    assert world == distributed.WorldEnv(rank=3, world_size=4, local_rank=1, local_world_size=2)


def test_each_rank_takes_its_own_gpu_and_a_host_with_fewer_gpus_than_ranks_is_refused():
    def world(local_rank, local_world_size, node=0):
        return distributed.WorldEnv(
            rank=node * local_world_size + local_rank,
            world_size=2 * local_world_size,
            local_rank=local_rank,
            local_world_size=local_world_size,
        )

    assert [distributed.local_gpu(world(r, 2), 2) for r in range(2)] == [0, 1]
    assert [distributed.local_gpu(world(r, 4, node=1), 8) for r in range(4)] == [0, 1, 2, 3]  # (more GPUs: fine)
    for rank in (0, 1):  # every rank refuses, rank 0 too
        with pytest.raises(UserError) as e:
            distributed.local_gpu(world(rank, 2), 1)
        assert str(e.value) == (
            "this host has 1 GPU for 2 torchrun ranks (--nproc_per_node 2): give at most 1 rank "
            "per GPU (--nproc_per_node 1), or pass --disable_cuda to train on the CPU"
        )
    with pytest.raises(
        UserError,
        match=r"^this host has 4 GPUs for 8 torchrun ranks \(--nproc_per_node 8\): give "
        r"at most 1 rank per GPU \(--nproc_per_node 4\), or pass --disable_cuda",
    ):
        distributed.local_gpu(world(0, 8), 4)
    # LOCAL_WORLD_SIZE unset (1): LOCAL_RANK 1 still needs a second GPU
    with pytest.raises(UserError, match=r"^this host has 1 GPU for 2 torchrun ranks"):
        distributed.local_gpu(distributed.WorldEnv(rank=1, world_size=2, local_rank=1, local_world_size=1), 1)


def test_select_device_puts_a_rank_on_its_gpu_or_refuses_more_ranks_than_gpus(monkeypatch):
    """train.select_device on a host that shows 2 GPUs, then 1 (torch.cuda faked: this machine may have none)."""
    import argparse

    from rl_core.runtime.device import select_device

    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    flags = argparse.Namespace(disable_cuda=False)
    rank1 = distributed.WorldEnv(rank=1, world_size=2, local_rank=1, local_world_size=2)
    assert select_device(flags, rank1) == torch.device("cuda", 1) and chosen == [1]
    assert select_device(argparse.Namespace(disable_cuda=True), rank1) == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(UserError) as e:  # (Training.run logs it as its one line and exits 2)
        select_device(flags, rank1)
    assert chosen == [1]  # the GPU was not touched
    assert str(e.value) == (
        "this host has 1 GPU for 2 torchrun ranks (--nproc_per_node 2): give at most 1 rank per "
        "GPU (--nproc_per_node 1), or pass --disable_cuda to train on the CPU"
    )
    assert select_device(argparse.Namespace(disable_cuda=True), rank1) == torch.device("cpu")  # the fix


# ------------------------------------------------------------- collectives, 2 processes
def _collectives_worker(rank: int, port: int, results):
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE="2",
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE="2",
    )
    from rl_core.losses.policy_gradient import advantage_moments, normalize_advantages
    from rl_core.numerics import collectives
    from rl_core.numerics.normalization import RunningMeanStd, ValueNormalizer

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
        # advantages: each rank normalizes its part of one minibatch (unequal halves, through the active group)
        part = (targets[rank, : 15 + 10 * rank] + 4.0 * rank).float().reshape(-1, 1)
        advantages = normalize_advantages(part, moments=collectives.all_reduce_sum(advantage_moments(part)))
        # plain lists through the queue: a tensor would be shared by a file descriptor that dies with this process
        results.put(
            (
                rank,
                rms.mean.tolist(),
                rms.var.tolist(),
                float(rms.count),
                float(popart.mu),
                float(popart.nu),
                head.weight.detach().tolist(),
                w.grad.tolist(),
                v.grad.tolist(),
                float(mean_loss),
                group.any_rank(rank == 1),
                dataclasses.astuple(group.agree(rank == 0, 10 + rank, 2 * rank, 100 * rank, ready=rank == 1)),
                group.gather_episodes(
                    [{"return": 5.0, "length": 7}, {"return": -1.5, "length": 3}][: 2 * rank], [0, 2]
                ),
                advantages.reshape(-1).tolist(),
            )
        )
    finally:
        distributed.stop(group)


@pytest.mark.multiprocess
def test_statistics_and_gradients_are_those_of_all_ranks_data():
    """RunningMeanStd and PopArt merge every rank's samples (as one process given all of them would); the
    gradient is the ranks' mean; advantages are normalized by the whole minibatch's statistics; any_rank and agree
    see every rank; episodes reach rank 0."""
    import multiprocessing as mp

    from rl_core.numerics.normalization import RunningMeanStd, ValueNormalizer

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
    both = torch.cat([targets[0, :15], targets[1, :25] + 4.0]).float()
    whole = (both - both.mean()) / (both.std(unbiased=False) + 1e-8)  # the minibatch's, as one process has it
    for rank, mean, var, count, mu, nu, weight, w_grad, v_grad, mean_loss, anyone, agreed, episodes, adv in got:
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
        # rank 0 stops; the steps of both; rank 1 has 2 episodes, sends its 100 env steps and holds a batch
        assert agreed == ([0], 21, [0, 2], 100, [1])
        # rank 1's episodes reach rank 0's logs
        assert episodes == ([{"return": 5.0, "length": 7}, {"return": -1.5, "length": 3}] if rank == 0 else [])
        torch.testing.assert_close(torch.tensor(adv), whole[:15] if rank == 0 else whole[15:], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------- whole runs, 2 ranks
AGENTS = {
    "impala": ["--env=CartPole-v1", "--agent=impala", "--total_steps=6000"],
    "ppo": ["--env=CartPole-v1", "--agent=ppo", "--total_steps=6000"],
    "r2d2": ["--env=CartPole-v1", "--agent=r2d2", "--total_steps=6000"],
    "sac": [
        "--env=Pendulum-v1",
        "--agent=sac",
        "--total_steps=1500",
        "--random_init_steps=500",
        "--replay_buffer_min_size=500",
    ],
}


@pytest.mark.multiprocess
@pytest.mark.timeout(600)
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_two_ranks_train_one_run_and_one_rank_resumes_it(tmp_path, agent):
    """torchrun --standalone --nproc_per_node 2: exit 0, one run directory, the global step count reaches
    --total_steps, the replicas end with identical parameters; the checkpoint resumes on 1 process."""
    args = [*AGENTS[agent], "--disable_final_test", "--xpid=run", "--log_interval=1"]
    result = torchrun(tmp_path, *args, *DEVICE)
    assert result.returncode == 0, result.stdout[-4000:]
    assert run_dirs(tmp_path) == ["run"]  # rank 1 wrote nothing of its own
    total = int(next(a for a in args if a.startswith("--total_steps")).split("=")[1])
    rows = csv_rows(str(tmp_path / "run" / "logs.csv"))
    assert int(rows[-1]["step"]) >= total
    assert int(rows[-1]["env_steps"]) >= int(rows[-1]["step"])  # both ranks' envs' steps, as the step count
    saved = checkpoint_file.load(str(tmp_path / "run" / "model.tar"))
    assert saved["step"] == int(rows[-1]["step"]) and saved["flags"]["num_actors"] % 2 == 0
    out = read(str(tmp_path / "run" / "out.log"))
    assert "replicas: the 2 ranks' parameters are identical" in out
    assert "over 2 ranks" in out  # the progress line: global SPS over the world
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["distributed"] == {"world_size": 2, "backend": BACKEND}
    assert "rank 1: finished at step" in result.stdout

    more = total + (1000 if agent == "sac" else 3000)
    result = run(
        "torchbeast_gym.polybeast",
        *[a for a in args if not a.startswith("--total_steps")],
        f"--total_steps={more}",
        f"--savedir={tmp_path}",
        output=str(tmp_path / "resume"),
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:]
    assert f"resuming {tmp_path / 'run' / 'model.tar'} at step {saved['step']:,}" in result.stdout
    assert int(csv_rows(str(tmp_path / "run" / "logs.csv"))[-1]["step"]) >= more


@pytest.mark.multiprocess
@pytest.mark.timeout(600)
def test_a_one_process_checkpoint_resumes_on_two_ranks(tmp_path):
    args = ["--env=CartPole-v1", "--agent=impala", "--disable_final_test", "--xpid=run"]
    result = run(
        "torchbeast_gym.polybeast",
        *args,
        "--total_steps=3000",
        f"--savedir={tmp_path}",
        output=str(tmp_path / "first"),
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    step = checkpoint_file.load(str(tmp_path / "run" / "model.tar"))["step"]
    result = torchrun(tmp_path, *args, *DEVICE, "--total_steps=6000")
    assert result.returncode == 0, result.stdout[-4000:]
    assert f"resuming {tmp_path / 'run' / 'model.tar'} at step {step:,}" in result.stdout
    assert f"resumed from rank 0's {tmp_path / 'run' / 'model.tar'} at step {step}" in result.stdout  # rank 1
    # the one process's single env server (the package's default) became one per rank
    assert "then --num_servers 2 to divide among the ranks" in result.stdout, result.stdout[-3000:]
    assert checkpoint_file.load(str(tmp_path / "run" / "model.tar"))["step"] >= 6000


@pytest.mark.multiprocess
@pytest.mark.timeout(600)
def test_two_nodes_meet_through_a_c10d_rendezvous(tmp_path):
    """Two torchrun launches, --nnodes 2 --node_rank 0 and 1, joined at 127.0.0.1: one run, both exit 0.  On the
    CPU (--disable_cuda): the two "nodes" share this host, where both would take its first GPU (LOCAL_RANK 0)."""
    port = free_port()
    procs = []
    for node in (0, 1):
        procs.append(
            start(
                TORCHRUN,
                "--nnodes=2",
                f"--node_rank={node}",
                "--nproc_per_node=1",
                "--rdzv_backend=c10d",
                f"--rdzv_endpoint=127.0.0.1:{port}",
                "--rdzv_id=two-nodes",
                "-m",
                "torchbeast_gym.polybeast",
                "--env=CartPole-v1",
                "--agent=ppo",
                "--total_steps=4000",
                "--disable_final_test",
                "--disable_cuda",
                "--xpid=run",
                f"--savedir={tmp_path}",
                output=str(tmp_path / f"node{node}"),
            )
        )
    for proc in procs:
        proc.wait(timeout=300)
    outputs = [read(str(tmp_path / f"node{node}")) for node in (0, 1)]
    assert [p.returncode for p in procs] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    assert run_dirs(tmp_path) == ["run"]
    assert "replicas: the 2 ranks' parameters are identical" in read(str(tmp_path / "run" / "out.log"))
    assert checkpoint_file.load(str(tmp_path / "run" / "model.tar"))["step"] >= 4000


# --------------------------------------------------------------------------- faults
# Each rank's output apart from torchrun's own (its warnings and failure report): with --log-dir and --redirects 3
# torchrun writes each local rank's stdout and stderr into files of their own.  A rank's env servers share its
# files; a rank's "last line" is the last of its own lines.
SERVER_LINE = re.compile(r"\[[A-Z]+:\d+ env_server [0-9:]+\] ")
TORCHRUN_SIGNALLED = "torch.distributed.elastic.multiprocessing.api.SignalException: Process {pid} got signal: {sig}"
UNANSWERED = (
    r"error: rank 1 of this 2-rank torchrun job did not stop with this rank within 15 s \(hung or stopped; "
    r"this rank's learner waits in (.+)\): no final checkpoint, and the run directory's last model\.tar stays "
    r"loadable \(resume with --xpid, at any world size\)"
)
GONE = (
    r"error: rank 1 of this 2-rank torchrun job is gone \(.+\): its log and torchrun's summary say why; this "
    r"rank stops too, and the run directory's last model\.tar stays loadable \(resume with --xpid, at any "
    r"world size\)"
)


def _torchrun_apart(tmp_path, module: str, *args: str) -> list[str]:
    """The command line (after ``python -m``) of 2 ranks of ``module`` on this host, each rank's output in its
    own files (``_rank_output``)."""
    return [
        TORCHRUN,
        "--standalone",
        "--nproc_per_node=2",
        f"--log-dir={tmp_path / 'ranks'}",
        "--redirects=3",
        "-m",
        module,
        *args,
    ]


def _rank_output(tmp_path, rank: int) -> str:
    """What local rank ``rank`` (and the env servers it started) printed so far: its stderr, where the runtime
    logs ("" before torchrun made its file); its stdout holds nothing."""
    paths = glob.glob(str(tmp_path / "ranks" / "*" / "attempt_0" / str(rank) / "stderr.log"))
    assert len(paths) <= 1, paths
    if not paths:
        return ""
    assert read(paths[0][: -len("stderr.log")] + "stdout.log") == ""
    return read(paths[0])


def _own_lines(tmp_path, rank: int) -> list[str]:
    """The lines of local rank ``rank`` itself: its output without its env servers' log lines."""
    return [line for line in _rank_output(tmp_path, rank).splitlines() if not SERVER_LINE.match(line)]


def _logged(pid, level: str, message: str) -> str:
    """The pattern of one line of the learner logger of the process ``pid`` (or a pattern): ``message`` is a
    pattern."""
    return rf"\[{level}:{pid} learner [0-9:]+\] {message}"


def _torchrun_exits(output: str) -> tuple[int, int, dict[int, int]]:
    """From torchrun's failure report: the root cause's local rank and exit code, and every failed local rank's
    exit code."""
    pattern = r"local_rank: (\d+)\)\s*\n\s*exitcode\s*:\s*(-?\d+)"
    assert "Root Cause (first observed failure):" in output, output[-3000:]
    rank, code = re.search(pattern, output.split("Root Cause (first observed failure):")[1]).groups()
    return int(rank), int(code), {int(r): int(c) for r, c in re.findall(pattern, output)}


def _each_rank_refused(tmp_path, torchrun_output: str, line: str) -> None:
    """Each rank ended with the one line ``line`` (a pattern) and exit 2, or, where the other one failed first,
    torchrun ended it (SIGTERM: -15) before or after it printed that line; nothing else came from either."""
    root, code, exits = _torchrun_exits(torchrun_output)
    assert code == 2 and sorted(exits) == [0, 1], torchrun_output[-3000:]
    for rank in (0, 1):
        lines = _rank_output(tmp_path, rank).splitlines()
        if exits[rank] == 2:
            assert len(lines) == 1 and re.fullmatch(line, lines[0]), (rank, lines)
        else:
            assert exits[rank] == -signal.SIGTERM, (rank, exits, torchrun_output[-3000:])
            assert lines == [] or (len(lines) == 1 and re.fullmatch(line, lines[0])), (rank, lines)


def _start_long_run(tmp_path, *extra):
    return start(
        *_torchrun_apart(
            tmp_path,
            "torchbeast_gym.polybeast",
            "--env=CartPole-v1",
            "--agent=impala",
            "--total_steps=100000000",
            "--disable_final_test",
            "--xpid=run",
            f"--savedir={tmp_path}",
            *DEVICE,
            *extra,
        ),
        output=str(tmp_path / "out"),
        start_new_session=True,
    )


def _wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout} s")


def _rank_pids(tmp_path) -> dict[int, int]:
    pids = {}
    for rank in (0, 1):
        for line in _own_lines(tmp_path, rank):
            found = re.match(r"\[INFO:(\d+) learner [0-9:]+\] torchrun: rank (\d+) of 2 ", line)
            if found:
                pids[int(found.group(2))] = int(found.group(1))
    return pids


def _server_pids(tmp_path, ranks=(0, 1)) -> list[int]:
    return [
        int(found.group(1))
        for rank in ranks
        for line in _rank_output(tmp_path, rank).splitlines()
        if (found := re.match(r"\[INFO:(\d+) env_server [0-9:]+\] env server \d+: \d+ envs at ", line))
    ]


@pytest.mark.multiprocess
@pytest.mark.timeout(450)
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_a_signal_ends_every_rank_with_a_checkpoint_and_no_orphans(tmp_path, how):
    """Ctrl-C (SIGINT to the terminal's foreground process group: torchrun's; this torchrun starts each rank in a
    session of its own) or SIGTERM to torchrun (a scheduler): torchrun passes the signal on to the ranks.  Each rank
    stops after the same batch and exits 0, its last line saying so (only a rank that exits 0 logs it), rank 0 with
    model.tar saved at that step.  A rank whose peer's wish to stop reached the batch's agreement before the signal
    reached it says that it stopped with that rank.  torchrun itself exits 1 whatever its ranks' status: it
    re-raises the signal it got (SignalException)."""
    sig = signal.SIGINT if how == "ctrl-c" else signal.SIGTERM
    proc = _start_long_run(tmp_path)
    try:
        _wait_for(lambda: "Step " in _rank_output(tmp_path, 0), 180, "training did not start")
        ranks, servers = _rank_pids(tmp_path), _server_pids(tmp_path)
        assert sorted(ranks) == [0, 1] and len(servers) == 2
        if how == "ctrl-c":
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out = read(str(tmp_path / "out"))
    assert proc.returncode == 1, out[-3000:]
    assert last_line(out) == TORCHRUN_SIGNALLED.format(pid=proc.pid, sig=int(sig)), out[-3000:]
    assert "ChildFailedError" not in out  # no rank failed
    rundir = tmp_path / "run"
    step = checkpoint_file.load(str(rundir / "model.tar"))["step"]
    assert step > 0

    def stopped(other):  # the rank's reason: the signal, or its peer's wish to stop that came first
        return rf"(interrupted|stopped with rank {other} \(a signal or an error there: its log says which\))"

    rank0, rank1 = _own_lines(tmp_path, 0), _own_lines(tmp_path, 1)
    last0 = re.fullmatch(
        _logged(
            ranks[0],
            "INFO",
            rf"{stopped(1)} at step {step}; run directory "
            rf"{re.escape(str(rundir))}",
        ),
        rank0[-1],
    )
    last1 = re.fullmatch(_logged(ranks[1], "INFO", rf"rank 1: {stopped(0)} at step {step}"), rank1[-1])
    assert last0 and last1, (rank0[-5:], rank1[-5:])
    assert "interrupted" in (last0.group(1), last1.group(1))  # (the signal reached a rank first)
    assert last_line(read(str(rundir / "out.log"))) == rank0[-1]
    assert "Traceback" not in _rank_output(tmp_path, 0) + _rank_output(tmp_path, 1)
    meta = json.loads((rundir / "meta.json").read_text())
    assert meta["success"] is False and meta["reason"] == last0.group(1)
    _wait_for(lambda: not any(alive(p) for p in [*ranks.values(), *servers]), 30, "processes were left running")


@pytest.mark.multiprocess
@pytest.mark.timeout(450)
def test_a_rank_that_dies_ends_the_job_naming_it_and_the_checkpoint_stays_loadable(tmp_path):
    """SIGKILL to rank 1: torchrun reports its -9 as the root cause, stops rank 0 (SIGTERM), which fails (exit 1)
    with a last line naming rank 1, and exits 1.  Rank 0's last save (a final one, of the last update both ranks
    took) is whole, loads safely, and is not older than the checkpoint saved before rank 1 died."""
    proc = _start_long_run(tmp_path, "--checkpoint_every=0.02")
    try:
        _wait_for(lambda: "saved checkpoint" in _rank_output(tmp_path, 0), 180, "no checkpoint was saved")
        ranks, servers = _rank_pids(tmp_path), _server_pids(tmp_path)
        assert sorted(ranks) == [0, 1] and len(servers) == 2
        before = checkpoint_file.load(str(tmp_path / "run" / "model.tar"))["step"]  # (each save replaces it whole)
        os.kill(ranks[1], signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out = read(str(tmp_path / "out"))
    rank0_tail = _rank_output(tmp_path, 0)[-4000:]  # (a rank 0 that outlived torchrun's grace: its stacks)
    assert proc.returncode == 1, out[-3000:] + rank0_tail
    root, code, exits = _torchrun_exits(out)
    assert (root, code) == (1, -signal.SIGKILL) and exits == {0: 1, 1: -signal.SIGKILL}, out[-2000:] + rank0_tail
    rank0 = _own_lines(tmp_path, 0)
    assert re.fullmatch(_logged(ranks[0], "ERROR", GONE), rank0[-1]), rank0[-5:]
    assert "Traceback" not in _rank_output(tmp_path, 0)
    saved = checkpoint_file.load(str(tmp_path / "run" / "model.tar"))  # whole, and loadable safely (weights_only)
    last_save = re.findall(r"saved checkpoint \S+ at step (\d+)$", "\n".join(rank0), re.MULTILINE)[-1]
    assert saved["step"] == int(last_save) >= before > 0
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["success"] is False and re.fullmatch(GONE, meta["reason"]), meta["reason"]
    _wait_for(lambda: not any(alive(p) for p in [*ranks.values(), *servers]), 30, "processes were left running")


@pytest.mark.multiprocess
@pytest.mark.timeout(450)
def test_a_rank_that_hangs_does_not_keep_the_others_past_torchruns_grace(tmp_path):
    """SIGSTOP to rank 1 (hung: its sockets stay open, so rank 0's next collective waits for it), then SIGTERM to
    torchrun, which gives its ranks 30 s before SIGKILL.  Rank 0 waits 15 s for its learner thread, then ends
    (exit 1) well within those 30 s, its last line naming rank 1, with no final save: the learner holds the
    weights mid-update, so model.tar stays the last periodic save, whole and loadable.  torchrun kills rank 1."""
    proc = _start_long_run(tmp_path, "--checkpoint_every=0.02")
    try:
        _wait_for(lambda: "saved checkpoint" in _rank_output(tmp_path, 0), 180, "no checkpoint was saved")
        ranks, servers = _rank_pids(tmp_path), _server_pids(tmp_path)
        assert sorted(ranks) == [0, 1] and len(servers) == 2
        os.kill(ranks[1], signal.SIGSTOP)
        time.sleep(2.0)  # (rank 0's learner now waits in its next collective)
        proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        _wait_for(lambda: not alive(ranks[0]), 60, "rank 0 did not exit")
        rank0_took = time.monotonic() - signalled
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out = read(str(tmp_path / "out"))
    rank0_output = _rank_output(tmp_path, 0)
    assert proc.returncode == 1, out[-3000:] + rank0_output[-3000:]
    assert last_line(out) == TORCHRUN_SIGNALLED.format(pid=proc.pid, sig=int(signal.SIGTERM)), out[-3000:]
    assert 15 <= rank0_took < distributed.STUCK_AFTER_S, (rank0_took, rank0_output[-3000:])
    rank0 = _own_lines(tmp_path, 0)
    last = re.fullmatch(_logged(ranks[0], "ERROR", UNANSWERED), rank0[-1])
    assert last and "(distributed_c10d.py:" in last.group(1), rank0[-5:]
    assert "Traceback" not in rank0_output and "most recent call first" not in rank0_output  # (no stack dump)
    saved = checkpoint_file.load(str(tmp_path / "run" / "model.tar"))  # whole, and loadable safely (weights_only)
    received = next(i for i, line in enumerate(rank0) if "received SIGTERM" in line)
    saves = re.findall(r"saved checkpoint \S+ at step (\d+)$", "\n".join(rank0), re.MULTILINE)
    assert saved["step"] == int(saves[-1]) > 0
    assert not any("saved checkpoint" in line for line in rank0[received:])  # no final save
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["success"] is False and re.fullmatch(UNANSWERED, meta["reason"]), meta["reason"]
    _wait_for(lambda: not any(alive(p) for p in [*ranks.values(), *servers]), 30, "processes were left running")


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_total_that_does_not_divide_among_the_ranks_is_refused_in_one_line(tmp_path):
    result = run(
        *_torchrun_apart(
            tmp_path,
            "torchbeast_gym.polybeast",
            "--env=CartPole-v1",
            "--agent=impala",
            "--num_actors=6",
            "--num_servers=3",
            "--total_steps=1000",
            f"--savedir={tmp_path / 'runs'}",
            *DEVICE,
        ),
        output=str(tmp_path / "out"),
        timeout=240,
    )
    assert result.returncode == 1, result.stdout[-3000:]  # torchrun's: a rank failed
    _each_rank_refused(
        tmp_path,
        result.stdout,
        re.escape(
            "error: --num_servers 3 does not divide among the 2 ranks of this torchrun job: give a multiple of 2 (it is "
            "the run's total; each rank takes 1/2)"
        ),
    )
    assert not (tmp_path / "runs").exists()  # refused before anything was written


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_two_ranks_on_a_host_with_one_gpu_are_refused_in_one_line(tmp_path):
    """Without --disable_cuda, 2 ranks on a host that shows 1 GPU (faked here: tests/one_gpu_host.py) would both
    take it, where NCCL refuses them with a traceback: each rank refuses the host in one line, exit 2, before it
    touches the GPU or starts a server or writes anything."""
    result = run(
        *_torchrun_apart(
            tmp_path,
            "tests.one_gpu_host",
            "--env=CartPole-v1",
            "--agent=impala",
            "--total_steps=1000",
            f"--savedir={tmp_path / 'runs'}",
            "--xpid=run",
        ),
        output=str(tmp_path / "out"),
        timeout=240,
    )
    assert result.returncode == 1, result.stdout[-3000:]  # torchrun's: a rank failed
    _each_rank_refused(
        tmp_path,
        result.stdout,
        _logged(
            r"\d+",
            "ERROR",
            re.escape(
                "error: this host has 1 GPU for 2 torchrun ranks (--nproc_per_node 2): give at most 1 rank per GPU "
                "(--nproc_per_node 1), or pass --disable_cuda to train on the CPU"
            ),
        ),
    )
    assert not (tmp_path / "runs").exists()


# What a logs.csv row measures of the clock, not of the run
TIMING = {"time", "sps", "learner_busy", "update_ms"}


def _deterministic_rows(tmp_path, xpid: str) -> list[dict]:
    result = run(
        TORCHRUN,
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "torchbeast_gym.polybeast",
        "--env=CartPole-v1",
        "--agent=ppo",
        "--seed=3",
        "--total_steps=8000",
        "--deterministic",
        "--log_step_interval=1000",
        "--disable_final_test",
        *DEVICE,
        f"--savedir={tmp_path}",
        f"--xpid={xpid}",
        output=str(tmp_path / f"{xpid}.out"),
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "replicas: the 2 ranks' parameters are identical" in (tmp_path / xpid / "out.log").read_text()
    assert json.loads((tmp_path / xpid / "meta.json").read_text())["distributed"]["world_size"] == 2
    return [{k: v for k, v in row.items() if k not in TIMING} for row in csv_rows(str(tmp_path / xpid / "logs.csv"))]


@pytest.mark.multiprocess
@pytest.mark.timeout(600)
def test_two_deterministic_runs_on_two_ranks_write_the_same_rows(tmp_path):
    """--deterministic under torchrun (rl_core/runtime/lockstep.py): each rank acts and learns in turn and the
    ranks agree before every batch, so two runs of one command write the same rows (timings aside), each row's
    env steps those of both ranks' envs."""
    first = _deterministic_rows(tmp_path, "first")
    second = _deterministic_rows(tmp_path, "second")
    assert len(first) == 8 and [int(r["step"]) for r in first] == [1024 * (i + 1) for i in range(8)]
    assert len({r["total_loss"] for r in first}) > 1 and sum(int(r["episodes"]) for r in first) > 0
    # every global step an env step of one of the two ranks' envs (rank 0's alone would be half)
    assert [int(r["env_steps"]) for r in first] == [int(r["step"]) for r in first]
    for i, (a, b) in enumerate(zip(first, second)):
        assert a == b, f"row {i} differs: { ({k: (a[k], b.get(k)) for k in a if a[k] != b.get(k)}) }"
    assert len(first) == len(second)


@pytest.mark.multiprocess
@pytest.mark.timeout(450)
def test_a_server_that_dies_under_deterministic_ends_every_rank(tmp_path):
    """A lockstep rank cannot take a restarted server's fresh envs (tests/test_deterministic.py): SIGKILL to rank
    1's server ends rank 1 with the one line naming it (exit 1), after the agreement that tells rank 0 to stop
    too; rank 0 stops with it after the same batch, its model.tar saved at that step, the replicas identical, and
    nothing is left running."""
    proc = _start_long_run(tmp_path, "--deterministic", "--checkpoint_every=0.02")
    try:
        _wait_for(lambda: "saved checkpoint" in _rank_output(tmp_path, 0), 180, "no checkpoint was saved")
        ranks, servers = _rank_pids(tmp_path), _server_pids(tmp_path)
        assert sorted(ranks) == [0, 1] and len(servers) == 2
        os.kill(_server_pids(tmp_path, ranks=(1,))[0], signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    out = read(str(tmp_path / "out"))
    assert proc.returncode == 1, out[-3000:]
    root, code, exits = _torchrun_exits(out)
    assert (root, code) == (1, 1) and exits[1] == 1, out[-2000:]
    rank0, rank1 = _own_lines(tmp_path, 0), _own_lines(tmp_path, 1)
    assert re.fullmatch(
        _logged(
            ranks[1],
            "ERROR",
            r"error: env server 0 \(unix:\S+\.1\) (closed the connection|failed \(.+\)): --deterministic does not "
            r"reconnect \(a restarted server's envs would not reproduce the run\); the server's log says why it went",
        ),
        rank1[-1],
    ), rank1[-5:]
    step = checkpoint_file.load(str(tmp_path / "run" / "model.tar"))["step"]
    # (torchrun's SIGTERM, sent once rank 1 has exited, may reach rank 0 before its last line: then it says so)
    stopped = _logged(
        ranks[0],
        "INFO",
        rf"(stopped with rank 1 \(a signal or an error there: its log says which\)|interrupted) at step {step}; "
        rf"run directory {re.escape(str(tmp_path / 'run'))}",
    )
    assert re.fullmatch(stopped, rank0[-1]), rank0[-5:]
    assert "replicas: the 2 ranks' parameters are identical" in "\n".join(rank0)
    assert "Traceback" not in _rank_output(tmp_path, 0) + _rank_output(tmp_path, 1)
    _wait_for(lambda: not any(alive(p) for p in [*ranks.values(), *servers]), 30, "processes were left running")
