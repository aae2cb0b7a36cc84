"""IMPALA (Espeholt et al. 2018): V-trace actor-critic over [T+1, B] unrolls, one step per batch (or --num_epochs)."""

from __future__ import annotations

import numpy as np
import torch
from torch.nn import functional as F

from rl_core.agents.base import Agent, actor_critic_streams
from rl_core.losses.advantages import stream_rewards_and_discounts
from rl_core.losses.impala import ValueHead, multi_head_impala_loss


def sample_actions(policy_logits: torch.Tensor, greedy: bool = False) -> torch.Tensor:
    """Actions [...] from logits [..., A]: sampled, or argmax when greedy."""
    if greedy:
        return policy_logits.argmax(-1)
    flat = policy_logits.reshape(-1, policy_logits.shape[-1])
    return torch.multinomial(F.softmax(flat.float(), dim=-1), 1).view(policy_logits.shape[:-1])


class ImpalaAgent(Agent):
    """The loss of one learner batch.

    ``batch`` holds the unroll store's fields, [T+1, B, ...]: index t has obs[t],
    the reward and done that came with it, and the action (with the behaviour
    policy's logits) that led to it.  So the learner pairs its outputs [:-1]
    with batch[1:], and bootstraps from its value of the last observation.

    A time-limit truncation (``batch["truncated"]``) is not a terminal state: its
    transition is replaced by one whose V-trace target is V(x_t) itself (reward
    V(x_t), discount 0; see ``rl_core.losses.advantages.bootstrap_truncations``), so
    earlier steps bootstrap from V(x_t) and that step adds no policy gradient.

    With more than one ``ValueStream`` (RND's intrinsic stream beside the env's), each stream's
    head gets V-trace targets of its own and the policy follows their weighted advantages
    (``rl_core.losses.impala.multi_head_impala_loss``).
    """

    name = "impala"

    def __init__(self, flags, spec=None):
        super().__init__(flags, spec)
        self.streams = actor_critic_streams(flags) if flags is not None else ()

    def unroll_fields(self):
        n = self.spec.num_actions
        fields = {"policy_logits": ((n,), np.dtype(np.float32)), "baseline": ((), np.dtype(np.float32))}
        fields.update({s.value_key: ((), np.dtype(np.float32)) for s in self.streams})
        return fields

    def act(self, model, inputs, state, greedy=False):
        outputs, state = model(inputs, state)
        logits = outputs["policy_logits"]
        extras = {"policy_logits": logits, "baseline": outputs["baseline"]}
        extras.update({s.value_key: outputs[s.value_key] for s in self.streams})
        return sample_actions(logits, greedy), extras, state

    def updates(self, model, batch, state):
        """``--num_epochs`` optimizer steps on the batch, each with the loss recomputed by the weights
        the previous one left: V-trace's importance weights correct for the policy having moved since the
        batch was acted (as for any lag), so a pass after the first is an off-policy update (replayed
        experience as in the IMPALA paper's replay experiments, without a buffer; RLlib's IMPALA num_sgd_iter)."""
        for _ in range(max(1, int(getattr(self.flags, "num_epochs", 1)))):
            yield self.loss(model, batch, state)

    def loss(self, model, batch: dict, initial_state: tuple):
        """One V-trace head per stream (alone: the env's reward on ``baseline``); an episodic stream's
        rewards are clipped per --reward_clipping and its truncations bootstrap, as above.  The entropy cost
        is ``entropy_cost()`` (--entropy_decay); the stats add it when it decays."""
        f = self.flags
        inputs = {"obs": batch["obs"], "reward": batch["reward"], "done": batch["done"], "last_action": batch["action"]}
        outputs, _ = model(inputs, initial_state)
        dones = batch["done"][1:]
        truncated = batch.get("truncated")
        truncated = truncated[1:] if truncated is not None else torch.zeros_like(dones)
        heads = []
        for s in self.streams:
            values = outputs[s.value_key][:-1]
            rewards, discounts, _ = stream_rewards_and_discounts(
                batch[s.reward_key][1:], dones, truncated, values.detach(), s.discounting, s.episodic, s.clip_rewards
            )
            heads.append(ValueHead(rewards, discounts, values, outputs[s.value_key][-1], s.coef, s.name))
        entropy_cost = self.entropy_cost()
        loss, stats = multi_head_impala_loss(
            behavior_policy_logits=batch["policy_logits"][1:],
            target_policy_logits=outputs["policy_logits"][:-1],
            actions=batch["action"][1:],
            heads=heads,
            baseline_cost=f.baseline_cost,
            entropy_cost=entropy_cost,
            clip_rho_threshold=f.clip_rho_threshold,
            clip_pg_rho_threshold=f.clip_pg_rho_threshold,
            clip_c_threshold=f.clip_c_threshold,
            lambda_=f.vtrace_lambda,
        )
        if getattr(f, "entropy_decay", "none") != "none":
            stats["entropy_cost"] = entropy_cost
        return loss, stats
