"""RND (Burda et al. 2018) against slow references in the paper's notation: the intrinsic reward and
its normalization (forward filter + running std, per env across unrolls), the two-head advantages
(GAE under PPO, V-trace under IMPALA, with rho clipped from above), the non-episodic intrinsic
return; the add-on's acting (random initialisation), its flags and defaults, and its whole state
surviving checkpoints exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from rl_core.agents import make_agent, rnd_wraps
from rl_core.data.env_spec import BoxActions, DiscreteActions, EnvSpec, Observation
from rl_core.config.flags import make_parser
from rl_core.losses import impala as impala_lib
from rl_core.losses import rnd as rnd_lib
from tests.test_agents import DISCRETE, B, T, _save_load, random_batch


def flags(*args):
    return make_parser().parse_args(
        [
            "--mlp_sizes=16",
            f"--unroll_length={T}",
            f"--batch_size={B}",
            "--num_actors=8",
            "--rnd",
            "--rnd_mlp_sizes=8,8,8",
            "--rnd_feature_size=16",
            *args,
        ]
    )


def rnd_batch(agent, seed=0, env_ids=None):
    batch = random_batch(DISCRETE, agent.inner, None, seed=seed)
    g = torch.Generator().manual_seed(seed + 100)
    batch["int_baseline"] = torch.randn(T + 1, B, generator=g)
    batch["env_id"] = (
        torch.as_tensor(env_ids if env_ids is not None else list(range(B)), dtype=torch.float32)
        .expand(T + 1, B)
        .clone()
    )
    batch["random_action"] = torch.zeros(T + 1, B)
    return batch


# ------------------------------------------------------- slow references


class SlowRunningMeanStd:
    """OpenAI baselines' RunningMeanStd (count starts at 1e-4, mean 0, var 1), in plain Python."""

    def __init__(self):
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4

    def update(self, xs):
        n = len(xs)
        batch_mean = sum(xs) / n
        batch_var = sum((x - batch_mean) ** 2 for x in xs) / n
        delta = batch_mean - self.mean
        total = self.count + n
        self.mean = self.mean + delta * n / total
        self.var = (self.var * self.count + batch_var * n + delta**2 * self.count * n / total) / total
        self.count = total


def slow_normalized_rewards(batches, gamma, num_envs, eps=0.0):
    """OpenAI's RewardForwardFilter per env (rewems = rewems * gamma + r, never reset), the running
    variance of every filtered value, each batch's rewards divided by sqrt(var) after its update
    (``eps``: the agent's guard against a variance of 0, sqrt(var + eps))."""
    rewems = [0.0] * num_envs
    rms = SlowRunningMeanStd()
    out = []
    for rewards, envs in batches:  # rewards [T][B], envs [B]; columns in time order
        filtered = []
        for b, env in enumerate(envs):
            for t in range(len(rewards)):
                rewems[env] = rewems[env] * gamma + rewards[t][b]
                filtered.append(rewems[env])
        rms.update(filtered)
        out.append([[rewards[t][b] / math.sqrt(rms.var + eps) for b in range(len(envs))] for t in range(len(rewards))])
    return out


def slow_gae(values, bootstrap, rewards, gammas, lam):
    """A_t = sum_l (prod_{i<l} gamma_{t+i} lambda) delta_{t+l} as an explicit sum, one column."""
    T_ = len(rewards)
    v = list(values) + [bootstrap]
    deltas = [rewards[t] + gammas[t] * v[t + 1] - v[t] for t in range(T_)]
    adv = []
    for t in range(T_):
        total, weight = 0.0, 1.0
        for k in range(t, T_):
            total += weight * deltas[k]
            weight *= gammas[k] * lam
        adv.append(total)
    return adv


def slow_vtrace(values, bootstrap, rewards, gammas, rhos, rho_bar, c_bar, pg_rho_bar, lam):
    """IMPALA eq. (1) as an explicit sum over t >= s, one column; rho and c clipped from above."""
    T_ = len(rewards)
    v = list(values) + [bootstrap]
    rho = [min(rho_bar, r) for r in rhos]
    c = [lam * min(c_bar, r) for r in rhos]
    deltas = [rho[t] * (rewards[t] + gammas[t] * v[t + 1] - v[t]) for t in range(T_)]
    vs = []
    for s in range(T_):
        total = v[s]
        for t in range(s, T_):
            prod = 1.0
            for i in range(s, t):
                prod *= gammas[i] * c[i]
            total += prod * deltas[t]
        vs.append(total)
    vs_next = vs[1:] + [bootstrap]
    adv = [min(pg_rho_bar, rhos[s]) * (rewards[s] + gammas[s] * vs_next[s] - v[s]) for s in range(T_)]
    return vs, adv


