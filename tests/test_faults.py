"""Faults a user meets end in one clear line, and nothing saved is lost.

Each test drives the real launcher (``python -m torchbeast_gym.polybeast``: env server processes,
sockets, files) into one fault and checks the last line, the exit status (2: the user's to fix,
1: the run failed) and that what was saved before is unchanged, byte for byte and mtime.
"""

import datetime
import json
import os
import re
import resource
import signal
import socket

import pytest
import torch

from tests.proc_utils import alive, children, last_line, read, run, snapshot, sockets_left, start, wait_for

pytestmark = pytest.mark.multiprocess

GYM = "torchbeast_gym.polybeast"


def flags(tmp_path, name="a", xpid="run", **overrides):
    """A small CartPole run: 4 envs on one server, batches of 4 x 20 = 80 steps, 10 batches."""
    values = {
        "env": "CartPole-v1",
        "num_actors": 4,
        "num_servers": 1,
        "batch_size": 4,
        "unroll_length": 20,
        "total_steps": 800,
        "pipes_basename": f"unix:{tmp_path}/pipe_{name}",
        "savedir": str(tmp_path / "runs"),
        "xpid": xpid,
        "log_interval": 1,
        "learning_rate": 0.002,
        "disable_final_test": True,
    }
    values.update(overrides)
    return [f"--{k}" if v is True else f"--{k}={v}" for k, v in values.items() if v is not None]


def log_messages(output: str) -> list[str]:
    """The messages of the run's log lines, in order ("[INFO:pid name time] message")."""
    return [line.split("] ", 1)[1] for line in output.splitlines() if line.startswith("[") and "] " in line]


