"""RND as an add-on of an on-policy agent (``--rnd``; Burda et al. 2018, "Exploration by Random
Network Distillation").

``RNDAgent`` wraps ``--agent impala | ppo | vpg | awr | vmpo | vtrace`` and changes three things:

* the model gains a second value head, ``int_baseline`` (``--value_normalization`` stays the
  extrinsic head's: the intrinsic reward is normalized by RND itself), and the RND networks and statistics
  (``models/rnd.py``; learner-only, so the inference copy carries neither);
* the inner agent learns two reward streams: the env's (``--discounting``, episodic, weighted
  ``--ext_coef``) and the intrinsic one (``--intrinsic_discounting``, non-episodic, weighted
  ``--int_coef``); its advantages are their weighted sum, each head learns its own targets
  (GAE, or V-trace under ``--agent impala``: ``rl_core.losses.impala.multi_head_impala_loss``);
* each learner batch first updates the observation statistics with its observations, then
  computes the intrinsic rewards of its transitions (the predictor's error on the next
  observation, divided by the running std of the forward-filtered intrinsic return), and
  every optimizer step of the inner agent also trains the predictor on a random
  ``--rnd_update_proportion`` of its share of the batch.

A fresh run first acts uniformly at random for ``--rnd_init_steps`` steps (all envs together)
and trains nothing on them: they only initialise the observation statistics (OpenAI's
``init_steps`` of a random agent).  The intrinsic reward's forward filter runs per env, so every
step carries its env's index (``actor_inputs`` sends it with the inference requests; ``act``
stores it in the unroll).
"""

from __future__ import annotations

import logging
import math
import threading

import numpy as np
import torch
from torch import nn

from rl_core.numerics import collectives
from rl_core.agents.base import Agent, ValueStream, actor_critic_streams
from rl_core.losses import rnd as rnd_lib
from rl_core.losses.scan import discounted_scan

log = logging.getLogger("rnd")


def intrinsic_stream(flags) -> ValueStream:
    """The intrinsic reward stream: non-episodic, ``--intrinsic_discounting``, weight ``--int_coef``."""
    return ValueStream(
        "int",
        "int_baseline",
        "int_reward",
        flags.intrinsic_discounting,
        flags.int_coef,
        episodic=False,
        clip_rewards=False,
    )


def occurrence_groups(env_ids: torch.Tensor) -> list[torch.Tensor]:
    """Column indices grouped so that no env appears twice in a group, groups in order of
    occurrence: a batch holding two consecutive unrolls of an env filters the earlier first."""
    seen: dict[int, int] = {}
    groups: list[list[int]] = []
    for column, env in enumerate(env_ids.tolist()):
        k = seen.get(env, 0)
        seen[env] = k + 1
        if k == len(groups):
            groups.append([])
        groups[k].append(column)
    return [torch.tensor(g, dtype=torch.long, device=env_ids.device) for g in groups]


