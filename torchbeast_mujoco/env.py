"""Gymnasium's MuJoCo continuous-control tasks, simulated by envpool.

``--env`` names one of gymnasium's MuJoCo tasks with a ``-v4`` or ``-v5``
suffix (``HalfCheetah-v5``; no suffix means ``-v5``, gymnasium's newest; the
name's case does not matter).  :class:`MujocoEnv` is a gymnasium.Env around an
envpool pool of one env (``num_envs=1``, one worker thread):

* observations float32 ``[obs_dim]`` (envpool gives float64);
* the action space is a float32 Box with the task's bounds (``[-1, 1]`` for
  most, ``[-0.4, 0.4]`` for the Humanoids, ``[-3, 3]`` InvertedPendulum,
  ``[-2, 2]`` Pusher).  Actions are clipped to it, as gymnasium's
  ``ClipAction`` does (envpool and gymnasium's MuJoCo envs take any action and
  charge its control cost unclipped); a non-finite action is an error;
* ``terminated`` and ``truncated`` stay distinct: the task's time limit
  (1000 steps; Reacher 50, Pusher 100) is a truncation, a Hopper / Walker2d /
  Ant / Humanoid falling over, or InvertedPendulum's pole falling, a termination;
* envpool resets an env on the step *after* its episode ended, ignoring that
  step's action and returning a reset observation with reward 0.  This env
  never lets that step happen: after an episode ends, ``reset()`` resets the
  pool explicitly, and ``step()`` before that raises (the env server and
  ``rl_core.evaluation.episodes`` call ``reset()`` themselves after every end);
* envpool seeds a pool when it is made, so ``reset(seed=s)`` makes a new pool
  with seed ``s`` (about 5 ms) unless the pool was just made with ``s`` and has
  not played yet; ``reset()`` without a seed continues the pool's random
  stream.  Same seed and same actions give the same trajectory, episode after
  episode.  (envpool takes int32 seeds: the seed used is ``seed % 2**31``.)

Videos (``--record_video``): envpool 1.2.5 renders MuJoCo off-screen with EGL
(its own bundled libEGL/libOpenGL, Mesa's software ``swrast`` driver on a
machine without a GPU: Debian's ``libegl-mesa0`` and ``libgl1-mesa-dri``).
MuJoCo's GL loader looks for the current context through the process's global
symbols, where envpool's private GL libraries are not, and MuJoCo then exits
the process (``ERROR: gladLoadGL error``).  :func:`enable_rendering` therefore
loads those libraries once with ``RTLD_GLOBAL``, after checking in a child
process that a frame can be rendered at all; where it cannot, the test env
plays without frames and a warning says why.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import logging
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from rl_core.envs.envpool_env import SingleEnvpoolEnv
from rl_core.errors import UserError
from torchbeast_mujoco.presets import ENV_DEFAULTS
from rl_core.flag_types import ranged

log = logging.getLogger("torchbeast_mujoco")

__all__ = [
    "DEFAULT_ENV",
    "MujocoEnv",
    "TASKS",
    "VERSIONS",
    "add_flags",
    "canonical_env_id",
    "check_flags",
    "create_env",
    "enable_rendering",
    "make_env",
    "make_test_env",
    "test_protocol",
]

TASKS = (
    "HalfCheetah",
    "Hopper",
    "Walker2d",
    "Ant",
    "Humanoid",
    "HumanoidStandup",
    "Swimmer",
    "Reacher",
    "Pusher",
    "InvertedPendulum",
    "InvertedDoublePendulum",
)
VERSIONS = ("v4", "v5")
DEFAULT_VERSION = "v5"
DEFAULT_ENV = "HalfCheetah-v5"
DEFAULT_AGENT = "ppo"
DEFAULT_RENDER_SIZE = 240  # 1000 frames of 240x240 RGB: 173 MB held for the video (gymnasium's 480: 691 MB)


# --------------------------------------------------------------------------
# Task names


_TASKS_BY_KEY = {t.lower(): t for t in TASKS}
_NAME_RE = re.compile(r"^(?P<task>[A-Za-z0-9]+?)(?:-(?P<version>v\d+))?$")


def _unknown(name) -> UserError:
    return UserError(
        f"unknown MuJoCo task {name!r}: use one of {', '.join(TASKS)} with -v4 or -v5 "
        f"(e.g. {DEFAULT_ENV}; no suffix: -{DEFAULT_VERSION})"
    )


def canonical_env_id(name: str) -> str:
    """``"HalfCheetah-v5"`` for ``"HalfCheetah-v5"``, ``"halfcheetah-v5"``, ``"HalfCheetah"``; ``"Hopper-v4"`` ...

    Raises a one-line ``UserError`` naming the valid tasks for anything else
    (envpool's ``-v2``/``-v3`` mujoco-py-era versions included).
    """
    m = _NAME_RE.match(name.strip()) if isinstance(name, str) else None
    task = _TASKS_BY_KEY.get(m.group("task").lower()) if m else None
    if task is None:
        raise _unknown(name)
    version = m.group("version") or DEFAULT_VERSION
    if version not in VERSIONS:
        raise UserError(
            f"MuJoCo task {name!r}: version {version} is not supported: use {task}-v4 or {task}-v5 "
            f"(gymnasium's mujoco-bindings versions)"
        )
    return f"{task}-{version}"


# --------------------------------------------------------------------------
# Rendering


def _envpool_gl_libraries() -> list[str]:
    """envpool's bundled GL libraries, dependencies first (empty where the wheel has none)."""
    from rl_core.envs.envpool_env import import_envpool

    envpool = import_envpool()  # without matplotlib (envpool's Jumanji renderers)

    libs_dir = Path(envpool.__file__).resolve().parent.parent / "envpool.libs"
    found = []
    for stem in ("libGLdispatch", "libOpenGL", "libEGL"):
        matches = sorted(glob.glob(str(libs_dir / f"{stem}-*.so*")))
        if matches:
            found.append(matches[0])
    return found


def _load_gl_globally() -> None:
    for path in _envpool_gl_libraries():
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)


