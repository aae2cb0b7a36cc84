"""SAC's parts against slow references in the papers' notation (Haarnoja et al. 2018; discrete:
Christodoulou 2019): the soft Bellman target with the twin minimum and the entropy term, the
critic, actor and temperature losses, discrete SAC's expectations against loops over actions,
the tanh-Gaussian log-probability against torch.distributions, the Polyak update; then the
agent's wiring (targets from the target critics, terminal and truncated transitions, gradients
of each loss only to its own parameters), acting, the inference copy, and an exact resume."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import distributions as D

from rl_core.agents import make_agent
from rl_core.data.env_spec import BoxActions, DiscreteActions, EnvSpec, Observation
from rl_core.config.flags import make_parser
from rl_core.losses import sac as lib

BOX = EnvSpec(Observation((3,), "<f4"), BoxActions((2,), (-2.0, -1.0), (2.0, 3.0)))
DISCRETE = EnvSpec(Observation((4,), "<f4"), DiscreteActions(3))


def flags(*args):
    return make_parser().parse_args(
        ["--agent=sac", "--mlp_sizes=16,16", "--batch_size=8", "--reward_clipping=none", *args]
    )


def agent_and_model(spec, *args, seed=0):
    torch.manual_seed(seed)
    agent = make_agent(flags(*args), spec)
    return agent, agent.build_model()


# ------------------------------------------------------------------ pure losses


@pytest.mark.parametrize("seed", [0, 1])
def test_soft_q_targets_match_loop(seed):
    g = torch.Generator().manual_seed(seed)
    B = 7
    r, q1, q2, logp = (torch.randn(B, generator=g, dtype=torch.float64) for _ in range(4))
    discounts = 0.99 * (torch.rand(B, generator=g) > 0.3).double()
    alpha = 0.37
    y = lib.soft_q_targets(r, discounts, q1, q2, logp, alpha)
    for b in range(B):
        soft_v = min(q1[b].item(), q2[b].item()) - alpha * logp[b].item()
        assert y[b].item() == pytest.approx(r[b].item() + discounts[b].item() * soft_v)


def test_discrete_expectations_match_loops_over_actions():
    g = torch.Generator().manual_seed(3)
    B, A = 5, 4
    logits = torch.randn(B, A, generator=g, dtype=torch.float64)
    logp = torch.log_softmax(logits, -1)
    p = logp.exp()
    q1, q2 = torch.randn(B, A, generator=g, dtype=torch.float64), torch.randn(B, A, generator=g, dtype=torch.float64)
    alpha, h_bar = 0.2, 0.5 * math.log(A)
    v = lib.discrete_soft_values(p, logp, q1, q2, alpha)
    actor = lib.discrete_actor_loss(p, logp, q1, q2, alpha)
    log_alpha = torch.tensor(math.log(alpha), dtype=torch.float64)
    temp = lib.temperature_loss(log_alpha, logp, h_bar, probs=p)
    v_ref, actor_ref, temp_ref = [], 0.0, 0.0
    for b in range(B):
        v_b = actor_b = temp_b = 0.0
        for a in range(A):
            pi, lp = p[b, a].item(), logp[b, a].item()
            q = min(q1[b, a].item(), q2[b, a].item())
            v_b += pi * (q - alpha * lp)
            actor_b += pi * (alpha * lp - q)
            temp_b += pi * (-alpha * (lp + h_bar))
        v_ref.append(v_b)
        actor_ref += actor_b / B
        temp_ref += temp_b / B
    torch.testing.assert_close(v, torch.tensor(v_ref, dtype=torch.float64))
    assert actor.item() == pytest.approx(actor_ref)
    assert temp.item() == pytest.approx(temp_ref)


def test_critic_actor_and_temperature_losses_match_loops_with_mask():
    g = torch.Generator().manual_seed(5)
    B = 9
    q1, q2, y, logp = (torch.randn(B, generator=g, dtype=torch.float64) for _ in range(4))
    mask = torch.tensor([1, 1, 0, 1, 1, 1, 0, 1, 1], dtype=torch.float64)
    alpha = 0.5
    critic = lib.critic_loss(q1, q2, y, mask)
    kept = [b for b in range(B) if mask[b] > 0]
    ref = sum(0.5 * (q1[b] - y[b]).item() ** 2 + 0.5 * (q2[b] - y[b]).item() ** 2 for b in kept) / len(kept)
    assert critic.item() == pytest.approx(ref)
    actor = lib.actor_loss(logp, q1, q2, alpha)
    assert actor.item() == pytest.approx(
        sum(alpha * logp[b].item() - min(q1[b].item(), q2[b].item()) for b in range(B)) / B
    )
    log_alpha = torch.tensor(math.log(alpha), dtype=torch.float64, requires_grad=True)
    h_bar = -2.0
    temp = lib.temperature_loss(log_alpha, logp, h_bar)
    assert temp.item() == pytest.approx(sum(-alpha * (logp[b].item() + h_bar) for b in range(B)) / B)
    temp.backward()  # dJ/dlog(alpha) = -alpha E[log pi + H-bar]: alpha falls when the entropy exceeds H-bar
    assert log_alpha.grad.item() == pytest.approx(-alpha * (logp.mean().item() + h_bar))


def test_critic_loss_sends_no_gradient_into_targets():
    q1 = torch.randn(4, requires_grad=True)
    y = torch.randn(4, requires_grad=True)
    lib.critic_loss(q1, q1 * 2, y).backward()
    assert y.grad is None and q1.grad is not None


def test_polyak_update_matches_formula():
    g = torch.Generator().manual_seed(0)
    target = [torch.randn(3, 2, generator=g), torch.randn(5, generator=g)]
    online = [torch.randn(3, 2, generator=g), torch.randn(5, generator=g)]
    expected = [0.005 * o + 0.995 * t for t, o in zip(target, online)]
    lib.polyak_update(target, online, 0.005)
    for t, e in zip(target, expected):
        torch.testing.assert_close(t, e)
    with pytest.raises(ValueError):
        lib.polyak_update(target, online[:1], 0.1)


def test_tanh_gaussian_log_prob_matches_torch_distributions():
    """The agent's squashed Gaussian: a = loc + scale tanh(u), u ~ N(mean, std), log pi with the tanh
    and affine corrections (Haarnoja et al. 2018, Appendix C), against torch's transformed density."""
    agent, model = agent_and_model(BOX)
    g = torch.Generator().manual_seed(1)
    mean = torch.randn(6, 2, generator=g, dtype=torch.float64)
    std = torch.rand(6, 2, generator=g, dtype=torch.float64) + 0.2
    dist = agent.distribution({"policy_mean": mean, "policy_std": std})
    torch.manual_seed(0)
    action, log_prob = dist.sample_with_log_prob()
    low, high = torch.tensor([-2.0, -1.0], dtype=torch.float64), torch.tensor([2.0, 3.0], dtype=torch.float64)
    reference = D.TransformedDistribution(
        D.Independent(D.Normal(mean, std), 1),
        [D.TanhTransform(), D.AffineTransform((high + low) / 2, (high - low) / 2)],
    )
    torch.testing.assert_close(log_prob, reference.log_prob(action), rtol=1e-6, atol=1e-6)
    assert ((action > low) & (action < high)).all()


