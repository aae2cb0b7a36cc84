"""RND explores where PPO alone does not: a 40-cell corridor with one reward at its end
(``tests.corridor_env:Corridor-v0``), through the full runtime (launcher, 2 env servers, sockets).

A uniformly random policy finds the reward about once in 10^9 episodes, and the corridor's small
survival reward makes PPO's own value differences point home (see the env), so PPO without an
exploration bonus stays near the start and its return stays at the survival reward alone (80 x
0.0003 = 0.024); PPO + RND walks the corridor and then exploits it (return about 1.01).  Both runs
take the package's defaults for their agent (``torchbeast_gym``: with --rnd the paper's gamma_E 0.999
and cleanrl's CartPole PPO, see ``rnd_defaults``); the control is given the same discount and PPO
settings, so that RND is the only difference.  RND's exploration is proved once, under PPO (the
paper's agent); IMPALA + RND's two V-trace heads are held to a slow reference in tests/test_rnd.py, and
its corridor runs are in docs/experiments/rnd.md.
"""

import json

import pytest

from tests.proc_utils import csv_rows
from tests.test_learning import PYTEST_TIMEOUT_S, run_to_the_end

pytestmark = pytest.mark.multiprocess

ENV = "tests.corridor_env:Corridor-v0"
# Measured (docs/experiments/rnd.md): PPO + RND first reached a last-100 mean of 0.9 at 34k-56k
# steps (seeds 1-3, and this test four times); 150k steps leave 2.7 times the slowest.
STEPS = 150_000
COMMON = [
    f"--env={ENV}",
    "--agent=ppo",
    f"--total_steps={STEPS}",
    "--seed=1",
    "--log_interval=2",
    "--disable_checkpoint",
    "--test_episodes=100",
]


def _returns(tmp_path, xpid):
    rows = csv_rows(str(tmp_path / xpid / "logs.csv"))
    returns = [(int(r["step"]), float(r["return_last_100"])) for r in rows if r["return_last_100"] != "nan"]
    test = json.loads((tmp_path / xpid / "final_test.json").read_text())["groups"]["test"]["mean"]
    return rows, returns, test


def _reaches_the_end(tmp_path, xpid, label, *args):
    """Train with ``args``; the last-100 training mean and the final test must reach 0.9 of the +1."""
    result, wall = run_to_the_end(tmp_path, xpid, *args)
    assert result.returncode == 0, result.stdout[-3000:]
    rows, returns, test = _returns(tmp_path, xpid)
    first = next((s for s, v in returns if v >= 0.9), None)
    print(
        f"\n{label} on the corridor: last-100 mean {returns[-1][1]:.2f} at step {rows[-1]['step']}, >= 0.9 "
        f"first at {first}; final test {test:.2f}; wall {wall:.0f} s"
    )
    assert returns[-1][1] >= 0.9, returns[-5:]
    assert test >= 0.9
    return rows


@pytest.mark.learning
@pytest.mark.timeout(PYTEST_TIMEOUT_S)
def test_ppo_with_rnd_reaches_the_end_of_the_corridor(tmp_path):
    rows = _reaches_the_end(tmp_path, "rnd", "PPO + RND", *COMMON, "--rnd")
    # the intrinsic stream was learned and logged
    assert all(
        k in rows[-1]
        for k in (
            "int_reward_mean",
            "int_reward_std",
            "int_episode_return",
            "int_explained_variance",
            "ext_explained_variance",
            "rnd_loss",
        )
    )
    assert any(r["int_episode_return"] not in ("", "nan") for r in rows)