def _render_probe() -> None:
    """Run in a child process by :func:`enable_rendering`: exit 0 iff a MuJoCo frame renders."""
    from rl_core.envs.envpool_env import import_envpool

    envpool = import_envpool()  # without matplotlib (envpool's Jumanji renderers)

    _load_gl_globally()
    pool = envpool.make(
        "InvertedPendulum-v5",
        env_type="gymnasium",
        num_envs=1,
        batch_size=1,
        num_threads=1,
        seed=0,
        render_mode="rgb_array",
        render_width=16,
        render_height=16,
    )
    pool.reset()
    frame = np.asarray(pool.render())
    if frame.shape != (1, 16, 16, 3) or frame.dtype != np.uint8:
        sys.exit(f"envpool rendered {frame.shape} {frame.dtype}, not (1, 16, 16, 3) uint8")
    print("render ok")


@functools.lru_cache(maxsize=1)
def enable_rendering() -> str | None:
    """Make envpool's MuJoCo rendering work in this process; None if it does, else why not (one line).

    A failed MuJoCo render ends the process, so the attempt runs first in a
    child process (about 2-3 s, once per process; MuJoCo's MUJOCO_LOG.TXT lands
    in a temporary directory).
    """
    root = str(Path(__file__).resolve().parents[1])
    code = f"import sys; sys.path.insert(0, {root!r}); from torchbeast_mujoco.env import _render_probe; _render_probe()"
    with tempfile.TemporaryDirectory(prefix="mujoco_render_probe_") as cwd:
        try:
            result = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=180)
        except subprocess.TimeoutExpired:
            return "the render probe did not finish in 180 s"
    if result.returncode != 0:
        lines = [line.strip() for line in (result.stdout + "\n" + result.stderr).splitlines() if line.strip()]
        reason = lines[-1] if lines else f"exit status {result.returncode}"
        return (
            f"MuJoCo cannot render off-screen here ({reason}); envpool renders with EGL: install Debian's "
            f"libegl-mesa0 and libgl1-mesa-dri (software rendering) or a GPU's EGL driver"
        )
    _load_gl_globally()
    return None


# --------------------------------------------------------------------------
# The env


