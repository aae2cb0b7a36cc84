"""A stand-in for DeepMind Lab's Python module, for tests on machines without DeepMind Lab.

It mirrors the surface of ``deepmind_lab`` (docs/users/python_api.md of
google-deepmind/lab): ``Lab(level, observations, config=None,
renderer='software', level_cache=None)`` with ``reset(episode=-1, seed=None)``,
``step(action, num_steps=1)``, ``observations()``, ``is_running()``,
``num_steps()``, ``action_spec()``, ``observation_spec()``, ``fps()``,
``events()``, ``close()``; and ``set_runfiles_path``.  Config values must be
strings and actions np.intc vectors within ``action_spec()``, as in DMLab.

The "level" is a deterministic toy: an episode lasts ``EPISODE_FRAMES`` frames
(shorter for some seeds), the frame's pixels depend on the episode seed, the
frame number and the pixel's position (see ``_frame_hwc``), and each frame of MOVE_BACK_FORWARD=1 earns reward 1.

For tests: every Lab is appended to ``Lab.instances``; each keeps ``resets``
(seeds it got) and ``steps`` ((action tuple, num_steps) per call).  With the
environment variable ``FAKE_DMLAB_LOG`` set, every reset appends a line
``pid level seed`` to that file (to see what env servers did).
"""

from __future__ import annotations

import os

import numpy as np

IS_STAND_IN = True
EPISODE_FRAMES = 60

_ACTION_SPEC = [
    {"min": -512, "max": 512, "name": "LOOK_LEFT_RIGHT_PIXELS_PER_FRAME"},
    {"min": -512, "max": 512, "name": "LOOK_DOWN_UP_PIXELS_PER_FRAME"},
    {"min": -1, "max": 1, "name": "STRAFE_LEFT_RIGHT"},
    {"min": -1, "max": 1, "name": "MOVE_BACK_FORWARD"},
    {"min": 0, "max": 1, "name": "FIRE"},
    {"min": 0, "max": 1, "name": "JUMP"},
    {"min": 0, "max": 1, "name": "CROUCH"},
]

_runfiles_path = None


def set_runfiles_path(path: str) -> None:
    global _runfiles_path
    _runfiles_path = path


def runfiles_path() -> str | None:
    return _runfiles_path


def frame_value(seed: int, frame: int) -> int:
    """The pixel value (before the per-channel offset) of frame ``frame`` of the episode with ``seed``."""
    return (seed * 31 + frame * 97) % 200


def episode_frames(seed: int) -> int:
    return EPISODE_FRAMES - (seed % 7)


class Lab:
    instances: list["Lab"] = []

    def __init__(self, level, observations, config=None, renderer="software", level_cache=None):
        if not isinstance(level, str) or not level:
            raise ValueError("level must be a non-empty string")
        config = {} if config is None else config
        for key, value in config.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"config keys and values must be strings, got {key!r}: {value!r}")
        if renderer not in ("software", "hardware"):
            raise ValueError(f"renderer must be 'software' or 'hardware', got {renderer!r}")
        self.width = int(config.get("width", "320"))
        self.height = int(config.get("height", "240"))
        known = {spec["name"] for spec in self.observation_spec()}
        for name in observations:
            if name not in known:
                raise ValueError(f"Unknown observation '{name}'")
        self.level = level
        self.config = dict(config)
        self.renderer = renderer
        self.level_cache = level_cache
        self.observation_names = list(observations)
        self.resets: list[int | None] = []
        self.steps: list[tuple[tuple[int, ...], int]] = []
        self._running = False
        self._closed = False
        self._frame = 0
        self._seed = 0
        self._length = EPISODE_FRAMES
        Lab.instances.append(self)

    # -- episodes ---------------------------------------------------------
    def reset(self, episode=-1, seed=None):
        self._check_open()
        if seed is not None and not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        if seed is None:
            seed = int(np.random.randint(0, 2**31 - 1))
        self._seed = int(seed)
        self.resets.append(self._seed)
        self._frame = 0
        self._length = episode_frames(self._seed)
        self._running = True
        if self.level_cache is not None:
            self._use_level_cache()
        log = os.environ.get("FAKE_DMLAB_LOG")
        if log:
            with open(log, "a") as f:
                f.write(f"{os.getpid()} {self.level} {self._seed}\n")
        return True

    def _use_level_cache(self) -> None:
        import tempfile

        key = f"{self.level}_{self._seed}"
        with tempfile.TemporaryDirectory() as tmp:
            pk3 = os.path.join(tmp, "map.pk3")
            if not self.level_cache.fetch(key, pk3):
                with open(pk3, "wb") as f:
                    f.write(f"compiled {key}".encode())
                self.level_cache.write(key, pk3)

    def step(self, action, num_steps=1):
        self._check_open()
        if not self._running:
            raise RuntimeError("Environment in wrong status to advance")
        action = np.asarray(action)
        if action.dtype != np.intc or action.shape != (len(_ACTION_SPEC),):
            raise ValueError(
                f"action must be np.intc of shape ({len(_ACTION_SPEC)},), got {action.dtype} {action.shape}"
            )
        for value, spec in zip(action.tolist(), _ACTION_SPEC):
            if not spec["min"] <= value <= spec["max"]:
                raise ValueError(f"{spec['name']}={value} is out of range")
        self.steps.append((tuple(action.tolist()), int(num_steps)))
        reward = 0.0
        for _ in range(int(num_steps)):
            self._frame += 1
            reward += 1.0 if action[3] == 1 else 0.0
            if self._frame >= self._length:
                self._running = False
                break
        return reward

    def is_running(self):
        return self._running

    def num_steps(self):
        return self._frame

    def observations(self):
        self._check_open()
        if not self._running:
            raise RuntimeError("Environment in wrong status for call to observations()")
        out = {}
        for name in self.observation_names:
            if name == "RGB_INTERLEAVED":
                out[name] = self._frame_hwc()
            elif name == "RGB":
                out[name] = np.ascontiguousarray(self._frame_hwc().transpose(2, 0, 1))
            else:
                out[name] = np.array([float(self._frame)])
        return out

    def _frame_hwc(self) -> np.ndarray:
        """Pixel (y, x, c) = frame_value + 20 c + 2 y + x (mod 256): a different value at every
        position of a row and column, so a flipped or transposed frame cannot pass for this one."""
        base = frame_value(self._seed, self._frame)
        y = np.arange(self.height, dtype=np.int64)[:, None, None]
        x = np.arange(self.width, dtype=np.int64)[None, :, None]
        c = np.arange(3, dtype=np.int64)[None, None, :]
        return ((base + 20 * c + 2 * y + x) % 256).astype(np.uint8)

    # -- specs ------------------------------------------------------------
    def action_spec(self):
        return [dict(spec) for spec in _ACTION_SPEC]

    def observation_spec(self):
        return [
            {"name": "RGB_INTERLEAVED", "dtype": np.uint8, "shape": (self.height, self.width, 3)},
            {"name": "RGB", "dtype": np.uint8, "shape": (3, self.height, self.width)},
            {"name": "MAP_FRAME_NUMBER", "dtype": np.float64, "shape": (1,)},
        ]

    def fps(self):
        return 60

    def events(self):
        return []

    def close(self):
        self._closed = True
        self._running = False
        return True

    def _check_open(self):
        if self._closed:
            raise RuntimeError("Environment is closed")
