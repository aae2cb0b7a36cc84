"""Every package's merged flag defaults, for every agent, with and without a recurrent core and --rnd, are
those recorded before the on-policy variants' defaults came from one function
(``rl_core.agents.policy_gradient.on_policy_defaults``): tests/data/merged_defaults.json, taken on the code before."""

from __future__ import annotations

import importlib
import json
import os

import pytest

from rl_core.agents import AGENTS
from rl_core.config.resolve import Machine, package_defaults
from rl_core.runtime import entry
from torchbeast_atari import presets as atari_presets

# A machine of 16 GiB: the presets' one machine-sized value (Atari R2D2's replay) is read from it, not from this host.
MACHINE = Machine(cores=2, memory_bytes=16 << 30)

RECORD = os.path.join(os.path.dirname(__file__), "data", "merged_defaults.json")
with open(RECORD) as _f:
    PACKAGES = list(json.load(_f)["base"])  # the packages recorded
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
            values = package_defaults(pkg, ["--agent", agent, *extra], MACHINE)
            merged = {k: values[k] for k in base if k != "agent"}  # the command line's, not a preset's
            expected = {k: v for k, v in dict(base, **record["merged"][key]).items() if k != "agent"}
            if expected.get("replay_buffer_size") == "machine":  # sized from the machine's memory
                expected["replay_buffer_size"] = atari_presets.R2D2_REPLAY.size(MACHINE.memory_bytes)
            assert merged == expected, key


def _atari_r2d2(*argv):
    pkg = importlib.import_module("torchbeast_atari.env")
    return entry.parse_flags(pkg, ["--agent", "r2d2", *argv])


def test_atari_r2d2_is_recurrent_unless_the_command_line_names_another_core_or_none(capsys):
    """R2D2 on Atari is the paper's recurrent agent with no flag; --feedforward or another core replaces the LSTM,
    and the start's announcement names the flag that changes the core either way."""
    from models import core_kind
    from rl_core.runtime.progress import describe_core

    plain = _atari_r2d2()
    assert (core_kind(plain), plain.hidden_size) == ("lstm", 512)
    assert describe_core(plain) == "model: an LSTM core of 512 units (--feedforward: none)"
    feedforward = _atari_r2d2("--feedforward")
    assert core_kind(feedforward) is None
    assert describe_core(feedforward) == "model: feedforward (--use_lstm, --use_elstm or --use_rtrl: a recurrent core)"
    assert core_kind(_atari_r2d2("--use_rtrl")) == "rtrl_elstm"
    assert core_kind(_atari_r2d2("--use_elstm")) == "elstm"
    with pytest.raises(SystemExit):
        _atari_r2d2("--feedforward", "--use_lstm")
    assert "--feedforward cannot be combined with --use_lstm" in capsys.readouterr().err


def test_atari_r2d2_replay_fills_a_quarter_of_the_machines_memory():
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    per_sequence = (20 + 40 + 1 + 3) * 84 * 84  # burn-in + T + 1 steps, and the first stack's 3 older frames
    flags = _atari_r2d2()
    assert (flags.burn_in, flags.unroll_length) == (20, 40)
    assert flags.replay_buffer_size == max(1000, memory // 4 // per_sequence)
    assert flags.replay_buffer_size * per_sequence <= memory / 4
    small = package_defaults(importlib.import_module("torchbeast_atari.env"), ["--agent", "r2d2"], MACHINE)
    assert small["replay_buffer_size"] == (16 << 30) // 4 // per_sequence  # the machine it is given, not this one


def test_an_agent_without_cores_is_announced_feedforward_and_refuses_a_core(capsys):
    from rl_core.agents import agent_traits
    from rl_core.runtime.progress import describe_core

    atari = importlib.import_module("torchbeast_atari.env")
    flags = entry.parse_flags(atari, ["--agent", "sac"])
    assert not agent_traits(flags).recurrent and agent_traits("r2d2").recurrent
    assert describe_core(flags, agent_traits(flags).recurrent) == "model: feedforward"
    with pytest.raises(SystemExit):
        entry.parse_flags(atari, ["--agent", "sac", "--use_elstm"])
    assert "--agent sac's networks are feedforward: drop --use_lstm" in capsys.readouterr().err
