"""Google Research Football (Kurach et al. 2020) through envpool's C++ build of the game.

``--env`` names one of the scenarios envpool ships, by its gfootball name:
``11_vs_11_easy_stochastic``, ``academy_empty_goal_close``, ... with or without
the ``gfootball/`` prefix and the ``-v1`` suffix of envpool's task id.

:class:`FootballEnv` is a gymnasium env around an envpool pool of one env:

* observations: the super-minimap (SMM, 72 x 96, four planes: left team,
  right team, ball, active player; 255 where a player or the ball is) of the
  last 4 frames, channel-first uint8 ``[16, 72, 96]``, oldest frame first,
  each frame's four planes in that order (SEED RL's ``stacked=True``).  reset
  fills the stack with the reset frame;
* 19 actions (gfootball's default action set);
* rewards ``scoring``: +1 for a goal scored, -1 for a goal conceded, so an
  episode's return is its score difference.  ``scoring,checkpoints`` needs the
  ball's position and the active player's index, which envpool's Football
  does not give (it gives only the minimap, the score and who owns the ball):
  the flag says so and stops;
* every scenario ends at its step limit (3,000 steps for the full games, 400
  for the academy) or earlier by its own rule (a goal or the ball out of play
  in the academy).  The game is over at the step limit, so it is a
  termination here, as in SEED RL where ``done`` zeroes the discount (envpool
  reports it as a time-limit truncation);
* envpool seeds a pool when it is made, so ``reset(seed=s)`` makes a new pool
  (about 1 s) unless the pool was just made with ``s`` and has not played yet.
  Same seed and same actions give the same frames, also in the stochastic
  scenarios.

Episode statistics (``info["episode_stats"]``, logged as ``stat/`` columns and
averaged in the final test): ``goals_scored``, ``goals_conceded`` and ``win``
(1.0 when more goals were scored than conceded).

Videos (``--record_video``): envpool renders no RGB frames of Football, so the
video shows the minimap: dark green pitch, left team red, right team blue, the
ball white, the active player yellow, each marker 3 x 3 minimap pixels, scaled
4 x (288 x 384).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from gymnasium import spaces

from rl_core.agents import AGENTS, agent_traits
from rl_core.envs.envpool_env import SingleEnvpoolEnv
from rl_core.errors import UserError
from torchbeast_football.presets import IMPALA_DEFAULTS

__all__ = [
    "DEFAULT_ENV",
    "FRAME_STACK",
    "FootballEnv",
    "NUM_ACTIONS",
    "OBS_SHAPE",
    "REWARDS",
    "SCENARIOS",
    "SMM_SHAPE",
    "add_flags",
    "canonical_scenario",
    "check_flags",
    "create_env",
    "make_env",
    "make_test_env",
    "smm_to_rgb",
    "test_protocol",
]

# The scenarios of envpool 1.2.5 (envpool/gfootball/registration.py) and their step limits.
SCENARIOS: dict[str, int] = {
    "11_vs_11_competition": 3000,
    "11_vs_11_easy_stochastic": 3000,
    "11_vs_11_hard_stochastic": 3000,
    "11_vs_11_kaggle": 3000,
    "11_vs_11_stochastic": 3000,
    "1_vs_1_easy": 500,
    "5_vs_5": 3000,
    "academy_3_vs_1_with_keeper": 400,
    "academy_corner": 400,
    "academy_counterattack_easy": 400,
    "academy_counterattack_hard": 400,
    "academy_empty_goal": 400,
    "academy_empty_goal_close": 400,
    "academy_pass_and_shoot_with_keeper": 400,
    "academy_run_pass_and_shoot_with_keeper": 400,
    "academy_run_to_score": 400,
    "academy_run_to_score_with_keeper": 400,
    "academy_single_goal_versus_lazy": 3000,
}
DEFAULT_ENV = "11_vs_11_easy_stochastic"
NUM_ACTIONS = 19
SMM_SHAPE = (4, 72, 96)  # planes: left team, right team, ball, active player
FRAME_STACK = 4
OBS_SHAPE = (SMM_SHAPE[0] * FRAME_STACK, *SMM_SHAPE[1:])
REWARDS = ("scoring", "scoring,checkpoints")

_NAME_RE = re.compile(r"^(?:gfootball/)?(?P<scenario>[a-z0-9_]+?)(?:-v\d+)?$", re.IGNORECASE)


def canonical_scenario(name: str) -> str:
    """``"academy_empty_goal_close"`` for that name, ``"gfootball/academy_empty_goal_close"`` or
    ``"gfootball/academy_empty_goal_close-v1"``; ``UserError`` for any other name."""
    m = _NAME_RE.match(name.strip()) if isinstance(name, str) else None
    scenario = m.group("scenario").lower() if m else None
    if scenario not in SCENARIOS:
        raise UserError(
            f"unknown Football scenario {name!r}: use one of {', '.join(SCENARIOS)} "
            f"(with or without the gfootball/ prefix)"
        )
    return scenario


def check_rewards(rewards: str) -> None:
    if rewards == "scoring":
        return
    if rewards == "scoring,checkpoints":
        raise UserError(
            "--rewards scoring,checkpoints needs the ball's position and the active player, which "
            "envpool's Football does not give (only the minimap and the score): use --rewards scoring"
        )
    raise UserError(f"unknown --rewards {rewards!r}: use scoring")


# --------------------------------------------------------------------------
# Rendering


_COLORS = np.array([[230, 60, 60], [70, 110, 255], [255, 255, 255], [255, 220, 0]], np.uint8)
_PITCH = np.array([20, 90, 30], np.uint8)
RENDER_SCALE = 4


def smm_to_rgb(smm: np.ndarray, scale: int = RENDER_SCALE) -> np.ndarray:
    """One minimap frame ``[4, 72, 96]`` -> an RGB image ``[72 scale, 96 scale, 3]`` uint8.

    Planes are painted in order (left team, right team, ball, active player), each marker
    dilated to 3 x 3 pixels so that one-pixel players are visible.
    """
    planes = np.asarray(smm) > 0
    padded = np.pad(planes, ((0, 0), (1, 1), (1, 1)))
    h, w = planes.shape[1:]
    grown = np.zeros_like(planes)
    for dy in range(3):
        for dx in range(3):
            grown |= padded[:, dy : dy + h, dx : dx + w]
    image = np.empty((h, w, 3), np.uint8)
    image[:] = _PITCH
    for plane, color in zip(grown, _COLORS):
        image[plane] = color
    return np.repeat(np.repeat(image, scale, axis=0), scale, axis=1)


# --------------------------------------------------------------------------
# The env


class FootballEnv(SingleEnvpoolEnv):
    """One Football scenario: observations uint8 ``[16, 72, 96]`` (4 stacked minimaps), 19 actions.

    Info keys: ``score`` (goals of the left and the right team so far), ``steps_left``;
    at the end of an episode ``episode_stats`` (see the module docstring).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}  # gfootball plays 10 steps per game second

    def __init__(
        self, scenario: str, seed: int | None = None, *, rewards: str = "scoring", render_mode: str | None = None
    ):
        self.scenario = canonical_scenario(scenario)
        check_rewards(rewards)
        self.rewards = rewards
        self.render_mode = render_mode
        self.task_id = f"gfootball/{self.scenario}-v1"
        self.observation_space = spaces.Box(0, 255, OBS_SHAPE, np.uint8)
        self.action_space = spaces.Discrete(NUM_ACTIONS)
        self._action = np.zeros(1, np.int32)
        self._stack = np.zeros(OBS_SHAPE, np.uint8)
        self._pool = None
        if seed is None:
            seed = int(np.random.SeedSequence().generate_state(1)[0])
        self._build(seed)

    def _make_pool(self, seed: int):
        from rl_core.envs.envpool_env import import_envpool

        envpool = import_envpool()  # without matplotlib (envpool's Jumanji renderers)

        return envpool.make_gymnasium(self.task_id, num_envs=1, batch_size=1, num_threads=1, seed=seed)

    def _push(self, frame_hwc: np.ndarray) -> np.ndarray:
        c = SMM_SHAPE[0]
        self._stack[:-c] = self._stack[c:]
        self._stack[-c:] = frame_hwc.transpose(2, 0, 1)
        return self._stack.copy()

    @staticmethod
    def _info(raw: dict) -> dict[str, Any]:
        return {"score": tuple(int(s) for s in raw["score"][0]), "steps_left": int(raw["steps_left"][0])}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, raw = self._reset_pool(seed)
        self._stack[:] = np.tile(obs[0].transpose(2, 0, 1), (FRAME_STACK, 1, 1))
        return self._stack.copy(), self._info(raw)

    def step(self, action):
        self._action[0] = action
        obs, reward, terminated, truncated, raw = self._pool.step(self._action)
        ended = bool(terminated[0] or truncated[0])  # the final whistle (envpool: a truncation) ends the game
        info = self._info(raw)
        if ended:
            scored, conceded = info["score"]
            info["episode_stats"] = {
                "goals_scored": float(scored),
                "goals_conceded": float(conceded),
                "win": float(scored > conceded),
            }
        return self._push(obs[0]), float(reward[0]), ended, False, info

    def render(self):
        if self.render_mode == "rgb_array":
            return smm_to_rgb(self._stack[-SMM_SHAPE[0] :])
        return None


