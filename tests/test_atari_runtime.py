"""torchbeast_atari through the real runtime: Pong on 2 env servers, checkpoints, resume."""

import json
import os

import pytest
import torch

from tests.proc_utils import csv_rows, read, run

ATARI = "torchbeast_atari.polybeast"


def atari_flags(tmp_path, xpid, **overrides):
    flags = {
        "env": "PongNoFrameskip-v4",
        "num_actors": 4,
        "num_servers": 2,
        "batch_size": 4,
        "unroll_length": 20,
        "pipes_basename": f"unix:{tmp_path}/pipe_{xpid}",
        "savedir": str(tmp_path / "runs"),
        "xpid": xpid,
        "log_interval": 1,
        "disable_final_test": True,  # 5 x 30 whole games; the eval-only test covers the protocol
    }
    flags.update(overrides)
    return [f"--{k}={v}" if v is not True else f"--{k}" for k, v in flags.items()]


@pytest.mark.multiprocess
def test_pong_on_two_servers_checkpoints_and_resumes(tmp_path):
    args = atari_flags(tmp_path, "pong", total_steps=3000, use_lstm=True, hidden_size=64)
    result = run(ATARI, *args, output=str(tmp_path / "out1"), timeout=180)
    assert result.returncode == 0, result.stdout[-3000:]
    rundir = tmp_path / "runs" / "pong"
    ckpt = torch.load(rundir / "model.tar", weights_only=True)
    assert ckpt["step"] >= 3000 and ckpt["flags"]["env"] == "PongNoFrameskip-v4"
    assert "stem.conv1.weight" in ckpt["model_state_dict"]
    assert any(k.startswith("core.") for k in ckpt["model_state_dict"])  # the LSTM core was trained
    rows = csv_rows(str(rundir / "logs.csv"))
    assert int(rows[-1]["step"]) >= 3000 and float(rows[-1]["env_steps"]) >= 3000
    meta = json.loads((rundir / "meta.json").read_text())
    assert meta["success"] is True and meta["flags"]["num_actions"] == 6

    args = atari_flags(tmp_path, "pong", total_steps=6000, use_lstm=True, hidden_size=64)
    result = run(ATARI, *args, output=str(tmp_path / "out2"), timeout=180)
    assert result.returncode == 0, result.stdout[-3000:]
    assert f"resumed from {rundir}/model.tar at step {ckpt['step']}" in result.stdout
    assert torch.load(rundir / "model.tar", weights_only=True)["step"] >= 6000


@pytest.mark.multiprocess
@pytest.mark.parametrize("core", ["use_elstm", "use_rtrl"])
def test_pretrained_frozen_stem_with_each_core(tmp_path, core):
    first = atari_flags(tmp_path, "source", total_steps=400)
    assert run(ATARI, *first, output=str(tmp_path / "out1"), timeout=180).returncode == 0
    source = torch.load(tmp_path / "runs" / "source" / "model.tar", weights_only=True)["model_state_dict"]
    path = str(tmp_path / "runs" / "source" / "model.tar")
    # Acting with a bfloat16 stem (--inference_precision) while the learner trains in float32.
    args = atari_flags(
        tmp_path,
        "frozen",
        total_steps=1200,
        hidden_size=32,
        load_conv_net_from=path,
        freeze_conv=True,
        inference_precision="bfloat16",
        **{core: True},
    )
    result = run(ATARI, *args, output=str(tmp_path / "out2"), timeout=180)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "central inference runs the stem in bfloat16" in result.stdout
    trained = torch.load(tmp_path / "runs" / "frozen" / "model.tar", weights_only=True)["model_state_dict"]
    assert all(v.dtype == torch.float32 for v in trained.values() if v.is_floating_point())
    for name in ["stem.conv1.weight", "stem.conv2.weight", "stem.conv3.bias"]:
        assert torch.equal(trained[name], source[name]), name
    assert not torch.equal(trained["stem.fc.weight"], source["stem.fc.weight"])  # loaded, then trained


@pytest.mark.multiprocess
def test_num_actions_flag_must_match_the_game(tmp_path):
    result = run(ATARI, *atari_flags(tmp_path, "x", num_actions=4), output=str(tmp_path / "out"), timeout=60)
    assert result.returncode == 2
    assert "--num_actions 4 disagrees with PongNoFrameskip-v4's 6 actions" in result.stdout.strip().splitlines()[-1]
    result = run(ATARI, *atari_flags(tmp_path, "y", env="NoSuchGame"), output=str(tmp_path / "out2"), timeout=60)
    assert result.returncode == 2
    assert "unknown Atari game 'NoSuchGame'" in result.stdout.strip().splitlines()[-1]


