"""The env package interface: what a package's ``env.py`` must provide, what it may, checked once.

A package (``torchbeast_gym``, ``torchbeast_atari``, ...) hands its ``env.py`` module to the entry
points (``rl_core/runtime/entry.py``), which wrap it in an :class:`EnvPackage`; the runtime then calls
the package through that object only, its optional parts answered with the runtime's defaults.  Its presets
(``PRESETS``, a table of ``rl_core.config.presets.Preset`` rows) live in a torch-free ``presets.py`` beside ``env.py``.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Any, Protocol

from rl_core.config.presets import check_table
from rl_core.errors import UserError


def package_of(module: ModuleType) -> str:
    return getattr(module, "__package__", None) or getattr(module, "__name__", "the package")


class EnvPackageModule(Protocol):
    """What an env package's ``env.py`` must define."""

    def add_flags(self, parser) -> None:
        """The package's flags and its defaults of the shared ones."""

    def make_env(self, flags, seed: int) -> Any:
        """A gymnasium env for training, seeded with ``seed``."""


REQUIRED = ("add_flags", "make_env")
# What it may define: functions, and six constants (its numeric flags' ranges are declared with them,
# type=ranged(kind, interval): rl_core/flag_types.py; ENVS_PER_SERVER: the envs one server process steps when the launcher sizes a run to the machine;
# SERVER_SPLITS: the --server_splits the sizing gives such a process, where measured to pay; SERVER_CORES: the share
# of a core one server process keeps busy beside a CPU learner, which the learner's torch threads leave it (1 without
# it; rl_core/runtime/device.py: auto_torch_threads); LOCKSTEP_CORES: True where the learner's torch threads take
# every core under --deterministic (its servers idle while it infers and learns), for a model that gains from them;
# CPU_AFFINITY: True where --cpu_affinity pays by default (its envs cheap beside the learner's update:
# rl_core/runtime/affinity.py); ACTION_KIND:
# "discrete" or "box", its envs' actions where known before an env is made, so that an agent that does not take
# them is refused at parse time; without it the learner refuses the agent once the servers describe their envs).
OPTIONAL_FUNCTIONS = (
    "num_actors_multiple",
    "check_flags",
    "test_protocol",
    "validation_protocol",
    "make_test_env",
)
# What older packages defined as functions, now rows of PRESETS (rl_core/config/presets.py).
PRESET_FUNCTIONS = ("agent_defaults", "env_defaults", "core_defaults", "rnd_defaults")


ENTRY_POINT_GROUP = "rl_core.env_packages"


