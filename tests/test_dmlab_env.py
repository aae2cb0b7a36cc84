"""torchbeast_dmlab against a stand-in ``deepmind_lab`` (tests/fake_deepmind_lab), and without one."""

import json
import os
import sys

import numpy as np
import pytest
import torch

from rl_core.errors import UserError
from rl_core.runtime.entry import parse_flags
from rl_core.envs.seeds import env_seed
from tests.proc_utils import REPO, csv_rows, run
from torchbeast_dmlab import env as dmlab
from torchbeast_dmlab.env import (
    ACTION_NAMES,
    ACTION_SETS,
    DMLAB30_LEVELS,
    canonical_level,
    create_env,
    final_test_runs,
    final_test_seeds,
    level_path,
    make_env,
)

FAKE_DIR = os.path.join(REPO, "tests", "fake_deepmind_lab")
DMLAB = "torchbeast_dmlab.polybeast"

IMPALA_VECTORS = [  # (look, look up/down, strafe, move, fire, jump, crouch)
    (0, 0, 0, 1, 0, 0, 0),
    (0, 0, 0, -1, 0, 0, 0),
    (0, 0, -1, 0, 0, 0, 0),
    (0, 0, 1, 0, 0, 0, 0),
    (-20, 0, 0, 0, 0, 0, 0),
    (20, 0, 0, 0, 0, 0, 0),
    (-20, 0, 0, 1, 0, 0, 0),
    (20, 0, 0, 1, 0, 0, 0),
    (0, 0, 0, 0, 1, 0, 0),
]


@pytest.fixture
def lab(monkeypatch):
    """The stand-in module, importable as ``deepmind_lab`` for this test only."""
    monkeypatch.syspath_prepend(FAKE_DIR)
    monkeypatch.delitem(sys.modules, "deepmind_lab", raising=False)
    import deepmind_lab

    assert deepmind_lab.IS_STAND_IN
    deepmind_lab.Lab.instances.clear()
    yield deepmind_lab
    sys.modules.pop("deepmind_lab", None)


def flags_of(*argv):
    return parse_flags(dmlab, list(argv))


def expected_frame(lab, seed, frame):
    """The stand-in's frame as the adapter must deliver it, [3, 72, 96]: row y, column x, channel c
    holds value + 20 c + 2 y + x (mod 256), so an adapter that flips or mirrors the image fails."""
    value = lab.frame_value(seed, frame)
    rows, cols = np.mgrid[0:72, 0:96]
    return np.stack([((value + 20 * c + 2 * rows + cols) % 256).astype(np.uint8) for c in range(3)])


# -- levels -------------------------------------------------------------------


def test_dmlab30_names_with_and_without_prefix():
    assert len(DMLAB30_LEVELS) == 30 and "rooms_collect_good_objects_train" in DMLAB30_LEVELS
    for name in ["rooms_watermaze", "contributed/dmlab30/rooms_watermaze"]:
        assert canonical_level(name) == "rooms_watermaze"
        assert level_path(name) == "contributed/dmlab30/rooms_watermaze"
    assert canonical_level("rooms_collect_good_objects_test") == "rooms_collect_good_objects_test"
    assert level_path("tests/empty_room_test") == "tests/empty_room_test"  # any level script by path
    for bad in ["rooms_water_maze", "contributed/dmlab30/nope", "PongNoFrameskip-v4"]:
        with pytest.raises(UserError, match="unknown DMLab level"):
            canonical_level(bad)


# -- the adapter ------------------------------------------------------------------


def test_observations_config_and_lab_arguments(lab):
    env = create_env("rooms_watermaze", seed=5)
    (instance,) = lab.Lab.instances
    assert instance.level == "contributed/dmlab30/rooms_watermaze"
    assert instance.observation_names == ["RGB_INTERLEAVED"]
    assert instance.config == {"width": "96", "height": "72", "logLevel": "WARN"}
    assert instance.renderer == "software" and instance.level_cache is None
    assert env.observation_space.shape == (3, 72, 96) and env.observation_space.dtype == np.uint8
    assert env.action_space.n == 9
    obs, info = env.reset(seed=5)
    assert obs.shape == (3, 72, 96) and obs.dtype == np.uint8 and obs.flags.c_contiguous
    np.testing.assert_array_equal(obs, expected_frame(lab, info["episode_seed"], 0))
    assert env.observation_space.contains(obs)