# ------------------------------------------------------------------ the agent's wiring


def batch_of(spec, B=8, seed=0, done=None, truncated=None):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(2, B, *spec.obs.shape, generator=g)
    if spec.discrete:
        action = torch.randint(0, spec.num_actions, (2, B), generator=g)
    else:
        action = torch.rand(2, B, spec.action.shape[0], generator=g) * 2 - 1
    zeros = torch.zeros(2, B, dtype=torch.bool)
    batch = {
        "obs": obs,
        "action": action,
        "reward": torch.randn(2, B, generator=g),
        "done": zeros.clone(),
        "truncated": zeros.clone(),
    }
    if done is not None:
        batch["done"][1, done] = True
    if truncated is not None:
        batch["done"][1, truncated] = True
        batch["truncated"][1, truncated] = True
    return batch


def reference_loss(agent, model, batch, seed):
    """The loss written out transition by transition in the papers' notation (same noise: ``seed``)."""
    f = agent.flags
    torch.manual_seed(seed)
    alpha = model.log_alpha.exp().item()
    obs, next_obs = batch["obs"][0], batch["obs"][1]
    B = obs.shape[0]
    discrete = agent.discrete
    with torch.no_grad():
        next_params = model.policy_params(next_obs)
        if not discrete:
            next_a, next_logp = agent.distribution(next_params).sample_with_log_prob()
    params = model.policy_params(obs)
    if not discrete:
        new_a, logp = agent.distribution(params).sample_with_log_prob()
    critic = actor = temp = 0.0
    kept = 0
    for b in range(B):
        r = batch["reward"][1, b].item()
        gamma = 0.0 if batch["done"][1, b] else f.discounting
        if discrete:
            with torch.no_grad():
                lp_next = torch.log_softmax(next_params["policy_logits"][b], -1)
                nq1, nq2 = model.target_critics(next_obs[b : b + 1])
                v_next = sum(
                    lp_next[a].exp().item() * (min(nq1[0, a].item(), nq2[0, a].item()) - alpha * lp_next[a].item())
                    for a in range(lp_next.numel())
                )
            q1_all, q2_all = model.critics(obs[b : b + 1])
            a_t = batch["action"][1, b].item()
            q1, q2 = q1_all[0, a_t], q2_all[0, a_t]
            lp = torch.log_softmax(params["policy_logits"][b], -1)
            actor = (
                actor
                + sum(
                    lp[a].exp() * (alpha * lp[a] - min(q1_all[0, a].item(), q2_all[0, a].item()))
                    for a in range(lp.numel())
                )
                / B
            )
            h = -(lp.exp() * lp).sum().item()
            temp += -alpha * (-h + agent.target_entropy) / B
        else:
            with torch.no_grad():
                nq1, nq2 = model.target_critics(next_obs[b : b + 1], next_a[b : b + 1])
                v_next = min(nq1.item(), nq2.item()) - alpha * next_logp[b].item()
            q1, q2 = model.critics(obs[b : b + 1], batch["action"][1, b : b + 1])
            q1, q2 = q1[0], q2[0]
            # Q(s, a~) with a gradient to a~ (reparameterisation) but none to the critics' parameters
            detached = {k: v.detach() for k, v in model.critics.named_parameters()}
            pq1, pq2 = torch.func.functional_call(model.critics, detached, (obs[b : b + 1], new_a[b : b + 1]))
            actor = actor + (alpha * logp[b] - torch.minimum(pq1, pq2)[0]) / B
            temp += -alpha * (logp[b].item() + agent.target_entropy) / B
        if batch["truncated"][1, b]:
            continue  # the next obs is the next episode's first: no target
        y = r + gamma * v_next
        critic = critic + 0.5 * (q1 - y) ** 2 + 0.5 * (q2 - y) ** 2
        kept += 1
    return critic / kept, actor, temp


