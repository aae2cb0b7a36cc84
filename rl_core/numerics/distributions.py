"""Action distributions for policies, with arbitrary batch shape ``[...]`` (e.g. ``[T, B]``).

Two families, both reduced over the event dimension so that every method
returns one number per batch element:

* :class:`Categorical` over ``A`` discrete actions, from logits ``[..., A]``.
* :class:`Gaussian`, a diagonal Gaussian over ``D`` continuous actions, from
  ``mean`` and ``std`` ``[..., D]``; optionally squashed into the env's Box
  bounds with a tanh (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and
  Applications", Appendix C)::

      u ~ N(mean, std^2),   a = loc + scale * tanh(u),
      loc = (high + low) / 2,   scale = (high - low) / 2,

      log pi(a) = log mu(u) - sum_i log(1 - tanh(u_i)^2) - sum_i log(scale_i)   (eq. 21)

  where ``mu`` is the base Gaussian density and the last sum is the Jacobian
  of the affine rescale from ``[-1, 1]`` to ``[low, high]``.

:func:`make_distribution` builds either from an action spec and the model's
policy outputs.  These classes avoid ``torch.distributions``: its argument
validation and generic broadcasting are slower on CPU, and sampling a
categorical with :func:`torch.multinomial` on the flattened probabilities is
what :func:`rl_core.agents.impala.agent.sample_actions` does.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F

from rl_core.data.env_spec import ActionSpace, BoxActions, DiscreteActions

# Squashed log_prob(a) inverts a = loc + scale * tanh(u) with u = atanh(y),
# y = (a - loc) / scale clamped to [-1 + SQUASH_EPS, 1 - SQUASH_EPS].  Actions
# on (or numerically beyond) the bounds thus get the density of
# |u| = atanh(1 - 1e-6) ~ 7.25 instead of an infinite u: finite, large
# log-probabilities.  1e-6 is representable next to 1 in float32 (its spacing
# there is ~6e-8).  sample_with_log_prob() needs no such clamp: it uses u itself.
SQUASH_EPS = 1e-6

# std_from_param(kind="exp") clamps the log-std to [LOG_STD_MIN, LOG_STD_MAX].
LOG_STD_MIN = -20.0
LOG_STD_MAX = 2.0

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)


def _at_least_float32(x: torch.Tensor) -> torch.Tensor:
    """``x`` as float32, or as itself when it is already float32 / float64."""
    if x.dtype in (torch.float32, torch.float64):
        return x
    return x.float()


class Categorical:
    """Categorical distribution pi(a) = softmax(logits)_a over the last dim.

    ``logits`` is ``[..., A]``; it is computed in float32 (or float64 when
    given in float64).  Logits of ``-inf`` (masked actions) are allowed: they
    get probability 0 and contribute 0 to the entropy and the KL.
    """

    def __init__(self, logits: torch.Tensor):
        if logits.dim() < 1:
            raise ValueError(f"Categorical expects logits of shape [..., A]; got {tuple(logits.shape)}")
        self.logits = _at_least_float32(logits)
        self.log_probs = F.log_softmax(self.logits, dim=-1)

    @property
    def probs(self) -> torch.Tensor:
        return self.log_probs.exp()

    @property
    def batch_shape(self) -> torch.Size:
        return self.logits.shape[:-1]

    @property
    def num_actions(self) -> int:
        return self.logits.shape[-1]

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """log pi(a) for int64 ``actions [...]`` -> ``[...]``."""
        log_probs = self.log_probs
        if actions.shape != self.batch_shape:
            log_probs = log_probs.expand(*actions.shape, self.num_actions)
        return log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        """H(pi) = -sum_a pi(a) log pi(a) -> ``[...]``."""
        p = self.probs
        return -torch.where(p > 0, p * self.log_probs, torch.zeros_like(p)).sum(-1)

    def kl(self, other: "Categorical") -> torch.Tensor:
        """KL(self || other) = sum_a p(a) (log p(a) - log q(a)) -> ``[...]``."""
        if not isinstance(other, Categorical):
            raise TypeError(f"Categorical.kl needs another Categorical; got {type(other).__name__}")
        p = self.probs
        terms = p * (self.log_probs - other.log_probs)
        return torch.where(p > 0, terms, torch.zeros_like(terms)).sum(-1)

    def sample(self) -> torch.Tensor:
        """Int64 actions ``[...]`` drawn with torch.multinomial (no gradient)."""
        flat = self.probs.detach().reshape(-1, self.num_actions)
        return torch.multinomial(flat, 1).view(self.batch_shape)

    def mode(self) -> torch.Tensor:
        """The most probable action, int64 ``[...]``."""
        return self.logits.argmax(-1)


class Gaussian:
    """Diagonal Gaussian over ``D`` action dims, optionally tanh-squashed into bounds.

    Args:
        mean: ``[..., D]`` mean of the base Gaussian.
        std: ``[..., D]`` (or broadcastable) standard deviation, > 0.
        squash: when False, a plain Gaussian over actions; the env server
            clips actions to the Box itself, so log_prob is the density of
            the unclipped sample.  When True, ``a = loc + scale * tanh(u)``,
            ``u ~ N(mean, std^2)`` (see the module docstring).
        low, high: ``[D]`` Box bounds (tensor or sequence of floats), kept
            as ``self.low`` / ``self.high`` on mean's device and dtype.  With
            ``squash`` they must be finite with low < high (both None means
            ``[-1, 1]``); without it they may be infinite and do not enter
            any density.  These value checks run when the bounds are given
            as sequences or CPU tensors (make_distribution passes lists), not
            for accelerator tensors, where they would synchronise.
        eps: the clamp of the atanh inversion in :meth:`log_prob`
            (``SQUASH_EPS``, see its comment).
        validate: False skips the bounds' value checks (a caller that checked them once, e.g. a
            learner building the same distribution at every update).

    Computation is in float32, or float64 when ``mean`` is float64.
    """

    def __init__(
        self,
        mean: torch.Tensor,
        std: torch.Tensor,
        squash: bool = False,
        low: Optional[Union[torch.Tensor, Sequence[float]]] = None,
        high: Optional[Union[torch.Tensor, Sequence[float]]] = None,
        eps: float = SQUASH_EPS,
        validate: bool = True,
    ):
        if mean.dim() < 1:
            raise ValueError(f"Gaussian expects mean of shape [..., D]; got {tuple(mean.shape)}")
        self.mean = _at_least_float32(mean)
        self.std = std.to(self.mean.dtype)
        try:
            broadcast_ok = not validate or torch.broadcast_shapes(self.mean.shape, self.std.shape) == self.mean.shape
        except RuntimeError:
            broadcast_ok = False
        if not broadcast_ok:
            raise ValueError(
                f"Gaussian std of shape {tuple(std.shape)} does not broadcast to mean's {tuple(mean.shape)}"
            )
        self.squash = bool(squash)
        self.eps = float(eps)
        self.low = self.high = self.loc = self.scale = None
        dim = self.mean.shape[-1]
        if (low is None) != (high is None):
            raise ValueError("Gaussian needs both low and high, or neither")
        if low is None and self.squash:
            low, high = [-1.0] * dim, [1.0] * dim
        if low is not None:
            low, high = torch.as_tensor(low, dtype=self.mean.dtype), torch.as_tensor(high, dtype=self.mean.dtype)
            if low.shape != (dim,) or high.shape != (dim,):
                raise ValueError(
                    f"Gaussian bounds must have shape [{dim}]; got low={tuple(low.shape)}, high={tuple(high.shape)}"
                )
            # Value checks only where they cost no device synchronisation.
            if validate and self.squash and low.device.type == "cpu" and high.device.type == "cpu":
                if not (torch.isfinite(low).all() and torch.isfinite(high).all()):
                    raise ValueError(
                        "Gaussian(squash=True) needs finite Box bounds; use squash=False for unbounded actions"
                    )
                if not (low < high).all():
                    raise ValueError("Gaussian(squash=True) needs low < high in every action dimension")
            self.low, self.high = low.to(self.mean.device), high.to(self.mean.device)
        if self.squash:
            self.loc = (self.high + self.low) / 2
            self.scale = (self.high - self.low) / 2

    @property
    def batch_shape(self) -> torch.Size:
        return self.mean.shape[:-1]

    def _base_log_prob(self, u: torch.Tensor) -> torch.Tensor:
        """log mu(u) = sum_i [-(u_i - m_i)^2 / (2 s_i^2) - log s_i - log(2 pi)/2]."""
        z = (u - self.mean) / self.std
        return (-0.5 * z.pow(2) - self.std.log() - _HALF_LOG_2PI).sum(-1)

    def _squash_correction(self, u: torch.Tensor) -> torch.Tensor:
        """sum_i log(1 - tanh(u_i)^2) + log(scale_i), with the stable form
        log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))."""
        log_dtanh = 2.0 * (_LOG_2 - u - F.softplus(-2.0 * u))
        return (log_dtanh + self.scale.log()).sum(-1)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """log pi(a) for ``actions [..., D]`` -> ``[...]``.

        Squashed: u = atanh(clamp((a - loc) / scale, -1 + eps, 1 - eps)), then
        eq. 21.  Prefer :meth:`sample_with_log_prob` for freshly drawn actions.
        """
        actions = actions.to(self.mean.dtype)
        if not self.squash:
            return self._base_log_prob(actions)
        y = ((actions - self.loc) / self.scale).clamp(-1.0 + self.eps, 1.0 - self.eps)
        u = torch.atanh(y)
        return self._base_log_prob(u) - self._squash_correction(u)

    def _rsample_u(self) -> torch.Tensor:
        noise = torch.randn(
            torch.broadcast_shapes(self.mean.shape, self.std.shape), dtype=self.mean.dtype, device=self.mean.device
        )
        return self.mean + self.std * noise

    def _squash(self, u: torch.Tensor) -> torch.Tensor:
        return self.loc + self.scale * torch.tanh(u) if self.squash else u

    def sample(self) -> torch.Tensor:
        """Reparameterised sample ``[..., D]``: gradients flow to mean and std."""
        return self._squash(self._rsample_u())

    def sample_with_log_prob(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """(action ``[..., D]``, log pi(action) ``[...]``), both reparameterised.

        The log-probability is computed from the pre-tanh u (exact: no atanh
        round trip, no clamp), so it is finite even where tanh(u) rounds to +-1.
        """
        u = self._rsample_u()
        log_prob = self._base_log_prob(u)
        if self.squash:
            log_prob = log_prob - self._squash_correction(u)
        return self._squash(u), log_prob

    def mode(self) -> torch.Tensor:
        """mean, or loc + scale * tanh(mean) when squashed (the image of the base mode)."""
        return self._squash(self.mean)

    def entropy(self) -> torch.Tensor:
        """Entropy of the base Gaussian, sum_i (1/2 + log(2 pi)/2 + log s_i) -> ``[...]``.

        For the squashed distribution this is the pre-squash entropy, the usual
        surrogate: the true one, H(u) + E[sum_i log(scale_i (1 - tanh(u_i)^2))],
        has no closed form.
        """
        log_std = self.std.log().expand(self.mean.shape)
        return (0.5 + _HALF_LOG_2PI + log_std).sum(-1)

    def kl(self, other: "Gaussian") -> torch.Tensor:
        """KL(self || other) between the base Gaussians -> ``[...]``::

            sum_i log(s2_i / s1_i) + (s1_i^2 + (m1_i - m2_i)^2) / (2 s2_i^2) - 1/2

        Exact for the squashed distributions too, provided both share the same
        bounds: KL is invariant under applying the same bijection
        (u -> loc + scale * tanh(u)) to both arguments.
        """
        if not isinstance(other, Gaussian):
            raise TypeError(f"Gaussian.kl needs another Gaussian; got {type(other).__name__}")
        if self.squash != other.squash:
            raise ValueError("Gaussian.kl between a squashed and an unsquashed Gaussian is not a KL of base Gaussians")
        if (
            self.squash
            and self.loc is not other.loc
            and self.loc.device.type == "cpu"  # A value check on an accelerator would synchronise.
            and not (torch.equal(self.loc, other.loc.cpu()) and torch.equal(self.scale, other.scale.cpu()))
        ):
            raise ValueError("Gaussian.kl between squashed Gaussians needs the same bounds")
        var1, var2 = self.std.pow(2), other.std.pow(2)
        kl = (other.std.log() - self.std.log()) + (var1 + (self.mean - other.mean).pow(2)) / (2.0 * var2) - 0.5
        return kl.expand(torch.broadcast_shapes(kl.shape, self.mean.shape, other.mean.shape)).sum(-1)


def std_from_param(x: torch.Tensor, kind: str = "softplus", min_std: float = 1e-3) -> torch.Tensor:
    """A positive std from an unconstrained network output ``x``.

    * ``"softplus"``: std = softplus(x) + min_std; smooth, grows linearly for
      large x, never below min_std.
    * ``"exp"`` (safe exp): std = exp(clamp(x, LOG_STD_MIN, LOG_STD_MAX)) + min_std,
      i.e. x is a log-std clamped to [-20, 2] (as in SAC implementations) so
      that exp can neither overflow nor underflow; std lies in
      [min_std + e^-20, min_std + e^2].  The clamp stops the gradient outside
      that range.
    """
    if min_std < 0:
        raise ValueError(f"std_from_param: min_std must be >= 0; got {min_std}")
    if kind == "softplus":
        return F.softplus(x) + min_std
    if kind == "exp":
        return torch.exp(x.clamp(LOG_STD_MIN, LOG_STD_MAX)) + min_std
    raise ValueError(f"std_from_param: unknown kind {kind!r}; use 'softplus' or 'exp'")


def make_distribution(action: ActionSpace, params: dict, squash: bool = False) -> Union[Categorical, Gaussian]:
    """The policy's distribution for an action space.

    Args:
        action: ``DiscreteActions(A)`` or ``BoxActions((D,), low, high)`` (rl_core/data/env_spec.py).
        params: ``{"policy_logits": [..., A]}`` for discrete, or
            ``{"policy_mean": [..., D], "policy_std": [..., D]}`` for box.
        squash: tanh-squash the Gaussian into [low, high] (box only; an error
            for a discrete spec).
    """
    if isinstance(action, DiscreteActions):
        if squash:
            raise ValueError("squash applies to box (continuous) action spaces only, not to a discrete one")
        logits = params["policy_logits"]
        n = action.n
        if logits.dim() < 1 or logits.shape[-1] != n:
            raise ValueError(
                f"policy_logits must be [..., {n}] for a discrete({n}) action space; got {tuple(logits.shape)}"
            )
        return Categorical(logits)
    if isinstance(action, BoxActions):
        shape = list(action.shape)
        if len(shape) != 1:
            raise ValueError(f"box action spaces must be 1-D, shape [D]; got shape {shape}")
        mean, std = params["policy_mean"], params["policy_std"]
        dim = int(shape[0])
        if mean.dim() < 1 or mean.shape[-1] != dim:
            raise ValueError(f"policy_mean must be [..., {dim}] for a box of shape [{dim}]; got {tuple(mean.shape)}")
        # Sequences go in as they are: Gaussian checks them on the CPU, then moves them.
        return Gaussian(mean, std, squash=squash, low=action.low, high=action.high)
    raise ValueError(f"unknown action space {action!r}; expected DiscreteActions or BoxActions")
