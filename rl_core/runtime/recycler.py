"""--recycle_period: the learner recycles its model's dormant units every N batches (ReDo, ``models.recycling``).

The units are scored on the observations of the batch just trained on (at most ``FRAMES`` of them), after
its optimizer steps and before the weights are published, so the inference copy gets the recycled
weights with the batch's.  Each recycling is one log line; logs.csv's ``recycled_units`` counts the units
recycled since the run (or its resumption) began.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from models.recycling import recycle_dormant
from rl_core.errors import UserError

log = logging.getLogger("learner")

# ReDo's statistics batch (Sokar et al. 2023: 256 inputs)
FRAMES = 256


class Recycler:
    """Every ``period`` learner batches, ``recycle_dormant`` on the model's ``recycle_pairs`` (a model without
    them is refused in one line when the Recycler is built)."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, period: int, tau: float, seed: int):
        if not getattr(model, "recyclable", False):
            stem = getattr(model, "stem", model)
            raise UserError(
                f"--recycle_period needs a model with recyclable layers (the image stems' convolutions); "
                f"this run's {type(stem).__name__} has none: drop --recycle_period"
            )
        self.model = model
        self.optimizer = optimizer
        self.period = period
        self.tau = tau
        self.seed = seed
        self.total = 0

    def __call__(self, learner_steps: int, obs: torch.Tensor) -> dict[str, float]:
        """After the ``learner_steps``-th batch (its observations ``obs`` [T+1, B, ...]): a recycling when the
        count is a multiple of the period; the stat ``recycled_units`` either way."""
        if learner_steps % self.period == 0:
            frames = obs.reshape(-1, *obs.shape[2:])[:FRAMES]
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + learner_steps)
            counts = recycle_dormant(self.model.recycle_pairs(frames), self.tau, self.optimizer, generator)
            recycled = sum(counts.values())
            self.total += recycled
            log.info(
                "learner batch %d: %d dormant units recycled (tau %g; per layer: %s)",
                learner_steps,
                recycled,
                self.tau,
                ", ".join(str(v) for v in counts.values()),
            )
        return {"recycled_units": float(self.total)}
