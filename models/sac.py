"""Soft actor-critic networks (Haarnoja et al. 2018; discrete actions: Christodoulou 2019).

Five networks on the observation alone (no reward or last action input, no recurrent core):

* the actor: box actions -> the mean and std of a Gaussian (``models.heads.GaussianHead``,
  state-dependent std), tanh-squashed into the env's bounds by the agent; discrete actions ->
  the logits of pi(.|s);
* two critics Q_1, Q_2: box actions -> Q(s, a) from [features(s), a]; discrete -> Q(s, .) [A]
  (``TwinCritics``: both in one batched forward, one ``baddbmm`` per layer);
* their target copies Q-bar_1, Q-bar_2 (frozen, Polyak-averaged by the agent);
* log alpha, the temperature's logarithm.

Each network has its own torso: for vector observations the (normalized) observation itself,
for images a CNN stem (``--model``), then a ReLU MLP of ``--mlp_sizes`` (the paper's 256, 256).
Everything is registered on :class:`SACModel`, so ``model.tar`` holds all of it.  Acting needs
the actor only: ``learner_only`` names the parts the inference copy leaves out.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from rl_core.data.env_spec import EnvSpec


class Torso(nn.Module):
    """obs [N, ...] -> features [N, F]: a CNN stem for images (or nothing), then a ReLU MLP."""

    def __init__(self, stem: nn.Module | None, in_size: int, hidden_sizes: tuple[int, ...]):
        super().__init__()
        self.stem = stem
        layers = []
        for size in hidden_sizes:
            layers += [nn.Linear(in_size, size), nn.ReLU()]
            in_size = size
        self.mlp = nn.Sequential(*layers)
        self.out_size = in_size

    def forward(self, obs: torch.Tensor, extra: torch.Tensor | None = None) -> torch.Tensor:
        x = self.stem(obs) if self.stem is not None else obs.flatten(1)
        dtype = self.mlp[0].weight.dtype if len(self.mlp) else x.dtype
        x = x.to(dtype)
        if extra is not None:
            x = torch.cat([x, extra.to(dtype)], dim=-1)
        return self.mlp(x)


class EnsembleLinear(nn.Module):
    """E independent linear layers applied in one batched matmul: x [E, N, in] -> [E, N, out].

    Each member is initialised as an ``nn.Linear(in, out)`` of its own."""

    def __init__(self, ensemble: int, in_size: int, out_size: int):
        super().__init__()
        layers = [nn.Linear(in_size, out_size) for _ in range(ensemble)]
        self.weight = nn.Parameter(torch.stack([layer.weight.detach().t() for layer in layers]))  # [E, in, out]
        self.bias = nn.Parameter(torch.stack([layer.bias.detach() for layer in layers]).unsqueeze(1))  # [E, 1, out]

    def forward(self, x: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        w, b = (self.weight.detach(), self.bias.detach()) if detach_params else (self.weight, self.bias)
        return torch.baddbmm(b, x, w)


class TwinCritics(nn.Module):
    """Q_1 and Q_2 in one batched forward: Q(s, a) [N] each from [features(s), a] (box actions), or
    Q(s, .) [N, A] (discrete).

    The two critics share no parameter: each has its own ReLU MLP (the members of ``layers``) and, for
    images, its own CNN stem (``stems``); the MLPs run as one ``baddbmm`` per layer for both."""

    def __init__(
        self,
        stems: list[nn.Module] | None,
        in_size: int,
        hidden_sizes: tuple[int, ...],
        num_outputs: int,
        box_actions: bool,
    ):
        super().__init__()
        self.stems = nn.ModuleList(stems) if stems else None
        self.box_actions = box_actions
        sizes = (in_size, *hidden_sizes, num_outputs)
        self.layers = nn.ModuleList(EnsembleLinear(2, i, o) for i, o in zip(sizes[:-1], sizes[1:]))

    def forward(
        self, obs: torch.Tensor, action: torch.Tensor | None = None, detach_params: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(Q_1, Q_2); ``detach_params``: gradients flow to the inputs (the actor's action), not to the
        critics' parameters (SAC's policy loss, Haarnoja et al. 2018 Eq. 7)."""
        dtype = self.layers[0].weight.dtype
        if self.stems is not None:
            x = torch.stack([stem(obs).to(dtype) for stem in self.stems])  # [2, N, F]
        else:
            x = obs.flatten(1).to(dtype).expand(2, *obs.shape[:1], -1)
        if action is not None:
            x = torch.cat([x, action.to(dtype).expand(2, *action.shape)], dim=-1)
        for i, layer in enumerate(self.layers):
            x = layer(x, detach_params)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        q = x.squeeze(-1) if self.box_actions else x
        return q[0], q[1]

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # A checkpoint from before the batched critics (q1/q2 each a Torso and a Linear q) loads into it.
        if prefix + "q1.q.weight" in state_dict:
            convert_twin_critics(state_dict, prefix, len(self.layers))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def convert_twin_critics(state_dict: dict, prefix: str, num_layers: int) -> None:
    """Rewrite, in place, the keys of separate critics (``q1.torso.mlp.{0,2,..}``, ``q1.q``,
    ``q1.torso.stem.*``) as the batched ones (``layers.i.weight`` [2, in, out], ``stems.{0,1}.*``)."""
    for k in [
        k for k in state_dict if k.startswith(prefix + "q1.torso.stem.") or k.startswith(prefix + "q2.torso.stem.")
    ]:
        member = 0 if k.startswith(prefix + "q1.") else 1
        state_dict[f"{prefix}stems.{member}.{k[len(prefix + 'q1.torso.stem.') :]}"] = state_dict.pop(k)
    for i in range(num_layers):
        old = "q.{}" if i == num_layers - 1 else f"torso.mlp.{2 * i}.{{}}"
        w = [state_dict.pop(f"{prefix}q{m}.{old.format('weight')}") for m in (1, 2)]
        b = [state_dict.pop(f"{prefix}q{m}.{old.format('bias')}") for m in (1, 2)]
        state_dict[f"{prefix}layers.{i}.weight"] = torch.stack([x.t() for x in w])
        state_dict[f"{prefix}layers.{i}.bias"] = torch.stack(b).unsqueeze(1)


