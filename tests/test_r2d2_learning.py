"""R2D2 learns through the full runtime (launcher, 2 env servers, sockets, replay) with
torchbeast_gym's defaults for --agent r2d2 and an LSTM core: the memory task (chance is 0).

Training episodes are played epsilon_i-greedily (env i of 16 with 0.4^(1 + 7 i / 15), so up to
40% random actions), which is R2D2's exploration, not its policy: on the memory task, whose
training returns that exploration caps near 0.93, the measure is the final test, 100 episodes
with --eval_epsilon 0.001 at the end of the 200k steps."""

import json

import pytest

from tests.proc_utils import csv_rows
from tests.test_learning import PYTEST_TIMEOUT_S, run_to_the_end

pytestmark = pytest.mark.multiprocess

MEMORY = "tests.memory_env:Memory-v0"


def train(tmp_path, xpid, *args):
    result, wall = run_to_the_end(tmp_path, xpid, "--agent=r2d2", "--seed=1", "--log_interval=2", *args)
    assert result.returncode == 0, result.stdout[-3000:]
    rows = csv_rows(str(tmp_path / xpid / "logs.csv"))
    final = json.loads((tmp_path / xpid / "final_test.json").read_text())
    test = final["groups"]["test"]
    last = rows[-1]
    print(
        f"\nR2D2 {xpid}: step {last['step']}, training last-100 mean {last['return_last_100']}, final test "
        f"mean {test['mean']:.2f} over {test['runs'] if 'runs' in test else ''} run(s); replay "
        f"{last.get('replay_size')} sequences, {last.get('replay_mb')} MB; wall {wall:.0f} s"
    )
    return rows, test["mean"]


@pytest.mark.learning
@pytest.mark.timeout(PYTEST_TIMEOUT_S)
def test_r2d2_with_an_lstm_and_the_package_defaults_solves_the_memory_task(tmp_path):
    """The one R2D2 learning test: the package's defaults (replay, burn-in from the stored state, n-step
    double Q, value rescaling) with an LSTM take the memory task from chance (0) to >= 0.9.  That no
    memoryless agent can pass it is the task's own control (tests/test_memory_task.py: the feedforward
    agent stays at chance; R2D2 feedforward here gave -0.14).  CartPole runs of these defaults are
    in docs/experiments/r2d2.md."""
    rows, lstm = train(tmp_path, "lstm", f"--env={MEMORY}", "--no_last_action", "--total_steps=200000", "--use_lstm")
    # the log carries the replay's and the learner's state
    assert {
        "replay_size",
        "replay_sample_insert_ratio",
        "replay_mean_priority",
        "mean_abs_td",
        "mean_q",
        "epsilon_min",
        "epsilon_max",
    } <= set(rows[-1])
    ratios = [
        float(r["replay_sample_insert_ratio"])
        for r in rows[len(rows) // 2 :]
        if r["replay_sample_insert_ratio"] != "nan"
    ]
    assert ratios and 0.8 * 8.0 <= sum(ratios) / len(ratios) <= 1.2 * 8.0  # --replay_ratio 8 held
    assert lstm >= 0.9


def test_checkpoint_replay_is_restored_on_resume_and_without_it_the_replay_refills(tmp_path):
    """--checkpoint_replay writes replay.tar beside model.tar and a resumed run goes on with it; a run
    resumed without the flag starts with an empty replay and learns again once it holds the minimum."""
    from tests.proc_utils import run

    def train_to(steps, *extra):
        result = run(
            "torchbeast_gym.polybeast",
            "--env=CartPole-v1",
            "--agent=r2d2",
            "--use_lstm",
            "--seed=1",
            f"--total_steps={steps}",
            "--replay_buffer_min_size=40",
            "--log_interval=1",
            "--disable_final_test",
            f"--pipes_basename=unix:{tmp_path}/pipe",
            f"--savedir={tmp_path}",
            "--xpid=resume",
            *extra,
            output=str(tmp_path / "out"),
            timeout=300,
        )
        assert result.returncode == 0, result.stdout[-3000:]
        return result.stdout

    out = train_to(6000, "--checkpoint_replay")
    assert (tmp_path / "resume" / "replay.tar").exists() and "saved the replay (" in out
    out = train_to(12000, "--checkpoint_replay")
    assert "restored the replay from" in out and "learning starts" not in out  # it was already past the minimum
    out = train_to(18000)
    assert "the replay starts empty" in out and "learning starts" in out
    rows = csv_rows(str(tmp_path / "resume" / "logs.csv"))
    assert int(rows[-1]["step"]) >= 18000
