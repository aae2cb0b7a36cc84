"""Memory tasks others wrote: POPGym's (Morad et al. 2023) and MiniGrid's Memory rooms (Chevalier-Boisvert et al.
2023), each made by its own library and encoded for the package's models.

- ``popgym-<Task><Easy|Medium|Hard>-v0``: the observation space flattened as gymnasium flattens it (a Discrete or
  MultiDiscrete observation one-hot, a Box as it is), float32: a vector for the MLP stem.
- ``MiniGrid-<Name>-v0``: the egocentric view, each cell one-hot (object, colour, state: MiniGrid's
  ``OneHotPartialObsWrapper``), channels first, uint8 [20, V, V]: the grid stem (``--model grid``).
  ``--view_size`` sets the view's side V (MiniGrid's ``agent_view_size``; its default is 7).  The Memory rooms act
  with their minimal action set, as ALE's games do: turn left, turn right, forward (MiniGrid's actions 0-2; the other
  four do nothing there); ``--full_action_space`` gives all seven.

Episode statistics of the Memory rooms (``info["episode_stats"]`` at the end of an episode, logged as ``stat/``
columns): ``cue_seen`` (1.0 when the start room's object, the cue the choice must match, was in the agent's view at
some step: MiniGrid's ``agent_sees``, walls occluding), ``success`` (1.0 when the matching object was reached) and
``cue_seen_success`` (both), so a log shows whether a policy looks back and whether what it saw decides its choice.
"""

from __future__ import annotations

import importlib

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from rl_core.envs.rendering import render_off_screen
from rl_core.errors import UserError
from rl_core.flag_types import ranged

DEFAULT_ENV = "popgym-RepeatPreviousEasy-v0"
# id prefix -> the library that registers those ids when imported
FAMILIES = {"popgym-": "popgym", "MiniGrid-": "minigrid"}
ACTION_KIND = "discrete"  # POPGym's memory tasks and MiniGrid act in Discrete spaces
# MiniGrid id prefix -> its minimal action set's size: MiniGrid's first actions (left, right, forward) are the ones
# that act there (in the Memory rooms pickup is toggle and toggle, drop and done change nothing)
MINIMAL_ACTIONS = {"MiniGrid-Memory": 3}
MEMORY_ROOMS = "MiniGrid-Memory"  # the ids whose episodes report the cue statistics (CueSeen)


def add_flags(parser) -> None:
    """The package's flag; its defaults per agent and core: presets.py."""
    g = parser.add_argument_group(
        "memory", "--env names a POPGym task (popgym-RepeatPreviousEasy-v0) or a MiniGrid one (MiniGrid-MemoryS13-v0)."
    )
    g.add_argument(
        "--view_size",
        type=ranged(int, "[0, inf)"),
        default=0,
        metavar="V",
        help="MiniGrid: the side of the agent's view, odd and at least 3 (0: the env's own, 7).",
    )
    g.add_argument(
        "--full_action_space",
        action="store_true",
        help="MiniGrid's Memory rooms: all 7 actions instead of the 3 that act there (left, right, forward).",
    )
    g.add_argument(
        "--num_levels",
        type=ranged(int, "[0, inf)"),
        default=0,
        metavar="N",
        help="MiniGrid: train on N fixed layouts, each episode's drawn from seeds 0..N-1 (recurrent-ppo-truncated-bptt "
        "trains the Memory rooms on 99); 0: a fresh layout every episode.  Final tests play fresh layouts.",
    )
    parser.set_defaults(env=DEFAULT_ENV, model="grid")


def family(env_id: str) -> str:
    """The library of ``env_id`` (``popgym`` or ``minigrid``); one line naming the fix if it has none."""
    for prefix, library in FAMILIES.items():
        if env_id.startswith(prefix):
            return library
    raise UserError(
        f"--env {env_id}: not a POPGym or MiniGrid id: give popgym-<Task><Easy|Medium|Hard>-v0 "
        f"(popgym-RepeatPreviousEasy-v0) or MiniGrid-<Name>-v0 (MiniGrid-MemoryS13-v0)"
    )


def check_flags(parser, flags) -> None:
    """A known family; a MiniGrid view of odd side >= 3; --view_size only for MiniGrid, videos only of MiniGrid."""
    library = family(flags.env)
    if flags.view_size:
        if library != "minigrid":
            parser.error(f"--view_size {flags.view_size}: only MiniGrid envs have a view; drop it for {flags.env}")
        if flags.view_size < 3 or flags.view_size % 2 == 0:
            parser.error(f"--view_size {flags.view_size}: MiniGrid's view has an odd side of at least 3 (3, 5, 7, ...)")
    if flags.num_levels and library != "minigrid":
        parser.error(
            f"--num_levels {flags.num_levels}: only MiniGrid's layouts are drawn from seeds; drop it for {flags.env}"
        )
    if flags.full_action_space and minimal_actions(flags.env) is None:
        parser.error(f"--full_action_space: {flags.env} already acts with its full action space; drop it")
    if getattr(flags, "record_video", False) and library == "popgym":
        parser.error(f"--record_video: {flags.env} has no frames to record (POPGym renders none); drop it")


