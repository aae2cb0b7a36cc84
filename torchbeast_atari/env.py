"""Atari environments with DeepMind / torchbeast preprocessing, built on ale-py.

``create_env`` returns a gymnasium env whose observations are uint8 arrays of
shape ``[4, 84, 84]`` (channel-first stack of the last 4 preprocessed frames,
oldest first, newest last). The preprocessing follows OpenAI baselines'
``wrap_deepmind(make_atari(...), frame_stack=True, clip_rewards=False)``, the
pipeline torchbeast uses:

* up to ``noop_max`` random no-op frames after each new game
  (count drawn uniformly from ``0..noop_max`` with the env's seeded RNG);
* action repeat 4, max-pooling the last 2 emulator frames;
* FIRE (then the game's action #2, as baselines' ``FireResetEnv``) after
  every reset for games whose minimal action set contains FIRE;
* sticky actions with probability ``sticky_actions`` (ALE's
  ``repeat_action_probability``) and the minimal or full (18) action set;
* the game truncated after ``max_episode_frames`` emulator frames
  (counted from the game's start, no-op and FIRE frames included);
* 84x84 grayscale frames: ALE's luminance screen resized with area
  interpolation (bit-identical to ``cv2.resize(..., INTER_AREA)``, which
  baselines uses; pure numpy here, no OpenCV dependency);
* episodic life (baselines' ``EpisodicLifeEnv``): a lost life ends the
  *training* episode (``terminated=True``) without ending the game; the next
  ``reset()`` continues the game. ``info["episode_end"]`` is True only on the
  step where the game is over or truncated, so a logger that ends episodes on
  it records whole-game returns;
* whole games for a policy trained with episodic life (``life_loss_reset``,
  the test env's): a lost life does not end the episode, but the game goes on
  at once as that ``reset()`` would go on with it (a no-op, then FIRE and
  action #2; the frame stack restarts), since such a policy never had to press
  FIRE itself (a greedy Breakout policy that does not would wait for the
  108k-frame cap after its first lost life);
* raw (unclipped) rewards.

Per-game episode statistics (``info["episode_stats"]`` on the step with
``episode_end``) come from :class:`EpisodeStats`, a wrapper driven by small
per-step probes of the emulator; ``GAME_PROBES`` says which game gets which
(Montezuma's Revenge: ``rooms_visited``, distinct values of RAM[3], and ``rooms_mask``, which
of its 24 rooms they were).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

import ale_py
import ale_py.roms
import gymnasium
import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding

from rl_core.errors import UserError
from rl_core.flag_types import ranged

__all__ = [
    "AtariEnv",
    "DistinctRamValueMask",
    "DistinctRamValues",
    "EpisodeProbe",
    "EpisodeStats",
    "FrameStack",
    "GAME_PROBES",
    "atari_games",
    "canonical_env_id",
    "create_env",
    "game_rom_id",
    "num_actions",
]

GAMES_LIST = Path(__file__).resolve().parents[1] / "list_atari_games.txt"
FULL_ACTION_SPACE_SIZE = len(ale_py.Action.__members__)  # 18
FRAME_SIZE = 84
FRAME_SKIP = 4
FRAME_STACK = 4

ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)


# --------------------------------------------------------------------------
# Game names


def _env_id(game_name: str) -> str:
    return f"{game_name}NoFrameskip-v4"


def _game_name(rom_id: str) -> str:
    """ale-py's own rom id -> PascalCase name conversion ("montezuma_revenge" -> "MontezumaRevenge")."""
    return rom_id.title().replace("_", "")


def _key(name: str) -> str:
    return name.replace("_", "").lower()


@functools.lru_cache(maxsize=1)
def atari_games() -> dict[str, int]:
    """``{"PongNoFrameskip-v4": 6, ...}``: every game the installed ALE runs, with its minimal action count.

    Read from ``list_atari_games.txt`` (written by ``scripts/list_atari_games.py``
    from the real ALE); where that file is absent (e.g. an installed package),
    the ALE is asked directly (slower: every ROM is opened once).
    """
    if GAMES_LIST.exists():
        games = {}
        for line in GAMES_LIST.read_text().splitlines():
            if line.strip():
                env_id, n = line.split()
                games[env_id] = int(n)
        return games
    games = {}
    for rom_id in ale_py.roms.get_all_rom_ids():
        ale = _supported_ale(rom_id)
        if ale is not None:
            ale.loadROM(ale_py.roms.get_rom_path(rom_id))
            games[_env_id(_game_name(rom_id))] = len(ale.getMinimalActionSet())
    return games


