"""One envpool environment behind the gymnasium API: what the Procgen and MuJoCo packages share.

envpool seeds an environment only when it is made, so ``reset(seed=s)`` makes a new pool
unless the current one was just made with ``s`` and has not played yet; ``reset()`` without
a seed goes on with the same random stream.  envpool takes int32 seeds; run seeds are
32-bit unsigned, so they are reduced modulo 2**31 - 1.
"""

from __future__ import annotations

import gymnasium

INT32_MAX = 2**31 - 1


def envpool_seed(seed: int) -> int:
    return int(seed) % INT32_MAX


class SingleEnvpoolEnv(gymnasium.Env):
    """Subclasses define ``_make_pool(seed)`` (an envpool env with num_envs=1 for that int32 seed)."""

    _pool = None

    def _make_pool(self, seed: int):
        raise NotImplementedError

    def _build(self, seed: int) -> None:
        if self._pool is not None:
            self._pool.close()
        self._pool = self._make_pool(envpool_seed(seed))
        self._seed = int(seed)
        self._fresh = True  # made with self._seed, nothing played yet

    def _reset_pool(self, seed: int | None):
        """reset(seed) of the gymnasium API on the pool: ``(obs [1, ...], raw info)``."""
        super().reset(seed=seed)
        if seed is not None and not (self._fresh and int(seed) == self._seed):
            self._build(seed)
        self._fresh = False
        return self._pool.reset()

    def close(self):
        if self._pool is not None:
            self._pool.close()
            self._pool = None