@pytest.mark.parametrize("spec", [BOX, DISCRETE], ids=["box", "discrete"])
def test_agent_loss_matches_reference_with_terminal_and_truncated_transitions(spec):
    agent, model = agent_and_model(spec, "--initial_temperature=0.3")
    with torch.no_grad():  # targets that differ from the critics, so that using the wrong ones shows
        for p in model.target_critics.parameters():
            p.add_(0.1 * torch.randn_like(p))
    batch = batch_of(spec, done=[1, 4], truncated=[2])
    torch.manual_seed(11)
    loss, stats = agent.loss(model, batch)
    critic, actor, temp = reference_loss(agent, model, batch, seed=11)
    assert stats["critic_loss"] == pytest.approx(critic.item(), rel=1e-5)
    assert stats["actor_loss"] == pytest.approx(actor.item(), rel=1e-5, abs=1e-6)
    assert stats["temperature_loss"] == pytest.approx(temp, rel=1e-5, abs=1e-7)
    assert loss.item() == pytest.approx(critic.item() + actor.item() + temp, rel=1e-5)


@pytest.mark.parametrize("spec", [BOX, DISCRETE], ids=["box", "discrete"])
def test_each_loss_reaches_only_its_own_parameters(spec):
    """Critic parameters get the critic loss's gradient only, the policy the actor loss's, log alpha
    the temperature loss's (one optimizer over all of them, as SEED RL)."""
    agent, model = agent_and_model(spec)
    batch = batch_of(spec, seed=2)
    torch.manual_seed(0)
    loss, _ = agent.loss(model, batch)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert not any(n.startswith("target_critics.") for n in grads)
    critic, actor, temp = reference_loss(agent, model, batch, seed=0)
    for part, prefixes in ((critic, ("critics.",)), (actor, ("actor_torso.", "policy.")), (torch.as_tensor(temp), ())):
        model.zero_grad(set_to_none=True)
        if part.requires_grad:
            part.backward()
        for name, p in model.named_parameters():
            if name.startswith(prefixes):
                torch.testing.assert_close(grads[name], p.grad, rtol=1e-4, atol=1e-6)
    # log alpha's gradient: dJ(alpha)/dlog(alpha) = J(alpha) itself
    assert grads["log_alpha"].item() == pytest.approx(temp, rel=1e-4, abs=1e-7)


