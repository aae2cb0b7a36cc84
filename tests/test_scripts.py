"""Every experiment script passes `bash -n` and its flags parse (--dry_run prints the configuration)."""

import glob
import os
import re
import subprocess
import sys

import pytest

from tests.proc_utils import REPO

SCRIPTS = sorted(glob.glob(os.path.join(REPO, "scripts", "*.sh")))
# R2AC's runs keep R2AC's settings (torchbeast's schedules and initialisation) whatever their package's defaults
R2AC_SCRIPTS = {
    "atari_qbert_rtrl.sh",
    "procgen_chaser_hard_rtrl.sh",
    "dmlab_rtrl_scratch.sh",
    "dmlab_rtrl_frozen_stem.sh",
}
R2AC_SETTINGS = {
    "learning_rate": "0.0006",
    "lr_decay": "linear",
    "entropy_cost": "0.01",
    "entropy_decay": "none",
    "batch_size": "32",
    "grad_norm_clipping": "40.0",
    "epsilon": "0.01",
    "init": "default",
    "recycle_period": "0",
    "stem_value": "False",
    "use_rtrl": "True",
}


def test_there_is_a_script_per_experiment():
    names = {os.path.basename(p) for p in SCRIPTS}
    assert names == {
        "atari_qbert_rtrl.sh",
        "atari_pong_impala.sh",
        "dmlab_rtrl_scratch.sh",
        "dmlab_rtrl_frozen_stem.sh",
        "procgen_chaser_hard_rtrl.sh",
        "mujoco_halfcheetah_ppo.sh",
        "atari_pong_ppo.sh",
        "atari_r2d2.sh",
        "mujoco_halfcheetah_sac.sh",
        "football_11v11_easy_vtrace.sh",
        "atari_montezuma_rnd.sh",
        "memory_cores.sh",
        "memory_minigrid_ppo.sh",
        "minatar.sh",
    }


@pytest.mark.multiprocess
@pytest.mark.parametrize("script", SCRIPTS, ids=os.path.basename)
def test_script_parses_and_its_flags_parse(script, tmp_path):
    assert subprocess.run(["bash", "-n", script], capture_output=True).returncode == 0
    text = open(script).read()
    assert not re.search(r"^\s*SEED=\s*$", text, re.M), "SEED must default to a number"
    # the scripts call `python`: the interpreter running the tests (a virtual environment's) comes first
    env = dict(
        os.environ,
        SAVE_DIR=str(tmp_path),
        PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
    )
    env.pop("SEED", None)
    result = subprocess.run(
        ["bash", script, "--dry_run"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    config = dict(
        line.strip()[2:].split("  # ")[0].split("=", 1)
        for line in result.stdout.splitlines()[1:]
        if line.startswith("  --")
    )
    assert config["seed"].isdigit()
    assert config["savedir"] == str(tmp_path)
    assert all(value != "" for value in config.values()), "no empty flag values"
    assert "use_wandb" in config and "xpid" in config and config["xpid"] != "None"
    if os.path.basename(script) in R2AC_SCRIPTS:
        assert {k: config[k] for k in R2AC_SETTINGS} == R2AC_SETTINGS
