"""The env spec: what a server's envs observe and take, as frozen dataclasses.

On the wire it is HELLO's JSON (``to_json`` / ``from_json``): ``num_envs``, ``obs_shape``,
``obs_dtype`` (numpy's ``dtype.str``), ``action`` (``{"kind": "discrete", "n"}`` or
``{"kind": "box", "shape", "low", "high"}``, the bounds flattened), ``server_index``, ``env_name``.
A spec made from one local env (``--mode test``) has no ``num_envs``, ``server_index`` or ``env_name``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Union

import numpy as np


@dataclass(frozen=True)
class DiscreteActions:
    """``n`` actions, 0 .. n-1."""

    n: int
    kind: ClassVar[str] = "discrete"

    def to_json(self) -> dict:
        return {"kind": "discrete", "n": self.n}


@dataclass(frozen=True)
class BoxActions:
    """Real vectors of ``shape`` within ``[low, high]`` (each flattened, one bound per element)."""

    shape: tuple[int, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    kind: ClassVar[str] = "box"

    def __post_init__(self):
        if len(self.low) != self.size or len(self.high) != self.size:
            raise ValueError(
                f"a box of shape {list(self.shape)} needs {self.size} bounds each; "
                f"got {len(self.low)} low and {len(self.high)} high"
            )

    @property
    def size(self) -> int:
        """The number of reals in an action."""
        return math.prod(self.shape)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) as float32 arrays of ``shape``."""
        return (
            np.asarray(self.low, np.float32).reshape(self.shape),
            np.asarray(self.high, np.float32).reshape(self.shape),
        )

    def to_json(self) -> dict:
        return {"kind": "box", "shape": list(self.shape), "low": list(self.low), "high": list(self.high)}


ActionSpace = Union[DiscreteActions, BoxActions]


@dataclass(frozen=True)
class Observation:
    """An observation's ``shape`` and ``dtype`` (numpy's ``dtype.str``: ``"|u1"``, ``"<f4"``)."""

    shape: tuple[int, ...]
    dtype: str


@dataclass(frozen=True)
class EnvSpec:
    obs: Observation
    action: ActionSpace
    num_envs: int | None = None
    server_index: int | None = None
    env_name: str | None = None

    @property
    def discrete(self) -> bool:
        return isinstance(self.action, DiscreteActions)

    @property
    def num_actions(self) -> int:
        """A discrete space's n."""
        if not self.discrete:
            raise ValueError(f"a box action space of shape {list(self.action.shape)} has no number of actions")
        return self.action.n

    def to_json(self) -> dict:
        out = {
            "num_envs": self.num_envs,
            "obs_shape": list(self.obs.shape),
            "obs_dtype": self.obs.dtype,
            "action": self.action.to_json(),
            "server_index": self.server_index,
            "env_name": self.env_name,
        }
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_json(cls, spec) -> EnvSpec:
        """The spec of a HELLO; ValueError, in one line, for one that is malformed."""
        try:
            obs = Observation(tuple(int(s) for s in spec["obs_shape"]), np.dtype(spec["obs_dtype"]).str)
            optional = {k: spec[k] for k in ("num_envs", "server_index", "env_name") if spec.get(k) is not None}
            out = cls(obs, action_space_from_json(spec["action"]), **optional)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(f"malformed env spec {spec!r:.300} ({type(e).__name__}: {e})") from None
        if not (isinstance(out.num_envs, (int, type(None))) and isinstance(out.env_name, (str, type(None)))):
            raise ValueError(f"malformed env spec {spec!r:.300}: num_envs must be an int and env_name a string")
        return out

    @classmethod
    def of_env(cls, obs, action_space) -> EnvSpec:
        """The spec of one local env from an observation and its gymnasium action space."""
        obs = np.asarray(obs)
        return cls(Observation(tuple(obs.shape), obs.dtype.str), action_space_of(action_space))


def action_space_from_json(action) -> ActionSpace:
    kind = action.get("kind")
    if kind == "discrete":
        return DiscreteActions(int(action["n"]))
    if kind == "box":
        return BoxActions(
            tuple(int(s) for s in action["shape"]),
            tuple(float(x) for x in action["low"]),
            tuple(float(x) for x in action["high"]),
        )
    raise ValueError(f"unknown action kind {kind!r}; expected 'discrete' or 'box'")


def action_space_of(space) -> ActionSpace:
    """The action space of a gymnasium ``Discrete`` or ``Box``."""
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return DiscreteActions(int(space.n))
    if isinstance(space, spaces.Box):
        return BoxActions(
            tuple(int(s) for s in space.shape),
            tuple(np.asarray(space.low, np.float64).ravel().tolist()),
            tuple(np.asarray(space.high, np.float64).ravel().tolist()),
        )
    raise TypeError(f"action space {space} is not supported (Discrete or Box)")
