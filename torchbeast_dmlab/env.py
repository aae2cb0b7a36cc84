"""DeepMind Lab (Beattie et al. 2016) through its Python module ``deepmind_lab``.

``create_env`` returns a gymnasium env over ``deepmind_lab.Lab`` with

* a discrete action set mapped onto DMLab's 7-dim integer action (IMPALA's 9
  actions by default, ``--dmlab_action_set extended`` for a 15-action set that
  adds small/large turns and looking up/down);
* each action repeated ``num_action_repeats`` (4) frames; with
  ``frame_pool="max"`` (the default, as the R2AC code's ``create_env_dmlab``)
  the observation is the pixel-wise max of the last two of those frames, with
  ``"none"`` it is the last frame (IMPALA, SEED RL: one ``step(action,
  num_steps=4)``);
* 72x96 RGB frames (``RGB_INTERLEAVED``, ``[72, 96, 3]``) delivered
  channel-first, uint8 ``[3, 72, 96]``;
* raw rewards (the learner clips them), summed over the repeated frames; the
  episode ends (``terminated``) when the level stops running.

Seeds: the env's ``seed`` seeds a generator that draws the seed of every
episode, passed to ``lab.reset(seed=...)`` (as SEED RL and the R2AC code do,
but each env server's env with its own seed: the env server derives a
distinct one per run, server and slot; the R2AC code gave every server the
same seed).  ``reset(seed=s)`` restarts that sequence.

Levels: the 30 DMLab-30 levels by their short names
(``rooms_collect_good_objects_train``) or with the ``contributed/dmlab30/``
prefix; the canonical name is the short one.  Any other level script can be
given by its path under ``game_scripts/levels`` with a ``/`` in it (e.g.
``contributed/dmlab30/rooms_watermaze`` or ``tests/empty_room_test``).

``deepmind_lab`` is imported when an env is made; :func:`check_flags` makes
every entry point fail fast, with one line saying how to get it, when it is
not installed.  The final test of the R2AC code (3 runs of 100 episodes, each
run its own env seed) is described as data by :func:`final_test_runs`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import tempfile
from typing import Any

import gymnasium
import numpy as np
from gymnasium import spaces

from rl_core.errors import UserError
from rl_core.flag_types import ranged

__all__ = [
    "ACTION_NAMES",
    "ACTION_SETS",
    "DMLAB30_LEVELS",
    "DMLAB30_TEST_LEVELS",
    "DmLabEnv",
    "FINAL_TEST_NUM_EPISODES",
    "FINAL_TEST_NUM_RUNS",
    "INSTALL_HINT",
    "LEVEL_PREFIX",
    "LevelCache",
    "OBS_SHAPE",
    "TestRun",
    "add_flags",
    "canonical_level",
    "check_flags",
    "create_env",
    "final_test_runs",
    "import_deepmind_lab",
    "level_path",
    "final_test_seeds",
    "make_env",
]

LEVEL_PREFIX = "contributed/dmlab30/"

# DMLab-30 training level -> the level its score is reported on
# (two levels have held-out test variants).
DMLAB30_TEST_LEVELS: dict[str, str] = {
    "rooms_collect_good_objects_train": "rooms_collect_good_objects_test",
    "rooms_exploit_deferred_effects_train": "rooms_exploit_deferred_effects_test",
    "rooms_select_nonmatching_object": "rooms_select_nonmatching_object",
    "rooms_watermaze": "rooms_watermaze",
    "rooms_keys_doors_puzzle": "rooms_keys_doors_puzzle",
    "language_select_described_object": "language_select_described_object",
    "language_select_located_object": "language_select_located_object",
    "language_execute_random_task": "language_execute_random_task",
    "language_answer_quantitative_question": "language_answer_quantitative_question",
    "lasertag_one_opponent_small": "lasertag_one_opponent_small",
    "lasertag_three_opponents_small": "lasertag_three_opponents_small",
    "lasertag_one_opponent_large": "lasertag_one_opponent_large",
    "lasertag_three_opponents_large": "lasertag_three_opponents_large",
    "natlab_fixed_large_map": "natlab_fixed_large_map",
    "natlab_varying_map_regrowth": "natlab_varying_map_regrowth",
    "natlab_varying_map_randomized": "natlab_varying_map_randomized",
    "skymaze_irreversible_path_hard": "skymaze_irreversible_path_hard",
    "skymaze_irreversible_path_varied": "skymaze_irreversible_path_varied",
    "psychlab_arbitrary_visuomotor_mapping": "psychlab_arbitrary_visuomotor_mapping",
    "psychlab_continuous_recognition": "psychlab_continuous_recognition",
    "psychlab_sequential_comparison": "psychlab_sequential_comparison",
    "psychlab_visual_search": "psychlab_visual_search",
    "explore_object_locations_small": "explore_object_locations_small",
    "explore_object_locations_large": "explore_object_locations_large",
    "explore_obstructed_goals_small": "explore_obstructed_goals_small",
    "explore_obstructed_goals_large": "explore_obstructed_goals_large",
    "explore_goal_locations_small": "explore_goal_locations_small",
    "explore_goal_locations_large": "explore_goal_locations_large",
    "explore_object_rewards_few": "explore_object_rewards_few",
    "explore_object_rewards_many": "explore_object_rewards_many",
}
DMLAB30_LEVELS: tuple[str, ...] = tuple(DMLAB30_TEST_LEVELS)
_ALL_DMLAB30 = frozenset(DMLAB30_LEVELS) | frozenset(DMLAB30_TEST_LEVELS.values())

# DMLab's action vector, in the order of Lab.action_spec().
ACTION_NAMES = (
    "LOOK_LEFT_RIGHT_PIXELS_PER_FRAME",
    "LOOK_DOWN_UP_PIXELS_PER_FRAME",
    "STRAFE_LEFT_RIGHT",
    "MOVE_BACK_FORWARD",
    "FIRE",
    "JUMP",
    "CROUCH",
)


def _act(look: int = 0, look_up_down: int = 0, strafe: int = 0, move: int = 0, fire: int = 0) -> dict[str, int]:
    return {
        "LOOK_LEFT_RIGHT_PIXELS_PER_FRAME": look,
        "LOOK_DOWN_UP_PIXELS_PER_FRAME": look_up_down,
        "STRAFE_LEFT_RIGHT": strafe,
        "MOVE_BACK_FORWARD": move,
        "FIRE": fire,
    }


ACTION_SETS: dict[str, tuple[dict[str, int], ...]] = {
    # IMPALA (Espeholt et al. 2018), SEED RL and the R2AC code.
    "impala": (
        _act(move=1),  # forward
        _act(move=-1),  # backward
        _act(strafe=-1),  # strafe left
        _act(strafe=1),  # strafe right
        _act(look=-20),  # look left
        _act(look=20),  # look right
        _act(look=-20, move=1),  # look left + forward
        _act(look=20, move=1),  # look right + forward
        _act(fire=1),  # fire
    ),
    # 15 actions: finer and coarser turns, looking up and down (Sample Factory's extended DMLab set).
    "extended": (
        _act(move=1),
        _act(move=-1),
        _act(strafe=-1),
        _act(strafe=1),
        _act(look=-10),
        _act(look=10),
        _act(look=-60),
        _act(look=60),
        _act(look_up_down=10),  # look down
        _act(look_up_down=-10),  # look up
        _act(look=-10, move=1),
        _act(look=10, move=1),
        _act(look=-60, move=1),
        _act(look=60, move=1),
        _act(fire=1),
    ),
}

OBS_HEIGHT, OBS_WIDTH = 72, 96
OBS_SHAPE = (3, OBS_HEIGHT, OBS_WIDTH)
OBSERVATION = "RGB_INTERLEAVED"
FRAME_POOLS = ("max", "none")

INSTALL_HINT = (
    "DeepMind Lab's Python module 'deepmind_lab' is not installed: build its wheel from "
    "https://github.com/google-deepmind/lab with Bazel (//python/pip_package:build_pip_package) and "
    "pip install it, see 'DeepMind Lab' in README.md"
)

# The final test of the R2AC code (full_test in its DMLab learner).
FINAL_TEST_NUM_RUNS = 3
FINAL_TEST_NUM_EPISODES = 100


def import_deepmind_lab():
    """The ``deepmind_lab`` module, or ``UserError(INSTALL_HINT)``."""
    try:
        import deepmind_lab
    except ImportError as e:
        if getattr(e, "name", None) == "deepmind_lab":
            raise UserError(INSTALL_HINT) from None
        raise UserError(f"'deepmind_lab' is installed but does not import ({e}): rebuild it for this Python") from None
    return deepmind_lab


# --------------------------------------------------------------------------
# Levels


def canonical_level(name: str) -> str:
    """``"rooms_watermaze"`` for ``"rooms_watermaze"`` and ``"contributed/dmlab30/rooms_watermaze"``.

    Any other name with a ``/`` is a level script path and is kept as given;
    anything else raises ``UserError``.
    """
    if not isinstance(name, str) or not name.strip():
        raise UserError(f"--env {name!r}: give a DMLab-30 level, e.g. {DMLAB30_LEVELS[0]}")
    name = name.strip()
    short = name[len(LEVEL_PREFIX) :] if name.startswith(LEVEL_PREFIX) else name
    if short in _ALL_DMLAB30:
        return short
    if "/" in name and not name.startswith(LEVEL_PREFIX):
        return name
    raise UserError(
        f"unknown DMLab level {name!r}: use a DMLab-30 level ({', '.join(DMLAB30_LEVELS[:3])}, ...; "
        f"see DMLAB30_LEVELS in torchbeast_dmlab/env.py) or a level script path such as tests/empty_room_test"
    )


def level_path(level: str) -> str:
    """What ``deepmind_lab.Lab`` loads: ``contributed/dmlab30/<name>`` for DMLab-30 levels."""
    level = canonical_level(level)
    return LEVEL_PREFIX + level if level in _ALL_DMLAB30 else level


class LevelCache:
    """DMLab's ``level_cache`` protocol over a directory shared by every env (and every run) on a machine.

    DMLab compiles a map for each (level, seed) it has not seen; with a cache it
    asks ``fetch(key, pk3_path)`` first and hands new maps to ``write``.  Files
    are written through a temporary name and a rename, so concurrent servers
    never read half a file.
    """

    def __init__(self, cache_dir: str):
        self.cache_dir = os.path.abspath(os.path.expanduser(cache_dir))
        os.makedirs(self.cache_dir, exist_ok=True)

    def path(self, key: str) -> str:
        digest = hashlib.md5(key.encode("utf-8")).hexdigest()
        return os.path.join(self.cache_dir, digest[:2], digest[2:] + ".pk3")

    def fetch(self, key: str, pk3_path: str) -> bool:
        try:
            shutil.copyfile(self.path(key), pk3_path)
            return True
        except OSError:
            return False

    def write(self, key: str, pk3_path: str) -> None:
        path = self.path(key)
        if os.path.exists(path):
            return
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        os.close(fd)
        try:
            shutil.copyfile(pk3_path, tmp)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise


# --------------------------------------------------------------------------
# The env


def _action_matrix(action_set: str, action_spec: list[dict]) -> np.ndarray:
    """The action set as rows of DMLab action vectors (np.intc), ordered and bounded by ``action_spec``."""
    if action_set not in ACTION_SETS:
        raise UserError(f"unknown --dmlab_action_set {action_set!r}: use one of {', '.join(ACTION_SETS)}")
    names = [d["name"] for d in action_spec]
    index = {name: i for i, name in enumerate(names)}
    rows = np.zeros((len(ACTION_SETS[action_set]), len(names)), np.intc)
    for r, action in enumerate(ACTION_SETS[action_set]):
        for name, value in action.items():
            if name not in index:
                if value:
                    raise UserError(f"this DeepMind Lab has no action {name} (its actions: {', '.join(names)})")
                continue
            spec = action_spec[index[name]]
            if not spec["min"] <= value <= spec["max"]:
                raise UserError(f"action {name}={value} is outside DeepMind Lab's [{spec['min']}, {spec['max']}]")
            rows[r, index[name]] = value
    return rows


class DmLabEnv(gymnasium.Env):
    """One DeepMind Lab level: observations uint8 ``[3, 72, 96]``, a discrete action set, action repeat.

    Reset info: ``episode_seed``, the seed ``lab.reset`` got.
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        level: str,
        seed: int | None = None,
        *,
        action_set: str = "impala",
        num_action_repeats: int = 4,
        frame_pool: str = "max",
        renderer: str = "software",
        level_cache_dir: str | None = None,
        dataset_path: str | None = None,
        extra_config: dict[str, Any] | None = None,
        render_mode: str | None = None,
    ):
        if num_action_repeats < 1:
            raise UserError(f"num_action_repeats must be >= 1, got {num_action_repeats}")
        if frame_pool not in FRAME_POOLS:
            raise UserError(f"unknown frame pooling {frame_pool!r}: use one of {', '.join(FRAME_POOLS)}")
        lab_module = import_deepmind_lab()
        self.level = canonical_level(level)
        self.num_action_repeats = int(num_action_repeats)
        # DMLab renders 60 frames a second; one video frame per agent step plays in real time at 60 / repeats.
        self.metadata = {"render_modes": ["rgb_array"], "render_fps": 60 / self.num_action_repeats}
        self.frame_pool = frame_pool
        self.render_mode = render_mode
        config = {"width": OBS_WIDTH, "height": OBS_HEIGHT, "logLevel": "WARN"}
        if dataset_path:
            config["datasetPath"] = dataset_path
        config.update(extra_config or {})
        self._lab = lab_module.Lab(
            level_path(self.level),
            [OBSERVATION],
            config={k: str(v) for k, v in config.items()},
            renderer=renderer,
            level_cache=LevelCache(level_cache_dir) if level_cache_dir else None,
        )
        self._actions = _action_matrix(action_set, self._lab.action_spec())
        self.action_space = spaces.Discrete(len(self._actions))
        self.observation_space = spaces.Box(0, 255, OBS_SHAPE, np.uint8)
        self._rng = np.random.default_rng(seed)
        self._last_obs = np.zeros(OBS_SHAPE, np.uint8)
        self.episode_seed: int | None = None

    def _observe(self) -> np.ndarray:
        frame = self._lab.observations()[OBSERVATION]  # [H, W, 3]
        return np.ascontiguousarray(np.asarray(frame, np.uint8).transpose(2, 0, 1))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        self.episode_seed = int(self._rng.integers(0, 2**31 - 1))
        self._lab.reset(seed=self.episode_seed)
        self._last_obs = self._observe()
        return self._last_obs, {"episode_seed": self.episode_seed}

    def step(self, action):
        lab, act, repeats = self._lab, self._actions[action], self.num_action_repeats
        if self.frame_pool == "none" or repeats == 1:
            reward = lab.step(act, num_steps=repeats)
            running = lab.is_running()
            if running:
                self._last_obs = self._observe()
        else:
            # repeats-1 frames, then one more: max over the frames after each (the last two).
            reward = lab.step(act, num_steps=repeats - 1)
            running = lab.is_running()
            if running:
                previous = self._observe()
                reward += lab.step(act, num_steps=1)
                running = lab.is_running()
                self._last_obs = np.maximum(previous, self._observe()) if running else previous
        return self._last_obs, float(reward), not running, False, {}

    def render(self):
        if self.render_mode == "rgb_array":
            return self._last_obs.transpose(1, 2, 0).copy()
        return None

    def close(self):
        if self._lab is not None:
            self._lab.close()
            self._lab = None


