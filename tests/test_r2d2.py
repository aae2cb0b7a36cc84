"""R2D2's parts against slow references in the paper's notation: value rescaling and its
inverse, n-step double-Q targets (episode ends inside the sequence, bootstrap at its end,
time-limit cuts), burn-in, the IS-weighted loss and the sequence priorities, the dueling head,
the per-env epsilons and how acting applies them, the target network's period."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rl_core.agents import make_agent
from rl_core.data.env_spec import DiscreteActions, EnvSpec, Observation
from rl_core.config.flags import make_parser
from rl_core.losses import r2d2 as lib

SPEC = EnvSpec(Observation((4,), "<f4"), DiscreteActions(3))


def flags(*args):
    return make_parser().parse_args(
        ["--agent=r2d2", "--mlp_sizes=16", "--dueling_hidden_size=8", "--hidden_size=8", *args]
    )


# ------------------------------------------------------------------ value rescaling


def test_value_rescaling_and_its_exact_inverse():
    x = torch.cat([torch.linspace(-1e4, 1e4, 2001, dtype=torch.float64), torch.tensor([0.0, 1e-6, -1e-6])])
    for eps in (1e-3, 1e-2, 0.0):
        h = lib.value_rescale(x, eps)
        slow = torch.tensor(
            [math.copysign(math.sqrt(abs(v) + 1) - 1, v) + eps * v for v in x.tolist()], dtype=torch.float64
        )
        torch.testing.assert_close(h, slow)
        torch.testing.assert_close(lib.inverse_value_rescale(h, eps), x, rtol=1e-9, atol=1e-7)
        torch.testing.assert_close(lib.value_rescale(lib.inverse_value_rescale(x, eps), eps), x, rtol=1e-9, atol=1e-7)
    # h compresses: |h(x)| grows like sqrt(|x|)
    assert lib.value_rescale(torch.tensor(1e4, dtype=torch.float64), 0.0).item() == pytest.approx(math.sqrt(10001) - 1)


# --------------------------------------------------------------------- n-step targets


def slow_n_step(r, d, v, n):
    """y_t = sum_{i<m} (prod_{k<i} gamma_{t+k}) r_{t+i} + (prod_{k<m} gamma_{t+k}) v_{t+m-1}, m = min(n, T - t)."""
    T, B = r.shape
    y = torch.zeros(T, B, dtype=torch.float64)
    for b in range(B):
        for t in range(T):
            m = min(n, T - t)
            total, disc = 0.0, 1.0
            for i in range(m):
                total += disc * r[t + i, b].item()
                disc *= d[t + i, b].item()
            y[t, b] = total + disc * v[t + m - 1, b].item()
    return y


@pytest.mark.parametrize("n", [1, 2, 5, 12])
def test_n_step_targets_against_a_slow_loop(n):
    g = torch.Generator().manual_seed(n)
    T, B = 9, 4
    r = torch.randn(T, B, generator=g, dtype=torch.float64)
    ends = torch.rand(T, B, generator=g) < 0.25
    d = 0.97 * (~ends).double()
    v = torch.randn(T, B, generator=g, dtype=torch.float64)
    torch.testing.assert_close(lib.n_step_targets(r, d, v, n), slow_n_step(r, d, v, n))
    # an episode end at t stops every window that reaches it: y_t = r_t there
    t, b = ends.nonzero()[0].tolist()
    assert lib.n_step_targets(r, d, v, n)[t, b].item() == pytest.approx(r[t, b].item())


def test_n_step_targets_bootstrap_at_the_sequence_end():
    T = 6
    r = torch.ones(T, 1, dtype=torch.float64)
    d = torch.full((T, 1), 0.5, dtype=torch.float64)
    v = torch.arange(T, dtype=torch.float64).view(T, 1) * 10
    y = lib.n_step_targets(r, d, v, 3)
    assert y[0, 0].item() == pytest.approx(1 + 0.5 + 0.25 + 0.125 * v[2, 0].item())  # a full 3-step window
    assert y[T - 1, 0].item() == pytest.approx(1 + 0.5 * v[T - 1, 0].item())  # cut: 1 step, the last value
    assert y[T - 2, 0].item() == pytest.approx(1 + 0.5 + 0.25 * v[T - 1, 0].item())


# --------------------------------------------------------------------- dueling head


def test_dueling_head_is_value_plus_centred_advantage():
    from models.qnet import DuelingHead

    torch.manual_seed(0)
    head = DuelingHead(5, 4, hidden_size=7)
    x = torch.randn(3, 2, 5)
    q = head(x)
    value = head.value(x)
    advantage = head.advantage(x)
    for t in range(3):
        for b in range(2):
            mean_a = sum(advantage[t, b, a].item() for a in range(4)) / 4
            for a in range(4):
                assert q[t, b, a].item() == pytest.approx(
                    value[t, b, 0].item() + advantage[t, b, a].item() - mean_a, abs=1e-6
                )
    torch.testing.assert_close(q.mean(-1), value.squeeze(-1))  # V is identified as the mean over actions


# ---------------------------------------------------------------------- exploration


def test_ape_x_epsilons():
    N = 16
    eps = lib.ape_x_epsilons(N)
    for i in range(N):
        assert eps[i].item() == pytest.approx(0.4 ** (1 + 7 * i / (N - 1)), rel=1e-6)
    assert eps[0].item() == pytest.approx(0.4) and eps[-1].item() == pytest.approx(0.4**8, rel=1e-6)
    assert lib.ape_x_epsilons(1).tolist() == pytest.approx([0.4])


def test_each_env_gets_its_own_epsilon_and_acting_applies_it():
    f = flags("--num_actors=8")
    agent = make_agent(f, SPEC)
    all_eps = lib.ape_x_epsilons(8)
    # server 1 of 2 with K = 4 envs: env ids 4..7
    inputs = agent.actor_inputs(np.arange(4, 8), 8)
    torch.testing.assert_close(inputs["epsilon"], all_eps[4:8].view(1, 4))
    model = agent.build_model()
    n = 20000
    obs = {
        "obs": torch.zeros(1, n, 4),
        "reward": torch.zeros(1, n),
        "done": torch.ones(1, n, dtype=torch.bool),
        "last_action": torch.zeros(1, n, dtype=torch.int64),
    }
    greedy = model(obs)[0]["q_values"].argmax(-1)  # the same obs everywhere: one greedy action
    torch.manual_seed(0)
    for epsilon in (0.0, 0.3, 1.0):
        action, extras, _ = agent.act(model, dict(obs, epsilon=torch.full((1, n), epsilon)), ())
        assert extras == {}
        other = (action != greedy).float().mean().item()
        assert other == pytest.approx(epsilon * 2 / 3, abs=0.015)  # a random action is the greedy one 1/3 of the time
    # validation and the final test: --eval_epsilon, whatever the inputs say
    action, _, _ = agent.act(model, dict(obs, epsilon=torch.ones(1, n)), (), greedy=True)
    assert (action != greedy).float().mean().item() < 0.005


# ------------------------------------------------------------------ the whole loss


def random_sequences(agent, L, B, seed=0):
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(L + 1, B, generator=g) < 0.15
    truncated = done & (torch.rand(L + 1, B, generator=g) < 0.4)
    done[L - 1, 0] = truncated[L - 1, 0] = True  # a time-limit cut near the end of the sequence
    done[L, 1], truncated[L, 1] = True, False  # an episode end on the last transition
    return {
        "obs": torch.randn(L + 1, B, 4, generator=g),
        "reward": 2 * torch.randn(L + 1, B, generator=g),
        "done": done,
        "truncated": truncated,
        "action": torch.randint(0, 3, (L + 1, B), generator=g),
        "replay/index": torch.arange(B),
        "replay/weight": torch.rand(B, generator=g) * 0.9 + 0.1,
    }


def slow_r2d2(agent, model, batch, state, f):
    """The loss, TD errors and priorities, one env and one step at a time in the paper's notation."""
    L1, B = batch["reward"].shape
    burn, n, gamma, eps = f.burn_in, f.n_steps, f.discounting, f.value_function_rescaling_epsilon
    h = lambda x: math.copysign(math.sqrt(abs(x) + 1) - 1, x) + eps * x  # noqa: E731

    def h_inv(x):
        return math.copysign((((math.sqrt(1 + 4 * eps * (abs(x) + 1 + eps)) - 1) / (2 * eps)) ** 2 - 1), x)

    losses, tds, priorities = [], [], []
    for b in range(B):
        # Q(s_t, .) of both networks, stepping from the stored state through the burn-in
        q_online, q_target = [], []
        for net, out in ((model, q_online), (model.target_network, q_target)):
            s = tuple(x[b : b + 1] for x in state)
            for t in range(L1):
                step = {
                    "obs": batch["obs"][t : t + 1, b : b + 1],
                    "reward": batch["reward"][t : t + 1, b : b + 1],
                    "done": batch["done"][t : t + 1, b : b + 1],
                    "last_action": batch["action"][t : t + 1, b : b + 1],
                }
                o, s = net(step, s)
                out.append(o["q_values"][0, 0].double())

        def value(t):  # h^-1(Q_target(s_t, argmax_a Q(s_t, a)))
            return h_inv(q_target[t][int(q_online[t].argmax())].item())

        total, td_b = 0.0, []
        for t in range(burn, L1 - 1):  # transitions t -> t+1 after the burn-in
            if batch["truncated"][t + 1, b]:
                td_b.append(None)  # no target: the next state was cut away
                continue
            y, disc = 0.0, 1.0
            for k in range(t, min(t + n, L1 - 1)):
                if batch["truncated"][k + 1, b]:  # cut at k: bootstrap from s_k, the last known state
                    y += disc * value(k)
                    disc = 0.0
                    break
                y += disc * batch["reward"][k + 1, b].item()
                if batch["done"][k + 1, b]:
                    disc = 0.0
                    break
                disc *= gamma
            else:
                y += disc * value(k + 1)
            delta = h(y) - q_online[t][int(batch["action"][t + 1, b])].item()
            td_b.append(delta)
            total += 0.5 * delta**2
        valid = [abs(d) for d in td_b if d is not None]
        priorities.append(0.9 * max(valid) + 0.1 * sum(valid) / len(valid) if valid else 0.0)
        losses.append(batch["replay/weight"][b].item() * total)
        tds.append([0.0 if d is None else d for d in td_b])
    return sum(losses) / B, torch.tensor(tds, dtype=torch.float64).T, np.array(priorities)


