"""Actor-critic assembly: stem -> [features, clipped reward, one-hot last action] -> core -> heads.

Inputs are time-major: obs [T, B, ...], reward [T, B], done [T, B] (obs[t] is the
first observation of a new episode), last_action [T, B] (discrete: the action index
that led to obs[t], fed one-hot) or [T, B, D] (box actions: the action vector, fed as
it is).  Reward and last action are zeroed where done, so nothing leaks across
episodes.  Outputs: policy_logits [T, B, A] (discrete), or policy_mean and policy_std
[T, B, D] (box: ``policy_head`` is a :class:`models.heads.GaussianHead`), and
baseline [T, B].

``obs_normalizer`` (an ``rl_core.numerics.normalization.RunningMeanStd`` over the observation
shape) normalizes observations before the stem, clipped to +-``obs_clip``; the agent
updates its statistics in the learner and they reach the inference copy with the
weights.  ``value_normalizer`` (``ValueNormalizer``: PopArt or return std) makes the
baseline head predict normalized values; ``baseline`` is always unnormalized.

``last_action_input=False`` leaves the one-hot last action out (the reward stays):
then nothing the agent did reaches its next step except through the core's state.

``extra_values`` (an ``nn.ModuleDict``, empty unless an add-on fills it) holds further value
heads beside ``baseline``, each a linear layer on the baseline's input: RND's intrinsic value
``int_baseline`` (Burda et al. 2018, Section 2.3: two value heads).  Each adds an output of
that name, [T, B].

``stem_value`` (recurrent models only) adds ``stem_baseline`` [T, B], a second value head, linear on the core's
input (the stem's features, reward, last action).  Trained on the env's reward (``--stem_value``: a value stream of
coefficient 0, so no policy gradient), it gives the stem a gradient that does not pass through the core's gates,
as a feedforward model's heads do (docs/experiments/recurrent.md: read only through a core, an Atari stem's
features grow until the gates saturate).  It predicts unnormalized values, as ``extra_values`` do.

``value_stem`` (feedforward models only) gives the baseline its own tower, so the
value loss does not steer the policy's features (SB3's default for MLP policies).

``set_stem_dtype(torch.bfloat16)`` (on an inference copy, --inference_precision)
runs the stem(s) in that dtype; their features are cast to the heads' dtype, so
the core, its state and the heads keep theirs.
"""

from __future__ import annotations

import torch
from torch import nn


def core_input_size(stem_out: int, num_actions: int, last_action_input: bool = True) -> int:
    """Width of the core's input: stem features, clipped reward, one-hot last action (if fed)."""
    return stem_out + 1 + (num_actions if last_action_input else 0)


