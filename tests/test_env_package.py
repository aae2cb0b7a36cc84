"""The env package interface (rl_core/config/env_package.py): checked once, with one line for what a package lacks."""

from __future__ import annotations

import importlib
import types

import pytest

from rl_core.config.env_package import EnvPackage, env_package, installed_env_packages
from rl_core.config.presets import Preset
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
    presets = importlib.import_module(f"{name}.presets")  # its presets table, read there
    assert pkg.presets is presets and pkg.presets_name == f"{name}.presets"
    assert pkg.PRESETS == presets.PRESETS and not hasattr(module, "PRESETS")


@pytest.mark.parametrize("name", PACKAGES)
def test_every_packages_presets_module_is_a_table_with_no_code(name):
    """Data only: no ``if``, no function, no machine read (a machine-sized value is a MemoryShare the resolver
    sizes); rows of Preset."""
    import ast
    import inspect

    presets = importlib.import_module(f"{name}.presets")
    tree = ast.parse(inspect.getsource(presets))
    code = [
        type(n).__name__
        for n in ast.walk(tree)
        if isinstance(n, (ast.If, ast.IfExp, ast.FunctionDef, ast.comprehension))
    ]
    assert not code, f"{name}/presets.py has {code}"
    assert "os" not in {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert presets.PRESETS and all(isinstance(row, Preset) for row in presets.PRESETS)


def _package_on_disk(root, name, env_py, presets_py=None):
    """A package ``name`` under ``root`` with that env.py (and presets.py), its env module imported."""
    (root / name).mkdir()
    (root / name / "__init__.py").write_text("")
    (root / name / "env.py").write_text("add_flags = make_env = print\n" + env_py)
    if presets_py is not None:
        (root / name / "presets.py").write_text(presets_py)
    return importlib.import_module(f"{name}.env")


def test_a_packages_presets_module_answers_its_table_and_env_py_without_one(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    row = "from rl_core.config.presets import Preset\nPRESETS = (Preset({'seed': %d}),)\n"
    both = _package_on_disk(tmp_path, "torchbeast_both", "", row % 1)
    pkg = EnvPackage(both)
    assert (pkg.PRESETS, pkg.presets_name) == ((Preset({"seed": 1}),), "torchbeast_both.presets")
    alone = _package_on_disk(tmp_path, "torchbeast_alone", row % 3)
    assert EnvPackage(alone).PRESETS == (Preset({"seed": 3}),) and EnvPackage(alone).presets is None
    twice = _package_on_disk(tmp_path, "torchbeast_twice", row % 4, row % 5)
    with pytest.raises(
        UserError,
        match=r"^env package torchbeast_twice.env: PRESETS defined in both env.py and presets.py: keep it in presets.py",
    ):
        EnvPackage(twice)
    same = _package_on_disk(tmp_path, "torchbeast_same", "from torchbeast_same.presets import PRESETS\n", row % 6)
    assert EnvPackage(same).PRESETS == (Preset({"seed": 6}),)  # env.py's re-export of it is the same table
    old = _package_on_disk(tmp_path, "torchbeast_old", "", "def agent_defaults(agent):\n    return {}\n")
    with pytest.raises(
        UserError, match=r"^env package torchbeast_old.env: agent_defaults is now a table: define PRESETS"
    ):
        EnvPackage(old)
    ranges = _package_on_disk(tmp_path, "torchbeast_ranges", "FLAG_RANGES = {'seed': '[0, inf)'}\n")
    with pytest.raises(UserError, match=r"FLAG_RANGES is now declared with each flag: .*type=ranged\(int"):
        EnvPackage(ranges)
    wrong = _package_on_disk(tmp_path, "torchbeast_wrong", "", "PRESETS = ({'seed': 1},)\n")
    with pytest.raises(UserError, match=r"PRESETS\[0\] is dict, not a rl_core.config.presets.Preset"):
        EnvPackage(wrong)


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
    assert pkg.PRESETS == ()
    assert pkg.num_actors_multiple(flags) == 1 and pkg.check_flags(None, flags) is None
    assert pkg.ENVS_PER_SERVER is None
    assert pkg.test_protocol(flags) == [{"name": "test", "episodes": 100, "group": "test", "overrides": {}}]
    assert pkg.validation_protocol(flags) == [{"name": "valid", "episodes": 7, "overrides": {}}]
    assert pkg.make_test_env(flags, 3, record=True) == "env" and made == [3]


def test_a_family_of_envs_gets_its_defaults_over_the_agents_and_under_the_cores(tmp_path, monkeypatch):
    """Rows keyed by an env pattern: the layer after the rows keyed by the agent, named by the --env it matched; a
    core's rows are laid over it, and a core named on the command line drops the core it gives."""
    monkeypatch.syspath_prepend(str(tmp_path))
    module = _package_on_disk(
        tmp_path,
        "torchbeast_families",
        "def add_flags(parser):\n    parser.set_defaults(env='Plain-v0')\n",
        "from rl_core.config.presets import Preset\n"
        "PRESETS = (\n"
        "    Preset({'learning_rate': 0.3, 'entropy_cost': 0.4, 'use_lstm': True}, env='Grid*'),\n"
        "    Preset({'learning_rate': 0.1, 'entropy_cost': 0.2}),\n"
        "    Preset({'entropy_cost': 0.5}, core='lstm'),\n"
        ")\n",
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
