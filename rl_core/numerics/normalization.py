"""Running statistics for normalising observations, rewards and value targets.

The statistics are ``nn.Module`` buffers (float64), so they are saved in a
model's ``state_dict`` (hence in checkpoints) and copied with it to an
inference copy of the model.  Updates happen under ``torch.no_grad``.

* :class:`RunningMeanStd`: mean and variance of everything seen so far,
  merged batch by batch with the parallel-variance combination of Chan,
  Golub and LeVeque (1979), as in OpenAI baselines.
* :class:`ValueNormalizer`: exponential moving moments of value targets for
  PopArt (van Hasselt et al. 2016, "Learning values across many orders of
  magnitude", Algorithm 1; Hessel et al. 2018, "Multi-task deep RL with
  PopArt") or for a plain return-scale normaliser.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import torch
from torch import nn

from rl_core.numerics import collectives


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    """float64 for float64 inputs, float32 for everything else (ints, halves)."""
    return torch.promote_types(x.dtype, torch.float32) if x.is_floating_point() else torch.float32


class RunningMeanStd(nn.Module):
    """Mean and variance over all samples seen, per element of ``shape``.

    Buffers: ``mean`` [shape] (init 0), ``var`` [shape] (init 1), ``count``
    scalar (init ``epsilon``), all float64.  As in OpenAI baselines the
    initial state counts as ``epsilon`` pseudo-samples of mean 0 and variance 1,
    which keeps the first normalisations finite; its weight vanishes as data
    comes in.

    ``update`` merges a batch of n samples with mean m_b and (population)
    variance v_b into (count, mean, var) by (Chan et al. 1979)::

        delta = m_b - mean,   N = count + n
        mean' = mean + delta n / N
        var'  = (var count + v_b n + delta^2 count n / N) / N
    """

    def __init__(self, shape: Union[int, Sequence[int]] = (), epsilon: float = 1e-4):
        super().__init__()
        self.shape = torch.Size((shape,) if isinstance(shape, int) else tuple(shape))
        self.register_buffer("mean", torch.zeros(self.shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(self.shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(float(epsilon), dtype=torch.float64))

    @property
    def std(self) -> torch.Tensor:
        return torch.sqrt(self.var)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merges ``x`` [..., *shape] into the statistics; all leading dims are samples."""
        nd = len(self.shape)
        if x.dim() < nd or x.shape[x.dim() - nd :] != self.shape:
            raise ValueError(
                f"RunningMeanStd of shape {tuple(self.shape)} expects x of shape [..., "
                f"{', '.join(map(str, self.shape))}]; got {tuple(x.shape)}"
            )
        x = x.detach().to(device=self.mean.device, dtype=torch.float64).reshape(-1, *self.shape)
        n = x.shape[0]
        if collectives.active() is not None:  # every rank merges all ranks' moments: the same statistics
            count = torch.full(self.shape, float(n), dtype=torch.float64, device=x.device)
            moments = collectives.all_reduce_sum(torch.stack([count, x.sum(0), x.pow(2).sum(0)]))
            n = float(moments[0].reshape(-1)[0]) if moments[0].numel() else float(n)
            if n == 0:
                return
            batch_mean = moments[1] / n
            batch_var = (moments[2] / n - batch_mean.pow(2)).clamp(min=0.0)
        elif n == 0:
            return
        else:
            batch_mean = x.mean(0)
            batch_var = x.var(0, unbiased=False)
        delta = batch_mean - self.mean
        total = self.count + n
        new_mean = self.mean + delta * (n / total)
        m2 = self.var * self.count + batch_var * n + delta.pow(2) * (self.count * n / total)
        self.mean.copy_(new_mean)
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def normalize(self, x: torch.Tensor, clip: Optional[float] = None, eps: float = 1e-8) -> torch.Tensor:
        """(x - mean) / sqrt(var + eps), optionally clamped to [-clip, clip], in x's dtype.

        Computed in float32 (float64 for float64 inputs); an integer ``x``
        (e.g. uint8 frames) gives float32.
        """
        dtype = _compute_dtype(x)
        mean = self.mean.to(device=x.device, dtype=dtype)
        inv_std = torch.rsqrt(self.var + eps).to(device=x.device, dtype=dtype)
        y = (x.to(dtype) - mean) * inv_std
        if clip is not None:
            y = y.clamp(-clip, clip)
        return y if not x.is_floating_point() else y.to(x.dtype)