class SACModel(nn.Module):
    learner_only = ("critics", "target_critics")

    def __init__(
        self,
        actor_torso: Torso,
        policy: nn.Module,
        critics: TwinCritics,
        discrete: bool,
        obs_normalizer: nn.Module | None = None,
        obs_clip: float = 10.0,
        initial_alpha: float = 1.0,
    ):
        super().__init__()
        self.actor_torso = actor_torso
        self.policy = policy
        self.discrete = discrete
        self.critics = critics
        self.target_critics = copy.deepcopy(critics)
        for p in self.target_critics.parameters():
            p.requires_grad_(False)
        self.obs_normalizer = obs_normalizer
        self.obs_clip = obs_clip
        self.log_alpha = nn.Parameter(torch.tensor(math.log(initial_alpha)))
        self.register_buffer("updates", torch.zeros((), dtype=torch.int64))  # learner steps taken

    @property
    def stem(self):  # the actor's CNN, for --load_conv_net_from / --freeze_conv (models.pretrained)
        return self.actor_torso.stem

    def initial_state(self, batch_size: int, device=None) -> tuple:
        return ()

    def set_stem_dtype(self, dtype: torch.dtype) -> None:
        if self.actor_torso.stem is not None:
            self.actor_torso.stem.to(dtype)

    def normalize(self, obs: torch.Tensor) -> torch.Tensor:
        """Observations as the networks see them: normalized by running statistics if on."""
        if self.obs_normalizer is None:
            return obs
        return self.obs_normalizer.normalize(obs.float(), clip=self.obs_clip)

    def policy_params(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        """The policy's parameters for normalized observations [N, ...]."""
        x = self.actor_torso(obs)
        if self.discrete:
            return {"policy_logits": self.policy(x)}
        return self.policy(x)

    def forward(self, inputs: dict, state: tuple = ()):
        """The policy's parameters for observations [T, B, ...] (acting); reward, done and last action
        are not inputs of SAC's networks."""
        obs = inputs["obs"]
        T, B = obs.shape[:2]
        params = self.policy_params(self.normalize(obs.flatten(0, 1)))
        return {k: v.view(T, B, *v.shape[1:]) for k, v in params.items()}, state

    @torch.no_grad()
    def update_targets(self, tau: float) -> None:
        from rl_core.losses.sac import polyak_update

        polyak_update(self.target_critics.parameters(), self.critics.parameters(), tau)


def build_sac_model(flags, spec: EnvSpec) -> SACModel:
    from models import action_size, build_stem
    from models.heads import GaussianHead

    obs_shape = spec.obs.shape
    action = spec.action
    discrete = spec.discrete
    n = action_size(action)
    hidden = tuple(int(s) for s in str(flags.mlp_sizes).split(",") if s)
    image = len(obs_shape) == 3

    def torso(extra: int = 0) -> Torso:
        stem = build_stem(flags, obs_shape) if image else None
        in_size = stem.out_size if image else int(math.prod(obs_shape))
        return Torso(stem, in_size + extra, hidden)

    actor_torso = torso()
    if discrete:
        policy = nn.Linear(actor_torso.out_size, n)
    else:
        policy = GaussianHead(
            actor_torso.out_size,
            n,
            std_kind=flags.std_kind,
            min_std=flags.min_std,
            initial_std=flags.initial_std,
            state_dependent=True,
        )
    stems = [build_stem(flags, obs_shape) for _ in range(2)] if image else None
    critic_in = (stems[0].out_size if image else int(math.prod(obs_shape))) + (0 if discrete else n)
    critics = TwinCritics(stems, critic_in, hidden, n if discrete else 1, box_actions=not discrete)
    obs_normalizer = None
    if flags.obs_normalization:
        from rl_core.numerics.normalization import RunningMeanStd

        obs_normalizer = RunningMeanStd(obs_shape)
    alpha = flags.initial_temperature if flags.learn_temperature else flags.entropy_cost
    model = SACModel(
        actor_torso, policy, critics, discrete, obs_normalizer, flags.obs_clip, initial_alpha=max(alpha, 1e-12)
    )
    model.log_alpha.requires_grad_(bool(flags.learn_temperature))  # else alpha stays --entropy_cost
    return model
