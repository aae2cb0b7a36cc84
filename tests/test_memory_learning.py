"""torchbeast_memory's defaults learn a memory task someone else wrote: POPGym's RepeatPreviousEasy (Morad et al.
2023: name the suit of the card dealt 4 steps ago, 51 steps an episode, returns scaled to [-1, 1]; guessing scores
-0.5).  An LSTM with the package's IMPALA defaults (discount 0 on the card tasks, torchbeast_memory/presets.py)
reaches a last-100 return of 0.5 within 400k steps; the feedforward agent with the same flags and budget, which
sees the current card, its last action and reward but holds nothing, stays at chance.  Both through the runtime:
the launcher, an env server, sockets."""

import pytest

from tests.proc_utils import csv_rows
from tests.test_learning import PYTEST_TIMEOUT_S, run_to_the_end

pytestmark = [pytest.mark.learning, pytest.mark.multiprocess]

# In lockstep (--deterministic), so that the curve is the seed's and not the threads' (asynchronous, two runs of
# seed 1 at discount 0.99 were at 0.45 and 0.59 near 454k steps; CI's, under load, at 0.47 at 800k).  The LSTM
# with these flags, seeds 1-4 (docs/experiments/memory.md, "Discount 0 on RepeatPreviousEasy"): first >= 0.5 at
# 160k, 110k, 130k and 210k steps, 0.99-1.00 at 400k; the feedforward agent (seed 1) within -0.52 and -0.46.  At
# the old default discount (0.99) seeds 1-4 in lockstep, to 1M, crossed 0.5 at 580k, 390k and 770k, and seed 4
# was at -0.33 at 1M.
BUDGET = 400_000
LEARNED = 0.5  # a policy without memory cannot pass about -0.45
AT_CHANCE = -0.3
RUNS = {"lstm": ["--use_lstm"], "feedforward": []}


@pytest.mark.timeout(PYTEST_TIMEOUT_S)
@pytest.mark.parametrize("core", list(RUNS))
def test_repeat_previous_easy_needs_the_core(tmp_path, core):
    result, _ = run_to_the_end(
        tmp_path,
        core,
        "--env=popgym-RepeatPreviousEasy-v0",
        "--seed=1",
        f"--total_steps={BUDGET}",
        "--deterministic",
        "--disable_checkpoint",
        "--disable_final_test",
        *RUNS[core],
        module="torchbeast_memory.polybeast",
    )
    assert result.returncode == 0, result.stdout[-3000:]
    rows = csv_rows(str(tmp_path / core / "logs.csv"))
    last = float(rows[-1]["return_last_100"])
    print(f"\nRepeatPreviousEasy, {core}: last-100 {last:.2f} at step {rows[-1]['step']}")
    assert int(rows[-1]["step"]) >= BUDGET
    if core == "feedforward":
        assert last <= AT_CHANCE
    else:
        assert last >= LEARNED
