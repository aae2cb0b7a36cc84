"""Procgen (Cobbe et al. 2020) through envpool's C++ build of the 16 games.

``create_env`` returns a gymnasium env with the full action space (15
actions) and 64x64 RGB observations, channel-first uint8 ``[3, 64, 64]``, as the
R2AC code's ``wrap_pytorch(gym.make("procgen:procgen-<game>-v0", ...))``: no
frame skip, no frame stack, raw rewards (the learner clips them).

Each env is one envpool pool of ``num_envs=1``: envpool batches internally,
but the env server steps one gymnasium env per slot, and a pool of one costs
little more than procgen's own step (``python -m torchbeast_procgen.env``
prints the steps/s of one env in one process).

Levels, as in procgen: ``num_levels=0`` draws level seeds from the whole
31-bit range; otherwise each episode plays a level drawn uniformly from
``[start_level, start_level + num_levels)``.  The env's ``seed`` seeds that
draw, so the same (seed, num_levels, start_level, distribution_mode) give the
same sequence of levels and the same frames.  envpool fixes seeds when a pool
is built, so ``reset(seed=s)`` builds a fresh pool seeded with ``s`` (cheap:
well under a millisecond).

Names: ``--env chaser``, ``--env procgen:procgen-chaser-v0`` (the spelling of
the published R2AC scripts), ``procgen-chaser-v0`` and ``Chaser`` are one game;
the canonical name is the bare lower-case game name ``"chaser"``.

Episode statistics (``info["episode_stats"]`` at the end of an episode):
``level_complete`` (1.0 when the level was solved, procgen's
``prev_level_complete``) and, in multi-task runs, ``return_<game>``, so each
game's returns are logged as their own column.

The final test of the R2AC code (``full_test`` in its procgen learner) is
described as data by :func:`final_test_level_sets`: the training levels and the
three held-out sets starting at levels 1000, 1200 and 1400, 200 levels and 200
episodes each.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np
from gymnasium import spaces

from rl_core.envs.envpool_env import SingleEnvpoolEnv
from rl_core.errors import UserError
from rl_core.flag_types import ranged

__all__ = [
    "DISTRIBUTION_MODES",
    "FINAL_TEST_NUM_EPISODES",
    "FINAL_TEST_NUM_LEVELS",
    "FINAL_TEST_START_LEVELS",
    "GAME_MODES",
    "LEVEL_SETS",
    "LevelSet",
    "MULTI_ENV_ORDER",
    "MULTI_ENV_ORDER_MEMORY",
    "NUM_ACTIONS",
    "OBS_SHAPE",
    "PROCGEN_GAMES",
    "ProcgenEnv",
    "add_flags",
    "canonical_game",
    "check_flags",
    "create_env",
    "final_test_level_sets",
    "game_for_env",
    "make_env",
    "multi_env_games",
]

NUM_ACTIONS = 15
OBS_SHAPE = (3, 64, 64)
DISTRIBUTION_MODES = ("easy", "hard", "extreme", "memory", "exploration")

# The 16 games, alphabetical; the modes each supports in procgen 0.10
# (procgen/src/games/*.cpp; envpool registers the same set).
GAME_MODES: dict[str, tuple[str, ...]] = {
    "bigfish": ("easy", "hard"),
    "bossfight": ("easy", "hard"),
    "caveflyer": ("easy", "hard", "memory", "exploration"),
    "chaser": ("easy", "hard", "extreme"),
    "climber": ("easy", "hard", "exploration"),
    "coinrun": ("easy", "hard", "exploration"),
    "dodgeball": ("easy", "hard", "extreme", "memory"),
    "fruitbot": ("easy", "hard"),
    "heist": ("easy", "hard", "memory", "exploration"),
    "jumper": ("easy", "hard", "memory", "exploration"),
    "leaper": ("easy", "hard", "extreme", "exploration"),
    "maze": ("easy", "hard", "memory", "exploration"),
    "miner": ("easy", "hard", "memory"),
    "ninja": ("easy", "hard", "exploration"),
    "plunder": ("easy", "hard"),
    "starpilot": ("easy", "hard", "extreme"),
}
PROCGEN_GAMES: tuple[str, ...] = tuple(GAME_MODES)

# The game order of --multi_env: the R2AC code's ("interesting first") lists, so
# that --multi_env N trains on the same N games as the published runs.
MULTI_ENV_ORDER: tuple[str, ...] = (
    "bigfish",
    "fruitbot",
    "maze",
    "leaper",
    "plunder",
    "starpilot",
    "miner",
    "bossfight",
    "caveflyer",
    "chaser",
    "climber",
    "coinrun",
    "dodgeball",
    "heist",
    "jumper",
    "ninja",
)
MULTI_ENV_ORDER_MEMORY: tuple[str, ...] = ("dodgeball", "heist", "maze", "miner", "caveflyer", "jumper")

DEFAULT_GAME = "chaser"

# The final test of the R2AC code: 200 episodes on 200 levels from each start level.
FINAL_TEST_START_LEVELS = (1000, 1200, 1400)
FINAL_TEST_NUM_LEVELS = 200
FINAL_TEST_NUM_EPISODES = 200

_INT32_MAX = 2**31 - 1


# --------------------------------------------------------------------------
# Names


_NAME_RE = re.compile(r"^(?:procgen:)?(?:procgen-)?(?P<game>[a-z]+)(?:-v\d+)?$", re.IGNORECASE)


def canonical_game(name: str) -> str:
    """``"chaser"`` for ``"chaser"``, ``"procgen:procgen-chaser-v0"``, ``"procgen-chaser-v0"``, ``"Chaser"``.

    Raises ``UserError`` for anything that is not one of the 16 games.
    """
    m = _NAME_RE.match(name.strip()) if isinstance(name, str) else None
    game = m.group("game").lower() if m else None
    if game not in GAME_MODES:
        raise UserError(
            f"unknown Procgen game {name!r}: use one of {', '.join(PROCGEN_GAMES)} (or procgen:procgen-<game>-v0)"
        )
    return game


def check_distribution_mode(game: str, mode: str) -> None:
    """``UserError`` unless ``game`` has ``mode`` in procgen."""
    if mode not in DISTRIBUTION_MODES:
        raise UserError(f"unknown --distribution_mode {mode!r}: use one of {', '.join(DISTRIBUTION_MODES)}")
    if mode not in GAME_MODES[game]:
        have = [g for g in PROCGEN_GAMES if mode in GAME_MODES[g]]
        raise UserError(
            f"--distribution_mode {mode} does not exist for {game} (it has {', '.join(GAME_MODES[game])}); "
            f"{mode} exists for {', '.join(have)}"
        )


def _task_id(game: str, mode: str) -> str:
    return f"{game.capitalize()}{mode.capitalize()}-v0"


# --------------------------------------------------------------------------
# The env


class ProcgenEnv(SingleEnvpoolEnv):
    """One Procgen game instance: observations uint8 ``[3, 64, 64]``, 15 actions.

    ``terminated`` when the game ends the episode (death, level solved);
    ``truncated`` at the game's time limit (procgen's per-game timeout,
    e.g. 1000 steps for chaser).  Info keys: ``level_seed`` (the level being
    played), ``prev_level_complete``, ``elapsed_step``; at the end of an
    episode ``episode_stats`` (see the module docstring).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 15}  # procgen's own video frame rate

    def __init__(
        self,
        game: str,
        seed: int | None = None,
        *,
        num_levels: int = 0,
        start_level: int = 0,
        distribution_mode: str = "hard",
        per_game_return: bool = False,
        render_mode: str | None = None,
    ):
        self.game = canonical_game(game)
        check_distribution_mode(self.game, distribution_mode)
        if num_levels < 0 or start_level < 0:
            raise UserError(f"num_levels and start_level must be >= 0, got {num_levels} and {start_level}")
        if start_level + num_levels > _INT32_MAX:
            raise UserError(f"start_level + num_levels must stay below 2**31, got {start_level + num_levels}")
        self.num_levels = int(num_levels)
        self.start_level = int(start_level)
        self.distribution_mode = distribution_mode
        self.per_game_return = per_game_return
        self.render_mode = render_mode
        self.task_id = _task_id(self.game, distribution_mode)
        self.observation_space = spaces.Box(0, 255, OBS_SHAPE, np.uint8)
        self.action_space = spaces.Discrete(NUM_ACTIONS)
        self._action = np.zeros(1, np.int32)
        self._pool = None
        self._last_obs = np.zeros(OBS_SHAPE, np.uint8)
        self._return = 0.0
        if seed is None:
            seed = int(np.random.SeedSequence().generate_state(1)[0])
        self._build(seed)

    def _make_pool(self, seed: int):
        from rl_core.envs.envpool_env import import_envpool

        envpool = import_envpool()  # without matplotlib (envpool's Jumanji renderers)

        try:
            return envpool.make_gymnasium(
                self.task_id,
                num_envs=1,
                batch_size=1,
                num_threads=1,
                seed=seed,
                num_levels=self.num_levels,
                start_level=self.start_level,
            )
        except ImportError as e:
            if "Qt" not in str(e):
                raise
            raise UserError(
                "envpool's Procgen cannot load Qt 5's GUI library: install it "
                "(Debian/Ubuntu: sudo apt-get install libqt5gui5)"
            ) from None

    @staticmethod
    def _info(raw: dict) -> dict[str, Any]:
        return {
            "level_seed": int(raw["level_seed"][0]),
            "prev_level_seed": int(raw["prev_level_seed"][0]),
            "prev_level_complete": bool(raw["prev_level_complete"][0]),
            "elapsed_step": int(raw["elapsed_step"][0]),
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, raw = self._reset_pool(seed)
        self._return = 0.0
        self._last_obs = obs[0].copy()
        return self._last_obs, self._info(raw)

    def step(self, action):
        self._action[0] = action
        obs, reward, terminated, truncated, raw = self._pool.step(self._action)
        r = float(reward[0])
        self._return += r
        terminated, truncated = bool(terminated[0]), bool(truncated[0])
        info = self._info(raw)
        if terminated or truncated:
            stats = {"level_complete": float(info["prev_level_complete"])}
            if self.per_game_return:
                stats[f"return_{self.game}"] = self._return
            info["episode_stats"] = stats
        self._last_obs = obs[0].copy()
        return self._last_obs, r, terminated, truncated, info

    def render(self):
        if self.render_mode == "rgb_array":
            return self._last_obs.transpose(1, 2, 0).copy()
        return None


def create_env(
    game: str,
    seed: int | None,
    *,
    num_levels: int = 0,
    start_level: int = 0,
    distribution_mode: str = "hard",
    per_game_return: bool = False,
) -> ProcgenEnv:
    """A seeded Procgen env; observations uint8 ``[3, 64, 64]``, 15 actions."""
    return ProcgenEnv(
        game,
        seed,
        num_levels=num_levels,
        start_level=start_level,
        distribution_mode=distribution_mode,
        per_game_return=per_game_return,
    )


# --------------------------------------------------------------------------
# Multi-task runs


def multi_env_games(n: int, distribution_mode: str = "hard") -> tuple[str, ...]:
    """The games of ``--multi_env n``: the first ``n`` of the R2AC order that have ``distribution_mode``.

    ``memory`` uses the R2AC code's own memory list; the other modes filter
    :data:`MULTI_ENV_ORDER` by what each game supports.
    """
    order = MULTI_ENV_ORDER_MEMORY if distribution_mode == "memory" else MULTI_ENV_ORDER
    order = tuple(g for g in order if distribution_mode in GAME_MODES[g])
    if not 1 <= n <= len(order):
        raise UserError(
            f"--multi_env {n}: with --distribution_mode {distribution_mode} it must be in 1..{len(order)} "
            f"({', '.join(order)})"
        )
    return order[:n]


def game_for_env(games: tuple[str, ...], server_index: int, slot: int, envs_per_server: int) -> str:
    """The game of env ``slot`` of server ``server_index``: global env index modulo the number of games.

    The global index is ``server_index * envs_per_server + slot`` (envs numbered
    server by server), so consecutive envs cycle through the games; with
    ``num_actors`` a multiple of the number of games (``check_flags`` insists)
    every game gets ``num_actors / N`` envs, on every server as evenly as
    ``envs_per_server`` allows.  E.g. 48 envs, 8 servers (6 each), 4 games:
    server 0 hosts games 0 1 2 3 0 1, server 1 hosts 2 3 0 1 2 3, ...
    """
    return games[(server_index * envs_per_server + slot) % len(games)]


def _slot_of_seed(flags, seed: int) -> tuple[int, int] | None:
    """(server, slot) whose env seed the env server derived as ``seed``; None if none matches."""
    from rl_core.envs.seeds import env_seed

    server = flags.server_index or 0
    for slot in range(flags.num_actors // flags.num_servers):
        if env_seed(flags.seed, server, slot) == seed:
            return server, slot
    return None


# --------------------------------------------------------------------------
# Final test protocol


@dataclasses.dataclass(frozen=True)
class LevelSet:
    """One set of the final test: ``episodes`` episodes on levels ``[start_level, start_level + num_levels)``.

    ``group``: ``"train"`` or ``"test"`` (the three held-out sets are summarised
    together, mean and std over their means, as the R2AC code reports them).
    ``held_out``: no level of the set was a training level (False when
    training used every level, ``--num_levels 0``).  The envs' seeds are not
    part of the set: ``rl_core.evaluation.episodes`` gives run ``r`` the env seeds
    ``env_seed(--seed, TEST_SEED_OFFSET + r, slot)``, which no training env has.
    """

    name: str
    group: str
    start_level: int
    num_levels: int
    episodes: int
    distribution_mode: str
    held_out: bool

    def overrides(self) -> dict[str, int]:
        """The flag values that make ``make_env`` play this set."""
        if self.distribution_mode == "exploration":
            return {}
        return {"start_level": self.start_level, "num_levels": self.num_levels}

    def protocol_run(self) -> dict:
        """This set as one run of ``rl_core.evaluation.episodes``'s ``test_protocol`` format."""
        return {"name": self.name, "episodes": self.episodes, "group": self.group, "overrides": self.overrides()}


def final_test_level_sets(flags) -> list[LevelSet]:
    """The level sets of the R2AC final test for a run with these flags.

    ``train``: 200 episodes on the first 200 training levels (``--start_level``,
    at most ``--num_levels`` of them; the R2AC code hard-codes levels 0-199,
    which is this for its ``--start_level 0 --num_levels 500``); then
    ``test_1000``, ``test_1200``, ``test_1400``: 200 episodes on 200 levels from
    each start level, all with the training ``--distribution_mode``.
    ``--distribution_mode exploration`` plays one fixed level per game, so
    there is only the ``train`` set.
    """
    mode = flags.distribution_mode
    train_levels = min(FINAL_TEST_NUM_LEVELS, flags.num_levels) if flags.num_levels else FINAL_TEST_NUM_LEVELS
    sets = [LevelSet("train", "train", flags.start_level, train_levels, FINAL_TEST_NUM_EPISODES, mode, False)]
    if mode == "exploration":
        return sets
    for start in FINAL_TEST_START_LEVELS:
        overlaps = flags.num_levels == 0 or (
            start < flags.start_level + flags.num_levels and flags.start_level < start + FINAL_TEST_NUM_LEVELS
        )
        sets.append(
            LevelSet(f"test_{start}", "test", start, FINAL_TEST_NUM_LEVELS, FINAL_TEST_NUM_EPISODES, mode, not overlaps)
        )
    return sets


LEVEL_SETS = final_test_level_sets  # the same function under a shorter public name


# ------------------------------------------------------- package interface
# Its flag defaults per agent: presets.py (rl_core/config/env_package.py reads them).

# Envs a server steps with a GPU learner on more than 2 cores, half as many without one (rl_core/config/sizing.py).
ENVS_PER_SERVER = 32
# The share of a core one server process keeps busy beside a CPU learner (rl_core/runtime/device.py): each of 8
# servers took 3% of a core while the ResNet learner trained at 320-410 steps/s on 2 cores, so the learner's torch
# threads take both (1.3 times the steps/s of one: docs/experiments/throughput.md).
SERVER_CORES = 0.05


ACTION_KIND = "discrete"  # its envs' actions, known before one is made (rl_core/config/env_package.py)


def add_flags(parser) -> None:
    """Procgen's flags, and the defaults of the R2AC Procgen runs (README of IDSIA/rtrl-elstm)."""
    g = parser.add_argument_group(
        "procgen", "--env names one of the 16 games: chaser or procgen:procgen-chaser-v0 (default: chaser)."
    )
    g.add_argument(
        "--num_levels",
        type=ranged(int, "[0, inf)"),
        default=0,
        metavar="N",
        help="Levels to train on (0: unlimited, as procgen; the R2AC runs use 500).",
    )
    g.add_argument("--start_level", type=ranged(int, "[0, inf)"), default=0, metavar="N", help="First training level.")
    g.add_argument(
        "--distribution_mode",
        default="hard",
        choices=DISTRIBUTION_MODES,
        help="Procgen distribution mode (extreme, memory, exploration exist for some games only).",
    )
    g.add_argument(
        "--multi_env",
        type=ranged(int, "[1, inf)"),
        default=1,
        metavar="N",
        help="Train on the first N games of the R2AC order (bigfish, fruitbot, maze, leaper, plunder, "
        "starpilot, ...; memory mode: dodgeball, heist, maze, miner, caveflyer, jumper); "
        "env i of the run plays game i mod N. Excludes --env.",
    )
    g.add_argument(
        "--valid_distribution_mode",
        default=None,
        choices=DISTRIBUTION_MODES,
        help="Validation envs' distribution mode (default: the training one).",
    )
    g.add_argument(
        "--valid_num_levels",
        type=ranged(int, "[0, inf)"),
        default=None,
        help="Validation levels (default: the training ones).",
    )
    g.add_argument(
        "--valid_start_level",
        type=ranged(int, "[0, inf)"),
        default=None,
        help="First validation level (default: training's).",
    )
    parser.set_defaults(
        model="resnet",
        num_actors=48,
        num_servers=8,
        batch_size=32,
        unroll_length=50,
        total_steps=200_000_000,
        learning_rate=0.0006,
        entropy_cost=0.01,
        epsilon=0.01,
        grad_norm_clipping=40.0,
        hidden_size=256,
    )


def _games(flags) -> tuple[str, ...]:
    if flags.multi_env > 1:
        return multi_env_games(flags.multi_env, flags.distribution_mode)
    return (canonical_game(flags.env),)


def num_actors_multiple(flags) -> int:
    """--num_actors must be a multiple of this (``check_flags``): the games of a --multi_env run, so that
    every game gets as many envs; what the launcher's sizing (``rl_core.config.sizing``) keeps to."""
    return max(1, flags.multi_env)


def check_flags(parser, flags) -> None:
    if flags.start_level + flags.num_levels > _INT32_MAX:
        parser.error("--start_level + --num_levels must stay below 2**31")
    if flags.distribution_mode == "exploration" and (flags.num_levels or flags.start_level):
        parser.error("--distribution_mode exploration plays one fixed level per game: drop --num_levels/--start_level")
    try:
        if flags.multi_env > 1:
            if flags.env is not None:
                parser.error(
                    f"--env {flags.env} and --multi_env {flags.multi_env} exclude each other: "
                    f"--multi_env N trains on the first N games of the R2AC order"
                )
            games = multi_env_games(flags.multi_env, flags.distribution_mode)
            if flags.num_actors % len(games):
                parser.error(
                    f"--num_actors ({flags.num_actors}) must be a multiple of --multi_env "
                    f"({len(games)}) so that every game gets the same number of envs"
                )
            flags.env = ",".join(games)
        else:
            flags.env = canonical_game(flags.env or DEFAULT_GAME)
            games = (flags.env,)
        for game in games:
            check_distribution_mode(game, flags.distribution_mode)
            if flags.valid_distribution_mode:
                check_distribution_mode(game, flags.valid_distribution_mode)
    except UserError as e:
        parser.error(str(e))
    if flags.num_actions is not None and flags.num_actions != NUM_ACTIONS:
        parser.error(f"--num_actions {flags.num_actions} disagrees with Procgen's {NUM_ACTIONS} actions: drop the flag")


def make_env(flags, seed: int, game: str | None = None) -> ProcgenEnv:
    """The env an env server hosts, from the run's flags.

    In a multi-task run the game follows from the env's place in the run
    (:func:`game_for_env`); the env server passes only the seed, and the seed
    says which slot of this server (``--server_index``) it is.  A seed of no
    slot (an env made outside a server) plays ``games[seed % N]`` unless
    ``game`` is given.
    """
    games = _games(flags)
    if game is None:
        if len(games) == 1:
            game = games[0]
        else:
            where = _slot_of_seed(flags, seed)
            if where is None:
                game = games[seed % len(games)]
            else:
                game = game_for_env(games, where[0], where[1], flags.num_actors // flags.num_servers)
    return create_env(
        game,
        seed,
        num_levels=flags.num_levels,
        start_level=flags.start_level,
        distribution_mode=flags.distribution_mode,
        per_game_return=len(games) > 1,
    )


def _task_overrides(game: str) -> dict:
    """Flag values that make ``make_env`` play ``game`` alone (a task of a multi-task run)."""
    return {"env": game, "multi_env": 1}


def test_protocol(flags) -> list[dict]:
    """The R2AC final test: the training levels, then three held-out sets (group "test": mean and std over them).

    A multi-task run (``--multi_env N``) plays every set on each of its N games,
    the set's episodes on each: run ``"<set>/<game>"``, reported per game and,
    per set, as the mean over the games.
    """
    games = _games(flags)
    if len(games) == 1:
        return [level_set.protocol_run() for level_set in final_test_level_sets(flags)]
    runs = []
    for level_set in final_test_level_sets(flags):
        base = level_set.protocol_run()
        for game in games:
            runs.append(
                dict(
                    base,
                    name=f"{level_set.name}/{game}",
                    set=level_set.name,
                    task=game,
                    overrides={**base["overrides"], **_task_overrides(game)},
                )
            )
    return runs


def validation_overrides(flags) -> dict:
    """--valid_distribution_mode / --valid_num_levels / --valid_start_level for the validation envs."""
    overrides = {
        "distribution_mode": flags.valid_distribution_mode,
        "num_levels": flags.valid_num_levels,
        "start_level": flags.valid_start_level,
    }
    return {k: v for k, v in overrides.items() if v is not None}


def validation_protocol(flags) -> list[dict]:
    """Validation on the ``--valid_*`` levels: ``--valid_num_episodes`` episodes, or in a multi-task
    run ``ceil(--valid_num_episodes / N)`` on each of the N games (every game, the same number each)."""
    games = _games(flags)
    overrides = validation_overrides(flags)
    if len(games) == 1:
        return [{"name": "valid", "episodes": flags.valid_num_episodes, "overrides": overrides}]
    each = -(-flags.valid_num_episodes // len(games))
    return [
        {"name": f"valid/{game}", "task": game, "episodes": each, "overrides": {**overrides, **_task_overrides(game)}}
        for game in games
    ]


if __name__ == "__main__":  # a quick throughput figure: python -m torchbeast_procgen.env [name] [steps]
    from rl_core.envs.env_speed import main

    main(create_env, DEFAULT_GAME, 20_000)
