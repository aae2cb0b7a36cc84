"""The configurable on-policy agent (Andrychowicz et al. 2020, "What Matters in On-Policy
Reinforcement Learning?"; SEED RL's ``policy_gradient`` agent).

One agent, its parts chosen by flags: the policy loss (``--agent vpg | ppo | awr | vmpo |
vtrace``), the advantage estimator (``--advantage gae | vtrace | nstep``), the value loss
(MSE or Huber, optionally clipped), advantage, value and observation normalization, entropy
and KL regularizers (a fixed cost, or a Lagrange multiplier towards a target), and how each
learner batch [T+1, B] is consumed: ``--num_epochs`` passes of ``--num_minibatches``
optimizer steps in one of SEED's ``--batch_mode``s.

Every loss term is a pure function of ``rl_core.losses``; this module only wires the
batch into them.  Alignment is the unroll store's: index t+1 of the batch holds the
action taken at obs[t], its behaviour log-probability and distribution parameters, the
behaviour value V_old(obs[t]), and the reward, done and truncated of that transition.

The agent learns one value head per ``ValueStream`` in ``self.streams``: the env's reward alone
(``baseline``), or with an add-on such as RND an intrinsic stream beside it; the advantage is
their weighted sum and the value loss sums over the heads.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rl_core.agents.base import Agent, actor_critic_streams
from rl_core.data.batch import action_field
from rl_core.agents.impala.agent import sample_actions
from rl_core.numerics import collectives
from rl_core.numerics.distributions import make_distribution
from rl_core.losses import advantages as adv_lib
from rl_core.losses import policy_gradient as pg_lib
from rl_core.numerics.optim import remaining_share

STEP_KEYS = ("action", "done", "truncated", "log_prob")


def _softplus_inverse(value: float) -> float:
    return value + math.log(-math.expm1(-value))


class LagrangeMultipliers(nn.Module):
    """Positive multipliers softplus(raw), trained by the agent's optimizer with the model."""

    def __init__(self, initial: dict[str, float]):
        super().__init__()
        self.raw = nn.ParameterDict({k: nn.Parameter(torch.tensor(_softplus_inverse(v))) for k, v in initial.items()})

    def __contains__(self, name: str) -> bool:
        return name in self.raw

    def value(self, name: str) -> torch.Tensor:
        return F.softplus(self.raw[name]) + 1e-8


