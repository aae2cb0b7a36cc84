"""Experiment lifecycle: dashboards, validation, final test, eval-only runs, videos, plots."""

import glob
import json
import os
import re
import struct
import subprocess
import sys

import numpy as np
import pytest
import torch

from rl_core.evaluation.episodes import crossed
from tests.proc_utils import csv_rows, read, run

GYM = "torchbeast_gym.polybeast"
ATARI = "torchbeast_atari.polybeast"


def gym_flags(tmp_path, xpid="run", **overrides):
    flags = {
        "env": "CartPole-v1",
        "num_actors": 8,
        "num_servers": 2,
        "batch_size": 8,
        "unroll_length": 20,
        "learning_rate": 0.003,
        "entropy_cost": 0.01,
        "pipes_basename": f"unix:{tmp_path}/pipe_{xpid}",
        "savedir": str(tmp_path / "runs"),
        "xpid": xpid,
        "log_interval": 1,
        "test_episodes": 6,
    }
    flags.update(overrides)
    return [f"--{k}" if v is True else f"--{k}={v}" for k, v in flags.items()]


def wandb_records(run_dir):
    """History rows, config and summary of an offline wandb run, read from its .wandb file."""
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = glob.glob(os.path.join(run_dir, "wandb", "offline-run-*", "run-*.wandb"))
    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    pos, payloads, partial = 7, [], b""
    while pos + 7 <= len(data):  # LevelDB-style log: 32 KiB blocks of typed chunks
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0:
            pos += left
            continue
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            payloads.append(chunk)
        elif kind == 2:
            partial = chunk
        elif kind == 3:
            partial += chunk
        elif kind == 4:
            payloads.append(partial + chunk)
    history, config, summary = [], {}, {}
    for payload in payloads:
        record = pb.Record()
        record.ParseFromString(payload)
        which = record.WhichOneof("record_type")
        if which == "history":
            history.append({"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in record.history.item})
        elif which in ("run", "config"):
            updates = record.run.config.update if which == "run" else record.config.update
            for item in updates:
                config[item.key] = json.loads(item.value_json)
        elif which == "summary":
            for item in record.summary.update:
                summary["/".join(item.nested_key) or item.key] = json.loads(item.value_json)
    return history, config, summary


def decode_video(path):
    """(number of frames, (width, height)) of an mp4, decoded with ffmpeg."""
    import imageio.v2 as imageio

    reader = imageio.get_reader(path, format="FFMPEG")
    try:
        frames = [frame for frame in reader]
    finally:
        reader.close()
    assert frames and all(f.shape == frames[0].shape and f.dtype == np.uint8 for f in frames)
    assert any(f.std() > 0 for f in frames)  # not a blank video
    return len(frames), (frames[0].shape[1], frames[0].shape[0])


@pytest.mark.multiprocess
def test_wandb_offline_tensorboard_final_test_and_video(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    args = gym_flags(
        tmp_path,
        use_wandb=True,
        project_name="tests",
        total_steps=20_000,
        record_video=True,
        validate_step_every=10_000,
        valid_num_episodes=2,
    )
    result = run(GYM, *args, output=str(tmp_path / "out"), timeout=180)
    assert result.returncode == 0, result.stdout[-3000:]
    rundir = tmp_path / "runs" / "run"

    final = json.loads((rundir / "final_test.json").read_text())
    assert final["runs"][0]["episodes"] == 6 and len(final["runs"][0]["returns"]) == 6
    assert final["groups"]["test"]["mean"] == pytest.approx(final["runs"][0]["mean_return"])
    assert final["step"] >= 20_000 and final["greedy"] is True
    assert final["video"].endswith("test_first_episode.mp4")
    # The video is env 0's first test episode: its first frame and one per step but the last (the episode
    # is over), so as many frames as steps, which is a CartPole return; at the env's render size.
    frames, size = decode_video(final["video"])
    assert size == (600, 400) and frames in final["runs"][0]["returns"]
    # The first validation recorded its first episode too.
    frames, size = decode_video(str(rundir / "valid_first_episode.mp4"))
    assert size == (600, 400) and frames >= 8  # CartPole's shortest episode has 8 steps
    log_text = read(str(rundir / "out.log"))
    assert "final test: mean return" in log_text and "final test test" not in log_text  # the one run is the group

    history, config, summary = wandb_records(str(rundir))
    logged_steps = [h["step"] for h in history if "sps" in h]
    csv_steps = [int(r["step"]) for r in csv_rows(str(rundir / "logs.csv"))]
    assert logged_steps == csv_steps  # one wandb row per logs.csv row
    assert {"sps", "total_loss", "return_last_100", "learner_queue"} <= set(history[0])
    assert config["total_steps"] == 20_000 and config["env"] == "CartPole-v1"
    assert "server_secret" not in config
    assert summary["final_test/test/mean"] == pytest.approx(final["groups"]["test"]["mean"])
    videos = [h for h in history if "video/test/_type" in h]
    assert videos and videos[0]["video/test/_type"] == "video-file" and videos[0]["video/test/path"].endswith(".mp4")
    assert [h for h in history if h.get("video/valid/_type") == "video-file"]
    assert any(h.get("final_test/test_mean") == pytest.approx(final["groups"]["test"]["mean"]) for h in history)

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(rundir))
    events.Reload()
    assert "sps" in events.Tags()["scalars"] and "final_test/test_mean" in events.Tags()["scalars"]
    assert [e.step for e in events.Scalars("sps")] == csv_steps


def test_validation_crossing_semantics():
    assert crossed(9_990, 10_010, 10_000)  # crossed without landing on it
    assert crossed(9_999, 10_000, 10_000)
    assert not crossed(10_000, 10_500, 10_000)
    assert crossed(19_000, 31_000, 10_000)  # two multiples in one jump: fires once
    assert not crossed(0, 10**9, 0)  # 0 means off


@pytest.mark.multiprocess
def test_validation_best_and_extra_checkpoints(tmp_path):
    args = gym_flags(
        tmp_path,
        total_steps=40_000,
        validate_step_every=10_000,
        valid_num_episodes=3,
        save_extra_checkpoint=15_000,
        disable_final_test=True,
    )
    result = run(GYM, *args, output=str(tmp_path / "out"), timeout=180)
    assert result.returncode == 0, result.stdout[-3000:]
    rundir = tmp_path / "runs" / "run"
    text = read(str(rundir / "out.log"))
    started = [int(s) for s in re.findall(r"validation of the model at step (\d+) started", text)]
    skipped = text.count("validation still running: skipping this one")
    # Each crossed multiple of 10k (10k, 20k, 30k, 40k: the last step's too) starts one, or is skipped
    # while one runs; never one per loop.  How many are skipped depends on the machine's load.
    assert len(started) + skipped == 4 and len(started) >= 2
    assert len({s // 10_000 for s in started}) == len(started) and started[-1] >= 40_000
    # every started validation finishes and is recorded, the last one after training ended
    results = [float(x) for x in re.findall(r"validation at step \d+: mean return ([\d.]+)", text)]
    assert len(results) == len(started)
    best = torch.load(rundir / "model_best_val.tar", weights_only=True)
    assert best["valid_return"] == pytest.approx(max(results), abs=0.01)
    assert best["step"] in started
    extra = torch.load(rundir / "model_extra.tar", weights_only=True)
    assert 15_000 <= extra["step"] < 15_000 + 8 * 20  # the update that crossed it
    rows = csv_rows(str(rundir / "logs.csv"))
    assert [float(r["valid_mean_return"]) for r in rows if r["valid_mean_return"] != "nan"]
    assert not (rundir / "final_test.json").exists()


# Runs per package when each protocol group is cut to --test_runs 2 (Procgen: train + 2 held-out sets).
EXPECTED_RUNS = {"gym": 1, "atari": 2, "procgen": 3, "dmlab": 2}


@pytest.mark.multiprocess
@pytest.mark.parametrize("package", ["gym", "atari", "procgen", "dmlab"])
def test_eval_only_mode_on_a_saved_checkpoint(tmp_path, package, monkeypatch):
    small = [
        f"--pipes_basename=unix:{tmp_path}/pipe",
        f"--savedir={tmp_path}/runs",
        "--xpid=run",
        "--num_actors=2",
        "--num_servers=1",
        "--batch_size=2",
        "--unroll_length=10",
        "--total_steps=100",
        "--disable_final_test",
        "--use_lstm",
        "--hidden_size=32",
    ]
    test_args = ["--test_runs=2", "--test_episodes=1", "--test_num_envs=1"]
    if package == "gym":
        module, train_args = GYM, gym_flags(tmp_path, total_steps=5_000, disable_final_test=True)
        test_args = ["--test_episodes=4"]
    elif package == "atari":
        module, train_args = ATARI, small
        test_args += ["--max_episode_frames=200", "--record_video"]
    elif package == "procgen":
        module, train_args = (
            "torchbeast_procgen.polybeast",
            small + ["--env=procgen:procgen-starpilot-v0"],
        )  # short greedy episodes
    else:
        fake = os.path.join(os.path.dirname(__file__), "fake_deepmind_lab")
        monkeypatch.setenv("PYTHONPATH", fake + os.pathsep + os.environ.get("PYTHONPATH", ""))
        module, train_args = "torchbeast_dmlab.polybeast", small
    result = run(module, *train_args, output=str(tmp_path / "train_out"), timeout=180)
    assert result.returncode == 0, result.stdout[-3000:]
    ckpt = tmp_path / "runs" / "run" / "model.tar"
    result = run(module, "--mode=test", f"--checkpoint={ckpt}", *test_args, output=str(tmp_path / "out"), timeout=180)
    assert result.returncode == 0, result.stdout[-3000:]
    (path,) = glob.glob(str(tmp_path / "runs" / "run" / "eval-*.json"))
    out = json.loads(open(path).read())
    runs = out["runs"]
    assert len(runs) == EXPECTED_RUNS[package]
    if package == "procgen":
        assert [r["overrides"] for r in runs] == [
            {"start_level": 0, "num_levels": 200},
            {"start_level": 1000, "num_levels": 200},
            {"start_level": 1200, "num_levels": 200},
        ]
        assert set(out["groups"]) == {"train", "test"} and out["groups"]["test"]["runs"] == 2
    assert all(r["episodes"] == len(r["returns"]) for r in runs)
    assert out["step"] == torch.load(ckpt, weights_only=True)["step"]
    if package == "atari":  # whole games of at most 200 frames = 50 agent steps, Pong's score is in [-21, 21]
        assert all(-21 <= x <= 21 for r in runs for x in r["returns"])
        # the video shows the emulator's RGB screen, 160x210, in real time (15 agent steps a second)
        frames, size = decode_video(out["video"])
        # a frame per agent step: at most (200 - 8 FIRE frames) / 4 = 48, up to 30 no-op frames fewer
        assert size == (160, 210) and 40 <= frames <= 48
        import imageio.v2 as imageio

        reader = imageio.get_reader(out["video"], format="FFMPEG")
        assert reader.get_meta_data()["fps"] == 15 and reader.get_data(0)[..., 0].std() > 0
        reader.close()
    assert ("test [test]: mean" if out["groups"]["test"]["runs"] > 1 else "test: mean return") in result.stdout
    # a line per run sums up its episodes (each one's return and length are in the eval json)
    assert "episodes, return min" in result.stdout and "episode 1: return" not in result.stdout


@pytest.mark.multiprocess
def test_eval_only_errors_are_one_line(tmp_path):
    result = run(GYM, "--mode=test", output=str(tmp_path / "out1"), timeout=60)
    assert result.returncode == 2 and "--mode test needs --checkpoint PATH" in result.stdout.strip().splitlines()[-1]
    result = run(GYM, "--mode=test", f"--checkpoint={tmp_path}/none.tar", output=str(tmp_path / "out2"), timeout=60)
    assert result.returncode == 2 and "does not exist" in result.stdout.strip().splitlines()[-1]


@pytest.mark.multiprocess
def test_plot_draws_two_runs_even_in_progress(tmp_path):
    for xpid in ["a", "b"]:
        args = gym_flags(tmp_path, xpid=xpid, total_steps=8_000, disable_final_test=True)
        assert run(GYM, *args, output=str(tmp_path / f"out_{xpid}"), timeout=120).returncode == 0
    # A row still being written (a run in progress) is skipped, not an error.
    with open(tmp_path / "runs" / "b" / "logs.csv", "a") as f:
        f.write("9999,1.0")
    out = tmp_path / "curves.png"
    result = run(
        "rl_core.records.plot",
        str(tmp_path / "runs" / "a"),
        str(tmp_path / "runs" / "b"),
        f"--out={out}",
        output=str(tmp_path / "plot_out"),
        timeout=60,
    )
    assert result.returncode == 0, result.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    # the bold line is the console's last-100 return, its last point the run's last value
    from rl_core.records.plot import read_curves

    steps, last_100, _, _ = read_curves(str(tmp_path / "runs" / "a"))
    last_row = csv_rows(str(tmp_path / "runs" / "a" / "logs.csv"))[-1]
    assert (steps[-1], last_100[-1]) == (int(last_row["step"]), float(last_row["return_last_100"]))
    # the short command (pyproject.toml's console script) beside the interpreter
    command = os.path.join(os.path.dirname(sys.executable), "polybeast-plot")
    result = subprocess.run([command, str(tmp_path / "nowhere"), f"--out={out}"], capture_output=True, text=True)
    assert result.returncode == 2 and "has no logs.csv" in result.stderr


# A linear CartPole controller, push right iff w . (x, x_dot, theta, theta_dot) > 0: 500 on every seed
# tried (a random or freshly initialized policy scores about 10-60).
CONTROLLER = (0.1, 0.5, 10.0, 2.0)


def controller_checkpoint(path, sign=1.0):
    """A model.tar of a run at step 0 whose weights play CONTROLLER greedily (sign -1: its mirror image),
    and whose optimizer has learning rate 0, so that training on leaves the weights as they are."""
    from rl_core.records import checkpoint_file
    from rl_core.agents import make_agent
    from rl_core.data.env_spec import DiscreteActions, EnvSpec, Observation
    from rl_core.runtime.entry import parse_flags
    import torchbeast_gym.env as gym_pkg

    flags = parse_flags(gym_pkg, ["--env=CartPole-v1", "--learning_rate=0"])
    spec = EnvSpec(Observation((4,), "<f4"), DiscreteActions(2))
    agent = make_agent(flags, spec)
    model = agent.build_model()
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.stem.net[0].weight[0] = 0.05 * torch.tensor(CONTROLLER)  # tanh stays monotone in w . x
        model.stem.net[2].weight[0, 0] = 1.0
        model.policy.weight[1, 0], model.policy.weight[0, 0] = 50.0 * sign, -50.0 * sign
    optimizer, scheduler = agent.make_optimizer(model)
    checkpoint_file.save(
        str(path),
        {
            "model_state_dict": model.state_dict(),
            "optimizer_state_dict": optimizer.state_dict(),
            "scheduler_state_dict": scheduler.state_dict(),
            "flags": checkpoint_file.flags_dict(flags),
            "step": 0,
            "learner_steps": 0,
        },
    )
    return model.state_dict()


@pytest.mark.multiprocess
def test_eval_only_and_the_final_test_play_the_checkpoints_weights(tmp_path):
    rundir = tmp_path / "runs" / "run"
    weights = controller_checkpoint(rundir / "model.tar")
    # eval-only on the checkpoint: the controller's score, far above any untrained policy
    result = run(
        GYM,
        "--mode=test",
        f"--checkpoint={rundir / 'model.tar'}",
        "--test_episodes=5",
        output=str(tmp_path / "out1"),
        timeout=180,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    (path,) = glob.glob(str(rundir / "eval-*.json"))
    returns = json.loads(open(path).read())["runs"][0]["returns"]
    assert len(returns) == 5 and min(returns) >= 400, returns

    # a run that resumes it and trains at learning rate 0 ends with the same weights; its final test plays them
    args = gym_flags(tmp_path, total_steps=2_000, learning_rate=0, test_episodes=5)
    result = run(GYM, *args, output=str(tmp_path / "out2"), timeout=180)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "resumed from" in result.stdout
    saved = torch.load(rundir / "model.tar", weights_only=True)
    assert saved["step"] >= 2_000
    assert all(torch.equal(saved["model_state_dict"][k], v) for k, v in weights.items())
    final = json.loads((rundir / "final_test.json").read_text())
    assert len(final["runs"][0]["returns"]) == 5 and min(final["runs"][0]["returns"]) >= 400, final["runs"]

    # control: the mirrored controller, through the same path, fails at once
    controller_checkpoint(tmp_path / "mirror" / "model.tar", sign=-1.0)
    result = run(
        GYM,
        "--mode=test",
        f"--checkpoint={tmp_path / 'mirror' / 'model.tar'}",
        "--test_episodes=5",
        output=str(tmp_path / "out3"),
        timeout=180,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    (path,) = glob.glob(str(tmp_path / "mirror" / "eval-*.json"))
    assert max(json.loads(open(path).read())["runs"][0]["returns"]) < 50


def test_a_validation_whose_snapshot_reached_the_last_step_is_not_repeated_at_the_end(tmp_path, monkeypatch):
    """The poll at a crossing (step 7,360) snapshots the model at the learner's step by then (8,000, the last): the
    end's check finds that step validated and starts no second validation of it."""
    import threading
    import types

    from rl_core.runtime import validation as validation_module

    started = []

    def fake_start_thread(name, target, errors):
        started.append(name)
        thread = threading.Thread(target=lambda: None)
        thread.start()
        return thread

    monkeypatch.setattr(validation_module, "start_thread", fake_start_thread)
    learner = types.SimpleNamespace(step=0, lock=threading.Lock(), model=torch.nn.Linear(1, 1))
    flags = types.SimpleNamespace(
        disable_validation=False, validate_every=0, validate_step_every=4000, record_video=False
    )
    parts = types.SimpleNamespace(learner=learner, device="cpu", agent=None)
    valid = validation_module.Validation(flags, parts, None, None, str(tmp_path), None, None, [])
    learner.step = 7360
    original = validation_module.copy.deepcopy

    def snapshot_later(model):  # the learner goes on to its last step while the poll starts the validation
        learner.step = 8000
        return original(model)

    monkeypatch.setattr(validation_module.copy, "deepcopy", snapshot_later)
    valid.poll(0.0)
    monkeypatch.setattr(validation_module.copy, "deepcopy", original)
    valid.finish()
    assert started == ["validation"]  # one validation, of step 8,000
    learner.step = 12_000
    valid.poll(1.0)  # the next crossing (12,000) is validated
    assert started == ["validation", "validation"]
