"""A memory task registered as ``tests.memory_env:Memory-v0``: recall a cue after blank steps.

One episode, with ``n_blank`` (default 10) blank steps:

    obs 0                      [cue_left, cue_right, 0]   one of the two cues, from the env's np_random
    obs 1 .. n_blank           [0, 0, 0]                  blank; actions are ignored, reward 0
    obs n_blank + 1 (query)    [0, 0, 1]                  the action taken here is judged:
                                                          +1 if it names the cue (0: left, 1: right),
                                                          -1 otherwise, and the episode terminates

so an episode is n_blank + 2 steps (12 by default) and its return is +1 or -1: a
policy that cannot remember the cue scores 0 on average (chance), one that
remembers it scores 1.  Nothing but the first observation carries the cue, and the
reward of every step before the query is 0, so only an agent with memory beats
chance.  An agent that sees its own last action has a memory outside its state:
it can carry the cue by repeating an action for n_blank + 1 steps, and policy
gradient finds that chain without any gradient through time (an eLSTM trained by
TBPTT on 4-step unrolls, whose unrolls never hold both the cue and the query,
solved the task that way in one CI run).  ``tests/test_memory_task.py`` therefore
trains with ``--no_last_action``.

``gym.make("tests.memory_env:Memory-v0", n_blank=15)`` changes the delay; the
registered default is 10 blank steps.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces

N_BLANK = 10


class MemoryEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, n_blank: int = N_BLANK):
        if n_blank < 0:
            raise ValueError(f"n_blank must be >= 0, got {n_blank}")
        self.n_blank = int(n_blank)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(3,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._cue = 0
        self._t = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(3, np.float32)
        if self._t == 0:
            obs[self._cue] = 1.0
        elif self._t == self.n_blank + 1:
            obs[2] = 1.0
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._cue = int(self.np_random.integers(2))
        self._t = 0
        return self._obs(), {}

    def step(self, action):
        if self._t > self.n_blank + 1:
            raise RuntimeError("step() after the episode ended: call reset()")
        if self._t == self.n_blank + 1:
            correct = int(action) == self._cue
            self._t += 1
            return np.zeros(3, np.float32), 1.0 if correct else -1.0, True, False, {}
        self._t += 1
        return self._obs(), 0.0, False, False, {}


gym.register(id="Memory-v0", entry_point=MemoryEnv, kwargs={"n_blank": N_BLANK})