class ValueNormalizer(nn.Module):
    """Normalisation of value targets: ``kind`` is ``"none"``, ``"popart"`` or ``"return_std"``.

    Buffers ``mu`` (first moment, init 0) and ``nu`` (second moment, init 1),
    scalar float64.  The scale is::

        sigma = clamp(sqrt(max(nu - mu^2, 0)), min_std, max_std)

    and the value head predicts normalised values: V = sigma * V_norm + mu.

    * ``"none"``: identity normalisation; ``update`` does nothing.
    * ``"popart"`` (van Hasselt et al. 2016, Algorithm 1): the targets' moments
      follow exponential moving averages with step ``beta``::

          mu' = (1 - beta) mu + beta mean(G),   nu' = (1 - beta) nu + beta mean(G^2)

      and, to Preserve Outputs Precisely, the last linear layer of the value
      head (``W``, ``b``) is rescaled so that sigma' (W' h + b') + mu' equals
      sigma (W h + b) + mu for every h::

          W' = W sigma / sigma',   b' = (sigma b + mu - mu') / sigma'.

    * ``"return_std"``: only the scale is adapted; mu stays 0, so sigma =
      sqrt(nu) (clamped), nu' = (1 - beta) nu + beta mean(G^2), and the head
      is rescaled as above with mu = mu' = 0.

    ``beta = 0`` replaces the moving averages by the running averages over every
    target seen so far (step ``n / (count + n)`` for a batch of n targets, so the
    first batch sets the moments): SEED RL's ``AverageMeanStd``, which suits
    statistics updated once per learner batch.  ``count`` is a buffer too.

    The targets G passed to :meth:`update` are unnormalised (e.g. V-trace
    targets computed from ``denormalize``d values).
    """

    KINDS = ("none", "popart", "return_std")

    def __init__(self, kind: str = "none", beta: float = 3e-4, min_std: float = 1e-4, max_std: float = 1e6):
        super().__init__()
        if kind not in self.KINDS:
            raise ValueError(f"unknown value normalisation {kind!r}; use one of {', '.join(self.KINDS)}")
        if not 0.0 <= beta <= 1.0:
            raise ValueError(f"value normaliser beta must be in [0, 1]; got {beta}")
        if not 0.0 < min_std <= max_std:
            raise ValueError(f"value normaliser needs 0 < min_std <= max_std; got {min_std}, {max_std}")
        self.kind = kind
        self.beta = float(beta)
        self.min_std = float(min_std)
        self.max_std = float(max_std)
        self.register_buffer("mu", torch.tensor(0.0, dtype=torch.float64))
        self.register_buffer("nu", torch.tensor(1.0, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(0.0, dtype=torch.float64))

    def extra_repr(self) -> str:
        return f"kind={self.kind!r}, beta={self.beta}, min_std={self.min_std}, max_std={self.max_std}"

    def _std(self, mu: torch.Tensor, nu: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(torch.clamp(nu - mu * mu, min=0.0)).clamp(self.min_std, self.max_std)

    @property
    def std(self) -> torch.Tensor:
        """sigma = clamp(sqrt(max(nu - mu^2, 0)), min_std, max_std), float64 scalar."""
        return self._std(self.mu, self.nu)

    def normalize(self, values: torch.Tensor) -> torch.Tensor:
        """(values - mu) / sigma in values' dtype (identity for ``"none"``)."""
        if self.kind == "none":
            return values
        dtype = _compute_dtype(values)
        mu = self.mu.to(device=values.device, dtype=dtype)
        std = self.std.to(device=values.device, dtype=dtype)
        return ((values.to(dtype) - mu) / std).to(values.dtype)

    def denormalize(self, normalized: torch.Tensor) -> torch.Tensor:
        """sigma * normalized + mu in normalized's dtype (identity for ``"none"``)."""
        if self.kind == "none":
            return normalized
        dtype = _compute_dtype(normalized)
        mu = self.mu.to(device=normalized.device, dtype=dtype)
        std = self.std.to(device=normalized.device, dtype=dtype)
        return (normalized.to(dtype) * std + mu).to(normalized.dtype)

    @torch.no_grad()
    def update(self, targets: torch.Tensor, head: Optional[nn.Linear] = None) -> None:
        """Moves the moments towards the unnormalised ``targets`` (any shape, all samples).

        When ``head`` (the value head's last ``nn.Linear``, outputting
        normalised values) is given, its weight and bias are rescaled in place
        so that its unnormalised outputs are unchanged.
        """
        if self.kind == "none":
            return
        if head is not None and head.bias is None and self.kind == "popart":
            raise ValueError("PopArt needs a value head with a bias to absorb the shift of mu")
        g = targets.detach().to(device=self.mu.device, dtype=torch.float64)
        if collectives.active() is not None:  # the moments of every rank's targets: each rank moves the same way
            n, total, squares = collectives.all_reduce_sum(
                torch.stack(
                    [torch.tensor(float(g.numel()), dtype=torch.float64, device=g.device), g.sum(), g.pow(2).sum()]
                )
            )
            n = float(n)
            g_mean, g_sq_mean = (total / n, squares / n) if n else (None, None)
        else:
            n = g.numel()
            g_mean, g_sq_mean = (g.mean(), g.pow(2).mean()) if n else (None, None)
        if n == 0:
            return
        beta = self.beta
        if beta == 0.0:  # running average over all targets so far
            beta = n / (float(self.count) + n)
        self.count.add_(n)
        old_mu, old_std = self.mu.clone(), self.std
        if self.kind == "popart":
            new_mu = (1.0 - beta) * self.mu + beta * g_mean
        else:  # return_std: mu stays 0.
            new_mu = self.mu
        new_nu = (1.0 - beta) * self.nu + beta * g_sq_mean
        new_std = self._std(new_mu, new_nu)
        if head is not None:
            w, b = head.weight, head.bias
            w.mul_((old_std / new_std).to(device=w.device, dtype=w.dtype))
            if b is not None:
                new_b = (old_std * b.to(torch.float64).to(self.mu.device) + old_mu - new_mu) / new_std
                b.copy_(new_b.to(device=b.device, dtype=b.dtype))
        self.mu.copy_(new_mu)
        self.nu.copy_(new_nu)
