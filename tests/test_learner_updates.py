"""The learner's update loop (rl_core/runtime/learner.py): one host sync per batch with a fused Adam,
a non-finite step skipped on the device and named, weights published every --publish_interval
batches, and the abort hooks dropped once updates are fast."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from rl_core.errors import TrainingDiverged
from rl_core.config.flags import make_parser
from rl_core.numerics.optim import make_optimizer
from rl_core.runtime.learner import POLICY_VERSION, GradientNorms, Learner, Weights, inference_copy


class ScriptedAgent:
    """Yields one loss per entry of ``scales``: the model's output times the scale (nan: a non-finite loss)."""

    def __init__(self, scales):
        self.scales = scales

    def updates(self, model, batch, state):
        self.keys = set(batch)
        for scale in self.scales:
            out = model(batch["x"]).mean()
            yield out * scale, {"out": out.detach(), "scale": float(scale) if scale == scale else 0.0}


def learner(scales, *args):
    flags = make_parser().parse_args(
        ["--optimizer=adam", "--learning_rate=0.1", "--grad_norm_clipping=0", "--lr_decay=none", *args]
    )
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    optimizer, scheduler = make_optimizer(flags, list(model.parameters()))
    weights = Weights(model, optimizer, scheduler, inference_copy(model), threading.Lock())
    return Learner(flags, ScriptedAgent(scales), weights, None, torch.device("cpu"), threading.Event())


def batch():
    return {"x": torch.randn(8, 3), "reward": torch.zeros(2, 8)}


def params(model):
    return [p.detach().clone() for p in model.parameters()]


def test_adam_is_fused_and_the_stats_are_the_means_over_the_steps():
    L = learner([1.0, 2.0, 3.0])
    assert L.optimizer.param_groups[0]["fused"]
    stats = L.learn(batch(), (), new_steps=5)
    assert stats["optimizer_steps"] == 3 and stats["scale"] == pytest.approx(2.0)
    assert set(stats) >= {"out", "grad_norm", "learning_rate"} and L.step == 5


def test_every_row_has_the_learning_rate_now_updates_or_none():
    """An interval without an update (the first row's, under load) still logs the rate: the schedule's
    value at the row, which a decayed run's rows are checked against."""
    L = learner([1.0], "--lr_decay=linear", "--total_steps=100", "--unroll_length=5", "--batch_size=5")
    assert L.take_stats() == {"learning_rate": pytest.approx(0.1)}
    L.learn(batch(), (), new_steps=25)
    assert L.take_stats()["learning_rate"] == pytest.approx(0.075)
    assert L.take_stats() == {"learning_rate": pytest.approx(0.075)}


def test_a_non_finite_step_is_skipped_on_the_device_and_named():
    L = learner([1.0, float("nan"), 1.0])
    data = batch()
    with pytest.raises(TrainingDiverged, match=r"its optimizer step 2\): the loss is nan"):
        L.learn(data, ())
    # the first and third steps were taken, the second (nan) was not: no weight is nan
    assert all(torch.isfinite(p).all() for p in L.model.parameters())
    assert L.optimizer.state[L.params[0]]["step"].item() == 2
    # ... and the skipped step left no trace: the weights and Adam's moments are those of a learner that
    # took only the two finite steps on the same batch
    reference = learner([1.0, 1.0])
    reference.learn(data, ())
    for p, q in zip(L.params, reference.params):
        assert torch.equal(p, q)
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(L.optimizer.state[p][key], reference.optimizer.state[q][key]), key


def test_weights_reach_inference_every_publish_interval_batches():
    L = learner([1.0], "--publish_interval=3")
    published = params(L.inference_model)
    for i in range(1, 7):
        L.learn(batch(), ())
        now = params(L.inference_model)
        changed = any(not torch.equal(a, b) for a, b in zip(now, published))
        assert changed == (i % 3 == 0), i
        if changed:
            assert all(torch.equal(a, b) for a, b in zip(now, params(L.model)))
        published = now