@pytest.mark.parametrize("pool", ["max", "none"])
def test_action_mapping_with_repeat_4(lab, pool):
    env = create_env("rooms_watermaze", seed=1, frame_pool=pool)
    (instance,) = lab.Lab.instances
    assert [d["name"] for d in instance.action_spec()] == list(ACTION_NAMES)
    env.reset()
    for a, vector in enumerate(IMPALA_VECTORS):
        if not instance.is_running():
            env.reset()
        before, calls = instance.num_steps(), len(instance.steps)
        _, reward, terminated, _, _ = env.step(a)
        if terminated:
            continue
        new = instance.steps[calls:]
        assert all(v == vector for v, _ in new)
        assert [n for _, n in new] == ([3, 1] if pool == "max" else [4])
        assert instance.num_steps() - before == 4
        assert reward == (4.0 if vector[3] == 1 else 0.0)  # the stand-in pays 1 per frame moving forward


def test_observation_is_max_of_last_two_frames_or_last(lab):
    for pool in ["max", "none"]:
        env = create_env("rooms_watermaze", seed=2, frame_pool=pool)
        _, info = env.reset()
        seed = info["episode_seed"]
        obs, *_ = env.step(0)
        if pool == "max":
            want = np.maximum(expected_frame(lab, seed, 3), expected_frame(lab, seed, 4))
        else:
            want = expected_frame(lab, seed, 4)
        np.testing.assert_array_equal(obs, want)
    assert not np.array_equal(expected_frame(lab, seed, 3), expected_frame(lab, seed, 4))


def test_extended_action_set(lab):
    env = create_env("rooms_watermaze", seed=1, action_set="extended", num_action_repeats=2)
    assert env.action_space.n == 15 == len(ACTION_SETS["extended"])
    env.reset()
    (instance,) = lab.Lab.instances
    env.step(8)  # look down
    assert instance.steps[-2][0] == (0, 10, 0, 0, 0, 0, 0) and [n for _, n in instance.steps[-2:]] == [1, 1]
    with pytest.raises(UserError, match="unknown --dmlab_action_set"):
        create_env("rooms_watermaze", seed=1, action_set="huge")


def test_seeds_are_passed_on_to_lab_reset(lab):
    a = create_env("rooms_watermaze", seed=11)
    b = create_env("rooms_watermaze", seed=11)
    c = create_env("rooms_watermaze", seed=12)
    seeds = {}
    for name, env in [("a", a), ("b", b), ("c", c)]:
        seeds[name] = [env.reset()[1]["episode_seed"] for _ in range(4)]
    assert [inst.resets for inst in lab.Lab.instances] == [seeds["a"], seeds["b"], seeds["c"]]
    assert seeds["a"] == seeds["b"] and seeds["a"] != seeds["c"]
    assert len(set(seeds["a"])) == 4 and all(0 <= s < 2**31 - 1 for s in seeds["a"] + seeds["c"])
    assert a.reset(seed=12)[1]["episode_seed"] == seeds["c"][0]  # reset(seed) restarts the sequence
    assert a.reset(seed=11)[1]["episode_seed"] == seeds["a"][0]
    # what env servers do: one distinct seed per (run, server, slot)
    f = flags_of("--env", "rooms_watermaze", "--num_actors", "4", "--num_servers", "2")
    firsts = [
        make_env(f, env_seed(f.seed, i, k)).reset(seed=env_seed(f.seed, i, k))[1]["episode_seed"]
        for i in range(2)
        for k in range(2)
    ]
    assert len(set(firsts)) == 4


