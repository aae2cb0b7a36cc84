"""A new agent and a new env package, each in its own files plus one registry line, run end to end.

The test writes, in a temporary directory: ``toy_agent/`` (an agent: its spec, flag, check, range and paper default
in ``__init__``, its class in ``agent.py``), ``torchbeast_toy/`` (an env package: its env, presets and entry modules) and one distribution's
``entry_points.txt`` that registers both (one line each), as an installed package of a user's would.  Nothing of
the repository is edited.  The run goes through the real launcher, env server processes and sockets, and learns:
the toy env pays 1 a step for the action that matches its observation's sign (random: 5 an episode of 10).
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

from tests.proc_utils import REPO

pytestmark = pytest.mark.multiprocess

TOY_AGENT = '''
"""REINFORCE with a learned baseline on each step's own reward (Williams 1992, Eq. 11), for one-step tasks:
its configuration, torch-free (the agent: agent.py)."""

from rl_core.agents import shared_flags
from rl_core.agents.spec import AgentSpec
from rl_core.agents.traits import AgentTraits
from rl_core.flag_types import ranged


def add_flags(p):
    p.add_argument_group("toy").add_argument(
        "--toy_value_cost", type=ranged(float, "[0, inf)"), default=0.5, help="Baseline loss weight."
    )


def check_flags(parser, flags):
    if flags.toy_value_cost == 0 and flags.optimizer == "rmsprop":
        parser.error("--agent toy: --toy_value_cost 0 leaves RMSprop nothing to scale the baseline by: give it a weight")


SPECS = (AgentSpec(name="toy", summary="REINFORCE on each step's reward", make="toy_agent.agent:ToyAgent",
                   traits=AgentTraits(replays=False, sizing="on_policy", recurrent=False),
                   defaults=dict(optimizer="adam", learning_rate=3e-3, epsilon=1e-8, lr_decay="none"),
                   flag_groups=(shared_flags.learning, add_flags), check=check_flags),)
'''

TOY_AGENT_CLASS = """
from torch.nn import functional as F

from rl_core.agents.base import Agent
from rl_core.agents.impala.agent import sample_actions


class ToyAgent(Agent):
    name = "toy"

    def unroll_fields(self):
        return {}

    def act(self, model, inputs, state, greedy=False):
        outputs, state = model(inputs, state)
        return sample_actions(outputs["policy_logits"], greedy), {}, state

    def updates(self, model, batch, state):
        inputs = {"obs": batch["obs"], "reward": batch["reward"], "done": batch["done"],
                  "last_action": batch["action"]}
        outputs, _ = model(inputs, state)
        logp = F.log_softmax(outputs["policy_logits"][:-1], -1).gather(-1, batch["action"][1:, ..., None])[..., 0]
        advantage = batch["reward"][1:] - outputs["baseline"][:-1]
        loss = -(advantage.detach() * logp).mean() + self.flags.toy_value_cost * advantage.pow(2).mean()
        yield loss, {"toy_advantage": float(advantage.abs().mean())}
"""

TOY_ENV = '''
"""Signs: an observation of +1 or -1; action 1 on +1 and 0 on -1 pays 1; 10 steps an episode."""

import gymnasium as gym
import numpy as np

from rl_core.flag_types import ranged

ACTION_KIND = "discrete"


class Signs(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, steps):
        self.steps = steps

    def _obs(self):
        self.sign = self.np_random.integers(2)
        return np.array([2.0 * self.sign - 1.0], np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        reward = float(int(action) == self.sign)
        self.t += 1
        return self._obs(), reward, False, self.t >= self.steps, {}


def add_flags(parser):
    parser.add_argument("--toy_episode_steps", type=ranged(int, "[1, inf)"), default=10, help="Steps an episode.")
    parser.set_defaults(env="Signs", num_actors=8, num_servers=1, batch_size=4, unroll_length=10,
                        total_steps=30_000)


def make_env(flags, seed):
    return Signs(flags.toy_episode_steps)
'''

TOY_PRESETS = """
from rl_core.config.presets import Preset