def first_run(tmp_path, **overrides):
    result = run(GYM, *flags(tmp_path, name="first", **overrides), output=str(tmp_path / "first_out"), timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    return result


def test_first_lines_name_run_directory_device_and_sizing_and_another_agent_cannot_resume(tmp_path):
    """Every run starts with its run directory, device and sizing; resuming it with another --agent is
    refused before anything is written (it was a KeyError 'betas' after meta.json was rewritten)."""
    rundir = tmp_path / "runs" / "run"
    result = first_run(tmp_path)
    messages = log_messages(result.stdout)
    assert messages[0] == f"run directory: {rundir} (new run)", messages[:3]
    # the learner's device: cpu here, "cuda (<its name>)" where a GPU is at hand (checked on an H100)
    assert re.match(r"device: (cpu|cuda \(.+\)), \d+ torch intra-op threads?$", messages[1]), messages[:3]
    assert messages[2] == (
        "sizing: --agent impala, 4 envs on 1 env server (4 each), learner batches of 4 x 20 = "
        "80 steps (~10 batches), --total_steps 800"
    ), messages[:3]
    step = int(re.search(r"saved checkpoint \S+ at step (\d+)", result.stdout).group(1))

    before = snapshot(rundir, ("model.tar", "meta.json", "logs.csv", "out.log", ".lock"))
    result = run(
        GYM, *flags(tmp_path, name="second", total_steps=1600, agent="ppo"), output=str(tmp_path / "out"), timeout=60
    )
    assert result.returncode == 2, result.stdout[-3000:]
    assert last_line(result.stdout).endswith(
        f"error: --agent ppo --optimizer adam cannot resume run run: its checkpoint {rundir}/model.tar (step {step:,}) "
        f"was trained with --agent impala --optimizer rmsprop; resume it with --agent impala --optimizer rmsprop, "
        f"or start a new run with another --xpid (or none)"
    ), last_line(result.stdout)
    assert "Traceback" not in result.stdout and "env server 0" not in result.stdout  # no server started
    assert snapshot(rundir, ("model.tar", "meta.json", "logs.csv", "out.log", ".lock")) == before
    assert not sockets_left(tmp_path)

    # The same agent with another model is refused once the servers told the spec (model.tar is read
    # only then): the run's record, meta.json, is put back as it was.
    before = snapshot(rundir, ("model.tar", "meta.json", "logs.csv"))
    result = run(
        GYM, *flags(tmp_path, name="third", total_steps=1600, mlp_sizes="32"), output=str(tmp_path / "out3"), timeout=60
    )
    assert result.returncode == 2, result.stdout[-3000:]
    assert f"checkpoint {rundir}/model.tar does not fit this model" in last_line(result.stdout)
    assert snapshot(rundir, ("model.tar", "meta.json", "logs.csv")) == before
    assert not sockets_left(tmp_path)


def test_runs_started_without_xpid_in_the_same_second_get_their_own_directories(tmp_path):
    """Without --xpid a run's directory is created exclusively: a name taken (here: every second of the
    next minute, as by runs started then) is never reused, and two runs started at once differ."""
    savedir = tmp_path / "runs"
    now = datetime.datetime.now()
    taken = set()
    for seconds in range(60):
        name = "torchbeast-" + (now + datetime.timedelta(seconds=seconds)).strftime("%Y%m%d-%H%M%S")
        (savedir / name).mkdir(parents=True, exist_ok=True)
        (savedir / name / "model.tar").write_bytes(b"another run's checkpoint")
        taken.add(name)
    before = {name: snapshot(savedir / name, ("model.tar",)) for name in taken}
    procs = [
        start(GYM, *flags(tmp_path, name=n, xpid=None, total_steps=160), output=str(tmp_path / f"out_{n}"))
        for n in ("a", "b")
    ]
    dirs = []
    for proc, n in zip(procs, ("a", "b")):
        assert proc.wait(timeout=120) == 0, read(str(tmp_path / f"out_{n}"))[-3000:]
        first = log_messages(read(str(tmp_path / f"out_{n}")))[0]
        match = re.fullmatch(rf"run directory: {savedir}/(torchbeast-\d{{8}}-\d{{6}}-\d+) \(new run\)", first)
        assert match, first
        dirs.append(match.group(1))
    assert dirs[0] != dirs[1] and not set(dirs) & taken
    assert set(os.listdir(savedir)) == taken | set(dirs)
    for name in dirs:
        meta = json.loads((savedir / name / "meta.json").read_text())
        assert meta["flags"]["xpid"] == name and meta["success"] is True
    assert {name: snapshot(savedir / name, ("model.tar",)) for name in taken} == before


def test_a_second_run_on_a_live_runs_xpid_is_refused_and_a_crashed_runs_lock_is_stale(tmp_path):
    rundir = tmp_path / "runs" / "run"
    out = str(tmp_path / "out_live")
    live = start(GYM, *flags(tmp_path, name="live", total_steps=10**9), output=out)
    servers = []
    try:
        wait_for(lambda: "Step " in read(out), 60, "the live run's first progress line")
        before = snapshot(rundir, ("meta.json", ".lock"))
        result = run(GYM, *flags(tmp_path, name="second"), output=str(tmp_path / "out_second"), timeout=60)
        assert result.returncode == 2, result.stdout[-3000:]
        host = re.escape(socket.gethostname())
        assert re.search(
            rf"error: run directory {rundir} is in use by another run \(pid {live.pid} on {host} since [0-9T:-]+\): "
            rf"wait for it to end, or pass another --xpid$",
            last_line(result.stdout),
        ), last_line(result.stdout)
        assert "Traceback" not in result.stdout and "env server 0" not in result.stdout
        assert snapshot(rundir, ("meta.json", ".lock")) == before
        assert "in use by another run" not in (rundir / "out.log").read_text()  # the refused run wrote nothing
        servers = children(live.pid)
    finally:
        live.kill()  # a crash: no clean exit, the lock file stays
        live.wait()
    wait_for(lambda: not any(alive(pid) for pid in servers), 30, "the crashed run's servers to exit")
    assert (rundir / ".lock").exists()
    result = run(GYM, *flags(tmp_path, name="third", total_steps=160), output=str(tmp_path / "out_third"), timeout=90)
    assert result.returncode == 0, result.stdout[-3000:]
    assert log_messages(result.stdout)[0] == f"run directory: {rundir} (new run)"
    holder = (rundir / ".lock").read_text()
    assert holder.startswith("pid ") and not holder.startswith(f"pid {live.pid} ")  # the third run's, now free


def test_a_budget_that_cannot_fill_one_batch_is_refused_at_the_start(tmp_path):
    rundir = tmp_path / "runs" / "run"
    rundir.mkdir(parents=True)
    (rundir / "model.tar").write_bytes(b"saved before")
    (rundir / "meta.json").write_text("{}")
    before = snapshot(rundir)
    result = run(
        GYM, *flags(tmp_path, batch_size=100_000, total_steps=500_000), output=str(tmp_path / "out"), timeout=60
    )
    assert result.returncode == 2, result.stdout[-3000:]
    assert (
        "error: one learner batch is --batch_size 100000 x --unroll_length 20 = 2,000,000 env steps, more than "
        "the whole budget --total_steps 500,000: the run would end without one update; lower --batch_size or "
        "--unroll_length, or raise --total_steps"
    ) in last_line(result.stdout)
    assert len(result.stdout.strip().splitlines()) == 1
    assert snapshot(rundir) == before and sorted(os.listdir(rundir)) == ["meta.json", "model.tar"]
    assert not sockets_left(tmp_path)


def test_a_diverging_run_names_the_first_non_finite_value_and_keeps_the_last_good_checkpoint(tmp_path):
    rundir = tmp_path / "runs" / "run"
    first_run(tmp_path)
    before = snapshot(rundir, ("model.tar",))
    saved = torch.load(rundir / "model.tar", weights_only=True)
    step, update = saved["step"], saved["learner_steps"] + 1
    result = run(
        GYM,
        *flags(tmp_path, name="second", total_steps=1600, learning_rate=1e30),
        output=str(tmp_path / "out"),
        timeout=90,
    )
    assert result.returncode == 1, result.stdout[-3000:]
    last = last_line(result.stdout)
    assert re.search(
        rf"error: training diverged at step {step:,} \(learner update {update}\): parameter [\w.]+ diverged after the "
        rf"optimizer step \(max \|x\| = [0-9.e+]+: its norm overflows float32\); model.tar keeps the last good "
        rf"checkpoint \(step {step:,}\); lower --learning_rate \(now [0-9.e+]+\) or clip the gradients "
        rf"\(--grad_norm_clipping\)$",
        last,
    ), last
    assert "Traceback" not in result.stdout and "saved checkpoint" not in result.stdout
    assert snapshot(rundir, ("model.tar",)) == before
    meta = json.loads((rundir / "meta.json").read_text())
    assert meta["success"] is False and "training diverged" in meta["reason"]
    assert not sockets_left(tmp_path)


def _file_size_limit(limit: int):
    def preexec():
        # A file system that takes no more than ``limit`` bytes per file: writes past it fail (EFBIG)
        # as writes into a full disk fail (ENOSPC); Python ignores SIGXFSZ already, this says so.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return preexec


@pytest.mark.parametrize("when", ["periodic", "final"])
def test_a_checkpoint_that_cannot_be_written_is_one_line_and_the_previous_one_is_kept(tmp_path, when):
    """A checkpoint write the file system refuses (here: RLIMIT_FSIZE below the checkpoint's size, a real
    failed write(2) on a real file system, portable and without root; a full disk fails the same write
    with ENOSPC) stops training cleanly with one line naming the path and the free space, exit 1: mid-run
    (the periodic save) or at the end (the final save; the run is not 'finished' then)."""
    rundir = tmp_path / "runs" / "run"
    first_run(tmp_path, mlp_sizes="256,256")
    before = snapshot(rundir, ("model.tar",))
    step = torch.load(rundir / "model.tar", weights_only=True)["step"]
    limit = len(before["model.tar"][0]) // 2  # the logs of both runs stay far below it
    sizing = {"total_steps": 10**9, "checkpoint_every": 0.01} if when == "periodic" else {"total_steps": 1600}
    result = run(
        GYM,
        *flags(tmp_path, name="second", mlp_sizes="256,256", **sizing),
        output=str(tmp_path / "out"),
        timeout=90,
        preexec_fn=_file_size_limit(limit),
    )
    assert result.returncode == 1, result.stdout[-3000:]
    last = last_line(result.stdout)
    assert re.search(
        rf"error: could not write {rundir}/model.tar: File too large \([0-9,.]+ MiB free there\); raise the file "
        rf"size limit \(ulimit -f\) or pass --savedir on another file system; model.tar of step {step:,} is kept$",
        last,
    ), last
    assert "Traceback" not in result.stdout and "saved checkpoint" not in result.stdout
    assert snapshot(rundir, ("model.tar",)) == before
    assert not [name for name in os.listdir(rundir) if name.endswith(".partial")]
    meta = json.loads((rundir / "meta.json").read_text())
    assert meta["success"] is False and "could not write" in meta["reason"]
    assert not sockets_left(tmp_path)