def test_fixed_temperature_is_not_trained():
    agent, model = agent_and_model(BOX, "--no-learn_temperature", "--entropy_cost=0.05")
    assert model.log_alpha.exp().item() == pytest.approx(0.05)
    assert not model.log_alpha.requires_grad
    optimizer, _ = agent.make_optimizer(model)
    assert all(p is not model.log_alpha for group in optimizer.param_groups for p in group["params"])


def test_target_entropy_defaults():
    assert agent_and_model(BOX)[0].target_entropy == -2.0
    assert agent_and_model(DISCRETE, "--target_entropy_ratio=0.5")[0].target_entropy == pytest.approx(0.5 * math.log(3))
    assert agent_and_model(DISCRETE, "--target_entropy=0.1")[0].target_entropy == pytest.approx(0.1)


def test_polyak_step_after_each_update_moves_targets_by_tau():
    agent, model = agent_and_model(BOX, "--polyak_tau=0.1")
    optimizer, _ = agent.make_optimizer(model)
    before_targets = [p.clone() for p in model.target_critics.parameters()]
    gen = agent.updates(model, batch_of(BOX), ())
    loss, _ = next(gen)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    online = [p.detach().clone() for p in model.critics.parameters()]
    with pytest.raises(StopIteration):
        next(gen)
    for t, t0, o in zip(model.target_critics.parameters(), before_targets, online):
        torch.testing.assert_close(t, 0.1 * o + 0.9 * t0)
    assert int(model.updates) == 1


# ------------------------------------------------------------------ acting


def inputs_for(spec, B):
    return {
        "obs": torch.randn(1, B, *spec.obs.shape),
        "reward": torch.zeros(1, B),
        "done": torch.zeros(1, B, dtype=torch.bool),
        "last_action": torch.zeros(1, B, 2),
    }


def test_box_acting_samples_in_bounds_and_greedy_is_the_squashed_mean():
    agent, model = agent_and_model(BOX)
    inputs = inputs_for(BOX, 64)
    sampled, extras, state = agent.act(model, inputs, (), greedy=False)
    assert extras == {} and state == ()
    low, high = torch.tensor([-2.0, -1.0]), torch.tensor([2.0, 3.0])
    assert sampled.shape == (1, 64, 2) and ((sampled > low) & (sampled < high)).all()
    greedy, _, _ = agent.act(model, inputs, (), greedy=True)
    params, _ = model(inputs)
    torch.testing.assert_close(greedy, (high + low) / 2 + (high - low) / 2 * torch.tanh(params["policy_mean"]))
    again, _, _ = agent.act(model, inputs, (), greedy=True)
    assert torch.equal(greedy, again) and not torch.equal(greedy, sampled)


def near_deterministic(model):
    """The policy's action near loc + scale tanh(3), far from uniform: mean bias 3, std e^-3."""
    with torch.no_grad():
        model.policy.mean.weight.zero_()
        model.policy.mean.bias.fill_(3.0)
        model.policy.std.weight.zero_()
        model.policy.std.bias.fill_(-3.0)
    return model


def test_random_init_steps_act_uniformly_then_the_policy_acts():
    agent, model = agent_and_model(BOX, "--random_init_steps=2000", "--std_kind=exp")
    near_deterministic(model)
    B = 500
    inputs = inputs_for(BOX, B)
    first = torch.cat([agent.act(model, inputs, ())[0][0] for _ in range(4)])  # 2,000 steps
    # uniform on [-2, 2] x [-1, 3]: mean at the centre, std (high - low) / sqrt(12)
    torch.testing.assert_close(first.mean(0), torch.tensor([0.0, 1.0]), atol=0.08, rtol=0)
    torch.testing.assert_close(first.std(0), torch.tensor([4.0, 4.0]) / math.sqrt(12), atol=0.05, rtol=0)
    policy_mode = torch.tensor([0.0, 1.0]) + torch.tensor([2.0, 2.0]) * math.tanh(3.0)
    policy = agent.act(model, inputs, ())[0][0]
    torch.testing.assert_close(policy.mean(0), policy_mode, atol=0.02, rtol=0)
    assert agent.random_steps_left <= 0
    greedy_agent, greedy_model = agent_and_model(BOX, "--random_init_steps=2000", "--std_kind=exp")
    greedy_agent.act(near_deterministic(greedy_model), inputs, (), greedy=True)  # validation is never random
    assert greedy_agent.random_steps_left == 2000
    resumed_agent, resumed_model = agent_and_model(BOX, "--random_init_steps=2000", "--std_kind=exp")
    near_deterministic(resumed_model).updates += 5  # a resumed run has learned: no random phase
    out = resumed_agent.act(resumed_model, inputs, ())[0][0]
    assert resumed_agent.random_steps_left == 0
    torch.testing.assert_close(out.mean(0), policy_mode, atol=0.02, rtol=0)


