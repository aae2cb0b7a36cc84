"""scripts/repeat_first_supervised.py: real POPGym RepeatFirst episodes fed as the learner feeds them, the answer
(each episode's first suit) beside them, and the package's model trained on it."""

import numpy as np
import pytest

from tests.proc_utils import load_script


def test_the_unrolls_are_the_learners_and_the_target_is_each_episodes_first_card():
    script = load_script("repeat_first_supervised")
    unrolls = script.unrolls("popgym-RepeatFirstEasy-v0", num_envs=3, unroll_length=20, seed=1)
    steps = [next(unrolls) for _ in range(12)]  # 240 steps: 3-4 whole episodes of 51 queries per env
    obs, done, reward, last, target = (
        np.concatenate([u[k].numpy() for u in steps]) for k in ("obs", "done", "reward", "last_action", "target")
    )
    assert obs.shape == (240, 3, 4) and done.shape == reward.shape == last.shape == target.shape == (240, 3)
    for b in range(3):
        starts = np.flatnonzero(done[:, b])
        # a reset at once (the env already part-way through its episode), then every 51 steps (one deck's cards
        # after the first)
        assert starts[0] == 0 and set(np.diff(starts[1:])) == {51} and 0 < starts[1] <= 51
        assert (reward[starts, b] == 0).all() and (np.abs(reward[1:, b][~done[1:, b]]) == 1 / 51).all()
        for s, e in zip(starts, [*starts[1:], 240]):
            # the target is the suit shown at the episode's first step, all episode long
            assert (target[s:e, b] == obs[s, b].argmax()).all()
        assert len({int(o.argmax()) for o in obs[:, b]}) == 4
    # the scattered start: the first episode is cut short by a different amount in each env
    assert len({int(np.flatnonzero(done[1:, b])[0]) for b in range(3)}) > 1


@pytest.mark.parametrize("stem", [[], ["--mlp_sizes="]], ids=["the package's stem", "no stem"])
def test_a_short_run_trains_the_packages_model_and_reports_its_accuracy(capsys, stem):
    load_script("repeat_first_supervised").main(
        ["--env=popgym-RepeatFirstEasy-v0", "--core=rtrl", "--updates=20", *stem]
    )
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 10 and all("rtrl rmsprop 0.002: update" in line for line in lines)
    assert all(0.0 <= float(line.split("updates ")[1].split()[0]) <= 1.0 for line in lines)