def create_env(level: str, seed: int | None, **kwargs) -> DmLabEnv:
    """A seeded DMLab env; observations uint8 ``[3, 72, 96]`` (keyword arguments: see :class:`DmLabEnv`)."""
    return DmLabEnv(level, seed, **kwargs)


# --------------------------------------------------------------------------
# Final test protocol


@dataclasses.dataclass(frozen=True)
class TestRun:
    """One run of the final test: ``episodes`` episodes of ``level``, summarised with the other runs of ``group``."""

    __test__ = False  # not a pytest class

    name: str
    group: str
    level: str
    episodes: int

    def protocol_run(self) -> dict:
        """This run in ``rl_core.evaluation.episodes``'s ``test_protocol`` format."""
        return {"name": self.name, "episodes": self.episodes, "group": self.group, "overrides": {"env": self.level}}


def final_test_runs(flags) -> list[TestRun]:
    """The R2AC final test: 3 runs x 100 episodes of the training level, mean and std over the 3 run means.

    Each run plays on envs of its own seeds, none of them a training env's:
    :func:`final_test_seeds`.  (The R2AC code seeded its runs 0, 1, 2, which
    could be its training seed.)  ``DMLAB30_TEST_LEVELS`` names the level
    DMLab-30 scores are reported on, for the two levels that differ.
    """
    level = canonical_level(flags.env)
    return [TestRun(f"run{r}", "test", level, FINAL_TEST_NUM_EPISODES) for r in range(FINAL_TEST_NUM_RUNS)]