def installed_env_packages() -> dict[str, str]:
    """The installed env packages, each name -> its env module, as their distributions register them under the
    entry-point group ``rl_core.env_packages`` (this repository's in pyproject.toml); tests and benchmarks walk
    them.  The runtime needs none of this: a run names its package (``python -m <package>.polybeast``)."""
    from importlib import metadata

    found = {ep.name: ep.value for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    if not found:
        raise UserError(
            f"no env package is registered under the entry points {ENTRY_POINT_GROUP!r}: install this "
            f"repository (python -m pip install --no-deps -e .), whose pyproject.toml registers its own"
        )
    return found


def presets_module(module: ModuleType) -> ModuleType | None:
    """The ``presets`` module of ``module``'s package, imported; None where the package has none."""
    package = getattr(module, "__package__", None)
    if not package:
        return None
    try:
        found = importlib.util.find_spec(f"{package}.presets")
    except ModuleNotFoundError:  # a package Python cannot import (a module made by hand)
        return None
    return importlib.import_module(found.name) if found else None


class EnvPackage:
    """An env package, checked: its required functions, and its optional ones or their defaults."""

    def __init__(self, module: ModuleType):
        self.name = name = getattr(module, "__name__", repr(module))
        missing = [f for f in REQUIRED if not callable(getattr(module, f, None))]
        if missing:
            raise UserError(
                f"env package {name} lacks {' and '.join(missing)}: an env package's env.py defines "
                f"add_flags(parser) and make_env(flags, seed) (rl_core/config/env_package.py)"
            )
        self.presets = presets = presets_module(module)
        self.presets_name = presets.__name__ if presets else name  # where its presets are read
        found = {f: getattr(module, f) for f in OPTIONAL_FUNCTIONS if getattr(module, f, None) is not None}
        wrong = [f for f, fn in found.items() if not callable(fn)]
        if wrong:
            raise UserError(
                f"env package {name}: {' and '.join(wrong)} must be "
                f"{'a function' if len(wrong) == 1 else 'functions'} (rl_core/config/env_package.py)"
            )
        old = [f for f in PRESET_FUNCTIONS for m in (module, presets) if m is not None and hasattr(m, f)]
        if old:
            raise UserError(
                f"env package {name}: {' and '.join(dict.fromkeys(old))} is now a table: define PRESETS, rows of "
                f"rl_core.config.presets.Preset, in {package_of(module)}/presets.py (rl_core/config/presets.py)"
            )
        if hasattr(module, "FLAG_RANGES"):
            raise UserError(
                f"env package {name}: FLAG_RANGES is now declared with each flag: "
                f'add_argument(..., type=ranged(int, "[1, inf)")) (rl_core/flag_types.py)'
            )
        tables = [m for m in (module, presets) if m is not None and hasattr(m, "PRESETS")]
        if len(tables) == 2 and tables[0].PRESETS is not tables[1].PRESETS:
            raise UserError(
                f"env package {name}: PRESETS defined in both env.py and presets.py: keep it in presets.py "
                f"(rl_core/config/env_package.py)"
            )
        self.PRESETS: tuple = tuple(tables[-1].PRESETS) if tables else ()
        check_table(self.PRESETS, self.presets_name)
        self._optional = found
        self.module = module
        # the package whose polybeast_env module runs a server
        self.package = getattr(module, "__package__", None) or name
        self.ENVS_PER_SERVER: int | None = getattr(module, "ENVS_PER_SERVER", None)
        self.SERVER_SPLITS: int = getattr(module, "SERVER_SPLITS", 1)
        self.SERVER_CORES: float = getattr(module, "SERVER_CORES", 1.0)
        self.LOCKSTEP_CORES: bool = bool(getattr(module, "LOCKSTEP_CORES", False))
        self.CPU_AFFINITY: bool = bool(getattr(module, "CPU_AFFINITY", False))
        self.ACTION_KIND: str | None = getattr(module, "ACTION_KIND", None)

    def __repr__(self) -> str:
        return f"EnvPackage({self.name})"

    # ------------------------------------------------------------ required
    def add_flags(self, parser) -> None:
        self.module.add_flags(parser)

    def make_env(self, flags, seed: int):
        return self.module.make_env(flags, seed)

    # ------------------------------------------------------------ optional
    def num_actors_multiple(self, flags) -> int:
        """--num_actors must be a multiple of this (1 unless the package says otherwise)."""
        fn = self._optional.get("num_actors_multiple")
        return fn(flags) if fn else 1

    def check_flags(self, parser, flags) -> None:
        """The package's own checks of the parsed flags (it may canonicalise them in place)."""
        fn = self._optional.get("check_flags")
        if fn:
            fn(parser, flags)

    def test_protocol(self, flags) -> list[dict]:
        """The final test's runs (rl_core/evaluation/episodes.py); without ``test_protocol``: 100 episodes."""
        fn = self._optional.get("test_protocol")
        return fn(flags) if fn else [{"name": "test", "episodes": 100, "group": "test", "overrides": {}}]

    def validation_protocol(self, flags) -> list[dict]:
        """The validation's runs; without ``validation_protocol``: --valid_num_episodes on the training envs."""
        fn = self._optional.get("validation_protocol")
        return fn(flags) if fn else [{"name": "valid", "episodes": flags.valid_num_episodes, "overrides": {}}]

    def make_test_env(self, flags, seed: int, record: bool = False):
        """The env for testing; without ``make_test_env``: ``make_env``."""
        fn = self._optional.get("make_test_env")
        return fn(flags, seed, record=record) if fn else self.make_env(flags, seed)


def env_package(pkg: ModuleType | EnvPackage) -> EnvPackage:
    """``pkg`` checked and wrapped; an EnvPackage as it is."""
    return pkg if isinstance(pkg, EnvPackage) else EnvPackage(pkg)