@pytest.mark.parametrize("core,burn_in,n", [(None, 0, 5), ("lstm", 4, 3), ("elstm", 3, 5), ("lstm", 0, 1)])
def test_r2d2_loss_and_priorities_against_a_slow_reference(core, burn_in, n):
    T, B = 7, 3
    args = [
        f"--burn_in={burn_in}",
        f"--unroll_length={T}",
        f"--n_steps={n}",
        "--discounting=0.9",
        "--reward_clipping=none",
        "--value_function_rescaling_epsilon=0.01",
    ]
    if core == "lstm":
        args.append("--use_lstm")
    elif core == "elstm":
        args.append("--use_elstm")
    f = flags(*args)
    agent = make_agent(f, SPEC)
    torch.manual_seed(1)
    model = agent.build_model()
    with torch.no_grad():  # a target network that differs from the online one
        for p in model.target_network.parameters():
            p.add_(0.3 * torch.randn_like(p))
    batch = random_sequences(agent, burn_in + T, B, seed=burn_in + n)
    state = tuple(torch.randn_like(s) for s in model.initial_state(B))
    loss, abs_td, mask, _ = agent.loss(model, batch, state)
    slow_loss, slow_td, slow_priorities = slow_r2d2(agent, model, batch, state, f)
    assert abs_td.shape == (T, B)
    assert loss.item() == pytest.approx(slow_loss, rel=1e-4)
    torch.testing.assert_close(abs_td.double(), slow_td.abs(), rtol=1e-4, atol=1e-4)
    from rl_core.data.replay import sequence_priorities

    np.testing.assert_allclose(sequence_priorities(abs_td, 0.9, mask), slow_priorities, rtol=1e-4, atol=1e-5)
    assert batch["truncated"][burn_in + 1 :].any() and batch["done"][burn_in + 1 :].any()  # the cases are exercised
    # gradients reach the online network only
    loss.backward()
    assert all(p.grad is None for p in model.target_network.parameters())
    assert any(
        p.grad is not None and p.grad.abs().sum() > 0
        for n_, p in model.named_parameters()
        if not n_.startswith("target_network.")
    )


