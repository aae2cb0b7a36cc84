"""``@FILE`` flag files (argparse's fromfile_prefix_chars, as SEED RL's gin files and RND's config.yaml keep an
experiment's setting beside its script): expanded once at every entry point, later flags winning, bad files one line."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

import pytest

from rl_core.errors import UserError
from rl_core.config.flags import expand_flag_files
from rl_core.runtime import entry
from tests.proc_utils import REPO

GYM = importlib.import_module("torchbeast_gym.env")
GYM_PRESETS = importlib.import_module("torchbeast_gym.presets")


def test_a_flag_file_holds_flags_one_or_several_to_a_line_with_comments_and_quotes(tmp_path):
    inner = tmp_path / "inner.flags"
    inner.write_text("--unroll_length 7\n")
    outer = tmp_path / "exp.flags"
    outer.write_text(
        "# PPO on CartPole, as the experiment's script runs it\n--agent ppo --seed 5  # trailing\n"
        f"--xpid 'my run'\n@{inner}\n--batch_size=4\n"
    )
    assert expand_flag_files(["--env", "CartPole-v1", f"@{outer}", "--seed", "9"]) == [
        "--env",
        "CartPole-v1",
        "--agent",
        "ppo",
        "--seed",
        "5",
        "--xpid",
        "my run",
        "--unroll_length",
        "7",
        "--batch_size=4",
        "--seed",
        "9",
    ]
    flags = entry.parse_flags(GYM, [f"@{outer}", "--seed", "9"])
    assert (flags.agent, flags.seed, flags.xpid, flags.unroll_length, flags.batch_size) == ("ppo", 9, "my run", 7, 4)
    assert flags.num_epochs == GYM_PRESETS.PPO_TUNED["num_epochs"]  # the file's --agent brings its defaults


def test_a_missing_or_looping_or_unquoted_flag_file_is_one_line(tmp_path, capsys):
    with pytest.raises(UserError, match=r"^flag file nowhere.flags: No such file or directory: give an existing file"):
        expand_flag_files(["@nowhere.flags"])
    loop = tmp_path / "loop.flags"
    loop.write_text(f"--seed 1 @{loop}\n")
    with pytest.raises(UserError, match=r"includes itself .*: drop the loop$"):
        expand_flag_files([f"@{loop}"])
    bad = tmp_path / "bad.flags"
    bad.write_text("--xpid 'unclosed\n")
    with pytest.raises(UserError, match=r"No closing quotation: quote it as a shell would$"):
        expand_flag_files([f"@{bad}"])
    with pytest.raises(SystemExit):
        entry.parse_flags(GYM, ["@nowhere.flags"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error: flag file nowhere.flags: No such file or directory" in err[0], err


@pytest.mark.multiprocess
def test_the_launcher_expands_a_flag_file_before_it_parses(tmp_path):
    flags = tmp_path / "exp.flags"
    flags.write_text("--env CartPole-v1\n--agent r2d2 --use_lstm\n--replay_ratio 3\n")
    result = subprocess.run(
        [sys.executable, "-m", "torchbeast_gym.polybeast", f"@{flags}", "--seed", "4", "--dry_run"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=REPO),
    )
    assert result.returncode == 0, result.stderr
    config = dict(
        line.strip()[2:].split("  # ")[0].split("=", 1)
        for line in result.stdout.splitlines()
        if line.startswith("  --")
    )
    assert (config["env"], config["agent"], config["use_lstm"], config["replay_ratio"], config["seed"]) == (
        "CartPole-v1",
        "r2d2",
        "True",
        "3.0",
        "4",
    )
