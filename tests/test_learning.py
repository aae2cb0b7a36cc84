"""IMPALA learns CartPole-v1 through the full runtime (launcher, 2 env servers, sockets)."""

import os
import time

import pytest

from tests.proc_utils import csv_rows, run

pytestmark = [pytest.mark.learning, pytest.mark.multiprocess]

# Each learning run has its own deadline, well inside the test's pytest timeout, so that a slow or
# stuck run fails with where it got to (steps, speed, return) rather than pytest's bare stack dump.
RUN_DEADLINE_S = 840
PYTEST_TIMEOUT_S = RUN_DEADLINE_S + 120


def run_to_the_end(tmp_path, xpid, *args, deadline_s: int = RUN_DEADLINE_S, module: str = "torchbeast_gym.polybeast"):
    """Train (``python -m module``); on a run past ``deadline_s``, fail naming its progress from logs.csv."""
    start = time.monotonic()
    try:
        result = run(
            module,
            *args,
            f"--pipes_basename=unix:{tmp_path}/pipe",
            f"--savedir={tmp_path}",
            f"--xpid={xpid}",
            output=str(tmp_path / "out"),
            timeout=deadline_s,
        )
    except AssertionError:
        path = str(tmp_path / xpid / "logs.csv")
        rows = csv_rows(path) if os.path.exists(path) else []
        where = (
            (
                f"step {rows[-1]['step']} at {float(rows[-1]['sps']):.0f} SPS, last-100 return "
                f"{rows[-1]['return_last_100']}"
            )
            if rows
            else "no logs.csv row"
        )
        pytest.fail(
            f"{xpid}: training did not finish within {deadline_s} s ({where}): the machine is too "
            f"slow or the run stalled (see {tmp_path / 'out'})",
            pytrace=False,
        )
    return result, time.monotonic() - start


# Nothing but the env and a seed: torchbeast_gym's IMPALA defaults (chosen by a sweep, see
# torchbeast_gym/env.py) must solve CartPole-v1 within their 500k steps.
CARTPOLE_FLAGS = ["--env=CartPole-v1", "--seed=1", "--log_interval=2"]


@pytest.mark.timeout(PYTEST_TIMEOUT_S)
def test_impala_with_the_package_defaults_solves_cartpole_within_500k_steps(tmp_path):
    import json

    result, wall = run_to_the_end(tmp_path, "cartpole", *CARTPOLE_FLAGS)
    assert result.returncode == 0, result.stdout[-3000:]
    flags = json.loads((tmp_path / "cartpole" / "meta.json").read_text())["flags"]
    assert (flags["total_steps"], flags["learning_rate"], flags["epsilon"], flags["batch_size"]) == (
        500_000,
        0.003,
        0.01,
        8,
    )  # the values used are on record
    rows = csv_rows(str(tmp_path / "cartpole" / "logs.csv"))
    final_step = int(rows[-1]["step"])
    assert 500_000 <= final_step < 500_000 + 20 * 8
    returns = [(int(r["step"]), float(r["return_last_100"])) for r in rows if r["return_last_100"] != "nan"]
    reached = [step for step, ret in returns if ret >= 400]
    print(
        f"\nCartPole: mean return of the last 100 episodes {returns[-1][1]:.1f} at step {final_step}; "
        f">= 400 first at step {reached[0] if reached else None}; wall {wall:.0f} s"
    )
    assert reached, f"mean return over the last 100 episodes never reached 400: {returns[-5:]}"
    assert returns[-1][1] >= 400


def _on_policy_cartpole(tmp_path, agent: str, *extra: str):
    """``torchbeast_gym`` with nothing but --env and --agent (and a seed, and ``extra``): the package's defaults,
    its steps included (PPO and V-MPO 200k)."""
    import json

    result, wall = run_to_the_end(
        tmp_path,
        agent,
        "--env=CartPole-v1",
        f"--agent={agent}",
        "--seed=1",
        "--log_interval=2",
        "--disable_final_test",
        *extra,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    rows = csv_rows(str(tmp_path / agent / "logs.csv"))
    returns = [(int(r["step"]), float(r["return_last_100"])) for r in rows if r["return_last_100"] != "nan"]
    final_step = int(rows[-1]["step"])
    assert final_step >= json.loads((tmp_path / agent / "meta.json").read_text())["flags"]["total_steps"]
    at_475 = next((s for s, v in returns if v >= 475), None)
    lowest_after = min((v for s, v in returns if at_475 is not None and s >= at_475), default=None)
    print(
        f"\n{agent} CartPole: last-100 mean {returns[-1][1]:.1f} at step {final_step}; "
        f">= 400 first at {next((s for s, v in returns if v >= 400), None)}; >= 475 first at "
        f"{at_475} (lowest after it {lowest_after}); wall {wall:.0f} s"
    )
    return returns


@pytest.mark.timeout(PYTEST_TIMEOUT_S)
def test_ppo_with_the_package_defaults_solves_cartpole(tmp_path):
    """PPO reaches a mean return >= 475 over the last 100 episodes within 500k agent steps (a random
    policy scores about 22), here within the package's 200k steps (rl-baselines3-zoo's
    tuned CartPole settings, see torchbeast_gym/env.py), and holds it to the end as the learning rate
    and the clip decay to 0.  In lockstep (--deterministic), so that the curve is the seed's and not the threads'
    timing (asynchronous, one full-suite run under CI's load ended at 469.5 after 475 at 56k-68k alone, seeds 1-7):
    seeds 1-5 first reach 475 at 58.4k-71.7k and end at 500 (docs/experiments/distributed.md, "Lockstep under
    torchrun"; docs/experiments/ppo.md, PPO: the clip's decay against the late dips of a constant one)."""
    returns = _on_policy_cartpole(tmp_path, "ppo", "--deterministic", "--log_step_interval=1024")
    assert max(v for _, v in returns) >= 475, returns[-5:]
    assert returns[-1][1] >= 475, returns[-5:]


@pytest.mark.timeout(PYTEST_TIMEOUT_S)
def test_vmpo_with_the_package_defaults_learns_cartpole(tmp_path):
    """V-MPO (its temperature and KL multiplier learned as Lagrange multipliers) reaches >= 400 and holds it to the
    end of the package's 200k steps (PPO's tuned settings; a random policy scores about 22).  Measured: 400 first at
    45k-84k, 495-500 at the end (docs/experiments/ppo.md: with cleanrl's settings, which it had before, one run in ten
    fell back below 400 late in its 500k steps)."""
    returns = _on_policy_cartpole(tmp_path, "vmpo")
    assert returns[-1][1] >= 400, returns[-5:]