def test_burn_in_changes_the_state_the_loss_starts_from():
    """With a core, the loss after a burn-in differs from one started at the stored state on the
    same T + 1 steps (the prefix matters), and no gradient flows into the burn-in steps."""
    T, B, burn = 5, 2, 4
    f = flags("--use_lstm", f"--burn_in={burn}", f"--unroll_length={T}", "--reward_clipping=none")
    agent = make_agent(f, SPEC)
    torch.manual_seed(2)
    model = agent.build_model()
    batch = random_sequences(agent, burn + T, B, seed=3)
    batch["done"][:] = False
    batch["truncated"][:] = False
    state = model.initial_state(B)
    with_burn, *_ = agent.loss(model, batch, state)
    f0 = flags("--use_lstm", "--burn_in=0", f"--unroll_length={T}", "--reward_clipping=none")
    agent0 = make_agent(f0, SPEC)
    suffix = {k: (v[burn:] if v.dim() and v.shape[0] == burn + T + 1 else v) for k, v in batch.items()}
    without, *_ = agent0.loss(model, suffix, state)
    assert abs(with_burn.item() - without.item()) > 1e-6
    obs = batch["obs"].clone().requires_grad_(True)
    loss, *_ = agent.loss(model, dict(batch, obs=obs), state)
    loss.backward()
    assert obs.grad[:burn].abs().sum().item() == 0.0
    assert obs.grad[burn:].abs().sum().item() > 0.0


