"""One envpool environment behind the gymnasium API: what the Procgen and MuJoCo packages share.

envpool seeds an environment only when it is made, so ``reset(seed=s)`` makes a new pool
unless the current one was just made with ``s`` and has not played yet; ``reset()`` without
a seed goes on with the same random stream.  envpool takes int32 seeds; run seeds are
32-bit unsigned, so they are reduced modulo 2**31 - 1.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types

import gymnasium

INT32_MAX = 2**31 - 1

# envpool's families whose package __init__ imports plotting: ``import envpool`` imports every
# family's registration (envpool.entry), and envpool/jumanji/__init__.py imports its renderers,
# matplotlib.pyplot among them (0.6 s, and on a fresh machine a font cache that each env server
# would build in /tmp/envpool-jumanji-matplotlib).
_LAZY_FAMILIES = ("jumanji",)


class _LazyPackage(types.ModuleType):
    """A package whose __init__ runs at the first use of a name it defines; its ``__path__`` is
    there at once, so that its submodules (registration) import without running it."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        self.__class__ = types.ModuleType  # from here on an ordinary module (no recursion)
        self.__spec__.loader.exec_module(self)
        return getattr(self, name)


def import_envpool():
    """``import envpool`` without the eager imports of ``_LAZY_FAMILIES`` (no matplotlib in an env
    server): each is registered as usual and initialised when one of its envs is made."""
    if "envpool" in sys.modules:
        return sys.modules["envpool"]
    root = importlib.util.find_spec("envpool")
    lazy = {}
    if root is not None and root.submodule_search_locations:
        for family in _LAZY_FAMILIES:
            name = f"envpool.{family}"
            directory = os.path.join(list(root.submodule_search_locations)[0], family)
            init = os.path.join(directory, "__init__.py")
            if name in sys.modules or not os.path.exists(init):
                continue
            spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[directory])
            module = importlib.util.module_from_spec(spec)
            module.__class__ = _LazyPackage
            sys.modules[name] = lazy[family] = module
    try:
        import envpool
    except BaseException:
        for family in lazy:
            sys.modules.pop(f"envpool.{family}", None)
        raise
    for family, module in lazy.items():
        setattr(envpool, family, module)
    return envpool


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