def create_env(
    scenario: str, seed: int | None = None, *, rewards: str = "scoring", record: bool = False
) -> FootballEnv:
    """A seeded Football env; observations uint8 ``[16, 72, 96]``, 19 actions."""
    return FootballEnv(scenario, seed, rewards=rewards, render_mode="rgb_array" if record else None)


# ------------------------------------------------------- package interface
# Its flag defaults per agent: presets.py (rl_core/config/env_package.py reads them).

# Envs a server steps with a GPU learner on more than 2 cores, half as many without one (rl_core/config/sizing.py):
# Football steps ~350 times a second, so 16 already keep a core busy.
ENVS_PER_SERVER = 16

ACTION_KIND = "discrete"  # its envs' actions, known before one is made (rl_core/config/env_package.py)


def add_flags(parser) -> None:
    """Football's flags; defaults of SEED RL's Football V-trace runs (their sources: presets.py)."""
    g = parser.add_argument_group(
        "football",
        f"--env names a Google Research Football scenario ({', '.join(SCENARIOS)}; "
        f"default {DEFAULT_ENV}), with or without the gfootball/ prefix.",
    )
    g.add_argument(
        "--rewards",
        default="scoring",
        choices=REWARDS,
        help="scoring: +1 / -1 per goal. scoring,checkpoints needs what envpool does not give (the flag says so).",
    )
    # --rnd sees the newest super-minimap (its 4 planes), not the stack of 4
    parser.set_defaults(env=DEFAULT_ENV, rnd_channels=SMM_SHAPE[0], **IMPALA_DEFAULTS)