def _supported_ale(rom_id: str) -> ale_py.ALEInterface | None:
    """An ALEInterface if the ALE can run ``rom_id`` single-player, else None.

    (``loadROM`` on an unsupported ROM, e.g. combat, makes the ALE exit the
    process, so ask ``isSupportedROM`` first.)
    """
    ale = ale_py.ALEInterface()
    return ale if ale.isSupportedROM(ale_py.roms.get_rom_path(rom_id)) else None


@functools.lru_cache(maxsize=1)
def _games_by_key() -> dict[str, tuple[str, str]]:
    """normalised game name -> (canonical env id, rom id), for the games in ``atari_games()``."""
    rom_ids = {_key(_game_name(r)): r for r in ale_py.roms.get_all_rom_ids()}
    games = {}
    for env_id in atari_games():
        key = _key(env_id[: -len("NoFrameskip-v4")])
        if key in rom_ids:
            games[key] = (env_id, rom_ids[key])
    return games


_ID_RE = re.compile(r"^(?:ALE/)?(?P<game>[A-Za-z0-9_]+?)(?:NoFrameskip|Deterministic)?(?:-v\d+)?$")


def _parse(env_id: str) -> tuple[str, str]:
    """-> (canonical env id, rom id); UserError if not a game the ALE runs."""
    m = _ID_RE.match(env_id.strip()) if isinstance(env_id, str) else None
    game = _games_by_key().get(_key(m.group("game"))) if m else None
    if game is not None:
        return game
    raise UserError(f"unknown Atari game {env_id!r}: see list_atari_games.txt")


def canonical_env_id(env_id: str) -> str:
    """``"PongNoFrameskip-v4"`` for ``"PongNoFrameskip-v4"``, ``"ALE/Pong-v5"``, ``"Pong-v0"``, ``"Pong"``, ``"pong"``.

    Only the game is taken from the name: v5's sticky actions / frame skip are
    *not* implied (``create_env``'s arguments decide those).
    Raises ``UserError`` for a game that is not in the installed ALE.
    """
    return _parse(env_id)[0]


def game_rom_id(env_id: str) -> str:
    """ale-py ROM id of a game (``"MontezumaRevenge"`` -> ``"montezuma_revenge"``)."""
    return _parse(env_id)[1]


def num_actions(env_id: str, full_action_space: bool = False) -> int:
    """Size of the action space ``create_env`` would give, without starting an emulator."""
    canonical = canonical_env_id(env_id)
    return FULL_ACTION_SPACE_SIZE if full_action_space else atari_games()[canonical]


# --------------------------------------------------------------------------
# Frames


