"""The env package interface (rl_core/env_package.py): checked once, with one line for what a package lacks."""

from __future__ import annotations

import importlib
import types

import pytest

from rl_core.env_package import EnvPackage, env_package
from rl_core.errors import UserError
from rl_core.runtime import entry

PACKAGES = ["torchbeast_gym", "torchbeast_atari", "torchbeast_procgen", "torchbeast_dmlab", "torchbeast_mujoco",
            "torchbeast_football"]


@pytest.mark.parametrize("name", PACKAGES)
def test_every_package_passes_the_check(name):
    module = importlib.import_module(f"{name}.env")
    pkg = EnvPackage(module)
    assert pkg.package == name and pkg.name == f"{name}.env" and env_package(pkg) is pkg
    flags = entry.make_parser(pkg).parse_args([])  # (not the package's checks: DMLab's needs its module)
    assert flags.num_actors % pkg.num_actors_multiple(flags) == 0


def test_a_package_lacking_a_required_function_is_refused_in_one_line(capsys):
    lacking = types.ModuleType("torchbeast_nothing.env")
    lacking.add_flags = lambda parser: None
    with pytest.raises(UserError, match=r"^env package torchbeast_nothing.env lacks make_env: an env package's env.py "
                                        r"defines add_flags\(parser\) and make_env\(flags, seed\)"):
        EnvPackage(lacking)
    with pytest.raises(SystemExit) as e:
        entry.launcher_main(types.ModuleType("torchbeast_empty.env"), [])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: env package torchbeast_empty.env lacks add_flags and make_env: an env package's env.py "
                   "defines add_flags(parser) and make_env(flags, seed) (rl_core/env_package.py)"]
    lacking.make_env, lacking.test_protocol = (lambda flags, seed: None), 100
    with pytest.raises(UserError, match=r"^env package torchbeast_nothing.env: test_protocol must be a function"):
        EnvPackage(lacking)


def test_optional_parts_take_the_runtimes_defaults():
    made = []
    bare = types.ModuleType("torchbeast_bare.env")
    bare.add_flags = lambda parser: None
    bare.make_env = lambda flags, seed: made.append(seed) or "env"
    pkg = EnvPackage(bare)
    flags = types.SimpleNamespace(valid_num_episodes=7)
    assert (pkg.agent_defaults("ppo"), pkg.core_defaults("ppo", "lstm"), pkg.rnd_defaults("ppo")) == ({}, {}, {})
    assert pkg.num_actors_multiple(flags) == 1 and pkg.check_flags(None, flags) is None
    assert pkg.FLAG_RANGES is None and pkg.ENVS_PER_SERVER is None
    assert pkg.test_protocol(flags) == [{"name": "test", "episodes": 100, "group": "test", "overrides": {}}]
    assert pkg.validation_protocol(flags) == [{"name": "valid", "episodes": 7, "overrides": {}}]
    assert pkg.make_test_env(flags, 3, record=True) == "env" and made == [3]