def check_flags(parser, flags) -> None:
    try:
        flags.env = canonical_scenario(flags.env or DEFAULT_ENV)
        check_rewards(flags.rewards)
    except UserError as e:
        parser.error(str(e))
    if agent_traits(flags).replays:
        learners = [name for name in AGENTS if not agent_traits(name).replays]
        parser.error(
            f"--agent {flags.agent} learns from a replay, which is not set up for Football (no replay codec for its "
            f"stacked minimaps, 110 KB a step, and no tuned defaults): use {' or '.join(learners)}"
        )
    if flags.num_actions is not None and flags.num_actions != NUM_ACTIONS:
        parser.error(
            f"--num_actions {flags.num_actions} disagrees with Football's {NUM_ACTIONS} actions: drop the flag"
        )


def make_env(flags, seed: int) -> FootballEnv:
    """The env an env server hosts, from the run's flags."""
    return create_env(flags.env or DEFAULT_ENV, seed, rewards=flags.rewards)


def make_test_env(flags, seed: int, record: bool = False) -> FootballEnv:
    """The training env; with ``record``, rendering the minimap for the video."""
    return create_env(flags.env or DEFAULT_ENV, seed, rewards=flags.rewards, record=record)


def test_protocol(flags) -> list[dict]:
    """3 runs of 100 episodes against the scenario's built-in opponent: mean return (the score
    difference) and mean ``win`` (the win rate) per run; mean and std over the runs."""
    return [{"name": f"test_{r}", "episodes": 100, "group": "test", "overrides": {}} for r in range(3)]


if __name__ == "__main__":  # a quick throughput figure: python -m torchbeast_football.env [name] [steps]
    from rl_core.envs.env_speed import main

    main(create_env, DEFAULT_ENV, 5_000)