# ------------------------------------------------- intrinsic reward


def test_intrinsic_reward_and_predictor_loss_are_the_mean_squared_feature_error():
    g = torch.Generator().manual_seed(0)
    predicted = torch.randn(7, 5, generator=g, requires_grad=True)
    target = torch.randn(7, 5, generator=g)
    expected = [sum((predicted[n, k].item() - target[n, k].item()) ** 2 for k in range(5)) / 5 for n in range(7)]
    assert rnd_lib.intrinsic_reward(predicted, target).tolist() == pytest.approx(expected, rel=1e-6)
    mask = torch.tensor([1, 0, 0, 1, 1, 0, 0])
    loss = rnd_lib.predictor_loss(predicted, target, mask)
    assert loss.item() == pytest.approx((expected[0] + expected[3] + expected[4]) / 3, rel=1e-6)
    loss.backward()
    assert predicted.grad[1].abs().sum() == 0 and predicted.grad[0].abs().sum() > 0


@pytest.mark.parametrize("seed", range(4))
def test_forward_filter_and_running_std_match_the_slow_loop(seed):
    rng = np.random.default_rng(seed)
    from rl_core.numerics.normalization import RunningMeanStd

    gamma, batches = 0.99, []
    rms, state = RunningMeanStd(()), torch.zeros(3, dtype=torch.float64)
    got = []
    for _ in range(3):
        rewards = rng.exponential(1.0, (5, 3))
        batches.append((rewards.tolist(), [0, 1, 2]))
        filtered, last = rnd_lib.reward_forward_filter(torch.tensor(rewards), state, gamma)
        state = last
        rms.update(filtered)
        got.append(rnd_lib.normalize_intrinsic_rewards(torch.tensor(rewards), rms.var, eps=0.0))
    for mine, slow in zip(got, slow_normalized_rewards(batches, gamma, 3)):
        np.testing.assert_allclose(mine.numpy(), np.array(slow), rtol=1e-10)


def test_the_agent_filters_each_env_across_its_unrolls_in_order():
    """Batches whose columns are envs in any order, one env twice (two consecutive unrolls): each
    env's filter goes on from where its previous unroll left it, as a per-env loop does."""
    f = flags("--agent=ppo", "--intrinsic_discounting=0.9")
    agent = make_agent(f, DISCRETE)
    model = agent.build_model().double()
    orders = [[0, 1, 2, 3, 4], [4, 2, 2, 7, 0], [2, 6, 0, 1, 3]]
    slow_in, got = [], []
    for i, envs in enumerate(orders):
        batch = {k: v.double() if v.is_floating_point() else v for k, v in rnd_batch(agent, i, envs).items()}
        model.rnd.obs_rms.update(model.rnd.newest(batch["obs"][1:]))
        x = model.rnd.normalized_input(batch["obs"][1:])
        predicted, target = model.rnd.features(x)
        raw = rnd_lib.intrinsic_reward(predicted, target).view(T, B)
        # the slow loop meets a column of an env after that env's earlier columns of the same batch
        slow_in.append((raw.tolist(), envs))
        reward, stats = agent.intrinsic_rewards(model, x, batch)
        got.append(reward)
    # the slow reference takes the columns in batch order: an env's two columns keep their order
    for mine, slow in zip(got, slow_normalized_rewards(slow_in, 0.9, 8, eps=1e-8)):
        np.testing.assert_allclose(mine.numpy(), np.array(slow), rtol=1e-8)
    assert stats["int_reward_std"] == pytest.approx(math.sqrt(float(model.rnd.return_rms.var)))


# -------------------------------------------------- two value heads