@pytest.mark.learning
@pytest.mark.timeout(PYTEST_TIMEOUT_S)
def test_ppo_without_rnd_never_finds_the_reward(tmp_path):
    from torchbeast_gym import presets as gym_presets

    same_ppo = [f"--{k}={v}" for k, v in gym_presets.CLEANRL_OVER_TUNED.items() if k != "total_steps"]
    result, wall = run_to_the_end(tmp_path, "ppo", *COMMON, "--discounting=0.999", *same_ppo)
    assert result.returncode == 0, result.stdout[-3000:]
    rows, returns, test = _returns(tmp_path, "ppo")
    print(
        f"\nPPO alone on the corridor: best last-100 mean {max(v for _, v in returns):.3f} in {rows[-1]['step']} "
        f"steps; furthest cell {rows[-1]['stat/furthest_cell']}; final test {test:.3f}; wall {wall:.0f} s"
    )
    assert int(rows[-1]["step"]) >= STEPS
    # the survival reward alone is 0.024 a game; 0.05 leaves room for two chance successes in 100
    assert max(v for _, v in returns) <= 0.05
    assert test <= 0.05


@pytest.mark.timeout(600)
def test_montezuma_with_rnd_logs_rooms_resumes_and_evaluates(tmp_path):
    """Real Montezuma's Revenge through the runtime with --agent ppo --rnd (short unrolls, games cut at
    400 frames = 100 agent steps, so that each of the 8 envs ends games within the run's 256 steps
    each: with 2,000-frame games whether one ended in time depended on how far acting ran ahead of
    the learner): the rooms any game reached in rooms_seen.json and the logs' RND columns; a resumed
    run continues RND's statistics (no second random start); eval-only prints each game's rooms."""
    import torch

    from tests.proc_utils import run

    common = [
        "--env=MontezumaRevenge",
        "--agent=ppo",
        "--rnd",
        "--unroll_length=32",
        "--rnd_init_steps=256",
        "--max_episode_frames=400",
        "--disable_final_test",
        "--log_interval=1",
        f"--pipes_basename=unix:{tmp_path}/pipe",
        f"--savedir={tmp_path}",
        "--xpid=mz",
    ]
    first = run("torchbeast_atari.polybeast", *common, "--total_steps=2048", output=str(tmp_path / "first"))
    assert first.returncode == 0, first.stdout[-3000:]
    assert "uniformly random actions for the first 256 steps" in first.stdout
    rooms = json.loads((tmp_path / "mz" / "rooms_seen.json").read_text())
    assert 1 in rooms["members"] and rooms["count"] == len(rooms["members"])  # the first room, at least
    rows = csv_rows(str(tmp_path / "mz" / "logs.csv"))
    assert {
        "rooms_seen",
        "stat/rooms_visited",
        "int_reward_mean",
        "int_reward_std",
        "int_episode_return",
        "ext_explained_variance",
        "int_explained_variance",
    } <= set(rows[-1])
    assert "stat/rooms_mask" not in rows[-1]  # a set, not a mean
    saved = torch.load(tmp_path / "mz" / "model.tar", weights_only=True)["model_state_dict"]
    assert bool(saved["rnd_ready"]) and float(saved["rnd.obs_rms.count"]) >= 2048

    second = run("torchbeast_atari.polybeast", *common, "--total_steps=3072", output=str(tmp_path / "second"))
    assert second.returncode == 0, second.stdout[-3000:]
    assert "resumed from" in second.stdout and "uniformly random actions" not in second.stdout
    resumed = torch.load(tmp_path / "mz" / "model.tar", weights_only=True)["model_state_dict"]
    assert float(resumed["rnd.obs_rms.count"]) >= float(saved["rnd.obs_rms.count"]) + 1024

    test = run(
        "torchbeast_atari.polybeast",
        "--env=MontezumaRevenge",
        "--mode=test",
        f"--checkpoint={tmp_path / 'mz' / 'model.tar'}",
        "--test_runs=1",
        "--test_episodes=2",
        output=str(tmp_path / "test"),
    )
    assert test.returncode == 0, test.stdout[-3000:]
    # the console sums the run up (its episodes, the rooms seen in any); the eval json has each episode's rooms
    assert "run0: 2 episodes, return min" in test.stdout and "run0: rooms seen in any episode: [1" in test.stdout
    (result,) = [json.loads(p.read_text()) for p in (tmp_path / "mz").glob("eval-*.json")]
    per_episode = result["runs"][0]["rooms_per_episode"]
    assert len(per_episode) == 2 and all(1 in rooms for rooms in per_episode), per_episode