class ActorCritic(nn.Module):
    def __init__(
        self,
        stem: nn.Module,
        num_actions: int,
        core: nn.Module | None = None,
        value_stem: nn.Module | None = None,
        last_action_input: bool = True,
        policy_head=None,
        obs_normalizer: nn.Module | None = None,
        obs_clip: float = 10.0,
        value_normalizer: nn.Module | None = None,
        stem_value: bool = False,
    ):
        """``num_actions``: A for discrete actions, the action dimension D with a ``policy_head``
        (a callable ``head_in -> module``, e.g. a GaussianHead factory) for box actions."""
        super().__init__()
        if core is not None and value_stem is not None:
            raise ValueError("a separate value tower needs a feedforward model (no recurrent core)")
        if stem_value and core is None:
            raise ValueError(
                "a value head on the stem needs a recurrent core: a feedforward model's heads read the stem"
            )
        self.stem = stem
        self.value_stem = value_stem
        self.num_actions = num_actions
        self.continuous = policy_head is not None
        self.last_action_input = last_action_input
        self.extra_inputs = core_input_size(0, num_actions, last_action_input)  # reward, last action
        self.core_input_size = stem.out_size + self.extra_inputs
        self.core = core
        if core is not None and core.input_size != self.core_input_size:
            raise ValueError(f"core input size {core.input_size} != {self.core_input_size}")
        head_in = core.hidden_size if core is not None else self.core_input_size
        self.policy = policy_head(head_in) if self.continuous else nn.Linear(head_in, num_actions)
        value_in = value_stem.out_size + self.extra_inputs if value_stem is not None else head_in
        self.baseline = nn.Linear(value_in, 1)
        self.extra_values = nn.ModuleDict()
        self.stem_baseline = nn.Linear(self.core_input_size, 1) if stem_value else None
        self.obs_normalizer = obs_normalizer
        self.obs_clip = obs_clip
        self.value_normalizer = value_normalizer

    def set_stem_dtype(self, dtype: torch.dtype) -> None:
        """Cast the stem (and the value tower) to ``dtype``; the rest keeps its dtype."""
        self.stem.to(dtype)
        if self.value_stem is not None:
            self.value_stem.to(dtype)

    def initial_state(self, batch_size: int, device=None) -> tuple:
        """Recurrent state, every tensor batch-first; () for a feedforward model."""
        if self.core is None:
            return ()
        return self.core.initial_state(batch_size=batch_size, device=device)

    def head_dtype(self) -> torch.dtype:
        return self.baseline.weight.dtype

    def torso(self, inputs: dict, state: tuple = ()):
        """Stem, [features, clipped reward, last action], core: ``(x [T, B, F], extra, flat_obs, state)``;
        ``extra`` holds the reward and last-action inputs, ``flat_obs`` the (normalized) observations
        [T*B, ...] (a separate value tower reads them)."""
        x, extra, flat_obs = self.core_input(inputs)
        if self.core is not None:
            x, state = self.core(x, inputs["done"], state)
        return x, extra, flat_obs, state

    def core_input(self, inputs: dict):
        """Stem and [features, clipped reward, last action]: ``(x [T, B, F], extra, flat_obs)``, as ``torso``."""
        obs = inputs["obs"]
        T, B = obs.shape[:2]
        if self.obs_normalizer is not None:
            obs = self.obs_normalizer.normalize(obs.float(), clip=self.obs_clip)
        flat_obs = obs.flatten(0, 1)
        dtype = self.head_dtype()
        features = self.stem(flat_obs).view(T, B, -1).to(dtype)
        not_done = (~inputs["done"]).unsqueeze(-1).to(features.dtype)
        reward = inputs["reward"].clamp(-1, 1).unsqueeze(-1).to(features.dtype) * not_done
        extra = [reward]
        if self.last_action_input:
            if self.continuous:
                last = inputs["last_action"].to(features.dtype).view(T, B, -1)
            else:
                # one-hot as a comparison: F.one_hot checks the range with two host reads (a sync on a GPU)
                actions = torch.arange(self.num_actions, device=features.device)
                last = (inputs["last_action"].unsqueeze(-1) == actions).to(features.dtype)
            extra.append(last * not_done)
        return torch.cat([features, *extra], dim=-1), extra, flat_obs

    @property
    def recyclable(self) -> bool:
        """Whether ``recycle_pairs`` answers: the stem has recyclable layers."""
        return hasattr(self.stem, "recycle_pairs")

    def recycle_pairs(self, obs: torch.Tensor) -> list:
        """The stem's recyclable layers and their activations on ``obs`` [..., obs shape]
        (``models.recycling``); a stem without them raises AttributeError naming it."""
        pairs = getattr(self.stem, "recycle_pairs", None)
        if pairs is None:
            raise AttributeError(f"{type(self.stem).__name__} has no recyclable layers")
        if self.obs_normalizer is not None:
            obs = self.obs_normalizer.normalize(obs.float(), clip=self.obs_clip)
        return pairs(obs.reshape(-1, *obs.shape[-len(self.stem.obs_shape) :]))

    def forward(self, inputs: dict, state: tuple = ()):
        core_in, extra, flat_obs = self.core_input(inputs)
        x = core_in
        if self.core is not None:
            x, state = self.core(core_in, inputs["done"], state)
        T, B = x.shape[:2]
        dtype = self.head_dtype()
        if self.value_stem is not None:
            value_features = self.value_stem(flat_obs).view(T, B, -1).to(dtype)
            value_x = torch.cat([value_features, *extra], dim=-1)
        else:
            value_x = x
        baseline = self.baseline(value_x).squeeze(-1)
        if self.value_normalizer is not None:
            baseline = self.value_normalizer.denormalize(baseline)
        outputs = dict(self.policy(x)) if self.continuous else {"policy_logits": self.policy(x)}
        outputs["baseline"] = baseline
        if self.stem_baseline is not None:
            outputs["stem_baseline"] = self.stem_baseline(core_in).squeeze(-1)
        for name, head in self.extra_values.items():
            outputs[name] = head(value_x).squeeze(-1)
        return outputs, state