def test_priorities_are_written_back_and_the_target_network_copied_every_period():
    T, B = 4, 3
    f = flags(f"--unroll_length={T}", "--burn_in=0", "--target_update_period=3")
    agent = make_agent(f, SPEC)
    model = agent.build_model()
    optimizer, _ = agent.make_optimizer(model)
    assert not any(
        p is q for group in optimizer.param_groups for p in group["params"] for q in model.target_network.parameters()
    )
    written = []

    class Source:
        def update_priorities(self, indices, priorities):
            written.append((indices.tolist(), np.asarray(priorities)))

    agent.source = Source()
    target_before = {k: v.clone() for k, v in model.target_network.state_dict().items()}
    for step in range(1, 7):
        batch = random_sequences(agent, T, B, seed=step)
        for loss, _ in agent.updates(model, batch, ()):
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        online = model.online_state()
        same = all(
            torch.equal(model.target_network.state_dict()[k], online[k]) for k in online if not k.endswith("updates")
        )
        assert same == (step % 3 == 0), step
        if step < 3:
            assert all(torch.equal(model.target_network.state_dict()[k], v) for k, v in target_before.items())
    assert len(written) == 6 and all(idx == [0, 1, 2] and (p > 0).all() for idx, p in written)
    assert int(model.updates) == 6


def test_the_inference_copy_has_no_target_network_and_publishes_the_online_weights():
    import threading

    from rl_core.runtime.learner import inference_copy, publish

    agent = make_agent(flags(), SPEC)
    model = agent.build_model()
    copy = inference_copy(model)
    assert copy.target_network is None and model.target_network is not None
    assert not any(k.startswith("target_network.") for k in copy.state_dict())
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)
    publish(model, copy, threading.Lock())
    online = model.online_state()
    assert set(copy.state_dict()) == set(online)
    assert all(torch.equal(v, online[k]) for k, v in copy.state_dict().items())
