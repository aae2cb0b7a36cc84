"""--deterministic (rl_core/runtime/lockstep.py): two runs of one command write the same logs.csv rows, for
every agent on torchbeast_gym, through the real launcher, env servers and sockets."""

import os
import re
import signal

import pytest

from rl_core.records import checkpoint_file
from tests.proc_utils import children, csv_rows, flag_error_line, last_line, read, run, sockets_left, start, wait_for

# What a row measures of the clock, not of the run
TIMING = {"time", "sps", "learner_busy", "update_ms"}

RUNS = {
    "impala": ["--env=CartPole-v1", "--agent=impala", "--total_steps=12000"],
    "ppo": ["--env=CartPole-v1", "--agent=ppo", "--total_steps=8000"],
    "r2d2": ["--env=CartPole-v1", "--agent=r2d2", "--total_steps=6000"],
    "sac": [
        "--env=Pendulum-v1",
        "--agent=sac",
        "--total_steps=2400",
        "--random_init_steps=400",
        "--replay_buffer_min_size=400",
    ],
}


def _train(tmp_path, xpid, *args):
    result = run(
        "torchbeast_gym.polybeast",
        *args,
        "--deterministic",
        "--log_step_interval=1000",
        "--disable_final_test",
        f"--savedir={tmp_path}",
        f"--xpid={xpid}",
        f"--pipes_basename=unix:{tmp_path}/{xpid}-pipe",
        output=str(tmp_path / f"{xpid}.out"),
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    rows = csv_rows(str(tmp_path / xpid / "logs.csv"))
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


@pytest.mark.multiprocess
@pytest.mark.timeout(600)
@pytest.mark.parametrize("agent", sorted(RUNS))
def test_two_runs_of_one_command_write_the_same_rows_whether_steps_travel_in_shared_memory_or_on_the_socket(
    tmp_path, agent
):
    first = _train(tmp_path, "first", *RUNS[agent], "--seed=3")  # steps and actions in shared memory
    second = _train(tmp_path, "second", *RUNS[agent], "--seed=3", "--no-shared_memory")
    assert len(first) >= 3
    # the rows hold training: optimizer steps taken, losses that moved, episodes that ended
    assert sum(float(r["optimizer_steps"]) for r in first) > 0
    assert len({r["total_loss"] for r in first}) > 1
    assert sum(int(r["episodes"]) for r in first) > 0
    for i, (a, b) in enumerate(zip(first, second)):
        assert a == b, f"row {i} differs: { ({k: (a[k], b.get(k)) for k in a if a[k] != b.get(k)}) }"
    assert len(first) == len(second)


@pytest.mark.multiprocess
@pytest.mark.timeout(600)
def test_another_seed_writes_other_rows(tmp_path):
    """The control: what makes the rows equal is the seed, not rows that do not depend on the run."""
    first = _train(tmp_path, "first", *RUNS["impala"], "--seed=3")
    other = _train(tmp_path, "other", *RUNS["impala"], "--seed=4")
    assert [r["total_loss"] for r in first] != [r["total_loss"] for r in other]
    assert [r["return_last_100"] for r in first] != [r["return_last_100"] for r in other]


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
@pytest.mark.parametrize("publish_interval", [1, 3])
def test_the_policy_lag_is_what_the_lockstep_order_implies(tmp_path, publish_interval):
    """2 servers of 4 envs, batches of B = 4, a row per batch: every T rounds each server hands over one
    chunk, a batch, and both are learned before the next round acts.  The batch n (counted from 0, learned
    after n batches) acted on the weights published before the round that began its unroll: those of the
    batch count 2 (n // 2) rounded down to a multiple of --publish_interval p.  Its lag, on every step, is
    n minus that (p = 1: 0, 1, 0, 1, ...; the first batch's is 0)."""
    T, B, p = 10, 4, publish_interval
    result = run(
        "torchbeast_gym.polybeast",
        "--env=CartPole-v1",
        "--agent=impala",
        "--deterministic",
        "--num_servers=2",
        "--num_actors=8",
        f"--batch_size={B}",
        f"--unroll_length={T}",
        f"--publish_interval={p}",
        f"--log_step_interval={T * B}",
        f"--total_steps={12 * T * B}",
        "--disable_final_test",
        f"--savedir={tmp_path}",
        "--xpid=run",
        f"--pipes_basename=unix:{tmp_path}/pipe",
        output=str(tmp_path / "out"),
        timeout=240,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    rows = csv_rows(str(tmp_path / "run" / "logs.csv"))
    assert [int(r["step"]) for r in rows] == [T * B * (n + 1) for n in range(12)]
    expected = [float(n - (2 * (n // 2)) // p * p) for n in range(12)]
    assert [float(r["policy_lag"]) for r in rows] == expected
    assert [float(r["policy_lag_max"]) for r in rows] == expected
    assert expected[0] == 0 and max(expected) == (1 if p == 1 else 3)


def test_validation_during_training_is_refused_in_one_line(capsys):
    from torchbeast_gym import env as gym_env

    line = flag_error_line(capsys, gym_env, "--env=CartPole-v1", "--deterministic", "--validate_step_every=1000")
    assert "--deterministic runs no validation during training" in line


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_a_server_that_dies_ends_the_run_in_one_line_naming_it(tmp_path):
    """The asynchronous runtime restarts a dead server and reconnects (tests/test_runtime.py); a lockstep run
    cannot take a restarted server's fresh envs and still reproduce, so it ends: exit 1, the last line naming the
    server, model.tar of the last batch saved before it loadable, no server or socket left."""
    out = str(tmp_path / "out")
    proc = start(
        "torchbeast_gym.polybeast",
        "--env=CartPole-v1",
        "--deterministic",
        "--num_servers=2",
        "--total_steps=100000000",
        "--checkpoint_every=0.01",
        "--disable_final_test",
        f"--savedir={tmp_path}",
        "--xpid=run",
        f"--pipes_basename=unix:{tmp_path}/pipe",
        output=out,
    )
    try:
        wait_for(lambda: "saved checkpoint" in read(out), 120, "a checkpoint")
        servers = wait_for(lambda: len(children(proc.pid)) == 2 and children(proc.pid), 30, "two servers")
        os.kill(servers[1], signal.SIGKILL)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = read(out)
    assert proc.returncode == 1, text[-3000:]
    assert re.fullmatch(
        rf"\[ERROR:{proc.pid} learner [0-9:]+\] error: env server 1 \(unix:{re.escape(str(tmp_path))}/pipe\.1\) "
        r"(closed the connection|failed \(.+\)): --deterministic does not reconnect \(a restarted server's envs "
        r"would not reproduce the run\); the server's log says why it went",
        last_line(text),
    ), text[-2000:]
    assert checkpoint_file.load(str(tmp_path / "run" / "model.tar"))["step"] > 0
    assert not sockets_left(tmp_path)
