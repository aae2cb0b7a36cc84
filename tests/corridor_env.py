"""A long corridor with one reward at its far end, registered as ``tests.corridor_env:Corridor-v0``.

Cells 0 .. length-1; an episode starts in cell 0.  Four actions: 0 moves back (a wall at cell 0),
1 moves forward, 2 and 3 stay.  Reaching the last cell gives +1 and ends the episode.  Every step
also gives a small survival reward (``step_reward``), and after ``max_steps`` steps the corridor
closes: the episode ends as a termination, with nothing after it.  The observation is the one-hot
cell; the step that ends an episode reports ``info["episode_stats"]["furthest_cell"]``.

The default corridor (40 cells, 80 steps) is out of reach of undirected exploration: a uniformly
random policy moves forward or back a quarter of the time each, so its position after 80 steps
has a standard deviation of sqrt(40) = 6.3 cells, and the last cell, 39 cells away, is 6.2 of
them out: about one episode in 10^9 finds the reward.

Why the survival reward.  PPO normalizes its advantages, so any differences between its values
of the states an action leads to become a full-size signal, however small they are.  With no
reward at all those differences are arbitrary (an untrained network's values of cells it has not
seen yet), and PPO alone settled on whatever they favoured: a near-deterministic policy that in
about one run in four walked forward and solved the corridor (measured on the first
version, 30 cells and no survival reward: a CI run, and 1 of 5 seeds; the other runs pressed
against the wall or stood still).  With a survival reward and a closing time, a cell far from the
start is reached later, with fewer steps left to earn, so its value is lower: the differences now
point home, and PPO alone no longer finds the reward (0 successes in 21 runs of 150k steps, at
0.001 and 0.0003 per step, 30 and 40 cells), though in some runs it drifts out to 8 cells on average
before turning home; 40 cells keep the end 4 standard deviations beyond such a drift.  An
exploration bonus larger than that slope (RND's) walks the corridor anyway, and the +1 at its end
outweighs the survival reward that ending the episode gives up (at most 80 x 0.0003 = 0.024).  So
the return separates exploration from its absence: about 1 for an agent that explores and then
exploits, 0.024 for one that does not.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

LENGTH = 40
MAX_STEPS = 80
STEP_REWARD = 0.0003


class CorridorEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, length: int = LENGTH, max_steps: int = MAX_STEPS, step_reward: float = STEP_REWARD):
        if length < 2 or max_steps < length - 1:
            raise ValueError(f"need length >= 2 and max_steps >= length - 1; got {length}, {max_steps}")
        self.length, self.max_steps, self.step_reward = int(length), int(max_steps), float(step_reward)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(self.length,), dtype=np.float32)
        self.action_space = spaces.Discrete(4)
        self._cell = self._t = self._furthest = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.length, np.float32)
        obs[self._cell] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._cell = self._t = self._furthest = 0
        return self._obs(), {}

    def step(self, action):
        action = int(action)
        if action == 0:
            self._cell = max(0, self._cell - 1)
        elif action == 1:
            self._cell += 1
        self._t += 1
        self._furthest = max(self._furthest, self._cell)
        reached = self._cell == self.length - 1
        end = reached or self._t >= self.max_steps
        info = {"episode_stats": {"furthest_cell": float(self._furthest)}} if end else {}
        return self._obs(), float(reached) + self.step_reward, end, False, info


gym.register(
    id="Corridor-v0",
    entry_point=CorridorEnv,
    kwargs={"length": LENGTH, "max_steps": MAX_STEPS, "step_reward": STEP_REWARD},
)