def test_discrete_acting():
    agent, model = agent_and_model(DISCRETE)
    inputs = inputs_for(DISCRETE, 4000)
    sampled, _, _ = agent.act(model, inputs, ())
    assert sampled.dtype == torch.int64 and sampled.shape == (1, 4000)
    params, _ = model(inputs)
    greedy, _, _ = agent.act(model, inputs, (), greedy=True)
    assert torch.equal(greedy, params["policy_logits"].argmax(-1))
    counts = torch.bincount(sampled.flatten(), minlength=3).float() / 4000
    expected = torch.softmax(params["policy_logits"], -1).mean((0, 1))
    torch.testing.assert_close(counts, expected, atol=0.03, rtol=0)


# ------------------------------------------------------------------ inference copy, resume


def test_inference_copy_leaves_the_critics_out_and_publish_copies_by_name():
    import threading

    from rl_core.runtime.learner import inference_copy, publish

    agent, model = agent_and_model(BOX)
    copy = inference_copy(model)
    assert copy.critics is None and copy.target_critics is None
    assert model.critics is not None and model.target_critics is not None
    assert set(copy.state_dict()) < set(model.state_dict())
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    publish(model, copy, threading.Lock())
    full = model.state_dict()
    for name, value in copy.state_dict().items():
        assert torch.equal(value, full[name])
    inputs = inputs_for(BOX, 3)
    assert torch.equal(agent.act(copy, inputs, (), greedy=True)[0], agent.act(model, inputs, (), greedy=True)[0])


