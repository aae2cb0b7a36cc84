"""IMPALA learns CartPole-v1 through the full runtime (launcher, 2 env servers, sockets)."""

import time

from tests.proc_utils import csv_rows, run

# Chosen by a sweep over lr, batch size and entropy cost; the MLP's value tower is
# separate from the policy's (torchbeast_gym's default), which made it robust across seeds.
CARTPOLE_FLAGS = [
    "--env=CartPole-v1",
    "--num_actors=16",
    "--num_servers=2",
    "--unroll_length=20",
    "--batch_size=8",
    "--learning_rate=0.003",
    "--entropy_cost=0.01",
    "--total_steps=500000",
    "--seed=1",
    "--log_interval=2",
]


def test_impala_solves_cartpole_within_500k_steps(tmp_path):
    start = time.monotonic()
    result = run(
        "torchbeast_gym.polybeast",
        *CARTPOLE_FLAGS,
        f"--pipes_basename=unix:{tmp_path}/pipe",
        f"--savedir={tmp_path}",
        "--xpid=cartpole",
        output=str(tmp_path / "out"),
        timeout=600,
    )
    wall = time.monotonic() - start
    assert result.returncode == 0, result.stdout[-3000:]
    rows = csv_rows(str(tmp_path / "cartpole" / "logs.csv"))
    final_step = int(rows[-1]["step"])
    assert 500_000 <= final_step < 500_000 + 20 * 8
    returns = [(int(r["step"]), float(r["return_last_100"])) for r in rows if r["return_last_100"] != "nan"]
    reached = [step for step, ret in returns if ret >= 400]
    print(f"\nCartPole: mean return of the last 100 episodes {returns[-1][1]:.1f} at step {final_step}; "
          f">= 400 first at step {reached[0] if reached else None}; wall {wall:.0f} s")
    assert reached, f"mean return over the last 100 episodes never reached 400: {returns[-5:]}"
    assert returns[-1][1] >= 400


def _on_policy_cartpole(tmp_path, agent: str):
    """``torchbeast_gym`` with nothing but --env and --agent (and a seed): the package's defaults."""
    start = time.monotonic()
    result = run(
        "torchbeast_gym.polybeast", "--env=CartPole-v1", f"--agent={agent}", "--total_steps=500000", "--seed=1",
        "--log_interval=2", "--disable_final_test", f"--pipes_basename=unix:{tmp_path}/pipe",
        f"--savedir={tmp_path}", f"--xpid={agent}", output=str(tmp_path / "out"), timeout=900,
    )
    wall = time.monotonic() - start
    assert result.returncode == 0, result.stdout[-3000:]
    rows = csv_rows(str(tmp_path / agent / "logs.csv"))
    returns = [(int(r["step"]), float(r["return_last_100"])) for r in rows if r["return_last_100"] != "nan"]
    final_step = int(rows[-1]["step"])
    assert final_step >= 500_000
    print(f"\n{agent} CartPole: last-100 mean {returns[-1][1]:.1f} at step {final_step}; "
          f">= 400 first at {next((s for s, v in returns if v >= 400), None)}; wall {wall:.0f} s")
    return returns


def test_ppo_with_the_package_defaults_solves_cartpole(tmp_path):
    """PPO reaches a mean return >= 475 over the last 100 episodes within 500k agent steps (a random
    policy scores about 22)."""
    returns = _on_policy_cartpole(tmp_path, "ppo")
    assert max(v for _, v in returns) >= 475, returns[-5:]
    assert returns[-1][1] >= 475, returns[-5:]


def test_vmpo_with_the_package_defaults_learns_cartpole(tmp_path):
    """V-MPO (its temperature and KL multiplier learned as Lagrange multipliers) reaches >= 400."""
    returns = _on_policy_cartpole(tmp_path, "vmpo")
    assert returns[-1][1] >= 400, returns[-5:]