PRESETS = (Preset({"toy_value_cost": 0.25}, agents="toy"),)
"""

ENTRY = """
from rl_core.runtime.entry import {main}
from torchbeast_toy import env

if __name__ == "__main__":
    {main}(env)
"""

ENTRY_POINTS = """
[rl_core.agents]
toy = toy_agent

[rl_core.env_packages]
torchbeast_toy = torchbeast_toy.env
"""


@pytest.fixture
def toy_tree(tmp_path):
    root = tmp_path / "plugins"
    (root / "torchbeast_toy").mkdir(parents=True)
    (root / "toy_agent").mkdir()
    (root / "toy_agent" / "__init__.py").write_text(TOY_AGENT)
    (root / "toy_agent" / "agent.py").write_text(TOY_AGENT_CLASS)
    package = root / "torchbeast_toy"
    (package / "__init__.py").write_text("")
    (package / "env.py").write_text(TOY_ENV)
    (package / "presets.py").write_text(TOY_PRESETS)
    for module, main in [("polybeast", "launcher_main"), ("polybeast_env", "env_main")]:
        (package / f"{module}.py").write_text(ENTRY.format(main=main))
    dist = root / "toy_plugins-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-plugins\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)  # the one registry line of each
    return root


def _run(root, *args, timeout=240):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), REPO]), PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_toy_agent_and_package_are_registered_with_their_flags_sources_and_checks(toy_tree):
    listed = _run(
        toy_tree,
        "-c",
        "from rl_core.agents import AGENTS; from rl_core.config.env_package import "
        "installed_env_packages as p; print(AGENTS[-1], sorted(p())[-1])",
    )
    assert listed.stdout.split() == ["toy", "torchbeast_toy"], listed.stderr
    dry = _run(toy_tree, "-m", "torchbeast_toy.polybeast", "--agent", "toy", "--dry_run")
    assert dry.returncode == 0, dry.stderr
    page = dry.stdout.split("\n")

    def group(source):  # the flag lines under the page's heading ``source:``
        lines = page[page.index(f"{source}:") + 1 :]
        return [line.strip() for line in lines[: next(i for i, x in enumerate(lines + [""]) if not x.startswith("  "))]]

    assert "--toy_value_cost=0.25" in group("torchbeast_toy: --agent toy")  # the package's preset
    assert "--optimizer=adam" in group("paper: --agent toy")  # the agent's own default
    assert "--toy_episode_steps=10" in group("torchbeast_toy")  # the package's own flag
    refused = _run(toy_tree, "-m", "torchbeast_toy.polybeast", "--agent", "toy", "--toy_value_cost", "-1", "--dry_run")
    assert refused.returncode == 2 and "--toy_value_cost must be in [0, inf), got -1.0" in refused.stderr
    checked = _run(
        toy_tree,
        "-m",
        "torchbeast_toy.polybeast",
        "--agent",
        "toy",
        "--toy_value_cost",
        "0",
        "--optimizer",
        "rmsprop",
        "--dry_run",
    )
    assert checked.returncode == 2 and checked.stderr.strip().splitlines()[-1].startswith(
        "python -m torchbeast_toy.polybeast: error: --agent toy: --toy_value_cost 0 leaves RMSprop nothing to scale "
        "the baseline by: give it a weight"
    )


def test_the_toy_agent_learns_the_toy_package_end_to_end(toy_tree, tmp_path):
    """Through the launcher, an env server process and its socket: last-100 >= 9 of 10 (random: 5)."""
    run = _run(
        toy_tree,
        "-m",
        "torchbeast_toy.polybeast",
        "--agent",
        "toy",
        "--savedir",
        str(tmp_path / "runs"),
        "--xpid",
        "toy",
        "--test_episodes",
        "20",
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    with open(tmp_path / "runs" / "toy" / "logs.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["return_last_100"] not in ("", "nan")]
    assert rows and float(rows[-1]["return_last_100"]) >= 9.0, rows[-1]
    assert int(rows[-1]["step"]) >= 30_000 and (tmp_path / "runs" / "toy" / "model.tar").exists()