def test_ppo_two_head_advantages_match_the_slow_reference():
    """A = ext_coef A_E + int_coef A_I, A_E episodic with gamma_E, A_I non-episodic with gamma_I:
    an episode end inside the unroll cuts A_E but not A_I."""
    f = flags(
        "--agent=ppo",
        "--discounting=0.999",
        "--intrinsic_discounting=0.9",
        "--ext_coef=2",
        "--int_coef=0.5",
        "--gae_lambda=0.8",
        "--reward_clipping=none",
    )
    agent = make_agent(f, DISCRETE).inner
    g = torch.Generator().manual_seed(3)
    step = {
        "reward": torch.randn(T, B, generator=g, dtype=torch.float64),
        "int_reward": torch.rand(T, B, generator=g, dtype=torch.float64),
        "done": torch.rand(T, B, generator=g) < 0.3,
        "truncated": torch.zeros(T, B, dtype=torch.bool),
        "log_prob": torch.zeros(T, B, dtype=torch.float64),
    }
    step["done"][2, 0] = True
    values = {
        "baseline": torch.randn(T, B, generator=g, dtype=torch.float64),
        "int_baseline": torch.randn(T, B, generator=g, dtype=torch.float64),
    }
    bootstrap = {k: torch.randn(B, generator=g, dtype=torch.float64) for k in values}
    adv, returns, mask = agent.advantages(values, bootstrap, step["log_prob"], step)
    for b in range(B):
        done = step["done"][:, b].tolist()
        a_e = slow_gae(
            values["baseline"][:, b].tolist(),
            bootstrap["baseline"][b].item(),
            step["reward"][:, b].tolist(),
            [0.0 if d else 0.999 for d in done],
            0.8,
        )
        a_i = slow_gae(
            values["int_baseline"][:, b].tolist(),
            bootstrap["int_baseline"][b].item(),
            step["int_reward"][:, b].tolist(),
            [0.9] * T,
            0.8,
        )
        assert adv[:, b].tolist() == pytest.approx([2 * e + 0.5 * i for e, i in zip(a_e, a_i)], rel=1e-10)
        assert returns["baseline"][:, b].tolist() == pytest.approx(
            [a + v for a, v in zip(a_e, values["baseline"][:, b].tolist())], rel=1e-10
        )
        assert returns["int_baseline"][:, b].tolist() == pytest.approx(
            [a + v for a, v in zip(a_i, values["int_baseline"][:, b].tolist())], rel=1e-10
        )
    assert mask.eq(1).all()


def test_the_intrinsic_return_goes_on_across_episode_ends():
    """With lambda = 1 the intrinsic target is the discounted sum of every later intrinsic reward and
    the bootstrap value, through the episode end at t = 1; the extrinsic one stops there."""
    f = flags(
        "--agent=ppo", "--intrinsic_discounting=0.5", "--discounting=0.5", "--gae_lambda=1", "--reward_clipping=none"
    )
    agent = make_agent(f, DISCRETE).inner
    T_, B_ = 4, 1
    ones = torch.ones(T_, B_, dtype=torch.float64)
    step = {
        "reward": ones.clone(),
        "int_reward": ones.clone(),
        "done": torch.tensor([[False], [True], [False], [False]]),
        "truncated": torch.zeros(T_, B_, dtype=torch.bool),
        "log_prob": torch.zeros(T_, B_, dtype=torch.float64),
    }
    values = {
        "baseline": torch.zeros(T_, B_, dtype=torch.float64),
        "int_baseline": torch.zeros(T_, B_, dtype=torch.float64),
    }
    bootstrap = {
        "baseline": torch.full((B_,), 8.0, dtype=torch.float64),
        "int_baseline": torch.full((B_,), 8.0, dtype=torch.float64),
    }
    _, returns, _ = agent.advantages(values, bootstrap, step["log_prob"], step)
    assert returns["int_baseline"][:, 0].tolist() == pytest.approx(
        [1 + 0.5 + 0.25 + 0.125 + 0.0625 * 8, 1 + 0.5 + 0.25 + 0.125 * 8, 1 + 0.5 + 0.25 * 8, 1 + 0.5 * 8]
    )
    assert returns["baseline"][:, 0].tolist() == pytest.approx([1.5, 1.0, 1 + 0.5 + 0.25 * 8, 1 + 0.5 * 8])


