"""Optimizer and learning-rate schedule from the flags, for every agent."""

from __future__ import annotations

import torch


def make_optimizer(flags, params, steps_per_update: float | None = None):
    """``--optimizer rmsprop`` (IMPALA's: --alpha, --momentum, --epsilon) or ``adam`` (--epsilon as
    Adam's eps); the rate decays linearly to 0 over --total_steps unless ``--lr_decay none``.

    Returns ``(optimizer, scheduler)``; the scheduler steps once per learner batch, which stands for
    ``steps_per_update`` agent steps (default T x B; a replay agent's T x B / replay ratio).
    """
    kind = flags.optimizer
    if kind == "adam":
        # fused: one kernel for every parameter (CPU and CUDA); it also skips a step on the device when
        # its ``found_inf`` is set, which the learner uses to check finiteness without a sync per step
        optimizer = torch.optim.Adam(params, lr=flags.learning_rate, eps=flags.epsilon, fused=_fusable(params))
    else:
        optimizer = torch.optim.RMSprop(
            params, lr=flags.learning_rate, momentum=flags.momentum, eps=flags.epsilon, alpha=flags.alpha, foreach=True
        )
    remaining = remaining_share(flags, steps_per_update)
    linear = flags.lr_decay == "linear"

    def lr_lambda(epoch):
        return remaining(epoch) if linear else 1.0

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def remaining_share(flags, steps_per_update: float | None = None):
    """``epoch -> 1 - min(epoch x steps_per_update, total) / total``: the share of --total_steps still to
    go after ``epoch`` learner batches (the linear schedules' factor; ``steps_per_update`` as in
    ``make_optimizer``)."""
    if steps_per_update is None:
        steps_per_update = flags.unroll_length * flags.batch_size
    # under torchrun a batch is every rank's (each with its share of --batch_size): the schedule counts global steps
    steps_per_update *= getattr(flags, "world_size", 1)
    total = flags.total_steps

    def share(epoch: int) -> float:
        return 1 - min(epoch * steps_per_update, total) / total

    return share


def _fusable(params) -> bool:
    """Fused Adam takes floating-point parameters on the CPU or CUDA (not on every other device)."""
    params = [p for group in params for p in (group["params"] if isinstance(group, dict) else [group])]
    return bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
