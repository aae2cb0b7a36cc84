"""The polybeast runtime end to end: real launcher, env server processes and sockets."""

import collections
import json
import math
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from rl_core.config.env_package import installed_env_packages
from tests.proc_utils import (
    alive,
    children,
    comm,
    csv_rows,
    free_port,
    read,
    run,
    server_pids,
    sockets_left,
    start,
    wait_for,
)

GYM = "torchbeast_gym.polybeast"


def common(tmp_path, xpid="run", **overrides):
    flags = {
        "env": "CartPole-v1",
        "num_actors": 8,
        "num_servers": 2,
        "batch_size": 8,
        "unroll_length": 20,
        "pipes_basename": f"unix:{tmp_path}/pipe",
        "savedir": str(tmp_path / "runs"),
        "xpid": xpid,
        "log_interval": 1,
        "learning_rate": 0.002,
        "test_episodes": 4,
    }
    flags.update(overrides)
    return [f"--{k}={v}" for k, v in flags.items()]


@pytest.mark.multiprocess
def test_num_actors_must_be_a_multiple_of_num_servers(tmp_path):
    result = run(GYM, *common(tmp_path, num_actors=5, num_servers=2), output=str(tmp_path / "out"), timeout=60)
    assert result.returncode == 2
    last = result.stdout.strip().splitlines()[-1]
    assert "--num_actors (5) must be a multiple of --num_servers (2)" in last
    assert not sockets_left(tmp_path)


@pytest.mark.multiprocess
def test_unknown_flag_and_unknown_env_are_one_clear_line(tmp_path):
    result = run(GYM, *common(tmp_path), "--no_such_flag=1", output=str(tmp_path / "out1"), timeout=60)
    assert result.returncode == 2
    # one line, no usage dump, and where the flags are listed
    assert result.stdout.strip().splitlines() == [
        "python -m torchbeast_gym.polybeast: error: unrecognized arguments: --no_such_flag=1 "
        "(all flags: python -m torchbeast_gym.polybeast --help)"
    ]
    # a misspelt flag is answered with the nearest known ones
    typo = run(GYM, *common(tmp_path), "--learnig_rate", "0.1", "--unrol_length=5", output=str(tmp_path / "out2"))
    assert typo.returncode == 2 and typo.stdout.strip().splitlines() == [
        "python -m torchbeast_gym.polybeast: error: unrecognized arguments: --learnig_rate 0.1 --unrol_length=5; did "
        "you mean --learning_rate or --unroll_length? (all flags: python -m torchbeast_gym.polybeast --help)"
    ]
    malformed = run(GYM, *common(tmp_path), "--batch_size=eight", output=str(tmp_path / "out3"), timeout=60)
    assert malformed.returncode == 2
    assert len(malformed.stdout.strip().splitlines()) == 1
    assert "argument --batch_size: invalid int value: 'eight'" in malformed.stdout and "--help" in malformed.stdout

    # an unknown id: at parse time, as --dry_run says it
    unknown = run(GYM, *common(tmp_path, env="NoSuchEnv-v0"), "--dry_run", output=str(tmp_path / "out4"), timeout=60)
    assert unknown.returncode == 2 and len(unknown.stdout.strip().splitlines()) == 1
    assert "unknown gymnasium environment 'NoSuchEnv-v0' (NameNotFound)" in unknown.stdout

    # an env its servers cannot make: at once, not at --connect_timeout (600 s here): run() fails past 120 s
    # (about 2 s on an idle machine)
    env = "tests.crashing_env:MissingModule-v0"
    result = run(GYM, *common(tmp_path, env=env, connect_timeout=600), output=str(tmp_path / "out2"), timeout=120)
    assert result.returncode == 2
    assert f"--env {env}: module 'no_such_module_for_tests' not found" in result.stdout
    assert "Traceback" not in result.stdout
    assert not sockets_left(tmp_path)


