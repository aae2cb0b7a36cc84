"""2 ranks under torchrun learn what 1 process learns, within the same global steps."""

import json

import pytest

from tests.proc_utils import csv_rows, run
from tests.test_learning import PYTEST_TIMEOUT_S, RUN_DEADLINE_S

pytestmark = pytest.mark.learning


@pytest.mark.timeout(PYTEST_TIMEOUT_S)
def test_ppo_on_two_ranks_solves_cartpole_within_the_one_process_budget(tmp_path):
    """The criterion of test_learning.py's one-process PPO test (a last-100 mean >= 475 within the package's
    200k agent steps, and at the end; a random policy scores about 22), met by 2 gloo ranks that split the
    run's 8 envs and its batch (each rank 4) and average their gradients: the global steps count both ranks'."""
    result = run("torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "torchbeast_gym.polybeast",
                 "--env=CartPole-v1", "--agent=ppo", "--seed=1", "--log_interval=2", "--disable_final_test",
                 f"--savedir={tmp_path}", "--xpid=ppo", output=str(tmp_path / "out"), timeout=RUN_DEADLINE_S)
    assert result.returncode == 0, result.stdout[-3000:]
    meta = json.loads((tmp_path / "ppo" / "meta.json").read_text())
    assert meta["distributed"]["world_size"] == 2 and meta["flags"]["total_steps"] == 200_000
    rows = csv_rows(str(tmp_path / "ppo" / "logs.csv"))
    returns = [(int(r["step"]), float(r["return_last_100"])) for r in rows if r["return_last_100"] != "nan"]
    final_step = int(rows[-1]["step"])
    print(f"\nppo, 2 ranks, CartPole: last-100 mean {returns[-1][1]:.1f} at global step {final_step}; >= 475 first "
          f"at {next((s for s, v in returns if v >= 475), None)}")
    assert final_step >= 200_000
    assert max(v for _, v in returns) >= 475, returns[-5:]
    assert returns[-1][1] >= 475, returns[-5:]
