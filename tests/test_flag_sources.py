"""Each flag value's source: --dry_run prints it, the start announces the values that are not their flags' own
defaults grouped by source, meta.json keeps them."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

from rl_core.runtime import entry
from rl_core.runtime.progress import announce_sources
from tests.proc_utils import REPO, run

ATARI = importlib.import_module("torchbeast_atari.env")
GYM = importlib.import_module("torchbeast_gym.env")


def test_each_value_names_the_layer_it_came_from(tmp_path):
    flags_file = tmp_path / "exp.flags"
    flags_file.write_text("--learning_rate 0.0003\n--seed 7\n")
    parsed = entry.parse_command_line(ATARI, ["--agent", "r2d2", f"@{flags_file}", "--seed", "9", "--use_rtrl"])
    sources, flags = parsed.sources, parsed.flags
    assert (flags.seed, flags.learning_rate) == (9, 0.0003)
    assert sources["agent"] == sources["seed"] == sources["use_rtrl"] == "command line"  # the last to name it
    assert sources["learning_rate"] == f"flag file {flags_file}"
    assert sources["burn_in"] == "torchbeast_atari: --agent r2d2"
    assert sources["discounting"] == sources["n_steps"] == "paper: --agent r2d2"
    assert sources["use_lstm"] == "flag default"  # the package's LSTM gave way to the core named
    assert sources["noop_max"] == sources["num_actors"] == "torchbeast_atari"  # the package's flags and defaults
    assert sources["entropy_cost"] == "flag default"
    rnd = entry.parse_command_line(ATARI, ["--agent", "ppo", "--rnd", "--use_lstm"]).sources
    assert rnd["batch_mode"] == rnd["discounting"] == rnd["rnd_init_steps"] == "torchbeast_atari: --agent ppo --rnd"
    assert rnd["int_coef"] == "torchbeast_atari: --agent ppo --rnd"
    lstm = entry.parse_command_line(ATARI, ["--agent", "ppo", "--use_lstm"]).sources
    assert lstm["batch_mode"] == "torchbeast_atari: --agent ppo with a lstm core"


def test_the_sizing_is_a_source_only_where_it_changed_a_value(monkeypatch):
    monkeypatch.setenv("POLYBEAST_CORES", "16")
    big = entry.parse_command_line(ATARI, ["--disable_cuda"], auto_size=True)
    assert (
        big.flags.num_actors != 56 and big.sources["num_actors"] == big.sources["num_servers"] == "sizing: this machine"
    )
    assert big.sources["batch_size"] == "torchbeast_atari: --agent impala"  # the sizing kept IMPALA's batch
    monkeypatch.setenv("POLYBEAST_CORES", "2")
    small = entry.parse_command_line(ATARI, ["--disable_cuda"], auto_size=True)
    assert small.sources["num_actors"] == "torchbeast_atari: --agent impala"


def test_r2acs_atari_script_is_told_which_settings_came_from_the_package(tmp_path):
    """R2AC's own Qbert command: the start names the package's IMPALA settings it did not ask for."""
    argv = [
        "--env",
        "QbertNoFrameskip-v4",
        "--use_rtrl",
        "--learning_rate",
        "0.0006",
        "--entropy_cost",
        "0.01",
        "--batch_size",
        "32",
        "--unroll_length",
        "50",
        "--num_actors",
        "48",
        "--num_servers",
        "12",
    ]
    parsed = entry.parse_command_line(ATARI, argv)
    lines = announce_sources(parsed.flags, parsed.sources)
    package = next(line for line in lines if line.startswith("from torchbeast_atari: --agent impala: "))
    for setting in ("--entropy_decay linear", "--init orthogonal", "--lr_decay none", "--recycle_period 1000"):
        assert setting in package, package
    given = next(line for line in lines if line.startswith("from command line: "))
    assert "--learning_rate 0.0006" in given and "--use_rtrl True" in given and "--entropy_cost" not in package
    assert not any("flag default" in line for line in lines)  # only values that are not their flags' defaults


def dry_run_groups(page: str) -> dict[str, list[str]]:
    """--dry_run's page as {source: its flag lines}."""
    groups: dict[str, list[str]] = {}
    current = ""
    for line in page.splitlines()[2:]:
        if line.startswith("  --"):
            groups[current].append(line.split("  (")[0])
        elif line.endswith(":"):
            current = line[:-1]
            groups[current] = []
    return groups