class PolicyGradientAgent(Agent):
    def __init__(self, flags, spec=None):
        super().__init__(flags, spec)
        self.kind = flags.agent
        self.streams = actor_critic_streams(flags)
        self.batch_explained_variance: dict | None = None  # by value key, from ``transitions``
        self.clip_share = lambda: 1.0  # the share of --ppo_clip in force (--ppo_clip_decay)
        if spec is not None:
            self.discrete = spec.discrete
            self.param_keys = ("policy_logits",) if self.discrete else ("policy_mean", "policy_std")

    # ------------------------------------------------------------ model
    def build_model(self):
        f = self.flags
        model = super().build_model()
        multipliers = {}
        if self.kind == "vmpo":
            multipliers.update(temperature=f.vmpo_init_temperature, kl=f.vmpo_init_alpha)
        elif f.target_kl is not None:
            multipliers["kl"] = f.lagrange_init
        if f.target_entropy is not None:
            multipliers["entropy"] = f.lagrange_init
        if multipliers:
            model.lagrange = LagrangeMultipliers(multipliers)
        return model

    def make_optimizer(self, model):
        optimizer, scheduler = super().make_optimizer(model)
        if self.flags.ppo_clip_decay == "linear":
            # the schedule's batch count (kept in checkpoints) says how far the run has gone
            remaining = remaining_share(self.flags)
            self.clip_share = lambda: remaining(scheduler.last_epoch)
        return optimizer, scheduler

    def distribution(self, params: dict):
        return make_distribution(self.spec.action, params, squash=self.flags.squash)

    # ----------------------------------------------------------- acting
    def unroll_fields(self):
        f32 = np.dtype(np.float32)
        if self.discrete:
            fields = {"policy_logits": ((self.spec.num_actions,), f32)}
        else:
            shape, _ = action_field(self.spec)
            fields = {"policy_mean": (shape, f32), "policy_std": (shape, f32)}
        fields.update(log_prob=((), f32))
        fields.update({s.value_key: ((), f32) for s in self.streams})
        return fields

    def act(self, model, inputs, state, greedy=False):
        outputs, state = model(inputs, state)
        params = {k: outputs[k] for k in self.param_keys}
        if self.discrete:  # the fast path IMPALA's inference uses
            logits = params["policy_logits"]
            action = sample_actions(logits, greedy)
            log_prob = F.log_softmax(logits.float(), -1).gather(-1, action.unsqueeze(-1)).squeeze(-1)
        else:
            dist = self.distribution(params)
            action = dist.mode() if greedy else dist.sample()
            log_prob = dist.log_prob(action)
        values = {s.value_key: outputs[s.value_key] for s in self.streams}
        return action, dict(params, log_prob=log_prob, **values), state

    # ---------------------------------------------------------- learning
    def updates(self, model, batch, state):
        f = self.flags
        if model.obs_normalizer is not None:
            with torch.no_grad():
                model.obs_normalizer.update(batch["obs"][1:])
        B = batch["reward"].shape[1]
        if f.batch_mode in ("repeat", "shuffle"):
            if model.value_normalizer is not None:
                tr = self.transitions(model, batch, state)
                self.update_value_normalizer(model, tr["returns/baseline"], tr["mask"])
            for _ in range(f.num_epochs):
                order = torch.randperm(B) if f.batch_mode == "shuffle" else torch.arange(B)
                for idx in order.tensor_split(f.num_minibatches):
                    idx = idx.to(batch["reward"].device)
                    mb = {k: v[:, idx] for k, v in batch.items()}
                    yield self.unroll_loss(model, mb, tuple(s[idx] for s in state))
            return
        transitions = moments = None
        over_ranks = f.advantage_normalization and collectives.active() is not None
        for _ in range(f.num_epochs):
            if transitions is None or f.batch_mode == "split_with_advantage_recomputation":
                transitions, moments = self.transitions(model, batch, state), None
                if model.value_normalizer is not None:
                    self.update_value_normalizer(model, transitions["returns/baseline"], transitions["mask"])
            if f.num_minibatches == 1:  # one minibatch of every transition: no order changes its means
                parts = [slice(None)]
            else:
                n = transitions["advantages"].shape[0]
                parts = torch.randperm(n).to(batch["reward"].device).tensor_split(f.num_minibatches)
            if over_ranks and (moments is None or len(parts) > 1):
                # every minibatch's advantage statistics over the ranks in one all-reduce per epoch (once per
                # batch with one minibatch: the advantages stay fixed until recomputed), not one per step
                adv, mask = transitions["advantages"], transitions["mask"]
                moments = collectives.all_reduce_sum(
                    torch.stack([pg_lib.advantage_moments(adv[idx], mask[idx]) for idx in parts])
                )
            for j, idx in enumerate(parts):
                part = {k: v[idx] for k, v in transitions.items()}
                yield self.transition_loss(model, part, None if moments is None else moments[j])

    @staticmethod
    @torch.no_grad()
    def update_value_normalizer(model, returns, mask) -> None:
        """PopArt / return-std statistics from this batch's value targets, once per batch before its
        optimizer steps (the head is rescaled in place, so not while a graph holds its weights)."""
        model.value_normalizer.update(returns[mask > 0], head=model.baseline)

    def _step_data(self, batch: dict) -> dict:
        """The [1:] side of a batch: what happened after each obs[t] (see the module docstring)."""
        keys = STEP_KEYS + tuple(k for s in self.streams for k in (s.value_key, s.reward_key))
        step = {k: batch[k][1:] for k in keys if k in batch}
        if "truncated" not in step:
            step["truncated"] = torch.zeros_like(step["done"])
        for k in self.param_keys:
            step["behaviour/" + k] = batch[k][1:]
        return step

    def advantages(self, values: dict, bootstrap_values: dict, target_log_probs, step):
        """(advantages [T, B], returns {value_key: [T, B]}, mask [T, B]) over the streams: each stream's
        estimate with the chosen estimator, the advantages summed with the streams' coefficients
        (``rl_core.losses.advantages.combine_streams``); an episodic stream's truncations bootstrap."""
        f = self.flags
        estimates = []
        for s in self.streams:
            v, bootstrap = values[s.value_key], bootstrap_values[s.value_key]
            rewards, discounts, mask = adv_lib.stream_rewards_and_discounts(
                step[s.reward_key], step["done"], step["truncated"], v, s.discounting, s.episodic, s.clip_rewards
            )
            if f.advantage == "gae":
                out = adv_lib.gae(v, rewards, discounts, bootstrap, f.gae_lambda)
            elif f.advantage == "nstep":
                out = adv_lib.nstep(v, rewards, discounts, bootstrap, f.nstep)
            else:
                out = adv_lib.vtrace(
                    target_log_probs - step["log_prob"],
                    v,
                    rewards,
                    discounts,
                    bootstrap,
                    f.clip_rho_threshold,
                    f.clip_c_threshold,
                    f.clip_pg_rho_threshold,
                    f.vtrace_lambda,
                )
            estimates.append((s.coef, out, mask))
        advantages, mask = adv_lib.combine_streams(estimates)
        return advantages, {s.value_key: out.returns for s, (_, out, _) in zip(self.streams, estimates)}, mask

    def unroll_loss(self, model, batch, state):
        """Loss of whole unrolls [T+1, b]: advantages from this pass's values (repeat, shuffle)."""
        inputs = {"obs": batch["obs"], "reward": batch["reward"], "done": batch["done"], "last_action": batch["action"]}
        outputs, _ = model(inputs, state)
        step = self._step_data(batch)
        dist = self.distribution({k: outputs[k][:-1] for k in self.param_keys})
        log_probs = dist.log_prob(step["action"])
        keys = [s.value_key for s in self.streams]
        values = {k: outputs[k][:-1] for k in keys}
        advantages, returns, mask = self.advantages(
            {k: v.detach() for k, v in values.items()},
            {k: outputs[k][-1].detach() for k in keys},
            log_probs.detach(),
            step,
        )
        return self.loss_terms(model, dist, log_probs, values, advantages, returns, mask, step)

    @torch.no_grad()
    def transitions(self, model, batch, state) -> dict:
        """The batch as T*B shuffled-able transitions, with advantages from the current model (split)."""
        inputs = {"obs": batch["obs"], "reward": batch["reward"], "done": batch["done"], "last_action": batch["action"]}
        outputs, _ = model(inputs, state)
        step = self._step_data(batch)
        dist = self.distribution({k: outputs[k][:-1] for k in self.param_keys})
        keys = [s.value_key for s in self.streams]
        advantages, returns, mask = self.advantages(
            {k: outputs[k][:-1] for k in keys}, {k: outputs[k][-1] for k in keys}, dist.log_prob(step["action"]), step
        )
        # explained variance of the values the batch's advantages came from (SB3's and cleanrl's statistic):
        # once per batch, not per optimizer step
        self.batch_explained_variance = {k: pg_lib.explained_variance(outputs[k][:-1], returns[k], mask) for k in keys}
        flat = {"in/" + k: v[:-1] for k, v in inputs.items()}
        flat.update(step)
        flat.update({"returns/" + k: v for k, v in returns.items()})
        flat.update(advantages=advantages, mask=mask)
        return {k: v.flatten(0, 1) for k, v in flat.items()}

    def transition_loss(self, model, tr: dict, advantage_moments=None):
        inputs = {k[3:]: v.unsqueeze(0) for k, v in tr.items() if k.startswith("in/")}
        outputs, _ = model(inputs, ())
        step = {k: v.unsqueeze(0) for k, v in tr.items() if not k.startswith("in/")}
        dist = self.distribution({k: outputs[k] for k in self.param_keys})
        log_probs = dist.log_prob(step["action"])
        keys = [s.value_key for s in self.streams]
        return self.loss_terms(
            model,
            dist,
            log_probs,
            {k: outputs[k] for k in keys},
            step["advantages"],
            {k: step["returns/" + k] for k in keys},
            step["mask"],
            step,
            explained_variance=self.batch_explained_variance,
            advantage_moments=advantage_moments,
        )

    def loss_terms(
        self,
        model,
        dist,
        log_probs,
        values,
        advantages,
        returns,
        mask,
        step,
        explained_variance=None,
        advantage_moments=None,
    ):
        """Policy + value + entropy + KL terms of one minibatch, each [T, b] reduced over the mask;
        ``values`` and ``returns`` map each stream's value key to [T, b].  ``explained_variance`` (by value
        key): the batch's, computed once by ``transitions``; else this minibatch's from ``values``.
        ``advantage_moments``: (torchrun) the whole minibatch's advantage moments over the ranks, summed
        already; else, under torchrun, they are summed here."""
        f = self.flags

        def reduce(x, mask=mask):
            return pg_lib.reduce(x, mask, f.loss_reduction)

        # The mask drops truncated transitions (their outcome is unknown) from the terms that
        # depend on it, the policy and value losses; entropy and KL are about the state x_t
        # alone and cover every step.

        if mask is not None and mask.dtype != torch.bool:  # 0/1 (truncations): the masked means' fast path
            mask = mask != 0
        if f.advantage_normalization:
            # (under torchrun the minibatch is every rank's part of it: its statistics too)
            if advantage_moments is None and collectives.active() is not None:
                advantage_moments = collectives.all_reduce_sum(pg_lib.advantage_moments(advantages, mask))
            advantages = pg_lib.normalize_advantages(advantages, mask, moments=advantage_moments)
        lagrange = getattr(model, "lagrange", None)
        stats = {}
        extra = torch.zeros((), device=advantages.device)
        if self.kind == "ppo":
            clip = f.ppo_clip * self.clip_share()
            policy = reduce(pg_lib.ppo_clip(log_probs, step["log_prob"], advantages, clip))
            stats["clip_fraction"] = pg_lib.masked_mean(
                pg_lib.ppo_clip_fraction(log_probs.detach(), step["log_prob"], clip), mask
            )
            stats["ppo_clip"] = clip
            stats["approx_kl"] = pg_lib.masked_mean(pg_lib.approx_kl(log_probs.detach(), step["log_prob"]), mask)
        elif self.kind == "awr":
            policy = reduce(pg_lib.awr(log_probs, advantages, f.awr_beta, f.awr_max_weight))
        elif self.kind == "vmpo":
            terms = pg_lib.vmpo(log_probs, advantages, lagrange.value("temperature"), f.vmpo_eps_eta, mask=mask)
            policy = terms.policy.sum()  # psi sums to 1 over the selected steps: L_pi is a sum
            extra = extra + terms.temperature
            stats["temperature"] = lagrange.value("temperature").detach()
        else:  # vpg; vtrace (with --advantage vtrace the advantages hold V-trace's rho_pg clipping)
            policy = reduce(pg_lib.vpg(log_probs, advantages))

        value = 0.0
        for s in self.streams:
            v, target, old = values[s.value_key], returns[s.value_key], step[s.value_key]
            stats[f"{s.name}_explained_variance"] = (
                explained_variance[s.value_key]
                if explained_variance is not None
                else pg_lib.explained_variance(v, target, mask)
            )
            normalizer = model.value_normalizer if s.value_key == "baseline" else None
            if normalizer is not None:
                v, target, old = (normalizer.normalize(x) for x in (v, target, old))
            value = value + reduce(
                pg_lib.value_loss(
                    v,
                    target,
                    kind=f.value_loss,
                    huber_delta=f.huber_delta,
                    clip_epsilon=f.value_clip or None,
                    old_values=old if f.value_clip else None,
                )
            )
        value = f.baseline_cost * value

        entropy = dist.entropy()
        if lagrange is not None and "entropy" in lagrange:
            term, multiplier_loss = pg_lib.lagrange_penalty(
                entropy, lagrange.value("entropy"), f.target_entropy, None, kind="lower"
            )
            entropy_loss = reduce(term, None) + multiplier_loss
            stats["entropy_multiplier"] = lagrange.value("entropy").detach()
        else:
            entropy_loss = -self.entropy_cost() * reduce(entropy, None)

        kl_loss = torch.zeros((), device=advantages.device)
        need_kl = (lagrange is not None and "kl" in lagrange) or f.kl_cost
        if need_kl:
            behaviour = self.distribution({k: step["behaviour/" + k] for k in self.param_keys})
            kl = behaviour.kl(dist)
            if lagrange is not None and "kl" in lagrange:
                target = f.vmpo_eps_alpha if self.kind == "vmpo" else f.target_kl
                term, multiplier_loss = pg_lib.lagrange_penalty(kl, lagrange.value("kl"), target, None, kind="upper")
                kl_loss = reduce(term, None) + multiplier_loss
                stats["kl_multiplier"] = lagrange.value("kl").detach()
            else:
                kl_loss = f.kl_cost * reduce(kl, None)
            stats["kl"] = kl.detach().mean()

        total = policy + value + entropy_loss + kl_loss + extra
        # tensors: the learner reads them with the batch's one host sync
        stats.update(
            pg_loss=policy.detach(),
            baseline_loss=torch.as_tensor(value).detach(),
            entropy_loss=entropy_loss.detach(),
            entropy=entropy.detach().mean(),
            total_loss=total.detach(),
            mean_advantage=pg_lib.masked_mean(advantages.detach(), mask),
        )
        return total, stats