class MujocoEnv(SingleEnvpoolEnv):
    """One gymnasium MuJoCo task (``HalfCheetah-v5`` ...) backed by an envpool pool of one env.

    See the module docstring for observations, actions, termination vs.
    truncation, envpool's auto-reset and seeding.  ``info``: envpool's per-step
    scalars (``elapsed_step``; task terms such as ``reward_run``,
    ``reward_ctrl``, ``x_position``, ``x_velocity`` for HalfCheetah).
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        env_id: str,
        seed: int | None = None,
        *,
        render_mode: str | None = None,
        render_size: int = DEFAULT_RENDER_SIZE,
    ):
        self.env_id = canonical_env_id(env_id)
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        if render_size <= 0:
            raise ValueError(f"render_size must be positive, got {render_size}")
        self.render_mode = render_mode
        self.render_size = int(render_size)
        self._pool = None
        if seed is None:
            seed = int(np.random.SeedSequence().generate_state(1)[0])
        self._build(seed)
        obs_shape = self._pool.observation_space.shape
        box = self._pool.action_space
        self.observation_space = spaces.Box(-np.inf, np.inf, obs_shape, np.float32)
        self.action_space = spaces.Box(
            np.asarray(box.low, np.float32), np.asarray(box.high, np.float32), box.shape, np.float32
        )
        self._low = self.action_space.low.astype(np.float64)
        self._high = self.action_space.high.astype(np.float64)
        self._action = np.zeros((1, *box.shape), np.float64)
        self.max_episode_steps = int(self._pool.spec.config.max_episode_steps)

    def _make_pool(self, seed: int):
        from rl_core.envs.envpool_env import import_envpool

        envpool = import_envpool()  # without matplotlib (envpool's Jumanji renderers)

        kwargs: dict[str, Any] = {}
        if self.render_mode == "rgb_array":
            kwargs = dict(render_mode="rgb_array", render_width=self.render_size, render_height=self.render_size)
        return envpool.make(
            self.env_id, env_type="gymnasium", num_envs=1, batch_size=1, num_threads=1, seed=seed, **kwargs
        )

    def _build(self, seed: int) -> None:
        super()._build(seed)
        self._needs_reset = True

    @staticmethod
    def _info(raw: dict) -> dict[str, Any]:
        info = {}
        for key, value in raw.items():
            if key in ("env_id", "players"):
                continue
            value = np.asarray(value)
            if value.shape == (1,):
                info[key] = value[0].item()
        return info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, raw = self._reset_pool(seed)
        self._needs_reset = False
        return obs[0].astype(np.float32), self._info(raw)

    def step(self, action):
        if self._needs_reset:
            raise RuntimeError(
                f"{self.env_id}: step() before reset() or after the episode ended: call reset() "
                f"(envpool would silently spend this step on its auto-reset)"
            )
        action = np.asarray(action, np.float64)
        if action.shape != self.action_space.shape:
            if action.size != self._action.size:
                raise ValueError(f"{self.env_id}: action of shape {action.shape}, expected {self.action_space.shape}")
            action = action.reshape(self.action_space.shape)
        if not np.all(np.isfinite(action)):
            raise ValueError(f"{self.env_id}: non-finite action {action.tolist()}")
        np.clip(action, self._low, self._high, out=self._action[0])
        obs, reward, terminated, truncated, raw = self._pool.step(self._action)
        terminated, truncated = bool(terminated[0]), bool(truncated[0])
        if terminated or truncated:
            self._needs_reset = True
        return obs[0].astype(np.float32), float(reward[0]), terminated, truncated, self._info(raw)

    def render(self):
        if self.render_mode != "rgb_array":
            return None
        return np.asarray(self._pool.render())[0]


def create_env(
    env_id: str, seed: int | None = None, *, record: bool = False, render_size: int = DEFAULT_RENDER_SIZE
) -> MujocoEnv:
    """A seeded :class:`MujocoEnv`; with ``record``, rendering RGB frames where this machine can."""
    render_mode = None
    if record:
        problem = enable_rendering()
        if problem is None:
            render_mode = "rgb_array"
        else:
            log.warning("%s: no video: %s", env_id, problem)
    env = MujocoEnv(env_id, seed, render_mode=render_mode, render_size=render_size)
    if seed is not None:
        env.action_space.seed(int(seed))
    return env


# ------------------------------------------------------- package interface
# Its flag defaults per agent, and every agent's on MuJoCo: presets.py (rl_core/config/env_package.py reads them).

# Envs a server steps with a GPU learner on more than 2 cores, half as many without one (rl_core/config/sizing.py).
ENVS_PER_SERVER = 32


ACTION_KIND = "box"  # its envs' actions, known before one is made (rl_core/config/env_package.py)


def add_flags(parser) -> None:
    """MuJoCo's flags; defaults for SEED RL's HalfCheetah PPO baseline (their sources: presets.py)."""
    g = parser.add_argument_group(
        "mujoco",
        f"--env names a gymnasium MuJoCo task ({', '.join(TASKS)}) with -v4 or -v5 "
        f"(default: {DEFAULT_ENV}; no suffix: -{DEFAULT_VERSION}), simulated by envpool.",
    )
    g.add_argument(
        "--render_size",
        type=ranged(int, "[1, inf)"),
        default=DEFAULT_RENDER_SIZE,
        metavar="PIXELS",
        help="Width and height of video frames (--record_video).",
    )
    # What holds for every agent; the runtime then sets presets.agent_defaults(--agent) (rl_core.runtime.entry).
    # total_steps: SEED's --total_environment_frames=2000000 (one action repeat; presets.py's [sh]).
    parser.set_defaults(env=DEFAULT_ENV, agent=DEFAULT_AGENT, total_steps=2_000_000, **ENV_DEFAULTS)


def _env_name(flags) -> str:
    return DEFAULT_ENV if flags.env is None else flags.env


def check_flags(parser, flags) -> None:
    try:
        flags.env = canonical_env_id(_env_name(flags))
    except UserError as e:
        parser.error(str(e))
    if flags.num_actions is not None:
        parser.error(f"--num_actions {flags.num_actions}: {flags.env}'s actions are continuous: drop the flag")
    if flags.render_size <= 0:
        parser.error(f"--render_size must be positive, got {flags.render_size}")


def make_env(flags, seed: int) -> MujocoEnv:
    """The env an env server hosts, from the run's flags."""
    return create_env(_env_name(flags), seed)


def make_test_env(flags, seed: int, record: bool = False) -> MujocoEnv:
    """The training env; with ``record``, rendering ``--render_size`` RGB frames for the video."""
    return create_env(_env_name(flags), seed, record=record, render_size=flags.render_size)


def test_protocol(flags) -> list[dict]:
    """10 episodes with the policy's mean action (the test is greedy unless --valid_sample)."""
    return [{"name": "test", "episodes": 10, "group": "test", "overrides": {}}]


if __name__ == "__main__":  # a quick throughput figure: python -m torchbeast_mujoco.env [name] [steps]
    from rl_core.envs.env_speed import main

    main(create_env, DEFAULT_ENV, 20_000)