@pytest.mark.multiprocess
def test_montezuma_rooms_are_logged_like_the_return(tmp_path):
    args = atari_flags(
        tmp_path,
        "mz",
        env="ALE/MontezumaRevenge-v5",
        total_steps=1500,
        max_episode_frames=400,
        sticky_actions=0.25,
        log_interval=0.5,
    )
    result = run(ATARI, *args, output=str(tmp_path / "out"), timeout=180)
    assert result.returncode == 0, result.stdout[-3000:]
    rows = csv_rows(str(tmp_path / "runs" / "mz" / "logs.csv"))
    rooms = [float(r["stat/rooms_visited"]) for r in rows if r.get("stat/rooms_visited") not in (None, "", "nan")]
    assert rooms and all(value >= 1 for value in rooms)
    lengths = [float(r["mean_episode_length"]) for r in rows if r["mean_episode_length"] != "nan"]
    assert lengths and max(lengths) <= 100  # 400 frames = 100 agent steps per game
    assert "rooms_visited" in read(str(tmp_path / "runs" / "mz" / "logs.csv"))
    assert os.path.exists(tmp_path / "runs" / "mz" / "model.tar")


def test_server_logs_whole_games_while_lives_end_training_episodes(tmp_path):
    """Breakout through a real env server: done at every lost life, episode_end only at game over."""
    import threading

    import numpy as np

    from rl_core.runtime import transport as tp
    from rl_core.runtime.env_server import EnvServer
    from torchbeast_atari.env import create_env

    address = tp.Address("unix", path=str(tmp_path / "srv.0"))
    server = EnvServer(address, [lambda: create_env("BreakoutNoFrameskip-v4", 3)], seeds=[3])
    stop = threading.Event()
    threading.Thread(target=server.serve_forever, args=(stop,), daemon=True).start()
    conn = tp.Connection(tp.connect(address, timeout=10), poll_s=0.5)
    assert conn.recv()[0] == tp.HELLO
    first = conn.recv()[1]
    assert first["obs"].shape == (1, 4, 84, 84) and first["obs"].dtype == np.uint8
    rng = np.random.default_rng(0)
    dones, rewards_since_game_start = 0, 0.0
    for _ in range(20_000):
        conn.send(tp.ACTION, {"action": rng.integers(0, 4, 1)})
        msg = conn.recv()[1]
        rewards_since_game_start += float(msg["reward"][0])
        dones += bool(msg["done"][0])
        if msg["episode_end"][0]:
            break
    else:
        raise AssertionError("no game ended in 20k steps")
    conn.close()
    stop.set()
    assert dones == 5  # Breakout's five lives each ended a training episode
    assert msg["done"][0]
    assert float(msg["episode_return"][0]) == rewards_since_game_start  # the whole game's return, not the last life's


@pytest.mark.multiprocess
def test_recycle_period_recycles_the_stems_dormant_filters_on_pong(tmp_path):
    """--recycle_period 5: every fifth learner batch the AtariNet stem's dormant units are recycled (ReDo,
    models/recycling.py), one log line each; logs.csv's recycled_units counts them."""
    args = atari_flags(tmp_path, "redo", total_steps=1600, recycle_period=5, log_interval=0.5)
    result = run(ATARI, *args, output=str(tmp_path / "out"), timeout=180)
    assert result.returncode == 0, result.stdout[-3000:]
    lines = [line for line in result.stdout.splitlines() if "dormant units recycled" in line]
    assert len(lines) >= 3 and "learner batch 5:" in lines[0], result.stdout[-3000:]
    rows = csv_rows(str(tmp_path / "runs" / "redo" / "logs.csv"))
    assert float(rows[-1]["recycled_units"]) > 0


@pytest.mark.multiprocess
def test_recycle_period_is_refused_in_one_line_for_a_stem_without_it(tmp_path):
    result = run(
        "torchbeast_gym.polybeast",
        "--env=CartPole-v1",
        "--recycle_period=10",
        "--total_steps=1000",
        f"--pipes_basename=unix:{tmp_path}/pipe",
        f"--savedir={tmp_path}",
        "--xpid=mlp",
        output=str(tmp_path / "out"),
        timeout=120,
    )
    assert result.returncode == 2, result.stdout[-3000:]
    last = result.stdout.strip().splitlines()[-1]
    assert "--recycle_period needs a model with recyclable layers" in last and "MLPStem" in last, last