@pytest.mark.multiprocess
def test_help_shows_every_flags_default_for_the_chosen_agent():
    """--help keeps the flag groups and shows each flag's default: the package's, for the --agent given."""
    import subprocess
    import sys

    from tests.proc_utils import REPO

    def help_text(*args):
        out = subprocess.run(
            [sys.executable, "-m", GYM, *args, "--help"], cwd=REPO, capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        return " ".join(out.stdout.split())  # argparse wraps lines

    impala, ppo = help_text(), help_text("--agent=ppo")
    for group in ("actors and env servers:", "learner:", "model:", "loss:", "optimizer:"):
        assert group in impala
    assert "--total_steps T Total environment steps to train for. (default: 500000)" in impala
    assert "--total_steps T Total environment steps to train for. (default: 200000)" in ppo  # PPO's own
    assert "--learning_rate LR Learning rate. (default: 0.001)" in ppo
    assert "--use_lstm LSTM core. (default: off)" in impala


@pytest.mark.multiprocess
def test_train_writes_logs_and_checkpoint_then_resumes(tmp_path):
    result = run(GYM, *common(tmp_path, total_steps=20_000), output=str(tmp_path / "out1"), timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    rundir = tmp_path / "runs" / "run"
    for name in ["out.log", "logs.csv", "meta.json", "model.tar"]:
        assert (rundir / name).exists(), name
    assert any(p.startswith("events.out.tfevents") for p in os.listdir(rundir))
    meta = json.loads((rundir / "meta.json").read_text())
    assert meta["success"] is True and meta["flags"]["total_steps"] == 20_000 and meta["end"]
    rows = csv_rows(str(rundir / "logs.csv"))
    assert rows and int(rows[-1]["step"]) >= 20_000
    assert {"sps", "return_last_100", "total_loss", "inference_batch", "learner_queue"} <= set(rows[-1])
    # the policy lag (learner batches since the weights that acted were published), every row from the first with a
    # learned batch on (a row before it has none: the acting process may still be starting)
    learned = [i for i, r in enumerate(rows) if r["policy_lag"] != ""]
    assert (
        learned
        and learned == list(range(learned[0], len(rows)))
        and int(rows[learned[0] - 1]["step"] if learned[0] else 0) == 0
    )
    lags = [(float(r["policy_lag"]), float(r["policy_lag_max"])) for r in rows[learned[0] :]]
    assert all(math.isfinite(mean) and 0 <= mean <= peak and peak == int(peak) for mean, peak in lags), lags
    assert "Step " in read(str(rundir / "out.log"))
    ckpt = torch.load(rundir / "model.tar", weights_only=True)
    first_step = ckpt["step"]
    assert first_step >= 20_000 and ckpt["flags"]["xpid"] == "run"
    lr_end_first = ckpt["optimizer_state_dict"]["param_groups"][0]["lr"]
    # the last-100 window is in the checkpoint: the last row's return is its mean
    window = ckpt["recent_returns"]
    assert 0 < len(window) <= 100 and all(isinstance(r, float) for r in window)
    assert sum(window) / len(window) == pytest.approx(float(rows[-1]["return_last_100"]))
    assert not sockets_left(tmp_path)

    # Same xpid, more steps: resumes step counter, optimizer and schedule; the partial write of a
    # save that was killed (kill -9 mid-write, tests/test_checkpoint.py) is removed at the start.
    (rundir / ".model.tar.x1y2.partial").write_bytes(b"torn")
    result = run(GYM, *common(tmp_path, total_steps=40_000), output=str(tmp_path / "out2"), timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "removed .model.tar.x1y2.partial" in result.stdout
    assert not (rundir / ".model.tar.x1y2.partial").exists()
    # the run's last-100 return goes on from the checkpoint's window (not from no episode at all)
    assert (
        f"resumed from {rundir}/model.tar at step {first_step} (last-100 return "
        f"{sum(window) / len(window):.2f} over {len(window)} episodes)"
    ) in result.stdout
    ckpt2 = torch.load(rundir / "model.tar", weights_only=True)
    rows2 = csv_rows(str(rundir / "logs.csv"))
    first_resumed = next(r for r in rows2 if int(r["step"]) > first_step)
    ended = int(first_resumed["episodes"])  # (those episodes' sum: their mean times their count)
    if ended < 100:  # the window's last 100 - ended and the new ones (100 or more: the new ones alone)
        kept = window[max(len(window) + ended - 100, 0) :]
        new_sum = float(first_resumed["mean_episode_return"]) * ended if ended else 0.0
        assert float(first_resumed["return_last_100"]) == pytest.approx((sum(kept) + new_sum) / (len(kept) + ended))
    assert ckpt2["step"] >= 40_000
    # the resumed inference copy's version is the checkpoint's batch count (not 0: a lag of ~125 batches)
    resumed = [r for r in csv_rows(str(rundir / "logs.csv")) if int(r["step"]) > first_step]
    assert resumed and all(0 <= float(r["policy_lag_max"]) < 0.5 * ckpt["learner_steps"] for r in resumed), resumed
    assert ckpt2["learner_steps"] > ckpt["learner_steps"]
    assert ckpt2["scheduler_state_dict"]["last_epoch"] == ckpt2["learner_steps"]
    assert ckpt2["optimizer_state_dict"]["state"][0]["step"] > ckpt["optimizer_state_dict"]["state"][0]["step"]
    # The schedule continued where it stopped: the rate is the linear decay's at the run's whole learner
    # step count over the new --total_steps, 0 at the end (a schedule restarted at the resume would be
    # halfway, near 0.001).
    steps_per_update = 20 * 8
    expected_lr = 0.002 * (1 - min(ckpt2["learner_steps"] * steps_per_update, 40_000) / 40_000)
    assert ckpt2["optimizer_state_dict"]["param_groups"][0]["lr"] == pytest.approx(expected_lr, abs=1e-12)
    assert lr_end_first == 0.0  # the first run decayed to 0 over its own --total_steps

    # Resuming at --total_steps trains nothing and saves what it loaded: the weights, the optimizer's state
    # tensors and the schedule are the checkpoint's, bit for bit (a run that loaded no weights would save
    # the freshly initialized model).
    result = run(
        GYM, *common(tmp_path, total_steps=40_000, test_episodes=1), output=str(tmp_path / "out3"), timeout=120
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "checkpoint is already at step" in result.stdout
    ckpt3 = torch.load(rundir / "model.tar", weights_only=True)
    assert ckpt3["model_state_dict"].keys() == ckpt2["model_state_dict"].keys()
    for name, tensor in ckpt2["model_state_dict"].items():
        assert torch.equal(ckpt3["model_state_dict"][name], tensor), name
    state2, state3 = ckpt2["optimizer_state_dict"]["state"], ckpt3["optimizer_state_dict"]["state"]
    assert state3.keys() == state2.keys() and state2
    for index, slots in state2.items():
        for slot, value in slots.items():
            assert torch.equal(torch.as_tensor(state3[index][slot]), torch.as_tensor(value)), (index, slot)
    assert ckpt3["scheduler_state_dict"] == ckpt2["scheduler_state_dict"]
    assert (ckpt3["step"], ckpt3["learner_steps"]) == (ckpt2["step"], ckpt2["learner_steps"])
    assert ckpt3["recent_returns"] == ckpt2["recent_returns"] and ckpt2["recent_returns"]


class NotAWeight:
    pass


def _bad_checkpoint(kind: str, path) -> str:
    """Writes a bad model.tar of ``kind``; returns what the error must say about it."""
    if kind == "garbage":
        path.write_bytes(b"not a checkpoint")
        return "it is truncated or not a PyTorch checkpoint"
    if kind == "truncated":
        torch.save({"model_state_dict": {"w": torch.zeros(1000)}, "step": 5}, path)
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
        return "it is truncated or not a PyTorch checkpoint"
    if kind == "unsafe":
        torch.save({"model_state_dict": {}, "hook": NotAWeight()}, path)
        return "it holds objects a safe load refuses, so this project did not write it"
    torch.save({"weights": torch.zeros(3)}, path)  # "foreign": a PyTorch file of another program
    return "it is a PyTorch file but not one of this project's checkpoints (no model_state_dict)"


@pytest.mark.multiprocess
@pytest.mark.parametrize("kind", ["garbage", "truncated", "unsafe", "foreign"])
def test_a_bad_checkpoint_is_one_line_before_any_server_and_kept(tmp_path, kind):
    rundir = tmp_path / "runs" / "run"
    rundir.mkdir(parents=True)
    what = _bad_checkpoint(kind, rundir / "model.tar")
    before = (rundir / "model.tar").read_bytes()
    result = run(GYM, *common(tmp_path, total_steps=5_000), output=str(tmp_path / "out"), timeout=60)
    assert result.returncode == 2
    last = result.stdout.strip().splitlines()[-1]
    assert (
        f"checkpoint {rundir}/model.tar cannot be read: {what}; move it away to start afresh, or pass another "
        f"--xpid" in last
    ), last
    assert "env server 0:" not in result.stdout  # refused before any server started
    assert "weights_only" not in result.stdout and "Traceback" not in result.stdout
    assert (rundir / "model.tar").read_bytes() == before
    assert not sockets_left(tmp_path)
    # --mode test: the same diagnosis, and a fix that applies there
    result = run(GYM, "--mode=test", f"--checkpoint={rundir}/model.tar", output=str(tmp_path / "out2"), timeout=60)
    assert result.returncode == 2
    last = result.stdout.strip().splitlines()[-1]
    assert f"cannot be read: {what}; pass --checkpoint the model.tar of a run of this project" in last, last
    assert "--xpid" not in last and "weights_only" not in result.stdout


@pytest.mark.multiprocess
def test_killed_server_is_restarted_and_training_finishes(tmp_path):
    out = str(tmp_path / "out")
    # long enough that the restarted server rejoins before the end, even beside another test on 2 cores
    proc = start(GYM, *common(tmp_path, total_steps=100_000), output=out)
    try:
        rows_path = str(tmp_path / "runs" / "run" / "logs.csv")
        wait_for(lambda: csv_rows(rows_path) and int(csv_rows(rows_path)[-1]["step"]) > 0, 60, "training to start")
        servers = wait_for(lambda: len(server_pids(proc.pid)) == 2 and server_pids(proc.pid), 10, "two servers")
        killed = servers[0]
        os.kill(killed, signal.SIGKILL)
        killed_at = time.monotonic()
        # The launcher polls its servers every 0.25 s; 30 s leaves room for a loaded 2-core machine.
        wait_for(lambda: "exited with code -9; restarting it" in read(out), 30, "the launcher to notice")
        assert time.monotonic() - killed_at < 30
        proc.wait(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = read(out)
    assert proc.returncode == 0, text[-3000:]
    rows = csv_rows(rows_path)
    assert int(rows[-1]["step"]) >= 100_000
    assert int(rows[-1]["server_restarts"]) == 1
    assert int(rows[-1]["dropped_unrolls"]) >= 1
    assert "dropped its unroll in flight; reconnecting" in text
    assert not sockets_left(tmp_path)


@pytest.mark.multiprocess
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_checkpoints_and_leaves_no_child_or_socket(tmp_path, sig):
    out = str(tmp_path / "out")
    proc = start(GYM, *common(tmp_path, total_steps=10**9), output=out)
    try:
        rows_path = str(tmp_path / "runs" / "run" / "logs.csv")
        wait_for(lambda: csv_rows(rows_path) and int(csv_rows(rows_path)[-1]["step"]) > 0, 60, "training to start")
        servers = server_pids(proc.pid)
        assert len(servers) == 2 and len(sockets_left(tmp_path)) == 2
        for pid in servers:
            # Each server has its own process group, so a terminal's Ctrl-C reaches only the
            # launcher, which shuts them down in order; and they stay in the launcher's
            # session, so the kernel's autogroup does not give each server the CPU share of
            # the whole learner process.
            assert os.getpgid(pid) == pid != os.getpgid(proc.pid)
            assert os.getsid(pid) == os.getsid(proc.pid)
        proc.send_signal(sig)
        sent = time.monotonic()
        proc.wait(timeout=15)
        assert time.monotonic() - sent < 15
    finally:
        if proc.poll() is None:
            proc.kill()
    text = read(out)
    assert proc.returncode == 0, text[-3000:]
    assert not any(alive(pid) for pid in servers)
    assert not sockets_left(tmp_path)
    rundir = tmp_path / "runs" / "run"
    assert torch.load(rundir / "model.tar", weights_only=True)["step"] > 0
    meta = json.loads((rundir / "meta.json").read_text())
    assert meta["reason"] == "interrupted" and meta["success"] is False


@pytest.mark.multiprocess
def test_env_exception_stops_the_run_with_its_traceback(tmp_path):
    result = run(
        GYM,
        *common(tmp_path, env="tests.crashing_env:Crashing-v0", total_steps=10**9),
        output=str(tmp_path / "out"),
        timeout=60,
    )
    assert result.returncode == 1
    assert "boom: the env broke at its step 300" in result.stdout
    assert "crashing_env.py" in result.stdout  # the env's traceback reached the learner
    assert "error in thread actor-" in result.stdout
    meta = json.loads((tmp_path / "runs" / "run" / "meta.json").read_text())
    assert meta["success"] is False and "boom" in meta["reason"]
    assert not sockets_left(tmp_path)


@pytest.mark.multiprocess
def test_split_servers_share_a_process_step_in_turn_and_train(tmp_path):
    """--server_splits 2: 4 servers in 2 processes (2 each, sharing a step lock), the learner connected to all 4."""
    result = run(
        GYM,
        *common(tmp_path, num_servers=4, server_splits=2, total_steps=4000),
        "--disable_final_test",
        output=str(tmp_path / "out"),
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    served = re.findall(r"\[INFO:(\d+) env_server [^]]*\] env server (\d+): 2 envs at ", result.stdout)
    assert sorted(int(i) for _, i in served) == [0, 1, 2, 3], served
    by_process = collections.defaultdict(set)
    for pid, i in served:
        by_process[pid].add(int(i))
    assert sorted(map(sorted, by_process.values())) == [[0, 1], [2, 3]]  # a process hosts consecutive servers
    assert "8 envs on 4 env servers (2 each; 2 to a process, stepped in turn: 2 processes)" in result.stdout
    assert not sockets_left(tmp_path)


@pytest.mark.multiprocess
def test_an_env_exception_in_a_split_server_stops_the_run_with_its_traceback(tmp_path):
    result = run(
        GYM,
        *common(tmp_path, env="tests.crashing_env:Crashing-v0", total_steps=10**9, num_servers=4, server_splits=2),
        output=str(tmp_path / "out"),
        timeout=60,
    )
    assert result.returncode == 1, result.stdout[-3000:]
    assert "boom: the env broke at its step 300" in result.stdout and "crashing_env.py" in result.stdout
    assert not sockets_left(tmp_path)


@pytest.mark.multiprocess
def test_servers_that_do_not_divide_into_splits_are_one_line(tmp_path):
    result = run(GYM, *common(tmp_path, num_servers=2, server_splits=4), output=str(tmp_path / "out"), timeout=60)
    assert result.returncode == 2
    assert "--num_servers (2) must be a multiple of --server_splits (4)" in result.stdout.strip().splitlines()[-1]


@pytest.mark.multiprocess
def test_env_exception_in_reset_stops_the_run_with_its_traceback(tmp_path):
    result = run(
        GYM,
        *common(tmp_path, env="tests.crashing_env:CrashingReset-v0", total_steps=10**9),
        output=str(tmp_path / "out"),
        timeout=60,
    )
    assert result.returncode == 1, result.stdout[-3000:]
    assert "boom: the env broke in its reset number 4" in result.stdout
    assert "in reset" in result.stdout and "crashing_env.py" in result.stdout  # the traceback, from the reset
    meta = json.loads((tmp_path / "runs" / "run" / "meta.json").read_text())
    assert meta["success"] is False and "boom" in meta["reason"]
    assert not sockets_left(tmp_path)


@pytest.mark.multiprocess
def test_a_server_that_keeps_dying_ends_the_run_with_one_line(tmp_path):
    """Restarts are allowed 5 times a minute per server; the 6th death ends the run, saved and
    reported, instead of restarting forever."""
    started = time.monotonic()
    result = run(
        GYM,
        *common(
            tmp_path, env="tests.crashing_env:Dying-v0", total_steps=10**9, num_servers=1, num_actors=2, batch_size=2
        ),
        output=str(tmp_path / "out"),
        timeout=150,
    )
    assert result.returncode == 1, result.stdout[-3000:]
    assert result.stdout.count("exited with code -9; restarting it") == 5
    last = result.stdout.strip().splitlines()[-1]
    assert "error: env server 0 died 6 times within a minute (last exit code -9)" in last
    assert "python -m torchbeast_gym.polybeast_env" in last and "Traceback" not in result.stdout
    assert time.monotonic() - started < 120
    meta = json.loads((tmp_path / "runs" / "run" / "meta.json").read_text())
    assert meta["success"] is False and "died 6 times within a minute" in meta["reason"]
    assert not sockets_left(tmp_path)


@pytest.mark.multiprocess
def test_env_servers_and_learner_run_separately(tmp_path):
    env_out = str(tmp_path / "env_out")
    flags = common(tmp_path, total_steps=10_000)
    servers = start("torchbeast_gym.polybeast_env", *flags, output=env_out)
    try:
        wait_for(lambda: len(sockets_left(tmp_path)) == 2, 30, "both servers to listen")
        result = run("torchbeast_gym.polybeast_learner", *flags, output=str(tmp_path / "learner_out"), timeout=120)
        assert result.returncode == 0, result.stdout[-3000:]
        assert int(csv_rows(str(tmp_path / "runs" / "run" / "logs.csv"))[-1]["step"]) >= 10_000
        # The servers wait for the next learner.
        assert servers.poll() is None and len(sockets_left(tmp_path)) == 2
        grandchildren = children(servers.pid)
        servers.send_signal(signal.SIGTERM)
        servers.wait(timeout=15)
    finally:
        if servers.poll() is None:
            servers.kill()
    assert not any(alive(pid) for pid in grandchildren)
    assert not sockets_left(tmp_path)


@pytest.mark.multiprocess
def test_tcp_servers_with_generated_secret(tmp_path):
    port = free_port()
    result = run(
        GYM,
        *common(tmp_path, pipes_basename=f"127.0.0.1:{port}", num_servers=1, total_steps=10_000),
        output=str(tmp_path / "out"),
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert int(csv_rows(str(tmp_path / "runs" / "run" / "logs.csv"))[-1]["step"]) >= 10_000
    # The generated secret never appears on a command line or in the saved flags.
    meta = json.loads((tmp_path / "runs" / "run" / "meta.json").read_text())
    assert "--server_secret" not in " ".join(meta["argv"])
    assert "server_secret" not in meta["flags"]


@pytest.mark.multiprocess
def test_learner_without_servers_times_out_naming_the_address(tmp_path):
    result = run(
        "torchbeast_gym.polybeast_learner",
        *common(tmp_path, connect_timeout=1),
        output=str(tmp_path / "out"),
        timeout=60,
    )
    assert result.returncode == 2
    assert f"could not connect to env server at unix:{tmp_path}/pipe.0 within 1 s" in result.stdout


@pytest.mark.multiprocess
def test_doubled_sigint_is_one_request(tmp_path):
    """SIGINT delivered twice at once (terminal process group + `timeout`) still shuts down in order."""
    gap, status = 0.0, 0
    out = str(tmp_path / "out")
    proc = start(GYM, *common(tmp_path, total_steps=10**9), output=out)
    try:
        rows_path = str(tmp_path / "runs" / "run" / "logs.csv")
        wait_for(lambda: csv_rows(rows_path) and int(csv_rows(rows_path)[-1]["step"]) > 0, 60, "training to start")
        kids = children(proc.pid)  # the env servers, the acting process and multiprocessing's resource tracker
        ended_by_the_launcher = [
            *server_pids(proc.pid),
            *(k for k in kids if comm(k) == "actor-loop"),
        ]
        proc.send_signal(signal.SIGINT)
        time.sleep(gap)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        proc.wait(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = read(out)
    assert proc.returncode == status, text[-3000:]
    assert "terminate called" not in text and "Traceback" not in text
    # the launcher ended the servers and the acting process; the resource tracker ends by itself once its pipe's
    # last holder (the launcher) is gone, a moment later on a busy machine
    assert len(ended_by_the_launcher) == 3 and not any(alive(pid) for pid in ended_by_the_launcher)  # 2 servers + 1
    wait_for(lambda: not any(alive(pid) for pid in kids), 10, "every child of the launcher to exit")
    assert not sockets_left(tmp_path)


@pytest.mark.multiprocess
def test_an_env_server_given_sigint_and_sigterm_at_once_exits_cleanly_without_a_traceback():
    """Both signals pending before Python runs the first handler: the second finds a handler that does nothing
    (SIG_IGN there would make Python raise "Signal 15 ignored due to race condition" into the cleanup)."""
    code = """
import os, signal, sys
both = {signal.SIGINT, signal.SIGTERM}
signal.pthread_sigmask(signal.SIG_BLOCK, both)  # before any thread starts (numpy's), so all inherit it
from rl_core.runtime.env_server import install_termination_handlers
install_termination_handlers()
os.kill(os.getpid(), signal.SIGINT)
os.kill(os.getpid(), signal.SIGTERM)
try:
    signal.pthread_sigmask(signal.SIG_UNBLOCK, both)
finally:
    print("cleanup ran", file=sys.stderr, flush=True)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "cleanup ran", result.stderr


def test_a_missing_env_module_is_named_at_parse_time_and_by_make_env(capsys):
    import types

    from rl_core.errors import UserError
    from rl_core.runtime.entry import parse_flags
    import torchbeast_gym.env as gym_pkg

    for env, module in [
        ("some_missing_module:Foo-v0", "some_missing_module"),
        ("tests.no_such_file:Foo-v0", "tests.no_such_file"),
    ]:
        with pytest.raises(SystemExit):
            parse_flags(gym_pkg, [f"--env={env}"])
        assert f"module '{module}' not found: install it or fix the module path" in capsys.readouterr().err
        with pytest.raises(UserError, match=f"module '{module}' not found: install it or fix the module path"):
            gym_pkg.make_env(types.SimpleNamespace(env=env), 0)


PACKAGES = list(installed_env_packages())  # every registered package (pyproject.toml)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_numeric_flag_has_a_range_checked_when_parsed(package, capsys):
    """Each int/float flag of each package has a range; a value outside it (and NaN for floats) ends
    the parse with one line naming the flag and the range, before anything starts."""
    import importlib

    from rl_core.config.flag_ranges import flag_ranges, numeric_dests
    from rl_core.runtime.entry import make_parser, parse_flags

    pkg = importlib.import_module(f"{package}.env")
    ranges = flag_ranges(make_parser(pkg))  # each declared with its flag: type=ranged(kind, interval)
    dests = numeric_dests(make_parser(pkg))
    assert set(dests) <= set(ranges), f"numeric flags without a range: {sorted(set(dests) - set(ranges))}"
    bad_values = {
        "[0, inf)": "-1",
        "(0, inf)": "0",
        "[1, inf)": "0",
        "[0, 1]": "1.5",
        "[0, 1)": "1",
        "(0, 1]": "0",
        "finite": "inf",
    }
    for dest, kind in dests.items():
        for bad in [bad_values[ranges[dest]]] + (["nan"] if kind is float else []):
            if kind is int and bad in ("1.5", "inf"):
                continue
            with pytest.raises(SystemExit) as exit_info:
                parse_flags(pkg, [f"--{dest}={bad}"])
            assert exit_info.value.code == 2
            last = capsys.readouterr().err.strip().splitlines()[-1]
            assert f"--{dest} must be" in last and bad in last, last


@pytest.mark.multiprocess
def test_a_negative_learning_rate_is_refused_at_once(tmp_path):
    """At once: the flags' check is all that ran (its one line, and nothing before it: no sizing, no server)."""
    start_time = time.monotonic()
    result = run(GYM, *common(tmp_path, learning_rate=-1), output=str(tmp_path / "out"), timeout=60)
    assert result.returncode == 2
    assert result.stdout.strip().splitlines() == [
        "python -m torchbeast_gym.polybeast: error: --learning_rate must be in [0, inf), got -1.0 (all flags: "
        "python -m torchbeast_gym.polybeast --help)"
    ]
    assert time.monotonic() - start_time < 30  # (about 1.3 s on an idle machine)
    assert not (tmp_path / "runs").exists() and not sockets_left(tmp_path)


@pytest.mark.multiprocess
def test_a_secret_on_the_command_line_reaches_no_file_log_dashboard_or_child(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    secret = "s3cr3t-d0-not-l0g-me"
    port = free_port()
    out = str(tmp_path / "out")
    proc = start(
        GYM,
        *common(
            tmp_path,
            pipes_basename=f"127.0.0.1:{port}",
            num_servers=1,
            total_steps=6_000,
            project_name="tests",
            test_episodes=1,
        ),
        "--use_wandb",
        "--server_secret",
        secret,
        output=out,
    )
    try:
        servers = wait_for(lambda: children(proc.pid), 90, "the env server")
        for pid in servers:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                assert secret.encode() not in f.read()
        proc.wait(timeout=150)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, read(out)[-3000:]
    leaks = [
        str(path) for path in (tmp_path / "runs").rglob("*") if path.is_file() and secret.encode() in path.read_bytes()
    ]
    assert not leaks and secret not in read(out)
    meta = json.loads((tmp_path / "runs" / "run" / "meta.json").read_text())
    assert meta["argv"][-2:] == ["--server_secret", "<redacted>"]
    assert list((tmp_path / "runs" / "run" / "wandb").rglob("*.wandb"))  # the dashboard was written


@pytest.mark.multiprocess
def test_a_refused_run_leaves_the_other_runs_socket_alone(tmp_path):
    """A second launcher on a basename whose server 0 another run serves is refused with one line,
    and removes no socket file it did not create: the first run's server still answers."""
    basename = f"unix:{tmp_path}/x"
    first = start(
        "torchbeast_gym.polybeast_env",
        "--env=CartPole-v1",
        "--num_actors=2",
        "--num_servers=1",
        f"--pipes_basename={basename}",
        output=str(tmp_path / "first_out"),
    )
    try:
        wait_for(lambda: os.path.exists(tmp_path / "x.0"), 60, "the first run's server")
        result = run(
            GYM,
            *common(tmp_path, pipes_basename=basename, num_servers=1, num_actors=2, batch_size=2),
            output=str(tmp_path / "second_out"),
            timeout=120,
        )
        assert result.returncode == 2
        assert f"unix:{tmp_path}/x.0 is in use by another server" in result.stdout
        assert os.path.exists(tmp_path / "x.0")
        from rl_core.runtime import transport as tp

        sock = tp.connect(tp.Address("unix", path=str(tmp_path / "x.0")), timeout=10)
        conn = tp.Connection(sock, poll_s=0.2, frame_timeout_s=10)
        kind, _ = conn.recv()
        assert kind == tp.HELLO  # still served
        conn.close()
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=30)
    assert not os.path.exists(tmp_path / "x.0")  # its own server removed its own file


@pytest.mark.multiprocess
def test_two_runs_with_the_default_basename_do_not_meet(tmp_path):
    """Without --pipes_basename each launcher's servers listen at unix:/tmp/polybeast-<its pid>.i."""
    args = [
        a
        for a in common(tmp_path, total_steps=3_000, num_actors=2, num_servers=1, batch_size=2, test_episodes=1)
        if not a.startswith("--pipes_basename")
    ]
    a = start(GYM, *args, "--xpid=a", output=str(tmp_path / "a_out"))
    b = start(GYM, *args, "--xpid=b", output=str(tmp_path / "b_out"))
    try:
        assert a.wait(timeout=240) == 0, read(str(tmp_path / "a_out"))[-3000:]
        assert b.wait(timeout=240) == 0, read(str(tmp_path / "b_out"))[-3000:]
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
    for proc, xpid in ((a, "a"), (b, "b")):
        meta = json.loads((tmp_path / "runs" / xpid / "meta.json").read_text())
        assert meta["flags"]["pipes_basename"] == f"unix:/tmp/polybeast-{proc.pid}"
        assert not os.path.exists(f"/tmp/polybeast-{proc.pid}.0")


def _ends_at_once_with(result, started, text):
    assert result.returncode == 2, result.stdout[-3000:]
    last = result.stdout.strip().splitlines()[-1]
    assert text in last, last
    assert "restarting it" not in result.stdout and "Traceback" not in result.stdout
    assert time.monotonic() - started < 45
    return last


@pytest.mark.multiprocess
def test_a_basename_in_a_missing_directory_is_one_line_before_any_server(tmp_path):
    started = time.monotonic()
    result = run(
        GYM, *common(tmp_path, pipes_basename=f"unix:{tmp_path}/missing/x"), output=str(tmp_path / "out"), timeout=60
    )
    _ends_at_once_with(result, started, f"the directory {tmp_path}/missing does not exist: create it")
    # a server started on its own says the same from its listen()
    started = time.monotonic()
    result = run(
        "torchbeast_gym.polybeast_env",
        "--env=CartPole-v1",
        "--server_index=0",
        f"--pipes_basename=unix:{tmp_path}/missing/x",
        output=str(tmp_path / "out2"),
        timeout=60,
    )
    _ends_at_once_with(
        result,
        started,
        f"cannot listen on unix:{tmp_path}/missing/x.0: No such file or directory: create {tmp_path}/missing",
    )


@pytest.mark.multiprocess
def test_an_env_that_cannot_be_created_ends_the_launcher_with_the_servers_reason(tmp_path):
    started = time.monotonic()
    result = run(
        GYM, *common(tmp_path, env="tests.crashing_env:BrokenInit-v0"), output=str(tmp_path / "out"), timeout=90
    )
    _ends_at_once_with(
        result,
        started,
        "could not start: tests.crashing_env:BrokenInit-v0: the "
        "environment could not be created (OSError: asset file cartpole.xml not found)",
    )
    assert not sockets_left(tmp_path)


@pytest.mark.multiprocess
def test_procgen_without_qt_is_one_line_naming_the_package(tmp_path, monkeypatch):
    """A Qt 5 GUI library that cannot be loaded (here an empty file ahead on the library path)."""
    fake = tmp_path / "qt"
    fake.mkdir()
    (fake / "libQt5Gui.so.5").write_bytes(b"")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake))
    started = time.monotonic()
    result = run(
        "torchbeast_procgen.polybeast",
        *common(tmp_path, env="chaser", num_actors=2, num_servers=1, batch_size=2),
        output=str(tmp_path / "out"),
        timeout=90,
    )
    _ends_at_once_with(
        result,
        started,
        "env server 0 could not start: envpool's Procgen cannot load Qt 5's GUI "
        "library: install it (Debian/Ubuntu: sudo apt-get install libqt5gui5)",
    )


@pytest.mark.multiprocess
@pytest.mark.parametrize("env,field", [("NaNObs-v0", "obs"), ("NaNReward-v0", "reward")])
def test_a_nan_from_an_env_is_one_line_naming_server_slot_and_field(tmp_path, env, field):
    result = run(
        GYM,
        *common(
            tmp_path, env=f"tests.crashing_env:{env}", num_actors=4, num_servers=2, batch_size=4, total_steps=10**9
        ),
        output=str(tmp_path / "out"),
        timeout=90,
    )
    assert result.returncode == 1, result.stdout[-3000:]
    last = result.stdout.strip().splitlines()[-1]
    assert re.search(rf"env server [01] \(unix:{tmp_path}/pipe\.[01]\), env slot [01]: its {field} holds nan", last), (
        last
    )
    assert "probability tensor" not in result.stdout and "Traceback" not in result.stdout
    assert not sockets_left(tmp_path)


@pytest.mark.multiprocess
def test_a_hung_env_is_named_and_ends_the_run(tmp_path):
    """An env whose step() never returns: a warning at half --env_timeout, the server's log names the
    slot, and at --env_timeout the run ends with one line naming the server (not `0 SPS` forever)."""
    started = time.monotonic()
    result = run(
        GYM,
        *common(
            tmp_path,
            env="tests.crashing_env:Hanging-v0",
            num_actors=2,
            num_servers=1,
            batch_size=2,
            total_steps=10**9,
            env_timeout=8,
        ),
        output=str(tmp_path / "out"),
        timeout=120,
    )
    assert result.returncode == 1, result.stdout[-3000:]
    last = result.stdout.strip().splitlines()[-1]
    assert re.search(
        rf"env server 0 \(unix:{tmp_path}/pipe\.0\) has not answered for \d+ s \(--env_timeout 8\)", last
    ), last
    assert "has not answered for 4 s; the run ends at 8 s" in result.stdout
    assert re.search(r"env server 0: env slot [01]'s step\(\) has not returned for \d+ s", result.stdout)
    assert time.monotonic() - started < 90 and "Traceback" not in result.stdout
    assert not sockets_left(tmp_path)
