"""A gymnasium env registered as ``tests.crashing_env:Crashing-v0`` that raises mid-episode."""

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class CrashingCartPole(CartPoleEnv):
    def __init__(self, crash_after: int = 300, **kwargs):
        super().__init__(**kwargs)
        self.crash_after = crash_after
        self.steps = 0

    def step(self, action):
        self.steps += 1
        if self.steps >= self.crash_after:
            raise RuntimeError(f"boom: the env broke at its step {self.steps}")
        return super().step(action)


gym.register(id="Crashing-v0", entry_point=CrashingCartPole, max_episode_steps=500)
