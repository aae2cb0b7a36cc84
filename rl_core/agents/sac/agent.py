"""Soft actor-critic (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications"),
with discrete actions as in Christodoulou 2019 ("Soft Actor-Critic for Discrete Action Settings").

* Model (``models.sac``): a policy, twin critics with Polyak-averaged target copies
  (``--polyak_tau``), and log alpha.  Box actions: a Gaussian tanh-squashed into the env's
  bounds, sampled with the reparameterisation trick; discrete actions: a categorical policy
  whose expectations are taken exactly.
* Acting: the policy samples during training (its own exploration, per env alike); validation
  and the final test take its mode, the squashed mean (or the most likely action).  With
  ``--random_init_steps N`` a fresh run's first N steps are uniform random actions.
* Data: every ``--unroll_length`` steps an env hands over its last T + 1 steps; they go into a
  uniform replay (``rl_core.data.replay_source`` over the prioritized buffer with priority
  exponent 0: every sequence, then every transition of it, equally likely) of
  ``--replay_buffer_size`` transitions; a batch is ``--batch_size`` transitions (windows of
  2 steps); each inserted transition is sampled ``--replay_ratio`` times on average; learning
  starts once ``--replay_buffer_min_size`` transitions are in.
* Learning: one loss per batch, critic + actor + temperature, each with gradients only to its
  own parameters (the actor's Q-values go through the critics with their parameters detached for
  that pass), one Adam over all of them (SEED RL's arrangement); then the targets move by tau.
  The temperature is learned towards ``--target_entropy`` (default -|A| for box actions,
  ``--target_entropy_ratio`` x log|A| for discrete ones) or fixed at ``--entropy_cost`` with
  ``--no-learn_temperature``.

Alignment is the unroll store's: a window [obs_t, obs_t+1] carries the action taken at obs_t and
that transition's reward, done and truncated at index 1.  A terminated transition's target is
its reward; a time-limit truncation's next observation is the next episode's first, so that
transition has no target (masked): every other transition of the episode bootstraps as usual.
"""

from __future__ import annotations

import logging
import math

import torch
from torch.nn import functional as F

from rl_core.agents.base import Agent
from rl_core.numerics.distributions import Gaussian, make_distribution
from rl_core.data.env_spec import ActionSpace, DiscreteActions
from rl_core.errors import UserError
from rl_core.losses import sac as sac_lib

log = logging.getLogger("sac")


def target_entropy(flags, action: ActionSpace) -> float:
    """H-bar: --target_entropy, else -|A| (box, Haarnoja et al.) or ratio x log|A| (discrete, Christodoulou)."""
    if flags.target_entropy is not None:
        return float(flags.target_entropy)
    if isinstance(action, DiscreteActions):
        return flags.target_entropy_ratio * math.log(action.n)
    return -float(action.size)