def final_test_seeds(flags, run_index: int) -> list[int]:
    """The env seeds of final-test run ``run_index``: those ``rl_core.evaluation.episodes`` gives it."""
    from rl_core.evaluation.episodes import test_seeds

    return test_seeds(flags, run_index)


# ------------------------------------------------------- package interface
# Its flag defaults per agent: presets.py (rl_core/config/env_package.py reads them).

# Envs a server steps on more than 2 cores (rl_core/config/sizing.py): R2AC's layout, one env per server process.
ENVS_PER_SERVER = 1


ACTION_KIND = "discrete"  # its envs' actions, known before one is made (rl_core/config/env_package.py)


def add_flags(parser) -> None:
    """DMLab's flags, and the defaults of the R2AC DMLab runs (README of IDSIA/rtrl-elstm)."""
    g = parser.add_argument_group("dmlab")
    g.add_argument(
        "--dmlab_action_set",
        default="impala",
        choices=sorted(ACTION_SETS),
        help="impala: the 9 actions of IMPALA and the R2AC code; extended: 15 actions.",
    )
    g.add_argument(
        "--num_action_repeats", type=ranged(int, "[1, inf)"), default=4, metavar="N", help="Frames per agent step."
    )
    g.add_argument(
        "--dmlab_frame_pool",
        default="max",
        choices=FRAME_POOLS,
        help="max: observe the max of the last two repeated frames (the R2AC code); "
        "none: the last frame (IMPALA, SEED RL).",
    )
    g.add_argument(
        "--level_cache_dir",
        default=None,
        metavar="DIR",
        help="Directory caching DMLab's compiled maps across envs and runs.",
    )
    g.add_argument(
        "--dataset_path",
        default=None,
        metavar="DIR",
        help="DMLab's datasetPath (the Brady et al. image set the psychlab levels need).",
    )
    g.add_argument(
        "--dmlab_renderer", default="software", choices=["software", "hardware"], help="deepmind_lab.Lab's renderer."
    )
    parser.set_defaults(
        env="rooms_keys_doors_puzzle",
        model="resnet",
        num_actors=48,
        num_servers=48,
        batch_size=32,
        unroll_length=100,
        total_steps=100_000_000,
        learning_rate=0.0006,
        entropy_cost=0.01,
        epsilon=0.01,
        grad_norm_clipping=40.0,
        hidden_size=512,
    )


