"""A long corridor with one reward at its far end, registered as ``tests.corridor_env:Corridor-v0``.

Cells 0 .. length-1; an episode starts in cell 0.  Four actions: 0 moves left (a wall at cell
0), 1 moves right, 2 and 3 stay.  Reaching the last cell gives +1 and ends the episode; after
``max_steps`` steps it is cut (a truncation).  The observation is the one-hot cell.

The default corridor (30 cells, 60 steps) is out of reach of undirected exploration: a uniformly
random policy moves right or left a quarter of the time each, so its position after 60 steps
has a standard deviation of sqrt(30) = 5.5 cells, and the last cell, 29 cells away, is 5.3 of
them out: about one episode in 10^7 finds the reward.  PPO without a bonus drifts from uniform
(its normalized advantages of pure noise move each cell's policy at random) and so can find it by
chance: in 7 runs of 150k steps one episode did, once.  An agent that keeps going where it has
not been (a novelty bonus) walks there in 29 steps.  So the return separates exploration from
its absence: 1 for an agent that explores and then exploits, near 0 for one that does not.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

LENGTH = 30
MAX_STEPS = 60


class CorridorEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, length: int = LENGTH, max_steps: int = MAX_STEPS):
        if length < 2 or max_steps < length - 1:
            raise ValueError(f"need length >= 2 and max_steps >= length - 1; got {length}, {max_steps}")
        self.length, self.max_steps = int(length), int(max_steps)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(self.length,), dtype=np.float32)
        self.action_space = spaces.Discrete(4)
        self._cell = 0
        self._t = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.length, np.float32)
        obs[self._cell] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._cell, self._t = 0, 0
        return self._obs(), {}

    def step(self, action):
        action = int(action)
        if action == 0:
            self._cell = max(0, self._cell - 1)
        elif action == 1:
            self._cell += 1
        self._t += 1
        if self._cell == self.length - 1:
            return self._obs(), 1.0, True, False, {}
        return self._obs(), 0.0, False, self._t >= self.max_steps, {}


gym.register(id="Corridor-v0", entry_point=CorridorEnv, kwargs={"length": LENGTH, "max_steps": MAX_STEPS})
