"""SAC learns through the full runtime (launcher, env server, sockets, uniform replay) with
torchbeast_gym's defaults for --agent sac: Pendulum-v1 with box actions, CartPole-v1 with
discrete SAC.  Training episodes are the sampled policy's (its own exploration)."""

import json

import pytest

from tests.proc_utils import csv_rows
from tests.test_learning import PYTEST_TIMEOUT_S, RUN_DEADLINE_S, run_to_the_end

pytestmark = pytest.mark.multiprocess


def train(tmp_path, xpid, *args, deadline_s: int = RUN_DEADLINE_S):
    result, wall = run_to_the_end(
        tmp_path, xpid, "--agent=sac", "--seed=1", "--log_interval=2", *args, deadline_s=deadline_s
    )
    assert result.returncode == 0, result.stdout[-3000:]
    rows = csv_rows(str(tmp_path / xpid / "logs.csv"))
    final = json.loads((tmp_path / xpid / "final_test.json").read_text())
    last = rows[-1]
    print(
        f"\nSAC {xpid}: step {last['step']}, training last-100 mean {last['return_last_100']}, final test "
        f"mean {final['groups']['test']['mean']:.2f}; alpha {last.get('alpha')}, entropy {last.get('entropy')}, "
        f"replay {last.get('replay_size')} transitions; wall {wall:.0f} s"
    )
    return rows


def last_episodes_mean(rows, n):
    """Mean return of the last ``n`` training episodes, from the rows' per-interval episode counts and means."""
    total, count = 0.0, 0
    for row in reversed(rows):
        k = int(float(row["episodes"] or 0))
        if k == 0:
            continue
        take = min(k, n - count)
        total += take * float(row["mean_episode_return"])
        count += take
        if count == n:
            return total / n
    raise AssertionError(f"only {count} episodes logged")


@pytest.mark.learning
@pytest.mark.timeout(PYTEST_TIMEOUT_S)
def test_sac_with_the_package_defaults_learns_pendulum_within_30k_steps(tmp_path):
    rows = train(tmp_path, "pendulum", "--env=Pendulum-v1", "--total_steps=30000")
    assert int(rows[-1]["step"]) >= 30_000
    assert {"critic_loss", "actor_loss", "alpha", "entropy", "replay_size", "replay_sample_insert_ratio"} <= set(
        rows[-1]
    )
    # each inserted transition is sampled --replay_ratio 256 times on average (one update of 256 per step)
    ratios = [
        float(r["replay_sample_insert_ratio"])
        for r in rows[len(rows) // 2 :]
        if r["replay_sample_insert_ratio"] != "nan"
    ]
    assert ratios and 0.8 * 256 <= sum(ratios) / len(ratios) <= 1.2 * 256
    # The criterion: the last 20 training episodes average >= -250 (a random policy: about
    # -1,200; the first 1,000 uniformly random steps' episodes here score -1,100 to -1,400).
    first = last_episodes_mean(rows[:3], 4)
    last20 = last_episodes_mean(rows, 20)
    print(f"first episodes {first:.1f}, last 20 episodes {last20:.1f}")
    assert first < -700
    assert last20 >= -250


@pytest.mark.learning
@pytest.mark.timeout(PYTEST_TIMEOUT_S)
def test_discrete_sac_with_the_package_defaults_learns_cartpole(tmp_path):
    """Discrete SAC (Christodoulou 2019) leaves a random policy far behind within 30k steps of the
    package's defaults (its rate does not decay, so a shorter budget changes nothing else).  A random
    policy scores about 22.  Measured at 30k steps: training last-100 mean 183 (seed 1), 172 (seed 2),
    233 (seed 3); final test (100 episodes of the most likely action) 198.5 (seed 2), 500.0
    (seed 3).  Over the package's 100k steps the policy solves CartPole (final tests of 500 in four of
    five runs; docs/experiments/sac.md)."""
    rows = train(tmp_path, "cartpole", "--env=CartPole-v1", "--total_steps=30000")
    assert int(rows[-1]["step"]) >= 30_000
    final = json.loads((tmp_path / "cartpole" / "final_test.json").read_text())["groups"]["test"]["mean"]
    returns = [float(r["return_last_100"]) for r in rows if r["return_last_100"] != "nan"]
    assert returns[0] < 50
    assert returns[-1] >= 100, returns[-5:]
    assert final >= 100, (final, returns[-5:])


def test_a_resumed_run_keeps_its_replay_and_does_not_act_randomly_again(tmp_path):
    """--checkpoint_replay: replay.tar is restored and learning goes on at once; the random phase of a
    fresh run (--random_init_steps) is not repeated (the policy has learned: model.updates > 0)."""
    from tests.proc_utils import run

    def train_to(steps, *extra):
        result = run(
            "torchbeast_gym.polybeast",
            "--env=Pendulum-v1",
            "--agent=sac",
            "--seed=1",
            f"--total_steps={steps}",
            "--replay_buffer_min_size=400",
            "--random_init_steps=400",
            "--log_interval=1",
            "--disable_final_test",
            "--disable_validation",
            f"--pipes_basename=unix:{tmp_path}/pipe",
            f"--savedir={tmp_path}",
            "--xpid=resume",
            *extra,
            output=str(tmp_path / "out"),
            timeout=300,
        )
        assert result.returncode == 0, result.stdout[-3000:]
        return result.stdout

    out = train_to(1200, "--checkpoint_replay")
    assert (tmp_path / "resume" / "replay.tar").exists() and "learning starts" in out
    assert "uniformly random actions for the first 400 steps" in out
    out = train_to(2000, "--checkpoint_replay")
    assert "restored the replay from" in out and "learning starts" not in out
    assert "uniformly random actions" not in out and "the policy acts from the start" in out
    rows = csv_rows(str(tmp_path / "resume" / "logs.csv"))
    assert int(rows[-1]["step"]) >= 2000 and float(rows[-1]["critic_loss"]) > 0
