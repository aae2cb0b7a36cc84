"""The statistics' collectives: what agents and normalizers merge over the ranks of a torchrun job.

``rl_core/runtime/distributed.py`` opens the job's process group and makes it the active one
(``set_active``); the layers below the runtime (normalizers, agents) reach it only through here, so
that they never import the runtime.  Outside torchrun nothing is active and each function is the
one-process answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch


class Collectives(Protocol):
    """What a process group offers the statistics (``rl_core.runtime.distributed.Group``)."""

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor: ...

    def any_rank(self, flag: bool) -> bool: ...


_ACTIVE: Collectives | None = None


def active() -> Collectives | None:
    """The job's group while one is open, else None."""
    return _ACTIVE


def set_active(group: Collectives | None) -> None:
    global _ACTIVE
    _ACTIVE = group


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    """The sum of ``tensor`` over the ranks of the active group (a new tensor); ``tensor`` itself without one."""
    return tensor if _ACTIVE is None else _ACTIVE.all_reduce_sum(tensor)


def any_rank(flag: bool) -> bool:
    """True when ``flag`` is true on any rank of the active group; ``flag`` itself without one."""
    return bool(flag) if _ACTIVE is None else _ACTIVE.any_rank(flag)
