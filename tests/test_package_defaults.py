"""Every package's merged flag defaults, for every agent, with and without a recurrent core and --rnd, are
those recorded before the on-policy variants' defaults came from one function
(``rl_core.agents.on_policy_defaults``): tests/data/merged_defaults.json, taken on the code before."""

from __future__ import annotations

import importlib
import json
import os

import pytest

from rl_core.agents import AGENTS
from rl_core.runtime import entry

RECORD = os.path.join(os.path.dirname(__file__), "data", "merged_defaults.json")
PACKAGES = ["torchbeast_gym", "torchbeast_atari", "torchbeast_procgen", "torchbeast_dmlab", "torchbeast_mujoco",
            "torchbeast_football"]
VARIANTS = {"": [], "lstm": ["--use_lstm"], "rnd": ["--rnd"], "lstm+rnd": ["--use_lstm", "--rnd"]}


@pytest.mark.parametrize("package", PACKAGES)
def test_every_packages_merged_defaults_are_as_recorded(package):
    with open(RECORD) as f:
        record = json.load(f)
    base = record["base"][package]  # the package's parser defaults; per agent and variant what differs
    pkg = importlib.import_module(f"{package}.env")
    for agent in AGENTS:
        for variant, extra in VARIANTS.items():
            key = f"{package} {agent} {variant}".strip()
            parser = entry.make_parser(pkg)
            entry.apply_agent_defaults(pkg, parser, ["--agent", agent, *extra])
            merged = {k: parser.get_default(k) for k in base}
            assert merged == dict(base, **record["merged"][key]), key
