"""Gymnasium envs that fail: ``tests.crashing_env:Crashing-v0`` raises mid-episode, ``CrashingReset-v0``
raises in a later reset, ``Dying-v0`` kills its process (a server that keeps dying), ``MissingModule-v0`` cannot
be made (its entry point's module does not exist)."""

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


class ResetCrashingCartPole(CartPoleEnv):
    """Raises in its ``crash_at``-th reset (the server's first resets pass; a later episode's does not)."""

    def __init__(self, crash_at: int = 4, **kwargs):
        super().__init__(**kwargs)
        self.crash_at = crash_at
        self.resets = 0

    def reset(self, **kwargs):
        self.resets += 1
        if self.resets >= self.crash_at:
            raise RuntimeError(f"boom: the env broke in its reset number {self.resets}")
        return super().reset(**kwargs)


class DyingCartPole(CartPoleEnv):
    """Kills its whole process (as a segfaulting C++ env would) at its ``die_after``-th step."""

    def __init__(self, die_after: int = 40, **kwargs):
        super().__init__(**kwargs)
        self.die_after = die_after
        self.steps = 0

    def step(self, action):
        import os
        import signal

        self.steps += 1
        if self.steps >= self.die_after:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().step(action)


gym.register(id="CrashingReset-v0", entry_point=ResetCrashingCartPole, max_episode_steps=20)
gym.register(id="Dying-v0", entry_point=DyingCartPole, max_episode_steps=500)


class BrokenInitCartPole(CartPoleEnv):
    """Cannot be created (a missing asset, a bad install): raises in its constructor."""

    def __init__(self, **kwargs):
        raise OSError("asset file cartpole.xml not found")


gym.register(id="BrokenInit-v0", entry_point=BrokenInitCartPole)


class NaNCartPole(CartPoleEnv):
    """Returns a NaN in its ``field`` ("obs": the pole's angle; "reward") at its ``at``-th step."""

    def __init__(self, field: str = "obs", at: int = 12, **kwargs):
        super().__init__(**kwargs)
        self.field, self.at, self.steps = field, at, 0

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        self.steps += 1
        if self.steps == self.at:
            if self.field == "obs":
                obs = obs.copy()
                obs[2] = float("nan")
            else:
                reward = float("nan")
        return obs, reward, terminated, truncated, info


gym.register(id="NaNObs-v0", entry_point=NaNCartPole, kwargs={"field": "obs"}, max_episode_steps=500)
gym.register(id="NaNReward-v0", entry_point=NaNCartPole, kwargs={"field": "reward"}, max_episode_steps=500)


class HangingCartPole(CartPoleEnv):
    """Its ``hang_at``-th step never returns (a deadlocked simulator)."""

    def __init__(self, hang_at: int = 30, **kwargs):
        super().__init__(**kwargs)
        self.hang_at, self.steps = hang_at, 0

    def step(self, action):
        import time

        self.steps += 1
        if self.steps >= self.hang_at:
            while True:
                time.sleep(3600)
        return super().step(action)


gym.register(id="Hanging-v0", entry_point=HangingCartPole, max_episode_steps=500)


# Registered, so the id resolves at parse time, but its module is missing: making it fails in the env server.
gym.register(id="MissingModule-v0", entry_point="no_such_module_for_tests:Env")