@pytest.mark.parametrize("spec", [BOX, DISCRETE], ids=["box", "discrete"])
def test_checkpoint_round_trip_resumes_exactly(spec, tmp_path):
    """model.tar holds the policy, both critics, both targets, alpha and the optimizer's state:
    training on from a saved and reloaded copy gives bit-identical weights."""
    from rl_core.records import checkpoint_file

    agent, model = agent_and_model(spec)
    optimizer, scheduler = agent.make_optimizer(model)
    batches = [batch_of(spec, seed=s) for s in range(6)]

    def train(model, optimizer, batches, seed):
        torch.manual_seed(seed)
        for batch in batches:
            for loss, _ in agent.updates(model, batch, ()):
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

    train(model, optimizer, batches[:3], seed=1)
    path = str(tmp_path / "model.tar")
    checkpoint_file.save(path, {"model_state_dict": model.state_dict(), "optimizer_state_dict": optimizer.state_dict()})
    names = {k.split(".")[0] for k in model.state_dict()}
    assert {"actor_torso", "policy", "critics", "target_critics", "log_alpha", "updates"} <= names
    saved = checkpoint_file.load(path)
    _, resumed = agent_and_model(spec, seed=99)
    resumed_optimizer, _ = agent.make_optimizer(resumed)
    resumed.load_state_dict(saved["model_state_dict"])
    resumed_optimizer.load_state_dict(saved["optimizer_state_dict"])
    train(model, optimizer, batches[3:], seed=2)
    train(resumed, resumed_optimizer, batches[3:], seed=2)
    for (name, a), b in zip(model.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(a, b), name
    assert int(resumed.updates) == 6


# ------------------------------------------------------------------ the replay's windows


def test_windows_draw_every_transition_uniformly():
    from rl_core.data.replay import PrioritizedReplay

    replay = PrioritizedReplay(50, priority_exponent=0.0, importance_sampling_exponent=0.0, seed=0)
    L1 = 9  # sequences of 8 transitions: step ids 0..8, 8..16, ... (overlapping by one)
    steps = torch.arange(20)[:, None] * 8 + torch.arange(L1)[None]
    replay.insert({"step": steps, "obs/frames": torch.zeros(20, L1 + 3, 1)})
    counts = np.zeros(20 * 8)
    for _ in range(200):
        _, items, weights = replay.sample(256, window=2, window_extra={"obs/frames": 3})
        first, second = items["step"][:, 0], items["step"][:, 1]
        assert torch.equal(second, first + 1) and items["obs/frames"].shape == (256, 5, 1)
        assert torch.equal(weights, torch.ones(256))
        np.add.at(counts, first.numpy(), 1)
    expected = 200 * 256 / 160
    assert counts.min() > 0.8 * expected and counts.max() < 1.2 * expected  # 320 draws each: +-4.5 sigma


def test_windows_of_frame_stacks_decode_to_the_stored_stacks():
    import queue

    from rl_core.data.replay_source import ReplaySource

    f = flags(
        "--replay_frame_stack", "--unroll_length=6", "--replay_buffer_size=64", "--batch_size=16", "--replay_ratio=100"
    )
    source = ReplaySource(
        queue.Queue(),
        f,
        stride=6,
        seed=0,
        capacity=8,
        min_size=1,
        trained_per_batch=16,
        priority_exponent=0.0,
        importance_sampling_exponent=0.0,
        window=2,
    )
    C, K, L1 = 4, 3, 7
    frames = torch.randint(0, 255, (L1 + C - 1, K, 2, 2), dtype=torch.uint8)
    obs = torch.stack([frames[t : t + C].transpose(0, 1) for t in range(L1)])  # [L1, K, C, 2, 2] shifting stacks
    obs[3, 1] = obs[3, 1, -1:].expand(C, 2, 2)  # an episode starts at step 3 of env 1: the stack is its reset frame
    unroll = {
        "obs": obs,
        "action": torch.arange(L1)[:, None].expand(L1, K) * 10 + torch.arange(K),
        "reward": torch.zeros(L1, K),
        "done": torch.zeros(L1, K, dtype=torch.bool),
    }
    source.insert(unroll, ())  # learning starts: the replay ratio counts steps inserted from here
    source.insert(unroll, ())
    stop = __import__("threading").Event()
    for _ in range(20):
        batch, state = source.next_batch(stop)
        assert state == () and batch["obs"].shape == (2, 16, C, 2, 2)
        t = batch["action"][0] // 10
        env = batch["action"][0] % 10
        assert torch.equal(batch["action"][1], batch["action"][0] + 10)
        for b in range(16):
            assert torch.equal(batch["obs"][0, b], obs[t[b], env[b]])
            assert torch.equal(batch["obs"][1, b], obs[t[b] + 1, env[b]])


@pytest.mark.parametrize("spec", [BOX, DISCRETE], ids=["box", "discrete"])
def test_batched_twin_critics_equal_two_separate_mlps_and_load_the_old_layout(spec):
    """TwinCritics runs both critics in one baddbmm per layer: each member equals its own ReLU MLP, and
    a checkpoint of the separate critics (q1/q2, each a torso and a Linear q) loads into it."""
    agent, model = agent_and_model(spec)
    critics = model.critics
    obs = torch.randn(6, 3 if spec is BOX else 4)
    action = torch.rand(6, 2) if spec is BOX else None
    x = obs if action is None else torch.cat([obs, action], -1)
    old = {}
    for m in range(2):
        h = x
        for i, layer in enumerate(critics.layers):
            w, b = layer.weight[m].t(), layer.bias[m, 0]
            h = torch.nn.functional.linear(h, w, b)
            name = "q" if i == len(critics.layers) - 1 else f"torso.mlp.{2 * i}"
            old[f"critics.q{m + 1}.{name}.weight"], old[f"critics.q{m + 1}.{name}.bias"] = w.clone(), b.clone()
            if i < len(critics.layers) - 1:
                h = torch.relu(h)
        q = critics(obs, action)[m]
        torch.testing.assert_close(q, h.squeeze(-1) if action is not None else h)
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("critics.")}
    state.update(old)
    _, fresh = agent_and_model(spec, seed=1)
    fresh.load_state_dict(state)
    for a, b in zip(fresh.critics(obs, action), critics(obs, action)):
        torch.testing.assert_close(a, b)


def test_the_actor_loss_reaches_the_action_but_not_the_critics_parameters():
    _, model = agent_and_model(BOX)
    obs, action = torch.randn(5, 3), torch.rand(5, 2, requires_grad=True)
    q1, q2 = model.critics(obs, action, detach_params=True)
    (q1 + q2).sum().backward()
    assert action.grad is not None and action.grad.abs().sum() > 0
    assert all(p.grad is None for p in model.critics.parameters())
