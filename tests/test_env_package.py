"""The env package interface (rl_core/config/env_package.py): checked once, with one line for what a package lacks."""

from __future__ import annotations

import importlib
import types

import pytest

from rl_core.config.env_package import EnvPackage, env_package, installed_env_packages
from rl_core.errors import UserError
from rl_core.runtime import entry

PACKAGES = list(installed_env_packages())  # every registered package (pyproject.toml)


@pytest.mark.parametrize("name", PACKAGES)
def test_every_package_passes_the_check(name):
    module = importlib.import_module(f"{name}.env")
    pkg = EnvPackage(module)
    assert pkg.package == name and pkg.name == f"{name}.env" and env_package(pkg) is pkg
    flags = entry.make_parser(pkg).parse_args([])  # (not the package's checks: DMLab's needs its module)
    assert flags.num_actors % pkg.num_actors_multiple(flags) == 0
    presets = importlib.import_module(f"{name}.presets")  # its defaults per agent, read there
    assert pkg.presets is presets and pkg.presets_name == f"{name}.presets"
    assert pkg.agent_defaults("ppo") == presets.agent_defaults("ppo") and not hasattr(module, "agent_defaults")


def _package_on_disk(root, name, env_py, presets_py=None):
    """A package ``name`` under ``root`` with that env.py (and presets.py), its env module imported."""
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("")
    (root / name / "env.py").write_text("add_flags = make_env = print\n" + env_py)
    if presets_py is not None:
        (root / name / "presets.py").write_text(presets_py)
    return importlib.import_module(f"{name}.env")


def test_a_packages_presets_module_answers_its_defaults_and_env_py_without_one(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    both = _package_on_disk(
        tmp_path,
        "torchbeast_both",
        "def rnd_defaults(agent):\n    return {'seed': 2}\n",
        "def agent_defaults(agent):\n    return {'seed': 1}\n",
    )
    pkg = EnvPackage(both)
    assert (pkg.agent_defaults("ppo"), pkg.rnd_defaults("ppo"), pkg.presets_name) == (
        {"seed": 1},
        {"seed": 2},
        "torchbeast_both.presets",
    )
    alone = _package_on_disk(tmp_path, "torchbeast_alone", "def agent_defaults(agent):\n    return {'seed': 3}\n")
    assert EnvPackage(alone).agent_defaults("ppo") == {"seed": 3} and EnvPackage(alone).presets is None
    twice = _package_on_disk(
        tmp_path,
        "torchbeast_twice",
        "def agent_defaults(agent):\n    return {}\n",
        "def agent_defaults(agent):\n    return {}\n",
    )
    with pytest.raises(
        UserError,
        match=r"^env package torchbeast_twice.env: agent_defaults defined in both env.py "
        r"and presets.py: keep it in presets.py",
    ):
        EnvPackage(twice)
    same = _package_on_disk(
        tmp_path,
        "torchbeast_same",
        "from torchbeast_same.presets import agent_defaults\n",
        "def agent_defaults(agent):\n    return {'seed': 4}\n",
    )
    assert EnvPackage(same).agent_defaults("ppo") == {"seed": 4}  # env.py's re-export of it is the same function


def test_a_package_lacking_a_required_function_is_refused_in_one_line(capsys):
    lacking = types.ModuleType("torchbeast_nothing.env")
    lacking.add_flags = lambda parser: None
    with pytest.raises(
        UserError,
        match=r"^env package torchbeast_nothing.env lacks make_env: an env package's env.py "
        r"defines add_flags\(parser\) and make_env\(flags, seed\)",
    ):
        EnvPackage(lacking)
    with pytest.raises(SystemExit) as e:
        entry.launcher_main(types.ModuleType("torchbeast_empty.env"), [])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: env package torchbeast_empty.env lacks add_flags and make_env: an env package's env.py "
        "defines add_flags(parser) and make_env(flags, seed) (rl_core/config/env_package.py)"
    ]
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
    assert pkg.env_defaults("ppo", "CartPole-v1") == {}
    assert pkg.num_actors_multiple(flags) == 1 and pkg.check_flags(None, flags) is None
    assert pkg.FLAG_RANGES is None and pkg.ENVS_PER_SERVER is None
    assert pkg.test_protocol(flags) == [{"name": "test", "episodes": 100, "group": "test", "overrides": {}}]
    assert pkg.validation_protocol(flags) == [{"name": "valid", "episodes": 7, "overrides": {}}]
    assert pkg.make_test_env(flags, 3, record=True) == "env" and made == [3]


def test_a_family_of_envs_gets_its_defaults_over_the_agents_and_under_the_cores(tmp_path, monkeypatch):
    """``env_defaults(agent, env)``: the layer after the package's ``agent_defaults``, named by the --env it
    answered; a core's defaults are laid over it, and a core named on the command line drops the core it gives."""
    monkeypatch.syspath_prepend(str(tmp_path))
    module = _package_on_disk(
        tmp_path,
        "torchbeast_families",
        "def add_flags(parser):\n    parser.set_defaults(env='Plain-v0')\n",
        "def agent_defaults(agent):\n    return {'learning_rate': 0.1, 'entropy_cost': 0.2}\n"
        "def env_defaults(agent, env):\n"
        "    return {'learning_rate': 0.3, 'entropy_cost': 0.4, 'use_lstm': True} if env.startswith('Grid') else {}\n"
        "def core_defaults(agent, core):\n    return {'entropy_cost': 0.5} if core == 'lstm' else {}\n",
    )
    plain = entry.parse_command_line(module, [])
    assert (plain.flags.learning_rate, plain.sources["learning_rate"]) == (0.1, "torchbeast_families: --agent impala")
    grid = entry.parse_command_line(module, ["--env", "Grid-v0"])
    source = "torchbeast_families: --agent impala on --env Grid-v0"
    assert (grid.flags.learning_rate, grid.sources["learning_rate"], grid.sources["use_lstm"]) == (0.3, source, source)
    assert (grid.flags.entropy_cost, grid.sources["entropy_cost"]) == (
        0.5,
        "torchbeast_families: --agent impala with a lstm core",
    )
    rtrl = entry.parse_command_line(module, ["--env", "Grid-v0", "--use_rtrl"])
    assert (rtrl.flags.use_lstm, rtrl.flags.use_rtrl, rtrl.flags.entropy_cost) == (False, True, 0.4)