@pytest.mark.parametrize("seed", range(3))
def test_impala_two_head_vtrace_loss_matches_the_slow_reference_with_rho_above_one(seed):
    """Both heads' V-trace targets from one set of importance weights, clipped from above
    (min(rho_bar, rho)); the batch has rho > 1, where the published max(rho, 1) would differ."""
    f = flags(
        "--agent=impala",
        "--discounting=0.97",
        "--intrinsic_discounting=0.9",
        "--ext_coef=2",
        "--int_coef=1",
        "--entropy_cost=0.01",
        "--baseline_cost=0.5",
        "--reward_clipping=none",
        "--vtrace_lambda=0.9",
        "--clip_rho_threshold=1.0",
        "--clip_c_threshold=1.0",
        "--clip_pg_rho_threshold=1.0",
    )
    agent = make_agent(f, DISCRETE)
    model = agent.build_model().double()
    batch = {k: (v.double() if v.is_floating_point() else v) for k, v in rnd_batch(agent, seed).items()}
    batch["truncated"][:] = False
    batch["int_reward"] = torch.rand(T + 1, B, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    inputs = {"obs": batch["obs"], "reward": batch["reward"], "done": batch["done"], "last_action": batch["action"]}
    loss, stats = agent.inner.loss(model, batch, ())
    outputs, _ = model(inputs, ())

    logits = outputs["policy_logits"][:-1].detach()
    pi = F.log_softmax(logits, -1).gather(-1, batch["action"][1:, :, None]).squeeze(-1).exp()
    mu = F.log_softmax(batch["policy_logits"][1:], -1).gather(-1, batch["action"][1:, :, None]).squeeze(-1).exp()
    rhos = pi / mu
    assert (rhos > 1).any() and (rhos < 1).any()

    def reference(clip):
        total = 0.0
        for b in range(B):
            done = batch["done"][1:, b].tolist()
            r = rhos[:, b].tolist()
            heads = []
            for key, reward_key, gammas, coef in (
                ("baseline", "reward", [0.0 if d else 0.97 for d in done], 2.0),
                ("int_baseline", "int_reward", [0.9] * T, 1.0),
            ):
                v = outputs[key][:-1, b].tolist()
                vs, adv = clip(v, outputs[key][-1, b].item(), batch[reward_key][1:, b].tolist(), gammas, r)
                heads.append((coef, vs, adv, v))
            for t in range(T):
                log_pi = math.log(pi[t, b].item())
                total += -log_pi * sum(c * adv[t] for c, _, adv, _ in heads)
                total += 0.5 * sum(0.5 * (vs[t] - v[t]) ** 2 for _, vs, _, v in heads)
                p = F.softmax(logits[t, b], -1)
                total += 0.01 * float((p * p.log()).sum())
        return total

    def correct(v, boot, rew, gammas, r):
        return slow_vtrace(v, boot, rew, gammas, r, 1.0, 1.0, 1.0, 0.9)

    def published(v, boot, rew, gammas, r):  # the RND-IMPALA code's clamp from the wrong side
        return slow_vtrace(v, boot, rew, gammas, [max(x, 1.0) for x in r], math.inf, math.inf, math.inf, 0.9)

    assert loss.item() == pytest.approx(reference(correct), rel=1e-9)
    assert abs(loss.item() - reference(published)) > 1e-3
    assert set(stats) >= {"ext_explained_variance", "int_explained_variance"}


def test_multi_head_impala_loss_with_one_head_is_impala_loss():
    g = torch.Generator().manual_seed(5)
    logits_mu, logits_pi = torch.randn(T, B, 3, generator=g), torch.randn(T, B, 3, generator=g)
    actions = torch.randint(0, 3, (T, B), generator=g)
    rewards, values, bootstrap = (
        torch.randn(T, B, generator=g),
        torch.randn(T, B, generator=g),
        torch.randn(B, generator=g),
    )
    dones = torch.rand(T, B, generator=g) < 0.2
    one, _ = impala_lib.impala_loss(logits_mu, logits_pi, actions, rewards, dones, values, bootstrap, discounting=0.9)
    head = impala_lib.ValueHead(rewards, (~dones).float() * 0.9, values, bootstrap)
    multi, _ = impala_lib.multi_head_impala_loss(logits_mu, logits_pi, actions, [head])
    assert multi.item() == pytest.approx(one.item(), rel=1e-6)


# ---------------------------------------------------- agent and model


@pytest.mark.parametrize("agent_name", rnd_wraps())
def test_every_on_policy_agent_takes_the_add_on(agent_name):
    f = flags(f"--agent={agent_name}", "--num_epochs=2", "--num_minibatches=2", "--optimizer=adam")
    agent = make_agent(f, DISCRETE)
    model = agent.build_model()
    optimizer, _ = agent.make_optimizer(model)
    assert "int_baseline" in agent.unroll_fields() and "env_id" in agent.unroll_fields()
    before = [p.detach().clone() for p in model.rnd.predictor.parameters()]
    target = [p.detach().clone() for p in model.rnd.target.parameters()]
    n = 0
    for loss, stats in agent.updates(model, rnd_batch(agent), ()):
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        n += 1
        assert {"rnd_loss", "int_reward_mean", "int_reward_std", "int_explained_variance"} <= set(stats)
    assert n == (2 if agent_name == "impala" else 4)  # IMPALA: 2 whole-batch passes; the others 2 epochs x 2
    assert any(not torch.equal(a, b) for a, b in zip(before, model.rnd.predictor.parameters()))
    assert all(torch.equal(a, b) for a, b in zip(target, model.rnd.target.parameters()))  # the target stays fixed
    assert model.extra_values["int_baseline"].weight.grad is not None


def test_the_predictor_trains_on_its_share_of_each_minibatch(monkeypatch):
    f = flags("--agent=ppo", "--num_epochs=2", "--num_minibatches=3", "--rnd_update_proportion=0.5")
    agent = make_agent(f, DISCRETE)
    model = agent.build_model()
    sizes = []
    features = model.rnd.features
    monkeypatch.setattr(model.rnd, "features", lambda x: (sizes.append(x.shape[0]), features(x))[1])
    steps = sum(1 for _ in agent.updates(model, rnd_batch(agent), ()))
    assert steps == 6
    assert sizes[0] == T * B and sizes[1:] == [round(T * B * 0.5 / 3)] * 6  # rewards, then each step's share


def test_random_initialisation_acts_uniformly_and_trains_nothing():
    f = flags("--agent=ppo", "--rnd_init_steps=20")
    agent = make_agent(f, DISCRETE)
    model = agent.build_model()
    inputs = {
        "obs": torch.randn(1, 8, 4),
        "reward": torch.zeros(1, 8),
        "done": torch.ones(1, 8, dtype=torch.bool),
        "last_action": torch.zeros(1, 8, dtype=torch.long),
        **agent.actor_inputs(np.arange(8), 8),
    }
    seen = []
    for _ in range(3):  # 8 envs: 20 random steps take three inference steps
        action, extras, _ = agent.act(model, inputs, ())
        seen.append(extras["random_action"])
        assert extras["env_id"].tolist() == [list(range(8))]
    assert all(bool(s.eq(1).all()) for s in seen)
    action, extras, _ = agent.act(model, inputs, ())
    assert extras["random_action"].eq(0).all()

    batch = rnd_batch(agent)
    batch["random_action"][1:] = 1
    count = float(model.rnd.obs_rms.count)
    assert list(agent.updates(model, batch, ())) == []  # no optimizer step on the random steps ...
    assert float(model.rnd.obs_rms.count) == count + T * B  # ... but their observations are counted
    assert not bool(model.rnd_ready)
    batch["random_action"][:] = 0
    assert len(list(agent.updates(model, batch, ()))) > 0
    assert bool(model.rnd_ready)
    # a resumed run (rnd_ready in its checkpoint) acts with its policy from the start
    fresh = make_agent(f, DISCRETE)
    _, extras, _ = fresh.act(model, inputs, ())
    assert extras["random_action"].eq(0).all() and fresh.random_steps_left == 0


def test_the_inference_copy_leaves_out_the_rnd_networks():
    from rl_core.runtime.learner import inference_copy, publish

    agent = make_agent(flags("--agent=ppo"), DISCRETE)
    model = agent.build_model()
    copy = inference_copy(model)
    assert copy.rnd is None and model.rnd is not None
    assert not any(k.startswith("rnd.") for k in copy.state_dict())
    assert "rnd_ready" in copy.state_dict() and "extra_values.int_baseline.weight" in copy.state_dict()
    model.rnd_ready.fill_(True)
    publish(model, copy, __import__("threading").Lock())
    assert bool(copy.rnd_ready)


@pytest.mark.parametrize("agent_name", ["ppo", "impala"])
def test_resume_twice_equals_an_uninterrupted_run(agent_name):
    """Predictor, target, observation and reward statistics, forward filters, episode accumulators
    and the optimizer all survive checkpoints: stopping and resuming twice changes nothing."""
    from rl_core.runtime.learner import Learner, Weights

    f = flags(
        f"--agent={agent_name}", "--num_epochs=2", "--num_minibatches=2", "--total_steps=100000", "--optimizer=adam"
    )
    agent0 = make_agent(f, DISCRETE)
    batches = [rnd_batch(agent0, seed=s, env_ids=[(s + b) % 8 for b in range(B)]) for s in range(6)]

    def fresh():
        agent = make_agent(f, DISCRETE)
        torch.manual_seed(123)
        model = agent.build_model()
        optimizer, scheduler = agent.make_optimizer(model)
        weights = Weights(model, optimizer, scheduler, agent.build_model(), __import__("threading").Lock())
        return Learner(f, agent, weights, None, "cpu", None)

    def train(learner, indices):
        for i in indices:
            torch.manual_seed(1000 + i)
            learner.learn(batches[i], ())

    def restore(learner):
        state = _save_load(
            {
                "model": learner.model.state_dict(),
                "optimizer": learner.optimizer.state_dict(),
                "scheduler": learner.scheduler.state_dict(),
            }
        )
        learner = fresh()
        learner.model.load_state_dict(state["model"])
        learner.optimizer.load_state_dict(state["optimizer"])
        learner.scheduler.load_state_dict(state["scheduler"])
        return learner

    straight = fresh()
    train(straight, range(6))
    resumed = fresh()
    train(resumed, range(2))
    resumed = restore(resumed)
    train(resumed, range(2, 4))
    resumed = restore(resumed)
    train(resumed, range(4, 6))
    a, b, initial = straight.model.state_dict(), resumed.model.state_dict(), fresh().model.state_dict()
    for key in (
        "rnd.obs_rms.mean",
        "rnd.obs_rms.count",
        "rnd.return_rms.var",
        "rnd.return_rms.count",
        "rnd.filter_state",
        "rnd.episode_return",
        "rnd.predictor.out.weight",
        "extra_values.int_baseline.weight",
    ):
        assert not torch.equal(a[key], initial[key]), key  # they moved ...
    assert torch.equal(a["rnd.target.out.weight"], initial["rnd.target.out.weight"])
    for key in a:  # ... and the resumed run holds exactly the same values
        assert torch.equal(a[key], b[key]), key


# ---------------------------------------------------------- flags


def test_rnd_flags_are_checked_in_one_line(capsys):
    import torchbeast_gym.env as gym_pkg
    from tests.proc_utils import flag_error_line

    assert "--rnd is an add-on of impala" in flag_error_line(capsys, gym_pkg, "--agent=r2d2", "--rnd")
    assert "nothing would be learned" in flag_error_line(
        capsys, gym_pkg, "--agent=ppo", "--rnd", "--ext_coef=0", "--int_coef=0"
    )
    assert "--rnd_update_proportion" in flag_error_line(capsys, gym_pkg, "--rnd", "--rnd_update_proportion=0")


def test_atari_rnd_defaults_are_the_papers():
    import torchbeast_atari.env as atari
    from rl_core.runtime.entry import parse_flags

    f = parse_flags(atari, ["--env=MontezumaRevenge", "--agent=ppo", "--rnd"])
    assert (f.sticky_actions, f.disable_episodic_life, f.max_episode_frames, f.reward_clipping) == (
        0.25,
        True,
        18000,
        "abs_one",
    )
    assert (f.discounting, f.intrinsic_discounting, f.gae_lambda, f.num_epochs, f.num_minibatches) == (
        0.999,
        0.99,
        0.95,
        4,
        4,
    )
    assert (f.learning_rate, f.entropy_cost, f.ppo_clip, f.unroll_length, f.ext_coef, f.int_coef) == (
        1e-4,
        0.001,
        0.1,
        128,
        2.0,
        1.0,
    )
    assert (f.rnd_channels, f.rnd_update_proportion, f.rnd_init_steps) == (1, 0.25, 50 * 128 * 8)
    explicit = parse_flags(
        atari, ["--env=MontezumaRevenge", "--agent=ppo", "--rnd", "--discounting=0.99", "--sticky_actions=0"]
    )
    assert (explicit.discounting, explicit.sticky_actions) == (0.99, 0.0)  # flags given win
    plain = parse_flags(atari, ["--env=MontezumaRevenge", "--agent=ppo"])
    assert (plain.discounting, plain.sticky_actions) == (0.99, 0.0)  # no RND, no RND defaults


# ----------------------------------------------------- rooms seen


def test_set_valued_statistics_keep_the_union_of_the_run(tmp_path):
    from rl_core.records import seen_sets

    assert seen_sets.members(seen_sets.to_mask([0, 3, 23, 30])) == [0, 3, 23]
    sets = seen_sets.SeenSets(str(tmp_path))
    row = sets.update(
        [
            {"return": 0.0, "stat/rooms_mask": seen_sets.to_mask([1])},
            {"return": 100.0, "stat/rooms_mask": seen_sets.to_mask([1, 0, 4])},
        ],
        step=10,
    )
    assert row == {"rooms_seen": 3.0}
    import json

    saved = json.loads((tmp_path / "rooms_seen.json").read_text())
    assert saved == {"members": [0, 1, 4], "count": 3, "step": 10}
    resumed = seen_sets.SeenSets(str(tmp_path))  # a resumed run goes on from the file
    assert resumed.update([{"stat/rooms_mask": seen_sets.to_mask([5])}], step=20) == {"rooms_seen": 4.0}


def test_montezuma_reports_which_rooms_a_game_visited():
    """The real ALE: a game of Montezuma's Revenge starts in room 1; the statistic lists it."""
    import torchbeast_atari.env as atari
    from rl_core.records import seen_sets

    env = atari.create_env("MontezumaRevenge", seed=0, episodic_life=False, max_episode_frames=400)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    while True:
        _, _, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        if terminated or truncated:
            break
    stats = info["episode_stats"]
    assert seen_sets.members(stats["rooms_mask"]) == [1]
    assert stats["rooms_visited"] == 1.0


def test_gym_ppo_takes_the_tuned_settings_and_with_rnd_those_the_corridor_measured():
    """torchbeast_gym: --agent ppo takes rl-baselines3-zoo's tuned CartPole settings; with --rnd, cleanrl's
    (the RND paper's PPO structure, which the corridor's runs measured) under RND's gamma_E 0.999."""
    import torchbeast_gym.env as gym_pkg
    from rl_core.runtime.entry import parse_flags

    keys = (
        "unroll_length",
        "batch_size",
        "num_epochs",
        "num_minibatches",
        "gae_lambda",
        "entropy_cost",
        "learning_rate",
        "discounting",
        "total_steps",
    )
    tuned = parse_flags(gym_pkg, ["--agent=ppo"])
    assert tuple(getattr(tuned, k) for k in keys) == (32, 8, 20, 1, 0.8, 0.0, 1e-3, 0.98, 200_000)
    rnd = parse_flags(gym_pkg, ["--agent=ppo", "--rnd"])
    assert tuple(getattr(rnd, k) for k in keys) == (128, 4, 4, 4, 0.95, 0.01, 2.5e-4, 0.999, 500_000)
    assert parse_flags(gym_pkg, ["--agent=ppo", "--rnd", "--num_epochs=2"]).num_epochs == 2  # flags given win
    vmpo = parse_flags(gym_pkg, ["--agent=vmpo"])  # V-MPO takes the tuned ones too (flaked with cleanrl's)
    assert tuple(getattr(vmpo, k) for k in keys) == (32, 8, 20, 1, 0.8, 0.0, 1e-3, 0.98, 200_000)
    vmpo_rnd = parse_flags(gym_pkg, ["--agent=vmpo", "--rnd"])
    assert tuple(getattr(vmpo_rnd, k) for k in keys) == (128, 4, 4, 4, 0.95, 0.01, 2.5e-4, 0.999, 500_000)
    awr = parse_flags(gym_pkg, ["--agent=awr"])  # the other on-policy agents keep cleanrl's
    assert tuple(getattr(awr, k) for k in keys) == (128, 4, 4, 4, 0.95, 0.01, 2.5e-4, 0.99, 500_000)


@pytest.mark.parametrize(
    "package, spec, rnd_in",
    [
        ("torchbeast_atari", EnvSpec(Observation((4, 84, 84), "|u1"), DiscreteActions(18)), (1, 84, 84)),
        ("torchbeast_procgen", EnvSpec(Observation((3, 64, 64), "|u1"), DiscreteActions(15)), (3, 64, 64)),
        ("torchbeast_football", EnvSpec(Observation((16, 72, 96), "|u1"), DiscreteActions(19)), (4, 72, 96)),
        ("torchbeast_gym", DISCRETE, (4,)),
        ("torchbeast_mujoco", EnvSpec(Observation((3,), "<f4"), BoxActions((2,), (-1.0, -2.0), (1.0, 2.0))), (3,)),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
@pytest.mark.parametrize("agent_name", ["impala", "ppo"])
def test_every_package_takes_rnd_with_its_defaults(package, spec, rnd_in, agent_name):
    """Each package's --rnd defaults build a model whose RND sees the newest frame (Atari: 1 of 4
    grayscale frames, Football: the newest 4-plane minimap), act at random first (box actions within
    their bounds), and then learn."""
    import importlib

    from rl_core.runtime.entry import parse_flags

    if package == "torchbeast_mujoco" and agent_name == "impala":
        pytest.skip("IMPALA takes discrete actions")
    pkg = importlib.import_module(f"{package}.env")
    f = parse_flags(
        pkg,
        [
            f"--agent={agent_name}",
            "--rnd",
            "--unroll_length=3",
            "--batch_size=2",
            "--num_minibatches=2",
            "--num_actors=2",
            "--num_servers=1",
            "--rnd_init_steps=2",
        ],
    )
    assert f.discounting == 0.999
    agent = make_agent(f, spec)
    model = agent.build_model()
    assert model.rnd.in_shape == rnd_in
    optimizer, _ = agent.make_optimizer(model)
    T1, B2 = 4, 2
    obs = (
        torch.randint(0, 255, (T1, B2, *spec.obs.shape), dtype=torch.uint8)
        if spec.obs.dtype == "|u1"
        else torch.randn(T1, B2, *spec.obs.shape)
    )
    box = not spec.discrete
    inputs = {
        "obs": obs[:1],
        "reward": torch.zeros(1, B2),
        "done": torch.ones(1, B2, dtype=torch.bool),
        "last_action": torch.zeros((1, B2, 2) if box else (1, B2), dtype=torch.float32 if box else torch.int64),
        **agent.actor_inputs(np.arange(B2), B2),
    }
    with torch.no_grad():
        action, extras, _ = agent.act(model, inputs, model.initial_state(B2))
    assert extras["random_action"].eq(1).all()
    if box:
        assert (action[0].abs() <= torch.tensor([1.0, 2.0])).all()
    batch = {
        "obs": obs,
        "reward": torch.randn(T1, B2),
        "done": torch.zeros(T1, B2, dtype=torch.bool),
        "truncated": torch.zeros(T1, B2, dtype=torch.bool),
        "action": action.expand(T1, *action.shape[1:]).clone(),
    }
    batch.update({k: v.expand(T1, *v.shape[1:]).clone() for k, v in extras.items()})
    batch["random_action"][:] = 0
    steps = 0
    for loss, _ in agent.updates(model, batch, model.initial_state(B2)):
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        assert torch.isfinite(loss)
        steps += 1
    assert steps > 0 and bool(model.rnd_ready)


def test_the_corridors_values_point_home_for_a_policy_that_does_not_explore():
    """tests/corridor_env.py's premise: with its survival reward and closing time, a uniformly random
    policy's discounted return-to-go falls with the distance from the start (a far cell is reached
    later, with fewer steps left), so PPO's normalized advantages push a policy without a bonus home;
    a game that never reaches the end earns 80 x 0.0003; the end pays 1 plus the steps' reward."""
    from tests.corridor_env import MAX_STEPS, STEP_REWARD, CorridorEnv

    env, rng, gamma = CorridorEnv(), np.random.default_rng(0), 0.999
    totals, counts, returns = np.zeros(env.length), np.zeros(env.length), []
    for _ in range(3000):
        obs, _ = env.reset()
        cells, rewards, done = [], [], False
        while not done:
            cells.append(int(obs.argmax()))
            obs, reward, done, truncated, info = env.step(int(rng.integers(4)))
            assert not truncated
            rewards.append(reward)
        assert info["episode_stats"]["furthest_cell"] >= max(cells)
        returns.append(sum(rewards))
        to_go = 0.0
        for cell, reward in zip(reversed(cells), reversed(rewards)):
            to_go = reward + gamma * to_go
            totals[cell] += to_go
            counts[cell] += 1
    values = totals[:8] / counts[:8]
    assert np.all(np.diff(values) < 0), values
    assert np.allclose(returns, MAX_STEPS * STEP_REWARD)  # no random game reached the end

    env.reset()
    for _ in range(env.length - 1):
        _, reward, done, _, info = env.step(1)
    assert (
        done and reward == pytest.approx(1 + STEP_REWARD) and info["episode_stats"]["furthest_cell"] == env.length - 1
    )


def test_images_smaller_than_the_convolutions_reach_take_the_mlp_trunk():
    """A MiniGrid view (one-hot [20, 7, 7]) is smaller than the paper's convolutions take: flattened, it goes through
    the vector trunk; an image of side 36 or more through the convolutions."""
    from models.rnd import CONV_MIN_SIDE, RNDNetwork

    small = RNDNetwork((20, 7, 7), 512, (), (64, 64))
    assert not any(isinstance(m, torch.nn.Conv2d) for m in small.modules())
    assert small(torch.zeros(3, 20, 7, 7)).shape == (3, 512)
    large = RNDNetwork((1, CONV_MIN_SIDE, CONV_MIN_SIDE), 512, (), (64, 64))
    assert any(isinstance(m, torch.nn.Conv2d) for m in large.modules())
    assert large(torch.zeros(3, 1, CONV_MIN_SIDE, CONV_MIN_SIDE)).shape == (3, 512)
