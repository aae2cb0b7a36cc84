"""RND explores where PPO alone does not: a 30-cell corridor with one reward at its end
(``tests.corridor_env:Corridor-v0``), through the full runtime (launcher, 2 env servers, sockets).

A uniformly random policy finds the reward about once in 10^7 episodes (see the env), so PPO
without an exploration bonus never sees it in the budget and its return stays 0; PPO + RND
walks the corridor and then exploits it.  Both runs take the package's defaults for their
agent (``torchbeast_gym``: cleanrl's CartPole PPO, and with --rnd the paper's gamma_E 0.999);
the control is given the same discount, so that RND is the only difference.
"""

import json

import pytest

from tests.proc_utils import csv_rows
from tests.test_learning import PYTEST_TIMEOUT_S, run_to_the_end

ENV = "tests.corridor_env:Corridor-v0"
# Measured (closing note of issue 15): PPO + RND first reached a last-100 mean of 0.9 at 32k-68k
# steps over its seeds; 150k steps leave twice that.
STEPS = 150_000
COMMON = [f"--env={ENV}", "--agent=ppo", f"--total_steps={STEPS}", "--seed=1", "--log_interval=2",
          "--disable_checkpoint", "--test_episodes=100"]


def _returns(tmp_path, xpid):
    rows = csv_rows(str(tmp_path / xpid / "logs.csv"))
    returns = [(int(r["step"]), float(r["return_last_100"])) for r in rows if r["return_last_100"] != "nan"]
    test = json.loads((tmp_path / xpid / "final_test.json").read_text())["groups"]["test"]["mean"]
    return rows, returns, test


@pytest.mark.timeout(PYTEST_TIMEOUT_S)
def test_ppo_with_rnd_reaches_the_end_of_the_corridor(tmp_path):
    result, wall = run_to_the_end(tmp_path, "rnd", *COMMON, "--rnd")
    assert result.returncode == 0, result.stdout[-3000:]
    rows, returns, test = _returns(tmp_path, "rnd")
    first = next((s for s, v in returns if v >= 0.9), None)
    print(f"\nPPO + RND on the corridor: last-100 mean {returns[-1][1]:.2f} at step {rows[-1]['step']}, >= 0.9 "
          f"first at {first}; final test {test:.2f}; wall {wall:.0f} s")
    assert returns[-1][1] >= 0.9, returns[-5:]
    assert test >= 0.9
    # the intrinsic stream was learned and logged
    assert all(k in rows[-1] for k in ("int_reward_mean", "int_reward_std", "int_episode_return",
                                       "int_explained_variance", "ext_explained_variance", "rnd_loss"))
    assert any(r["int_episode_return"] not in ("", "nan") for r in rows)


@pytest.mark.timeout(PYTEST_TIMEOUT_S)
def test_ppo_without_rnd_never_finds_the_reward(tmp_path):
    result, wall = run_to_the_end(tmp_path, "ppo", *COMMON, "--discounting=0.999")
    assert result.returncode == 0, result.stdout[-3000:]
    rows, returns, test = _returns(tmp_path, "ppo")
    print(f"\nPPO alone on the corridor: best last-100 mean {max(v for _, v in returns):.2f} in {rows[-1]['step']} "
          f"steps; final test {test:.2f}; wall {wall:.0f} s")
    assert int(rows[-1]["step"]) >= STEPS
    assert max(v for _, v in returns) <= 0.05
    assert test <= 0.05