class RNDAgent(Agent):
    def __init__(self, flags, spec, inner: Agent):
        super().__init__(flags, spec)
        self.inner = inner
        self.name = f"{flags.agent}+rnd"
        inner.streams = (*actor_critic_streams(flags, ext_coef=flags.ext_coef), intrinsic_stream(flags))
        self.random_steps_left = int(flags.rnd_init_steps)
        self._stats_lock = threading.Lock()
        self._episode_returns: list[float] = []
        self._init_steps_seen = 0

    # ------------------------------------------------------------ model
    def build_model(self) -> nn.Module:
        from models.rnd import RND

        f = self.flags
        model = self.inner.build_model()
        head = nn.Linear(model.baseline.in_features, 1)
        if f.init == "orthogonal":
            from models.init import orthogonal_weight

            orthogonal_weight(head.weight, 1.0)
            nn.init.zeros_(head.bias)
        model.extra_values["int_baseline"] = head
        mlp_sizes = tuple(int(s) for s in str(f.rnd_mlp_sizes).split(",") if s)
        model.rnd = RND(
            self.spec.obs.shape,
            f.num_actors,
            channels=f.rnd_channels,
            feature_size=f.rnd_feature_size,
            mlp_sizes=mlp_sizes,
        )
        model.learner_only = (*getattr(model, "learner_only", ()), "rnd")
        # Published to the inference copy: set once the random initialisation is over, so that a
        # resumed run acts with its policy from the start.
        model.register_buffer("rnd_ready", torch.tensor(False))
        return model

    def make_optimizer(self, model):
        return self.inner.make_optimizer(model)

    # ----------------------------------------------------------- acting
    def unroll_fields(self):
        f32 = np.dtype(np.float32)
        return dict(self.inner.unroll_fields(), env_id=((), f32), random_action=((), f32))

    def actor_inputs(self, env_ids: np.ndarray, num_envs: int) -> dict[str, torch.Tensor]:
        inputs = dict(self.inner.actor_inputs(env_ids, num_envs))
        inputs["env_id"] = torch.as_tensor(np.asarray(env_ids), dtype=torch.float32).view(1, -1)
        return inputs

    def act(self, model, inputs, state, greedy=False):
        action, extras, state = self.inner.act(model, inputs, state, greedy)
        if "env_id" not in inputs:  # validation and the test play without the actors' inputs
            return action, extras, state
        random = torch.zeros_like(inputs["env_id"])
        if not greedy and self.random_steps_left > 0:
            if bool(model.rnd_ready):
                log.info(
                    "the policy acts from the start: the observation statistics are initialised "
                    "(--rnd_init_steps applies to a fresh run)"
                )
                self.random_steps_left = 0
            else:
                if self.random_steps_left == self.flags.rnd_init_steps:
                    log.info(
                        "uniformly random actions for the first %d steps (--rnd_init_steps): they "
                        "initialise RND's observation statistics and train nothing",
                        self.random_steps_left,
                    )
                self.random_steps_left -= action.shape[1]
                action = self.random_actions(action)
                random = torch.ones_like(random)
        extras = dict(extras, env_id=inputs["env_id"], random_action=random)
        return action, extras, state

    def random_actions(self, like: torch.Tensor) -> torch.Tensor:
        action = self.spec.action
        if self.spec.discrete:
            return torch.randint(0, action.n, like.shape, device=like.device)
        low = torch.as_tensor(action.low, dtype=like.dtype, device=like.device)
        high = torch.as_tensor(action.high, dtype=like.dtype, device=like.device)
        return low + (high - low) * torch.rand_like(like)

    # ------------------------------------------------------ data path
    def sequence(self):
        return self.inner.sequence()

    def make_data_source(self, learner_queue, pin: bool = False):
        return self.inner.make_data_source(learner_queue, pin)

    def learner_queue_size(self, chunk_envs):
        return self.inner.learner_queue_size(chunk_envs)

    # ---------------------------------------------------------- learning
    def updates(self, model, batch, state):
        rnd = model.rnd
        rnd.obs_rms.update(rnd.newest(batch["obs"][1:]))
        if not bool(model.rnd_ready):
            # on every rank alike: a rank that trains while another does not would leave its all-reduce alone
            if collectives.any_rank(bool((batch["random_action"][1:] > 0).any())):
                self._init_steps_seen += batch["reward"][1:].numel()
                return  # the random initialisation: statistics only, no optimizer step
            model.rnd_ready.fill_(True)
            log.info("observation statistics initialised from %d random steps; training starts", self._init_steps_seen)
        x = rnd.normalized_input(batch["obs"][1:])  # [T*B, ...]: the next observation of each transition
        int_reward, stats = self.intrinsic_rewards(model, x, batch)
        batch = dict(batch, int_reward=torch.cat([torch.zeros_like(int_reward[:1]), int_reward]))
        shares = 1 if self.flags.agent == "impala" else max(1, int(self.flags.num_minibatches))
        n = x.shape[0]
        size = max(1, round(n * self.flags.rnd_update_proportion / shares))
        for loss, inner_stats in self.inner.updates(model, batch, state):
            idx = torch.randperm(n, device=x.device)[:size]
            predicted, target = rnd.features(x[idx])
            distill = rnd_lib.predictor_loss(predicted, target)
            yield loss + distill, dict(inner_stats, rnd_loss=distill.detach(), **stats)

    @torch.no_grad()
    def intrinsic_rewards(self, model, x: torch.Tensor, batch: dict) -> tuple[torch.Tensor, dict]:
        """i'_t [T, B] of the batch's transitions, normalized (Section 2.4); updates the forward
        filters, the return statistics and the episodes' intrinsic returns."""
        rnd = model.rnd
        f = self.flags
        T, B = batch["reward"].shape[0] - 1, batch["reward"].shape[1]
        predicted, target = rnd.features(x)
        raw = rnd_lib.intrinsic_reward(predicted, target).view(T, B).double()
        env_ids = batch["env_id"][-1].long()
        filtered = torch.empty_like(raw)
        for columns in occurrence_groups(env_ids):
            envs = env_ids[columns]
            filtered[:, columns], rnd.filter_state[envs] = rnd_lib.reward_forward_filter(
                raw[:, columns], rnd.filter_state[envs], f.intrinsic_discounting
            )
        rnd.return_rms.update(filtered)
        reward = rnd_lib.normalize_intrinsic_rewards(raw, rnd.return_rms.var)
        self._track_episodes(rnd, reward, batch["done"][1:], env_ids)
        stats = {
            "int_reward_mean": reward.mean().item(),
            "int_reward_raw_mean": raw.mean().item(),
            "int_reward_std": math.sqrt(float(rnd.return_rms.var)),
        }
        return reward.to(batch["reward"].dtype), stats

    def _track_episodes(self, rnd, reward: torch.Tensor, done: torch.Tensor, env_ids: torch.Tensor) -> None:
        """Each env's intrinsic return of its current episode; finished ones go to the logs.

        The return so far is a forward scan over time, ``G_t = r_t + (1 - done_{t-1}) G_{t-1}`` from
        the env's ``episode_return`` (``rl_core.losses.scan``): one host sync per group of columns
        (the finished returns), none per step."""
        finished = []
        done = done.bool()
        for columns in occurrence_groups(env_ids):
            envs = env_ids[columns]
            rewards, ends = reward[:, columns].to(rnd.episode_return.dtype), done[:, columns]
            goes_on = torch.cat([torch.ones_like(rewards[:1]), (~ends[:-1]).to(rewards.dtype)])
            returns = discounted_scan(rewards, goes_on, rnd.episode_return[envs], reverse=False)
            finished.extend(returns[ends].tolist())  # in the order a loop over t meets them
            rnd.episode_return[envs] = torch.where(ends[-1], torch.zeros_like(returns[-1]), returns[-1])
        if finished:
            with self._stats_lock:
                self._episode_returns.extend(finished)

    def log_stats(self) -> dict[str, float]:
        """For each logs.csv row: the intrinsic return of the episodes finished since the last one."""
        with self._stats_lock:
            returns, self._episode_returns = self._episode_returns, []
        return {"int_episode_return": float(np.mean(returns)) if returns else float("nan")}
