"""Recycling dormant units: ReDo (Sokar et al. 2023, "The Dormant Neuron Phenomenon in Deep RL").

A unit i of a ReLU layer with activations h_i(x) scores (ReDo's Definition 3.1)

    s_i = E_x |h_i(x)| / ( (1/H) sum_k E_x |h_k(x)| )

over a batch of inputs (and, for a conv layer, over every position), H the layer's units; it is
tau-dormant when s_i <= tau.  A dormant unit is recycled: its incoming weights are drawn afresh and
its outgoing weights (the next layer's columns that read it) are zeroed, so the network computes
the same function at the moment of recycling, and the unit can learn again.  A pair with a frozen layer
(``--freeze_conv``, ``--freeze_fc``: ``requires_grad`` off) is left alone: its fresh weights could not learn.

The fresh incoming weights: orthogonal directions with their mean taken out, scaled to the mean norm
of the layer's other units, bias 0.  ReDo draws them from the initial distribution; the mean is taken
out here because an image stem's inputs (frames in [0, 1], ReLU outputs) are all positive: a fresh
filter whose weights sum below 0 is silent on a uniform background from its first step, and on Pong
most of the first convolution's filters die that way (docs/experiments/impala.md, "Dead first-layer filters").
A centred filter answers edges, not the background's brightness.

The optimizer's state of a recycled unit's incoming weights: second moments (RMSprop's
``square_avg``, Adam's ``exp_avg_sq``) take the median of the layer's other units', so that the
first steps are the size of the layer's (zero would make them up to 1/sqrt(1 - alpha) learning
rates: the spike that can silence a filter again); every other state (momenta, Adam's first
moment) is zeroed, in the outgoing columns too.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from rl_core.numerics import collectives

__all__ = ["RecyclePair", "dormant_scores", "recycle_dormant", "SECOND_MOMENTS"]

# An optimizer's per-parameter state kept, for recycled weights, at the median of the others'
SECOND_MOMENTS = frozenset({"square_avg", "exp_avg_sq", "max_exp_avg_sq"})


@dataclasses.dataclass
class RecyclePair:
    """A ReLU layer whose units may be recycled, the layer that reads them, and its activations.

    ``activation``: the layer's output after its ReLU, [N, units] or [N, units, H, W].
    ``columns_per_unit``: how many of ``next_layer``'s input columns each unit owns (a conv layer
    read by a linear one through a flatten: H x W; otherwise 1)."""

    layer: nn.Conv2d | nn.Linear
    next_layer: nn.Conv2d | nn.Linear
    activation: torch.Tensor
    columns_per_unit: int = 1


def dormant_scores(activation: torch.Tensor) -> torch.Tensor:
    """ReDo's score s_i of each unit (dim 1) of ``activation`` [N, units, ...]: E|h_i| over every other
    dim, over the layer's mean of it.  A layer that is silent throughout scores 0 everywhere.  Under
    torchrun the expectation runs over every rank's inputs (``rl_core.numerics.collectives``), so that the ranks
    find the same units dormant and their replicas stay equal."""
    per_unit = collectives.all_reduce_sum(activation.detach().abs().float().transpose(0, 1).flatten(1).mean(1))
    return per_unit / (per_unit.mean() + 1e-9)


def _fresh_rows(n: int, fan_in: int, norm: float, generator: torch.Generator) -> torch.Tensor:
    """n directions in R^fan_in, orthogonal in blocks of at most fan_in, mean removed, each of norm
    ``norm``."""
    blocks = []
    for size in [fan_in] * (n // fan_in) + ([n % fan_in] if n % fan_in else []):
        q, r = torch.linalg.qr(torch.randn(fan_in, size, generator=generator))
        blocks.append((q * torch.sign(torch.diagonal(r))).T)  # [size, fan_in]
    q = torch.cat(blocks)
    q = q - q.mean(dim=1, keepdim=True)
    return q * (norm / q.norm(dim=1, keepdim=True).clamp_min(1e-12))


def _reset_state(
    optimizer: torch.optim.Optimizer | None, param: torch.Tensor, index: tuple, live: tuple | None
) -> None:
    """``param``'s optimizer state at ``index``: second moments to the median over ``live`` (None: left
    as they are), every other tensor of its shape to 0."""
    if optimizer is None:
        return
    state = optimizer.state.get(param, {})
    for key, value in state.items():
        if not isinstance(value, torch.Tensor) or value.shape != param.shape:
            continue
        if key in SECOND_MOMENTS:
            if live is not None:
                others = value[live]
                if others.numel():
                    value[index] = others.median()
        else:
            value[index] = 0


@torch.no_grad()
def recycle_dormant(
    pairs: list[RecyclePair],
    tau: float,
    optimizer: torch.optim.Optimizer | None = None,
    generator: torch.Generator | None = None,
) -> dict[str, int]:
    """Recycles every pair's tau-dormant units in place (weights and ``optimizer``'s state); returns how
    many each layer had, by the layer's position in ``pairs`` (``"0"``, ``"1"``, ...).  A layer whose
    every unit is dormant is left alone: it has no live units to take the scale from."""
    generator = generator if generator is not None else torch.Generator().manual_seed(0)
    counts = {}
    for i, pair in enumerate(pairs):
        layer, nxt = pair.layer, pair.next_layer
        if not (layer.weight.requires_grad and nxt.weight.requires_grad):
            # frozen (--freeze_conv, --freeze_fc): fresh weights could not learn, zeroed columns would stay zero
            counts[str(i)] = 0
            continue
        dormant = dormant_scores(pair.activation) <= tau
        n = int(dormant.sum())
        counts[str(i)] = n
        if n == 0 or n == dormant.numel():
            continue
        dead = dormant.nonzero().flatten().to(layer.weight.device)
        alive = (~dormant).nonzero().flatten().to(layer.weight.device)
        weight = layer.weight
        fan_in = weight[0].numel()
        norm = float(weight[alive].flatten(1).norm(dim=1).mean())
        fresh = _fresh_rows(n, fan_in, norm, generator)
        weight[dead] = fresh.view(n, *weight.shape[1:]).to(weight.dtype).to(weight.device)
        _reset_state(optimizer, weight, (dead,), (alive,))
        if layer.bias is not None:
            layer.bias[dead] = 0
            _reset_state(optimizer, layer.bias, (dead,), (alive,))
        # the next layer's input columns that read the recycled units: zero, and their momenta too
        k = pair.columns_per_unit
        columns = (dead[:, None] * k + torch.arange(k, device=dead.device)).flatten()
        nxt.weight[:, columns] = 0
        _reset_state(optimizer, nxt.weight, (slice(None), columns), None)
    return counts