def _area_weights(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """Sparse area-interpolation weights: out[i] = sum_k w[i, k] * in[idx[i, k]].

    Weight = the fraction of output cell ``i`` covered by input cell ``j``
    (OpenCV's INTER_AREA for downscaling).
    """
    scale = n_in / n_out
    rows = []
    for i in range(n_out):
        lo, hi = i * scale, (i + 1) * scale
        row = []
        for j in range(int(np.floor(lo)), min(n_in, int(np.ceil(hi)))):
            overlap = min(hi, j + 1) - max(lo, j)
            if overlap > 1e-9:
                row.append((j, overlap / scale))
        rows.append(row)
    k = max(len(r) for r in rows)
    idx = np.zeros((n_out, k), np.intp)
    w = np.zeros((n_out, k), np.float32)
    for i, row in enumerate(rows):
        for c, (j, weight) in enumerate(row):
            idx[i, c], w[i, c] = j, weight
    return idx, w


class AreaResize:
    """Grayscale uint8 ``[H, W]`` -> ``[out_h, out_w]`` by area interpolation.

    Horizontal pass first, in float32, then round half to even: this is the
    arithmetic of ``cv2.resize(img, (out_w, out_h), interpolation=cv2.INTER_AREA)``
    and gives the same bytes on ALE screens.
    """

    def __init__(self, in_shape: tuple[int, int], out_shape: tuple[int, int] = (FRAME_SIZE, FRAME_SIZE)):
        self.in_shape, self.out_shape = tuple(in_shape), tuple(out_shape)
        self._row_idx, self._row_w = _area_weights(in_shape[0], out_shape[0])
        self._col_idx, self._col_w = _area_weights(in_shape[1], out_shape[1])

    def __call__(self, img: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        horiz = np.einsum("rik,ik->ri", img[:, self._col_idx].astype(np.float32), self._col_w)
        vert = np.einsum("ikc,ik->ic", horiz[self._row_idx], self._row_w)
        np.rint(vert, out=vert)
        if out is None:
            return vert.astype(np.uint8)
        out[...] = vert
        return out


# --------------------------------------------------------------------------
# The preprocessed game


class AtariEnv(gymnasium.Env):
    """One Atari game through the DeepMind preprocessing; observations are single ``[84, 84]`` uint8 frames.

    (``create_env`` adds the 4-frame stack and per-game statistics.)

    Info keys: ``lives``; ``frame_number`` (emulator frames since the game
    started); ``episode_end`` on steps (game over or truncated: the logged,
    whole-game episode ends) and ``life_reset`` (with ``life_loss_reset``: this
    step lost a life and the game went on as a reset would go on with it); on
    reset ``new_game`` (False when a game goes on after a lost life) and
    ``noops`` (no-op frames done, on a new game).
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        game: str,
        seed: int | None = None,
        *,
        episodic_life: bool = True,
        life_loss_reset: bool = False,
        sticky_actions: float = 0.0,
        full_action_space: bool = False,
        max_episode_frames: int = 108_000,
        noop_max: int = 30,
        frame_skip: int = FRAME_SKIP,
        render_mode: str | None = None,
    ):
        if not 0.0 <= sticky_actions <= 1.0:
            raise UserError(f"sticky_actions must be a probability in [0, 1], got {sticky_actions}")
        if noop_max < 0:
            raise UserError(f"noop_max must be >= 0, got {noop_max}")
        if max_episode_frames <= 0:
            raise UserError(f"max_episode_frames must be > 0, got {max_episode_frames}")
        if frame_skip < 1:
            raise UserError(f"frame_skip must be >= 1, got {frame_skip}")
        self.env_id, self.rom_id = _parse(game)
        self.episodic_life = episodic_life
        self.life_loss_reset = life_loss_reset and not episodic_life
        self.sticky_actions = float(sticky_actions)
        self.full_action_space = full_action_space
        self.max_episode_frames = int(max_episode_frames)
        self.noop_max = int(noop_max)
        self.frame_skip = int(frame_skip)
        # A video of one frame per agent step plays in real time at the ALE's 60 Hz / frame_skip.
        self.metadata = {"render_modes": ["rgb_array"], "render_fps": 60 / self.frame_skip}
        self.render_mode = render_mode

        self.ale = ale_py.ALEInterface()
        self._seed(seed)  # loads the ROM
        minimal = list(self.ale.getMinimalActionSet())
        self._action_set = list(self.ale.getLegalActionSet()) if full_action_space else minimal
        # FIRE on reset depends on the game (its minimal set), not on the action space asked for.
        if ale_py.Action.FIRE in minimal and len(minimal) >= 3:
            self._fire_actions = [ale_py.Action.FIRE, minimal[2]]  # baselines' FireResetEnv: step(1), step(2)
        else:
            self._fire_actions = []

        h, w = self.ale.getScreenDims()
        self._screens = np.zeros((2, h, w), np.uint8)
        self._resize = AreaResize((h, w))
        self._lives = 0
        self._continue_game = False  # the last step lost a life (episodic life) and the game goes on

        self.action_space = spaces.Discrete(len(self._action_set))
        self.observation_space = spaces.Box(0, 255, (FRAME_SIZE, FRAME_SIZE), np.uint8)

    # -- seeding ----------------------------------------------------------

    def _seed(self, seed: int | None) -> None:
        ss = np.random.SeedSequence(seed)
        np_seed, ale_seed = ss.generate_state(n_words=2)
        self._np_random, _ = seeding.np_random(int(np_seed))
        self.ale.setInt("random_seed", int(np.int32(ale_seed)))
        self.ale.setFloat("repeat_action_probability", self.sticky_actions)
        self.ale.setInt("max_num_frames_per_episode", 0)  # truncation is ours (see step)
        self.ale.loadROM(ale_py.roms.get_rom_path(self.rom_id))  # applies the settings above

    def get_action_meanings(self) -> list[str]:
        return [a.name for a in self._action_set]

    # -- emulator ---------------------------------------------------------

    def _repeat(self, action: ale_py.Action) -> float:
        """``frame_skip`` frames of ``action``; leaves the max of the last 2 screens in ``_screens[1]``."""
        ale, skip, reward = self.ale, self.frame_skip, 0.0
        got_previous = False
        for i in range(skip):
            reward += ale.act(action)
            if i == skip - 2:
                ale.getScreenGrayscale(self._screens[0])
                got_previous = True
            if ale.game_over() or ale.getEpisodeFrameNumber() >= self.max_episode_frames:
                break
        ale.getScreenGrayscale(self._screens[1])
        if got_previous:
            np.maximum(self._screens[0], self._screens[1], out=self._screens[1])
        return reward

    def _frame(self) -> np.ndarray:
        return self._resize(self._screens[1])

    def _new_game(self) -> int:
        self.ale.reset_game()
        # uniform in 0..noop_max (baselines draws 1..noop_max); raw emulator frames, as in NoopResetEnv
        noops = int(self._np_random.integers(0, self.noop_max + 1))
        for _ in range(noops):
            self.ale.act(ale_py.Action.NOOP)
            if self.ale.game_over():  # as baselines' NoopResetEnv
                self.ale.reset_game()
        self.ale.getScreenGrayscale(self._screens[1])
        return noops

    # -- gymnasium API ----------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is not None:
            self._seed(seed)
        info: dict[str, Any] = {}
        if self._continue_game and seed is None and not self.ale.game_over():
            self._go_on()
            info["new_game"] = False
        else:
            info["noops"] = self._new_game()
            info["new_game"] = True
        self._continue_game = False
        for action in self._fire_actions:
            self._repeat(action)
            if self.ale.game_over():  # as baselines' FireResetEnv (cannot loop: no FIRE after this)
                info["noops"] = self._new_game()
                info["new_game"] = True
                break
        self._lives = self.ale.lives()
        info["lives"] = self._lives
        info["frame_number"] = self.ale.getEpisodeFrameNumber()
        return self._frame(), info

    def _go_on(self, serve: tuple = ()) -> float:
        """Go on with a game after a lost life: baselines' ``EpisodicLifeEnv.reset`` (step(0)), then ``serve``;
        stops at game over or truncation."""
        reward = 0.0
        for action in (ale_py.Action.NOOP, *serve):
            reward += self._repeat(action)
            if self.ale.game_over() or self.ale.getEpisodeFrameNumber() >= self.max_episode_frames:
                break
        return reward

    def step(self, action):
        reward = self._repeat(self._action_set[action])
        lives = self.ale.lives()
        life_lost = 0 < lives < self._lives
        life_reset = (
            life_lost
            and self.life_loss_reset
            and not self.ale.game_over()
            and self.ale.getEpisodeFrameNumber() < self.max_episode_frames
        )
        if life_reset:  # what reset() does after an episodic life's end, the episode going on
            reward += self._go_on(tuple(self._fire_actions))
            lives = self.ale.lives()
        game_over = self.ale.game_over()
        frame_number = self.ale.getEpisodeFrameNumber()
        truncated = not game_over and frame_number >= self.max_episode_frames
        self._lives = lives
        terminated = game_over or (self.episodic_life and life_lost)
        episode_end = game_over or truncated
        self._continue_game = terminated and not episode_end
        info = {"lives": lives, "frame_number": frame_number, "episode_end": episode_end}
        if life_reset:
            info["life_reset"] = True
        return self._frame(), reward, terminated, truncated, info

    def render(self):
        if self.render_mode == "rgb_array":
            return self.ale.getScreenRGB()
        return None


# --------------------------------------------------------------------------
# Episode statistics


class EpisodeProbe(Protocol):
    """Reads the emulator every step of a game and summarises it as one number."""

    def reset(self, ale: ale_py.ALEInterface) -> None:
        """A new game started (``observe`` follows)."""

    def observe(self, ale: ale_py.ALEInterface) -> None:
        """Called after reset and after every step."""

    def result(self) -> float:
        """The statistic for the game so far."""


class DistinctRamValues:
    """How many distinct values one RAM byte took during the game (e.g. rooms visited)."""

    def __init__(self, address: int):
        self.address = address
        self._ram = np.zeros(128, np.uint8)
        self._seen: set[int] = set()

    def reset(self, ale: ale_py.ALEInterface) -> None:
        self._seen = set()

    def observe(self, ale: ale_py.ALEInterface) -> None:
        ale.getRAM(self._ram)
        self._seen.add(int(self._ram[self.address]))

    def result(self) -> float:
        return float(len(self._seen))


class DistinctRamValueMask(DistinctRamValues):
    """The set of values one RAM byte took during the game, as a bitmask (bit k: value k; values
    of 24 and above are left out): a set-valued statistic (``rl_core.records.seen_sets``), e.g. which rooms."""

    def result(self) -> float:
        from rl_core.records.seen_sets import to_mask

        return to_mask(self._seen)


ProbeFactory = Callable[[], EpisodeProbe]

# ROM id -> {statistic name -> probe factory}
GAME_PROBES: dict[str, dict[str, ProbeFactory]] = {
    "montezuma_revenge": {
        "rooms_visited": functools.partial(DistinctRamValues, 3),
        "rooms_mask": functools.partial(DistinctRamValueMask, 3),
    },
}


class EpisodeStats(gymnasium.Wrapper):
    """Adds ``info["episode_stats"] = {name: float}`` on the step whose ``info["episode_end"]`` is True.

    Wraps an :class:`AtariEnv` directly (it needs ``info["new_game"]`` from
    reset and the emulator ``env.unwrapped.ale``); every probe sees the state
    after each reset and step, across lives, and is reset at each new game.
    """

    def __init__(self, env: gymnasium.Env, probes: Mapping[str, ProbeFactory]):
        super().__init__(env)
        self._probes = {name: make() for name, make in probes.items()}

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        ale = self.env.unwrapped.ale
        for probe in self._probes.values():
            if info.get("new_game", True):
                probe.reset(ale)
            probe.observe(ale)
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        ale = self.env.unwrapped.ale
        for probe in self._probes.values():
            probe.observe(ale)
        if info.get("episode_end", terminated or truncated):
            info["episode_stats"] = {name: probe.result() for name, probe in self._probes.items()}
        return obs, reward, terminated, truncated, info


# --------------------------------------------------------------------------
# Frame stack


class FrameStack(gymnasium.ObservationWrapper):
    """``[H, W]`` frames -> ``[k, H, W]``, oldest first, newest last; reset fills the stack with the reset frame."""

    def __init__(self, env: gymnasium.Env, k: int = FRAME_STACK):
        super().__init__(env)
        shape = env.observation_space.shape
        self._frames = np.zeros((k, *shape), env.observation_space.dtype)
        self.observation_space = spaces.Box(0, 255, self._frames.shape, self._frames.dtype)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self._frames[:] = obs
        return self._frames.copy(), info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if info.get("life_reset"):  # the game went on as after a reset (AtariEnv's life_loss_reset): so does the stack
            self._frames[:] = obs
            return self._frames.copy(), reward, terminated, truncated, info
        return self.observation(obs), reward, terminated, truncated, info

    def observation(self, observation):
        self._frames[:-1] = self._frames[1:]
        self._frames[-1] = observation
        return self._frames.copy()


# --------------------------------------------------------------------------


def create_env(
    env_id: str,
    seed: int,
    *,
    episodic_life: bool = True,
    life_loss_reset: bool = False,
    sticky_actions: float = 0.0,
    full_action_space: bool = False,
    max_episode_frames: int = 108_000,
    noop_max: int = 30,
    render_mode: str | None = None,
) -> gymnasium.Env:
    """A seeded Atari env with DeepMind preprocessing; observations uint8 ``[4, 84, 84]``.

    ``env_id``: ``"PongNoFrameskip-v4"``, ``"ALE/Pong-v5"``, ... (see
    :func:`canonical_env_id`). ``seed`` seeds the no-op draws and the ALE (sticky
    actions); ``reset()`` without a seed goes on with that RNG, and
    ``reset(seed=s)`` reseeds and starts a new game.
    """
    env: gymnasium.Env = AtariEnv(
        env_id,
        seed,
        episodic_life=episodic_life,
        life_loss_reset=life_loss_reset,
        sticky_actions=sticky_actions,
        full_action_space=full_action_space,
        max_episode_frames=max_episode_frames,
        noop_max=noop_max,
        render_mode=render_mode,
    )
    probes = GAME_PROBES.get(env.rom_id)
    if probes:
        env = EpisodeStats(env, probes)
    return FrameStack(env, FRAME_STACK)


# ------------------------------------------------------- package interface
# Its flag defaults per agent, with a recurrent core and with --rnd: presets.py (rl_core/config/env_package.py reads them).

# Envs a server steps with a GPU learner on more than 2 cores, half as many without one (rl_core/config/sizing.py):
# 14 servers x 32 on 16 cores with an H100 reached 57k frames/s on Pong, the sizing's anchor.
ENVS_PER_SERVER = 32
# ...each process one server (--server_splits 1).  Splits pay in benchmarks/server_overlap.py's emulation of a GPU
# learner's round trip (1.15x), but not end to end: on the H200 machine (16 cores) IMPALA Pong ran 14 processes x 2
# splits x 16 envs at 0.86-0.91 of the agent steps/s of 14 x 32 unsplit (benchmarks/gpu_suite.py's splits stage,
# docs/experiments/throughput.md): the learner process, not the servers, bounds the run there.
SERVER_SPLITS = 1
# Under --deterministic (PPO's default here) the learner's torch threads take every core: its servers idle while it
# infers and learns.  On 2 cores PPO Pong's lockstep ran 1.36-1.49x the steps/s on 2 threads than on 1, where
# MinAtar's net ran 0.78-0.83x and CartPole's MLP 0.46x (docs/experiments/throughput.md), so it is this package's.
LOCKSTEP_CORES = True


ACTION_KIND = "discrete"  # its envs' actions, known before one is made (rl_core/config/env_package.py)


def add_flags(parser) -> None:
    """Atari's flags and defaults (torchbeast's, with T=20, B=32 and 16 envs on 2 servers; IMPALA's are B=8 and 56
    envs, below)."""
    g = parser.add_argument_group("atari")
    g.add_argument(
        "--disable_episodic_life", action="store_true", help="A lost life does not end the training episode."
    )
    g.add_argument(
        "--sticky_actions",
        type=ranged(float, "[0, 1]"),
        default=0.0,
        metavar="P",
        help="Probability of repeating the previous action (RND runs use 0.25).",
    )
    g.add_argument("--full_action_space", action="store_true", help="All 18 actions instead of the minimal set.")
    g.add_argument(
        "--max_episode_frames", type=ranged(int, "[1, inf)"), default=108_000, help="Emulator frames per game at most."
    )
    g.add_argument(
        "--noop_max", type=ranged(int, "[0, inf)"), default=30, help="Up to this many no-ops at the start of a game."
    )
    g.add_argument(
        "--video_view",
        default="screen",
        choices=["screen", "network"],
        help="--record_video shows the emulator's RGB screen as a person sees it (screen), or the "
        "84x84 grayscale frames the network sees (network).",
    )
    parser.set_defaults(
        env="PongNoFrameskip-v4",
        model="atari",
        num_actors=16,
        num_servers=2,
        batch_size=32,
        unroll_length=20,
        total_steps=50_000_000,
        rnd_channels=1,
    )


def check_flags(parser, flags) -> None:
    try:
        flags.env = canonical_env_id(flags.env)
        n = num_actions(flags.env, flags.full_action_space)
    except UserError as e:
        parser.error(str(e))
    if flags.num_actions is not None and flags.num_actions != n:
        parser.error(f"--num_actions {flags.num_actions} disagrees with {flags.env}'s {n} actions: drop the flag")
    if not 0.0 <= flags.sticky_actions < 1.0:
        parser.error(f"--sticky_actions must be in [0, 1), got {flags.sticky_actions}")


def make_env(flags, seed: int) -> gymnasium.Env:
    """The env an env server hosts, from the run's flags."""
    return create_env(
        flags.env,
        seed,
        episodic_life=not flags.disable_episodic_life,
        sticky_actions=flags.sticky_actions,
        full_action_space=flags.full_action_space,
        max_episode_frames=flags.max_episode_frames,
        noop_max=flags.noop_max,
    )


def make_test_env(flags, seed: int, record: bool = False) -> gymnasium.Env:
    """Whole games for validation and the final test: no episodic life, but a policy trained with it gets the game
    going on after a lost life as its training did (``life_loss_reset``).  Recorded, it renders the emulator's RGB
    screen (210x160), unless ``--video_view network`` asks for the network's input."""
    return create_env(
        flags.env,
        seed,
        episodic_life=False,
        life_loss_reset=not flags.disable_episodic_life,
        sticky_actions=flags.sticky_actions,
        full_action_space=flags.full_action_space,
        max_episode_frames=flags.max_episode_frames,
        noop_max=flags.noop_max,
        render_mode="rgb_array" if record and flags.video_view == "screen" else None,
    )


def test_protocol(flags) -> list[dict]:
    """DeepMind's protocol: 5 runs of 30 whole games, each run its own seeds; mean and std over runs."""
    return [{"name": f"run{i}", "episodes": 30, "group": "test", "overrides": {}} for i in range(5)]