def test_the_policy_lag_is_the_batches_since_the_weights_that_acted():
    """The inference copy's version is the batch count at its last publication (every 3 batches); a batch
    whose steps carry the versions that acted has, in its stats, the mean and the largest lag over its steps
    beyond the first; the agent never sees the field; a row takes the mean of the means, the max of the maxes."""
    L = learner([1.0], "--publish_interval=3")
    lags = []
    for n in range(7):
        acted = L.inference_model.policy_version
        assert acted == 3 * (n // 3)
        versions = torch.full((3, 8), acted, dtype=torch.int32)
        versions[0] = -100  # (the step before the first action: not trained on)
        versions[1:, 0] = acted - 4  # one env's steps acted on older weights
        data, state, host = L.to_device(dict(batch(), **{POLICY_VERSION: versions}), ())
        assert POLICY_VERSION not in data and host is versions
        stats = L.learn(data, state, None, host)
        assert POLICY_VERSION not in L.agent.keys
        lag = n - acted
        assert stats["policy_lag"] == pytest.approx((7 * lag + lag + 4) / 8) and stats["policy_lag_max"] == lag + 4
        lags.append(stats["policy_lag"])
    row = L.take_stats()
    assert row["policy_lag"] == pytest.approx(sum(lags) / 7) and row["policy_lag_max"] == 2 + 4
    assert "policy_lag" not in L.learn(batch(), ())  # a batch without versions (a test's) logs none


def test_abort_hooks_are_dropped_once_an_update_is_fast(monkeypatch):
    """Which update counts as fast is set here, not measured: this tiny update takes milliseconds, but a loaded
    machine may pause any thread for longer than the 0.1 s of FAST_UPDATE_S."""
    from rl_core.runtime import learner as learner_module

    L = learner([1.0])
    assert L._abort_hooks
    monkeypatch.setattr(learner_module, "FAST_UPDATE_S", 0.0)  # every update is slow: the hooks stay
    L.learn(batch(), ())
    assert L._abort_hooks and L.model[0]._forward_pre_hooks and all(p._backward_hooks for p in L.model.parameters())
    monkeypatch.setattr(learner_module, "FAST_UPDATE_S", 3600.0)  # every update is fast: they go
    L.learn(batch(), ())
    assert not L._abort_hooks
    assert not L.model[0]._forward_pre_hooks
    assert not any(p._backward_hooks for p in L.model.parameters())


def test_publishing_follows_parameters_whose_storage_was_replaced():
    """A model converted after the learner was made (``.to()`` swaps a parameter's ``.data``) still
    publishes its current weights."""
    L = learner([1.0])
    L.model.double().float()  # each parameter gets new storage, as a move to another device does
    with torch.no_grad():
        for p in L.model.parameters():
            p.add_(1.0)
    L.publish_weights()
    assert all(torch.equal(a, b) for a, b in zip(params(L.inference_model), params(L.model)))


@pytest.mark.parametrize("max_norm", [0.5, 100.0, float("inf")])
def test_gradient_norms_match_torchs_clipping_and_total_norm(max_norm):
    """GradientNorms.clip / .weights against nn.utils.clip_grad_norm_ / get_total_norm on the same model,
    with a parameter that got no gradient."""
    torch.manual_seed(0)
    models = [nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3), nn.Linear(3, 3)) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    x = torch.randn(11, 5)
    for m in models:
        (m[2](m[1](m[0](x))) ** 2).sum().backward()  # m[3] gets no gradient
    expected = nn.utils.clip_grad_norm_(list(models[0].parameters()), max_norm, foreach=True)
    norms = GradientNorms(list(models[1].parameters()))
    assert norms.uniform
    got = norms.clip(max_norm)
    torch.testing.assert_close(got, expected)
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        assert (a.grad is None) == (b.grad is None)
        if a.grad is not None:
            torch.testing.assert_close(b.grad, a.grad)
    torch.testing.assert_close(norms.weights(), nn.utils.get_total_norm(list(models[0].parameters()), foreach=True))
    mixed = GradientNorms([torch.zeros(2, requires_grad=True), torch.zeros(2, dtype=torch.float64, requires_grad=True)])
    assert not mixed.uniform  # (torch's functions take those)
