"""2 ranks under torchrun learn what 1 process learns, at the same global steps."""

import json

import pytest

from tests.proc_utils import csv_rows, run
from tests.test_learning import PYTEST_TIMEOUT_S, RUN_DEADLINE_S

pytestmark = pytest.mark.learning

# One process with torchbeast_gym's PPO defaults (--agent ppo --seed S, 200k steps) first reaches a
# last-100 mean of 475 at 56k-68k agent steps (seeds 1-7 with the clip decaying since issue 39; 55k-62k
# before; docs/results.md).  Ranks that act as one learner
# reach it where one process does; ranks that do not (no gradient average, or one rank's gradient for all:
# each learns from half the data) reach it later or never (docs/results.md, "Several ranks"), as did the
# schedule and episode-window bugs this comparison found (100k-102k).
ONE_PROCESS_475_AT = 67_600
WITHIN = 1.25  # what async timing moves a run by


@pytest.mark.timeout(PYTEST_TIMEOUT_S)
def test_ppo_on_two_ranks_learns_cartpole_at_the_one_process_pace(tmp_path):
    """2 gloo ranks split the run's 8 envs and its batch of 8 unrolls (each rank 4 and 4) and average their
    gradients: the global steps count both ranks'.  They must reach a last-100 mean of 475 (a random policy
    scores about 22) within 1.25 x the one-process runs' latest step, and hold it to the end of the package's
    200k steps, as the one-process test does."""
    result = run("torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "torchbeast_gym.polybeast",
                 "--env=CartPole-v1", "--agent=ppo", "--seed=1", "--log_interval=1", "--disable_final_test",
                 "--disable_cuda", f"--savedir={tmp_path}", "--xpid=ppo", output=str(tmp_path / "out"),
                 timeout=RUN_DEADLINE_S)
    assert result.returncode == 0, result.stdout[-3000:]
    meta = json.loads((tmp_path / "ppo" / "meta.json").read_text())
    assert meta["distributed"]["world_size"] == 2 and meta["flags"]["total_steps"] == 200_000
    rows = csv_rows(str(tmp_path / "ppo" / "logs.csv"))
    returns = [(int(r["step"]), float(r["return_last_100"])) for r in rows if r["return_last_100"] != "nan"]
    final_step = int(rows[-1]["step"])
    reached = next((s for s, v in returns if v >= 475), None)
    print(f"\nppo, 2 ranks, CartPole: last-100 mean {returns[-1][1]:.1f} at global step {final_step}; >= 475 "
          f"first at {reached}")
    assert final_step >= 200_000
    # one learner: every optimizer step the same on both ranks (compared exactly at the end)
    assert "replicas: the 2 ranks' parameters are identical" in (tmp_path / "ppo" / "out.log").read_text()
    assert reached is not None and reached <= WITHIN * ONE_PROCESS_475_AT, (reached, returns[-5:])
    assert returns[-1][1] >= 475, returns[-5:]
