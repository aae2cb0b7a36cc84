"""R2D2 (Kapturowski et al. 2019, "Recurrent Experience Replay in Distributed Reinforcement
Learning"): recurrent n-step double Q-learning from prioritized sequence replay.

* Acting: a dueling Q-network (``models.qnet``); env i of N explores epsilon-greedily with
  epsilon_i = 0.4^(1 + 7 i / (N - 1)) (Ape-X), an input that travels with its inference
  requests; validation and the final test use ``--eval_epsilon``.
* Data: every ``--sequence_stride`` steps (default unroll_length / 2) an env hands over a
  sequence of burn_in + unroll_length + 1 steps with the recurrent state at its first step;
  sequences go into a prioritized replay (``rl_core.data.replay_source``).
* Learning: the stored state is burned in over the first ``--burn_in`` steps without gradient
  (online and target networks alike); on the remaining T + 1 steps the n-step double-Q targets
  y_t with value rescaling h give the TD errors delta_t = h(y_t) - Q(s_t, a_t) of transitions
  t = burn_in .. L-1; the loss is the IS-weighted 0.5 sum_t delta_t^2; the sequence's new
  priority eta max|delta| + (1 - eta) mean|delta| is written back after the optimizer step; the
  target network is copied every ``--target_update_period`` learner steps.

Alignment is the unroll store's: index t+1 holds the action taken at obs[t] and the reward,
done and truncated of that transition.  A time-limit truncation is not a terminal state: its
transition has no target (masked) and earlier windows bootstrap from the state where the
episode was cut (``rl_core.losses.advantages.bootstrap_truncations``).
"""

from __future__ import annotations

import torch

from rl_core.agents.base import Agent
from rl_core.losses import r2d2 as r2d2_lib
from rl_core.losses.advantages import bootstrap_truncations
from rl_core.data.batch import REPLAY_INDEX, REPLAY_WEIGHT
from rl_core.data.replay import sequence_priorities


class R2D2Agent(Agent):
    name = "r2d2"

    def __init__(self, flags, spec=None):
        super().__init__(flags, spec)
        self.source = None

    # ------------------------------------------------------------ model
    def build_model(self):
        from models.qnet import build_q_network

        model = build_q_network(self.flags, self.spec)
        model.add_target_network()
        return model

    def make_optimizer(self, model):
        from rl_core.numerics.optim import make_optimizer

        online = [
            p for name, p in model.named_parameters() if p.requires_grad and not name.startswith("target_network.")
        ]
        f = self.flags  # a learner step trains B x T steps: B x T / replay ratio env steps
        return make_optimizer(f, online, steps_per_update=f.batch_size * f.unroll_length / f.replay_ratio)

    # ----------------------------------------------------------- acting
    def unroll_fields(self):
        return {}

    def epsilons(self, num_envs: int) -> torch.Tensor:
        return r2d2_lib.ape_x_epsilons(num_envs, self.flags.epsilon_base, self.flags.epsilon_alpha)

    def actor_inputs(self, env_ids, num_envs):
        return {"epsilon": self.epsilons(num_envs)[torch.as_tensor(env_ids)].view(1, -1)}

    def sequence(self):
        f = self.flags
        stride = f.sequence_stride or max(1, f.unroll_length // 2)
        return f.burn_in + f.unroll_length, stride

    def act(self, model, inputs, state, greedy=False):
        outputs, state = model(inputs, state)
        q = outputs["q_values"]
        action = q.argmax(-1)
        epsilon = inputs.get("epsilon") if not greedy else None
        if epsilon is None:
            epsilon = torch.full(action.shape, self.flags.eval_epsilon, device=action.device)
        explore = torch.rand(action.shape, device=action.device) < epsilon
        random_action = torch.randint(0, q.shape[-1], action.shape, device=action.device)
        return torch.where(explore, random_action, action), {}, state

    # ---------------------------------------------------------- learning
    def make_data_source(self, learner_queue, pin: bool = False):
        from rl_core.data.replay_source import ReplaySource

        self.source = ReplaySource(learner_queue, self.flags, stride=self.sequence()[1], seed=self.flags.seed, pin=pin)
        return self.source

    def loss(self, model, batch: dict, state: tuple):
        """(loss, TD errors [T, B], mask [T, B], stats) of a batch of sequences [L+1, B]."""
        f = self.flags
        eps = f.value_function_rescaling_epsilon
        inputs = {"obs": batch["obs"], "reward": batch["reward"], "done": batch["done"], "last_action": batch["action"]}
        burn = f.burn_in
        target_net = model.target_network
        suffix = {k: v[burn:] for k, v in inputs.items()}
        with torch.no_grad():
            online_state = target_state = state
            if burn:
                prefix = {k: v[:burn] for k, v in inputs.items()}
                _, online_state = model(prefix, state)
                _, target_state = target_net(prefix, state)
            target_q = target_net(suffix, target_state)[0]["q_values"]  # [T+1, B, A]
        q = model(suffix, online_state)[0]["q_values"]
        actions = batch["action"][burn + 1 :]
        rewards = batch["reward"][burn + 1 :]
        if f.reward_clipping == "abs_one":
            rewards = rewards.clamp(-1, 1)
        q_taken = q[:-1].gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)  # Q(s_t, a_t), t < T
        with torch.no_grad():
            values = r2d2_lib.double_q_values(q.detach(), target_q, eps)  # h^-1 Q_target(s_t, a*_t), t <= T
            discounts = (~batch["done"][burn + 1 :]).to(q.dtype) * f.discounting
            truncated = batch.get("truncated")
            truncated = truncated[burn + 1 :] if truncated is not None else torch.zeros_like(batch["done"][burn + 1 :])
            rewards, discounts, mask = bootstrap_truncations(rewards.to(q.dtype), discounts, values[:-1], truncated)
            targets = r2d2_lib.n_step_targets(rewards, discounts, values[1:], f.n_steps)
        out = r2d2_lib.r2d2_loss(q_taken, targets, batch[REPLAY_WEIGHT].to(q.dtype), mask, eps)
        abs_td = out.td_errors.abs()
        stats = {
            "total_loss": out.loss.detach(),
            "mean_abs_td": (abs_td.sum() / mask.sum().clamp(min=1)).detach(),
            "mean_q": q_taken.detach().mean(),
            "max_abs_q": q.detach().abs().max(),
            "mean_is_weight": batch[REPLAY_WEIGHT].mean(),
        }
        return out.loss, abs_td, mask, stats

    def updates(self, model, batch, state):
        f = self.flags
        loss, abs_td, mask, stats = self.loss(model, batch, state)
        epsilons = self.epsilons(f.num_actors)
        stats.update(epsilon_min=float(epsilons.min()), epsilon_max=float(epsilons.max()))
        yield loss, stats
        # After the optimizer step: the sampled sequences' new priorities, the target network.
        priorities = sequence_priorities(abs_td, f.priority_eta, mask)
        if self.source is not None:
            self.source.update_priorities(batch[REPLAY_INDEX], priorities)
        with torch.no_grad():
            model.updates += 1
            if int(model.updates) % f.target_update_period == 0:
                model.update_target_network()