def test_episode_end(lab):
    env = create_env("rooms_watermaze", seed=3)
    _, info = env.reset()
    length = lab.episode_frames(info["episode_seed"])
    steps, total, terminated = 0, 0.0, False
    while not terminated:
        obs, reward, terminated, truncated, _ = env.step(0)
        steps, total = steps + 1, total + reward
        assert not truncated and obs.shape == (3, 72, 96)
        assert steps <= 100
    assert steps == -(-length // 4) and total == length  # forward: 1 per frame until the level stops
    assert not lab.Lab.instances[0].is_running()
    _, info2 = env.reset()  # a new episode with a new seed
    assert lab.Lab.instances[0].is_running() and info2["episode_seed"] != info["episode_seed"]


def test_level_cache_dir(lab, tmp_path):
    cache = tmp_path / "cache"
    env = create_env("rooms_watermaze", seed=4, level_cache_dir=str(cache))
    env.reset(seed=4)
    files = [p for p in cache.rglob("*.pk3")]
    assert len(files) == 1
    other = create_env("rooms_watermaze", seed=4, level_cache_dir=str(cache))
    other.reset(seed=4)  # the same map: fetched, not written again
    assert [p for p in cache.rglob("*") if p.is_file()] == files


# -- flags and the final test ---------------------------------------------------------


def test_flags_and_defaults(lab, capsys):
    f = flags_of()
    assert (f.env, f.model, f.unroll_length, f.hidden_size, f.learning_rate, f.entropy_cost) == (
        "rooms_keys_doors_puzzle",
        "resnet",
        100,
        512,
        0.0006,
        0.01,
    )
    assert (f.num_actors, f.num_servers, f.batch_size, f.total_steps) == (48, 48, 32, 100_000_000)
    assert (f.dmlab_action_set, f.num_action_repeats, f.dmlab_frame_pool) == ("impala", 4, "max")
    assert flags_of("--env", "contributed/dmlab30/rooms_watermaze", "--num_actions", "9").env == "rooms_watermaze"
    assert flags_of("--dmlab_action_set", "extended", "--num_actions", "15").num_actions == 15
    for argv, message in [
        (["--num_actions", "15"], "--num_actions 15 disagrees with the impala action set's 9"),
        (["--env", "rooms_water_maze"], "unknown DMLab level 'rooms_water_maze'"),
        (["--num_action_repeats", "0"], "--num_action_repeats must be in [1, inf), got 0"),
    ]:
        with pytest.raises(SystemExit) as e:
            flags_of(*argv)
        assert e.value.code == 2 and message in capsys.readouterr().err.strip().splitlines()[-1]


def test_final_test_protocol_data(lab):
    f = flags_of("--env", "rooms_watermaze", "--seed", "3", "--num_actors", "8", "--num_servers", "4")
    runs = final_test_runs(f)
    assert [(r.name, r.group, r.level, r.episodes) for r in runs] == [
        (f"run{i}", "test", "rooms_watermaze", 100) for i in range(3)
    ]
    assert runs[0].protocol_run() == {
        "name": "run0",
        "episodes": 100,
        "group": "test",
        "overrides": {"env": "rooms_watermaze"},
    }
    training = {env_seed(3, i, k) for i in range(4) for k in range(2)}
    test_seeds = [s for r in range(3) for s in final_test_seeds(f, r)]
    assert len(test_seeds) == 3 * f.test_num_envs == len(set(test_seeds))
    assert not training & set(test_seeds)


# -- through the runtime, and without DeepMind Lab ---------------------------------------


@pytest.mark.multiprocess
def test_training_through_the_runtime_with_the_stand_in(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", FAKE_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    log = tmp_path / "lab_resets.log"
    monkeypatch.setenv("FAKE_DMLAB_LOG", str(log))
    args = [
        "--env=contributed/dmlab30/rooms_watermaze",
        "--num_actors=4",
        "--num_servers=2",
        "--batch_size=4",
        "--unroll_length=10",
        "--total_steps=600",
        "--hidden_size=32",
        "--use_lstm",
        f"--pipes_basename=unix:{tmp_path}/pipe",
        f"--savedir={tmp_path / 'runs'}",
        "--xpid=dm",
        "--log_interval=1",
        "--disable_final_test",
        f"--level_cache_dir={tmp_path / 'cache'}",
    ]
    result = run(DMLAB, *args, output=str(tmp_path / "out"), timeout=150)
    assert result.returncode == 0, result.stdout[-3000:]
    rundir = tmp_path / "runs" / "dm"
    rows = csv_rows(str(rundir / "logs.csv"))
    assert int(rows[-1]["step"]) >= 600
    returns = [float(r["mean_episode_return"]) for r in rows if r["mean_episode_return"] != "nan"]
    assert returns  # the stand-in's episodes last 14-15 agent steps
    ckpt = torch.load(rundir / "model.tar", weights_only=True)
    assert ckpt["step"] >= 600 and ckpt["flags"]["env"] == "rooms_watermaze"
    meta = json.loads((rundir / "meta.json").read_text())
    assert meta["env_spec"]["obs_shape"] == [3, 72, 96] and meta["flags"]["num_actions"] == 9
    # every env of every server got its own seed stream
    lines = [line.split() for line in log.read_text().splitlines()]
    assert {level for _, level, _ in lines} == {"contributed/dmlab30/rooms_watermaze"}
    assert len({pid for pid, _, _ in lines}) == 2  # two server processes
    assert len({seed for _, _, seed in lines}) == len(lines)  # no episode seed repeats anywhere
    assert list((tmp_path / "cache").rglob("*.pk3"))


@pytest.mark.multiprocess
@pytest.mark.parametrize("module", ["polybeast", "polybeast_env", "polybeast_learner"])
def test_without_deepmind_lab_one_line_says_how_to_get_it(tmp_path, monkeypatch, module):
    monkeypatch.delenv("PYTHONPATH", raising=False)
    result = run(
        f"torchbeast_dmlab.{module}",
        "--env=rooms_watermaze",
        f"--pipes_basename=unix:{tmp_path}/p",
        f"--savedir={tmp_path / 'runs'}",
        output=str(tmp_path / "out"),
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout
    assert "'deepmind_lab' is not installed" in lines[0] and "github.com/google-deepmind/lab" in lines[0]
    assert "Traceback" not in result.stdout
    assert not (tmp_path / "runs").exists()