def check_flags(parser, flags) -> None:
    try:
        flags.env = canonical_level(flags.env)
    except UserError as e:
        parser.error(str(e))
    n = len(ACTION_SETS[flags.dmlab_action_set])
    if flags.num_actions is not None and flags.num_actions != n:
        parser.error(
            f"--num_actions {flags.num_actions} disagrees with the {flags.dmlab_action_set} action set's "
            f"{n} actions: drop the flag"
        )
    if flags.dry_run:  # the configuration can be checked without DeepMind Lab installed
        return
    try:
        import_deepmind_lab()
    except UserError as e:  # one line, no usage: nothing is wrong with the command line
        parser.exit(2, f"error: {e}\n")


def make_env(flags, seed: int) -> DmLabEnv:
    """The env an env server hosts, from the run's flags."""
    return create_env(
        flags.env,
        seed,
        action_set=flags.dmlab_action_set,
        num_action_repeats=flags.num_action_repeats,
        frame_pool=flags.dmlab_frame_pool,
        renderer=flags.dmlab_renderer,
        level_cache_dir=flags.level_cache_dir,
        dataset_path=flags.dataset_path,
    )


def test_protocol(flags) -> list[dict]:
    """3 runs x 100 episodes of the training level, on seeds no training env has."""
    return [run.protocol_run() for run in final_test_runs(flags)]