class SACAgent(Agent):
    name = "sac"

    def __init__(self, flags, spec=None):
        super().__init__(flags, spec)
        self.source = None
        self.random_steps_left = flags.random_init_steps
        self._bounds: dict = {}  # the box's (low, high) per device
        if spec is not None:
            self.discrete = spec.discrete
            self.target_entropy = target_entropy(flags, spec.action)

    # ------------------------------------------------------------ model
    def build_model(self):
        from models import core_kind
        from models.sac import build_sac_model

        if core_kind(self.flags) is not None:
            raise UserError("--agent sac's networks are feedforward: drop --use_lstm / --use_elstm / --use_rtrl")
        return build_sac_model(self.flags, self.spec)

    def make_optimizer(self, model):
        from rl_core.numerics.optim import make_optimizer

        f = self.flags  # a learner step trains B transitions: B / replay ratio env steps
        params = [p for p in model.parameters() if p.requires_grad]
        return make_optimizer(f, params, steps_per_update=f.batch_size / f.replay_ratio)

    def distribution(self, params: dict):
        if self.discrete:
            return make_distribution(self.spec.action, params)
        mean = params["policy_mean"]
        bounds = self._bounds.get(mean.device)
        if bounds is None:  # checked once (make_distribution), then kept on each device
            make_distribution(self.spec.action, params, squash=True)
            action = self.spec.action
            bounds = tuple(
                torch.as_tensor(b, dtype=torch.float32, device=mean.device) for b in (action.low, action.high)
            )
            self._bounds[mean.device] = bounds
        return Gaussian(mean, params["policy_std"], squash=True, low=bounds[0], high=bounds[1], validate=False)

    # ----------------------------------------------------------- acting
    def unroll_fields(self):
        return {}

    def random_actions(self, shape: torch.Size, device) -> torch.Tensor:
        action = self.spec.action
        if self.discrete:
            return torch.randint(0, action.n, tuple(shape), device=device)
        low = torch.as_tensor(action.low, dtype=torch.float32, device=device)
        high = torch.as_tensor(action.high, dtype=torch.float32, device=device)
        return low + (high - low) * torch.rand(*shape, low.numel(), device=device)

    def act(self, model, inputs, state, greedy=False):
        if not greedy and self.random_steps_left > 0:
            if int(model.updates) == 0:  # a fresh run (a resumed one has learned: its policy acts)
                if self.random_steps_left == self.flags.random_init_steps:
                    log.info(
                        "uniformly random actions for the first %d steps (--random_init_steps)", self.random_steps_left
                    )
                self.random_steps_left -= inputs["obs"].shape[1]
                return self.random_actions(inputs["obs"].shape[:2], inputs["obs"].device), {}, state
            log.info("the policy acts from the start: it has learned (--random_init_steps applies to a fresh run)")
            self.random_steps_left = 0
        params, state = model(inputs, state)  # (no forward pass while acting at random)
        dist = self.distribution(params)
        action = dist.mode() if greedy else dist.sample()
        return action, {}, state

    # ---------------------------------------------------------- learning
    def make_data_source(self, learner_queue, pin: bool = False):
        from rl_core.data.replay_source import ReplaySource

        f = self.flags
        T = f.unroll_length
        self.source = ReplaySource(
            learner_queue,
            f,
            stride=T,
            seed=f.seed,
            capacity=math.ceil(f.replay_buffer_size / T),
            min_size=math.ceil(f.replay_buffer_min_size / T),
            trained_per_batch=f.batch_size,
            pin=pin,
            priority_exponent=0.0,
            importance_sampling_exponent=0.0,
            window=2,
            unit=("transitions", T),
        )
        return self.source

    def learner_queue_size(self, chunk_envs):
        return 2  # transitions reach the replay (and the learner) a few steps after they happen

    def loss(self, model, batch: dict):
        """(critic + actor + temperature loss, stats) of a batch of transitions [2, B]."""
        f = self.flags
        if model.obs_normalizer is not None:
            with torch.no_grad():
                model.obs_normalizer.update(batch["obs"][1])
        obs, next_obs = model.normalize(batch["obs"][0]), model.normalize(batch["obs"][1])
        action, reward = batch["action"][1], batch["reward"][1].float()
        if f.reward_clipping == "abs_one":
            reward = reward.clamp(-1, 1)
        discounts = (~batch["done"][1]).float() * f.discounting
        truncated = batch.get("truncated")
        mask = (~truncated[1]).float() if truncated is not None else None
        alpha = model.log_alpha.exp().detach()

        with torch.no_grad():
            next_params = model.policy_params(next_obs)
            if self.discrete:
                next_log_probs = F.log_softmax(next_params["policy_logits"].float(), -1)
                nq1, nq2 = model.target_critics(next_obs)
                next_values = sac_lib.discrete_soft_values(next_log_probs.exp(), next_log_probs, nq1, nq2, alpha)
                targets = reward + discounts * next_values
            else:
                next_action, next_log_prob = self.distribution(next_params).sample_with_log_prob()
                nq1, nq2 = model.target_critics(next_obs, next_action)
                targets = sac_lib.soft_q_targets(reward, discounts, nq1, nq2, next_log_prob, alpha)

        params = model.policy_params(obs)
        if self.discrete:
            q1_all, q2_all = model.critics(obs)
            index = action.long().unsqueeze(-1)
            q1, q2 = q1_all.gather(-1, index).squeeze(-1), q2_all.gather(-1, index).squeeze(-1)
            log_probs = F.log_softmax(params["policy_logits"].float(), -1)
            probs = log_probs.exp()
            actor = sac_lib.discrete_actor_loss(probs, log_probs, q1_all, q2_all, alpha)
            temperature = sac_lib.temperature_loss(model.log_alpha, log_probs, self.target_entropy, probs=probs)
            entropy = -(probs * log_probs).sum(-1).mean()
        else:
            q1, q2 = model.critics(obs, action)
            new_action, log_prob = self.distribution(params).sample_with_log_prob()
            pq1, pq2 = model.critics(obs, new_action, detach_params=True)
            actor = sac_lib.actor_loss(log_prob, pq1, pq2, alpha)
            temperature = sac_lib.temperature_loss(model.log_alpha, log_prob, self.target_entropy)
            entropy = -log_prob.detach().mean()
        critic = sac_lib.critic_loss(q1, q2, targets, mask)
        total = critic + actor + (temperature if f.learn_temperature else 0.0)
        stats = {  # tensors: the learner reads them with the batch's one host sync
            "total_loss": total.detach(),
            "critic_loss": critic.detach(),
            "actor_loss": actor.detach(),
            "temperature_loss": temperature.detach(),
            "alpha": alpha,
            "entropy": entropy.detach(),
            "target_entropy": self.target_entropy,
            "mean_q": q1.detach().mean(),
            "mean_target": targets.mean(),
        }
        return total, stats

    def updates(self, model, batch, state):
        loss, stats = self.loss(model, batch)
        yield loss, stats
        with torch.no_grad():  # after the optimizer step
            model.update_targets(self.flags.polyak_tau)
            model.updates += 1
