"""An env that costs nothing, registered as ``benchmarks.null_env:Null-v0``: the runtime's own ceiling.

A zero observation of 4 floats, 2 actions, reward 0, a time limit every 100 steps; ``step`` does no work
beyond returning, so a run on it measures the data path, inference and learning alone.
"""

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class NullEnv(gym.Env):
    observation_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, length: int = 100):
        self._obs = np.zeros(4, np.float32)
        self._length = length
        self._t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._obs, {}

    def step(self, action):
        self._t += 1
        return self._obs, 0.0, False, self._t >= self._length, {}


gym.register("Null-v0", entry_point=NullEnv)
