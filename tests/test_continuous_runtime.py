"""Continuous actions through the whole runtime: launcher, env servers, sockets, learner, checkpoint,
resume, the final test with the mean action and eval-only mode, for torchbeast_gym (Pendulum) and
torchbeast_mujoco (HalfCheetah on envpool)."""

from __future__ import annotations

import glob
import json
import os

import pytest
import torch

from tests.proc_utils import csv_rows, run

pytestmark = pytest.mark.multiprocess


def _flags(tmp_path, xpid, **kw):
    base = {
        "pipes_basename": f"unix:{tmp_path}/p_{xpid}",
        "savedir": str(tmp_path / "runs"),
        "xpid": xpid,
        "log_interval": 1,
        "num_actors": 4,
        "num_servers": 2,
    }
    base.update(kw)
    return [f"--{k}" if v is True else f"--{k}={v}" for k, v in base.items()]


def test_pendulum_ppo_trains_checkpoints_and_tests_with_the_mean_action(tmp_path):
    flags = _flags(
        tmp_path,
        "pendulum",
        env="Pendulum-v1",
        agent="ppo",
        total_steps=4096,
        unroll_length=64,
        batch_size=4,
        test_episodes=3,
        obs_normalization=True,
        squash=True,
    )
    result = run("torchbeast_gym.polybeast", *flags, output=str(tmp_path / "out"), timeout=300)
    assert result.returncode == 0, result.stdout[-3000:]
    rundir = tmp_path / "runs" / "pendulum"
    meta = json.load(open(rundir / "meta.json"))
    assert meta["env_spec"]["action"]["kind"] == "box" and meta["flags"]["agent"] == "ppo"
    final = json.load(open(rundir / "final_test.json"))
    assert final["greedy"] and final["runs"][0]["episodes"] == 3
    assert all(-2000 < r <= 0 for r in final["runs"][0]["returns"])  # Pendulum's return range, 200 steps
    state = torch.load(rundir / "model.tar", weights_only=True)
    assert {"obs_normalizer.mean", "obs_normalizer.var", "policy.std_param"} <= set(state["model_state_dict"])
    assert state["model_state_dict"]["obs_normalizer.count"] > 4000  # statistics of what it saw
    rows = csv_rows(str(rundir / "logs.csv"))
    assert int(rows[-1]["step"]) >= 4096 and "clip_fraction" in rows[-1]


def test_mujoco_halfcheetah_resumes_and_evaluates(tmp_path):
    common = dict(
        total_steps=2048, unroll_length=16, batch_size=16, num_minibatches=4, num_epochs=2, disable_final_test=True
    )
    result = run(
        "torchbeast_mujoco.polybeast", *_flags(tmp_path, "hc", **common), output=str(tmp_path / "a"), timeout=300
    )
    assert result.returncode == 0, result.stdout[-3000:]
    rundir = tmp_path / "runs" / "hc"
    first = torch.load(rundir / "model.tar", weights_only=True)
    assert first["flags"]["agent"] == "ppo" and first["flags"]["value_normalization"] == "popart"
    assert first["step"] >= 2048 and first["model_state_dict"]["value_normalizer.count"] > 0

    common["total_steps"] = 4096
    result = run(
        "torchbeast_mujoco.polybeast", *_flags(tmp_path, "hc", **common), output=str(tmp_path / "b"), timeout=300
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert "resumed from" in result.stdout
    second = torch.load(rundir / "model.tar", weights_only=True)
    assert second["step"] >= 4096
    # The normalizers went on from the first run's statistics, not from scratch.
    assert second["model_state_dict"]["obs_normalizer.count"] > first["model_state_dict"]["obs_normalizer.count"]
    assert second["model_state_dict"]["value_normalizer.count"] > first["model_state_dict"]["value_normalizer.count"]

    result = run(
        "torchbeast_mujoco.polybeast",
        "--mode=test",
        f"--checkpoint={rundir}/model.tar",
        "--test_episodes=2",
        output=str(tmp_path / "c"),
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    (path,) = glob.glob(os.path.join(rundir, "eval-*.json"))
    evaluation = json.load(open(path))
    assert evaluation["env"] == "HalfCheetah-v5" and evaluation["runs"][0]["episodes"] == 2