def _make(flags, library: str, **kwargs) -> gym.Env:
    try:
        importlib.import_module(library)  # registers the library's ids
        return gym.make(flags.env, **kwargs)
    except gym.error.Error as e:
        raise UserError(f"--env {flags.env}: {library} has no such env ({type(e).__name__}: {e})") from None


def popgym_env(flags, render_mode: str | None = None) -> gym.Env:
    """A POPGym task, its observation one-hot and flat, float32 (its cards and counts have no frames to render)."""
    env = _make(flags, "popgym")
    env = gym.wrappers.FlattenObservation(env)
    return gym.wrappers.DtypeObservation(env, np.float32)


def minimal_actions(env_id: str) -> int | None:
    """The size of ``env_id``'s minimal action set (its first actions), None where every action acts."""
    return next((n for prefix, n in MINIMAL_ACTIONS.items() if env_id.startswith(prefix)), None)


class FirstActions(gym.ActionWrapper):
    """The env's first ``n`` discrete actions only (their indices unchanged)."""

    def __init__(self, env: gym.Env, n: int):
        super().__init__(env)
        self.action_space = spaces.Discrete(n)

    def action(self, action):
        return action


class CueSeen(gym.Wrapper):
    """MiniGrid's Memory rooms: whether the cue (the start room's object, MemoryEnv's column 1, one row above the
    hallway) was ever in view, reported with the outcome at the episode's end (the module docstring)."""

    def reset(self, **kwargs):
        from minigrid.core.constants import OBJECT_TO_IDX

        obs, info = self.env.reset(**kwargs)
        room = self.env.unwrapped
        self._cue = (1, room.height // 2 - 1)
        self._cue_index = OBJECT_TO_IDX[room.grid.get(*self._cue).type]
        self._seen = self._sees(obs)
        return obs, info

    def _sees(self, obs) -> bool:
        """MiniGrid's ``agent_sees`` read off the observation the step made (its unseen cells are encoded 0)."""
        view = self.env.unwrapped.relative_coords(*self._cue)
        return view is not None and obs["image"][view[0], view[1], 0] == self._cue_index

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._seen = self._seen or self._sees(obs)
        if terminated or truncated:
            success = float(reward > 0)
            stats = {"cue_seen": float(self._seen), "success": success, "cue_seen_success": self._seen * success}
            info = dict(info, episode_stats=stats)
        return obs, reward, terminated, truncated, info


class FixedLayouts(gym.Wrapper):
    """Each episode one of ``n`` layouts: every reset draws its seed from 0..n-1 with a generator that the first
    seeded reset seeds (procgen's ``num_levels``, for MiniGrid's procedurally drawn rooms)."""

    def __init__(self, env: gym.Env, n: int):
        super().__init__(env)
        self.n = n
        self._draw = np.random.default_rng()

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._draw = np.random.default_rng(seed)
        return self.env.reset(seed=int(self._draw.integers(self.n)), options=options)


def minigrid_env(flags, render_mode: str | None = None, levels: int = 0) -> gym.Env:
    """A MiniGrid env's view, one-hot per cell, channels first: uint8 [20, V, V]; its minimal action set."""
    from minigrid.wrappers import ImgObsWrapper, OneHotPartialObsWrapper

    kwargs = {"agent_view_size": flags.view_size} if flags.view_size else {}
    if render_mode:
        kwargs["render_mode"] = render_mode
    env = _make(flags, "minigrid", **kwargs)
    if levels:
        env = FixedLayouts(env, levels)
    if flags.env.startswith(MEMORY_ROOMS):
        env = CueSeen(env)
    env = ImgObsWrapper(OneHotPartialObsWrapper(env))
    n = minimal_actions(flags.env)
    if n is not None and not flags.full_action_space:
        env = FirstActions(env, n)
    height, width, channels = env.observation_space.shape
    space = spaces.Box(0, 1, (channels, height, width), np.uint8)
    return gym.wrappers.TransformObservation(env, lambda obs: np.ascontiguousarray(obs.transpose(2, 0, 1)), space)


def make_env(flags, seed: int, render_mode: str | None = None, fresh_layouts: bool = False) -> gym.Env:
    """The task ``--env`` names, encoded; seeded by the env server's first reset(seed); MiniGrid on ``--num_levels``
    fixed layouts unless ``fresh_layouts``."""
    if family(flags.env) == "minigrid":
        env = minigrid_env(flags, render_mode, levels=0 if fresh_layouts else flags.num_levels)
    else:
        env = popgym_env(flags, render_mode)
    env.action_space.seed(seed)
    return env


def make_test_env(flags, seed: int, record: bool = False) -> gym.Env:
    """The same task on fresh layouts (MiniGrid); rendering frames when a video is recorded."""
    if record:
        render_off_screen()
    return make_env(flags, seed, render_mode="rgb_array" if record else None, fresh_layouts=True)