def test_the_dry_run_page_shows_only_what_the_run_reads_grouped_by_source(capsys):
    """IMPALA on Atari: no other agent's flag, no RND flag, no core's, no PPO advantage; sentinels explained;
    --dry_run=all shows every flag."""
    with pytest.raises(SystemExit) as e:
        entry.parse_flags(ATARI, ["--agent", "impala", "--seed", "4", "--dry_run"])
    assert e.value.code == 0
    page = capsys.readouterr().out
    groups = dry_run_groups(page)
    shown = {line.split("=")[0].strip()[2:] for lines in groups.values() for line in lines}
    for unread in (
        "ppo_clip",
        "vmpo_eps_eta",
        "awr_beta",
        "replay_ratio",
        "priority_exponent",
        "int_coef",
        "gae_lambda",
        "advantage",
        "value_clip",
        "hidden_size",
        "forget_bias",
        "target_entropy",
    ):
        assert unread not in shown, unread
    for read in ("learning_rate", "entropy_cost", "vtrace_lambda", "num_actors", "seed", "sticky_actions"):
        assert read in shown, read
    assert list(groups)[:2] == ["command line", "torchbeast_atari: --agent impala"]
    assert "  --seed=4" in groups["command line"] and "  --batch_size=8" in groups["torchbeast_atari: --agent impala"]
    assert "  --test_episodes=0  (0: the protocol's)" in page and "  --torch_threads=0  (0: " in page
    with pytest.raises(SystemExit):
        entry.parse_flags(ATARI, ["--agent", "impala", "--dry_run=all"])
    every = capsys.readouterr().out
    assert "--ppo_clip=" in every and "--replay_ratio=" in every and "every flag" in every


def test_argv_is_parsed_once(monkeypatch):
    """One parse of the command line, whatever the layers (flag files, presets, sizing, sources)."""
    import argparse

    calls = []
    original = argparse.ArgumentParser.parse_known_args

    def counted(self, args=None, namespace=None):
        calls.append(args)
        return original(self, args, namespace)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", counted)
    parsed = entry.parse_command_line(ATARI, ["--agent", "ppo", "--use_lstm", "--rnd", "--seed", "2"], auto_size=True)
    assert parsed.flags.seed == 2 and parsed.flags.batch_mode == "shuffle"
    assert len(calls) == 1, calls


@pytest.mark.multiprocess
def test_dry_run_prints_the_sources_and_meta_json_keeps_them(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchbeast_gym.polybeast",
            "--env",
            "CartPole-v1",
            "--agent",
            "ppo",
            "--seed",
            "3",
            "--dry_run",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=REPO),
    )
    assert result.returncode == 0, result.stderr
    groups = dry_run_groups(result.stdout)
    assert "  --seed=3" in groups["command line"] and "  --entropy_cost=0.0" in groups["torchbeast_gym: --agent ppo"]
    assert list(groups)[0] == "command line" and list(groups)[-1] == "flag default"

    out = run(
        "torchbeast_gym.polybeast",
        "--env=CartPole-v1",
        "--num_actors=2",
        "--num_servers=1",
        "--batch_size=2",
        "--unroll_length=10",
        "--total_steps=200",
        "--disable_final_test",
        "--seed=3",
        f"--pipes_basename=unix:{tmp_path}/pipe",
        f"--savedir={tmp_path}",
        "--xpid=run",
        output=str(tmp_path / "out"),
        timeout=120,
    )
    assert out.returncode == 0, out.stdout[-3000:]
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["flag_sources"]["seed"] == "command line" and meta["flag_sources"]["env"] == "command line"
    assert set(meta["flag_sources"]) >= set(meta["flags"]) - {"server_secret"}
    assert "from command line: " in out.stdout
