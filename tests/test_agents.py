"""The agent seam: --agent vtrace reproduces IMPALA's loss; how the on-policy agent consumes a
batch (epochs, minibatches, batch modes); its whole state (normalizers, Lagrange multipliers,
optimizer) survives checkpoints exactly."""

from __future__ import annotations

import io

import pytest
import torch
from torch.nn import functional as F

from rl_core.agents import ON_POLICY, make_agent
from rl_core.data.env_spec import BoxActions, DiscreteActions, EnvSpec, Observation
from rl_core.config.flags import make_parser

T, B = 6, 5
DISCRETE = EnvSpec(Observation((4,), "<f4"), DiscreteActions(3))
BOX = EnvSpec(Observation((3,), "<f4"), BoxActions((2,), (-1.0, -2.0), (1.0, 2.0)))


def flags(*args):
    return make_parser().parse_args(["--mlp_sizes=16", f"--unroll_length={T}", f"--batch_size={B}", *args])


def random_batch(spec, agent, model, seed=0, truncate=True):
    """A [T+1, B] batch as the actor pool stores it: behaviour fields from a perturbed policy."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T + 1, B, *spec.obs.shape, generator=g)
    done = torch.rand(T + 1, B, generator=g) < 0.2
    truncated = done & (torch.rand(T + 1, B, generator=g) < 0.5) if truncate else torch.zeros_like(done)
    batch = {"obs": obs, "reward": 3 * torch.randn(T + 1, B, generator=g), "done": done, "truncated": truncated}
    if spec.discrete:
        batch["action"] = torch.randint(0, 3, (T + 1, B), generator=g)
        logits = torch.randn(T + 1, B, 3, generator=g)
        batch["policy_logits"] = logits
        batch["log_prob"] = F.log_softmax(logits, -1).gather(-1, batch["action"].unsqueeze(-1)).squeeze(-1)
    else:
        batch["action"] = torch.rand(T + 1, B, 2, generator=g) * 1.8 - 0.9
        batch["policy_mean"] = torch.randn(T + 1, B, 2, generator=g) * 0.3
        batch["policy_std"] = torch.rand(T + 1, B, 2, generator=g) + 0.5
        dist = agent.distribution({"policy_mean": batch["policy_mean"], "policy_std": batch["policy_std"]})
        batch["log_prob"] = dist.log_prob(batch["action"])
    batch["baseline"] = torch.randn(T + 1, B, generator=g)
    return batch


def test_vtrace_agent_with_impala_settings_gives_impala_loss():
    """One epoch, one minibatch, summed terms, V-trace advantages, RMSprop: the same loss and
    gradients as --agent impala, with rewards outside [-1, 1], truncations and three thresholds."""
    common = [
        "--entropy_cost=0.013",
        "--baseline_cost=0.7",
        "--discounting=0.95",
        "--reward_clipping=abs_one",
        "--clip_rho_threshold=1.3",
        "--clip_pg_rho_threshold=0.8",
        "--clip_c_threshold=0.9",
        "--vtrace_lambda=0.9",
    ]
    impala = make_agent(flags("--agent=impala", *common), DISCRETE)
    vtrace = make_agent(
        flags(
            "--agent=vtrace",
            "--advantage=vtrace",
            "--loss_reduction=sum",
            "--num_epochs=1",
            "--num_minibatches=1",
            "--batch_mode=repeat",
            "--no-advantage_normalization",
            *common,
        ),
        DISCRETE,
    )
    torch.manual_seed(0)
    model = impala.build_model()
    batch = random_batch(DISCRETE, vtrace, model)
    assert batch["truncated"][1:].any() and (batch["reward"].abs() > 1).any()

    ((impala_loss, _),) = list(impala.updates(model, batch, ()))
    impala_grads = torch.autograd.grad(impala_loss, list(model.parameters()))
    ((vtrace_loss, stats),) = list(vtrace.updates(model, batch, ()))
    vtrace_grads = torch.autograd.grad(vtrace_loss, list(model.parameters()))
    torch.testing.assert_close(vtrace_loss, impala_loss, rtol=1e-5, atol=1e-5)
    for a, b in zip(vtrace_grads, impala_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    # ... and a different threshold changes both the same way (the flags reach the same places).
    other = make_agent(
        flags(
            "--agent=vtrace",
            "--advantage=vtrace",
            "--loss_reduction=sum",
            "--batch_mode=repeat",
            *common,
            "--clip_pg_rho_threshold=0.3",
        ),
        DISCRETE,
    )
    ((other_loss, _),) = list(other.updates(model, batch, ()))
    assert not torch.allclose(other_loss, vtrace_loss)


def test_impala_epochs_are_vtrace_agent_epochs():
    """--agent impala --num_epochs 3: three optimizer steps on the batch, each loss recomputed by the weights
    the step before left (V-trace reweighting the now older behaviour), as --agent vtrace's three passes of
    one minibatch with IMPALA's settings; one epoch, the default, yields one loss."""
    common = ["--entropy_cost=0.013", "--baseline_cost=0.7", "--discounting=0.95", "--num_epochs=3"]
    impala = make_agent(flags("--agent=impala", *common), DISCRETE)
    vtrace = make_agent(
        flags(
            "--agent=vtrace",
            "--advantage=vtrace",
            "--loss_reduction=sum",
            "--num_minibatches=1",
            "--batch_mode=repeat",
            "--no-advantage_normalization",
            *common,
        ),
        DISCRETE,
    )
    batch = random_batch(DISCRETE, vtrace, None)
    losses = {}
    for name, agent in (("impala", impala), ("vtrace", vtrace)):
        torch.manual_seed(0)
        model = agent.build_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        losses[name] = []
        for loss, _ in agent.updates(model, batch, ()):
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses[name].append(loss.item())
    assert len(losses["impala"]) == 3 and len(set(losses["impala"])) == 3  # each pass sees the moved weights
    assert losses["impala"] == pytest.approx(losses["vtrace"], rel=1e-4, abs=1e-5)
    one = make_agent(flags("--agent=impala"), DISCRETE)
    assert len(list(one.updates(one.build_model(), batch, ()))) == 1


@pytest.mark.parametrize("mode", ["repeat", "shuffle", "split", "split_with_advantage_recomputation"])
def test_epochs_and_minibatches_per_batch_mode(mode, monkeypatch):
    agent = make_agent(flags("--agent=ppo", f"--batch_mode={mode}", "--num_epochs=3", "--num_minibatches=2"), DISCRETE)
    torch.manual_seed(0)
    model = agent.build_model()
    batch = random_batch(DISCRETE, agent, model)
    seen = []
    recomputed = []
    original_unroll, original_transitions = agent.unroll_loss, agent.transitions
    monkeypatch.setattr(
        agent, "unroll_loss", lambda m, mb, st: seen.append(mb["obs"].shape[1]) or original_unroll(m, mb, st)
    )
    monkeypatch.setattr(agent, "transitions", lambda *a: recomputed.append(1) or original_transitions(*a))
    original_transition_loss = agent.transition_loss
    monkeypatch.setattr(
        agent,
        "transition_loss",
        lambda m, tr, *moments: seen.append(tr["advantages"].shape[0]) or original_transition_loss(m, tr, *moments),
    )
    losses = [loss for loss, _ in agent.updates(model, batch, ())]
    assert len(losses) == 3 * 2 and all(torch.isfinite(x) for x in losses)
    if mode in ("repeat", "shuffle"):
        assert seen == [3, 2] * 3  # whole unrolls, every unroll once per epoch
    else:
        assert seen == [15, 15] * 3  # T*B transitions split in two
        assert len(recomputed) == (3 if mode == "split_with_advantage_recomputation" else 1)


@pytest.mark.parametrize(
    "mode, minibatches, reductions",
    [("split", 1, 1), ("split", 2, 3), ("split_with_advantage_recomputation", 1, 3), ("shuffle", 2, 6)],
)
def test_under_torchrun_the_advantage_statistics_cost_one_all_reduce_per_epoch_at_most(mode, minibatches, reductions):
    """Under torchrun a minibatch's advantages are normalized by their statistics over every rank.  The split
    modes' advantages stay fixed between recomputations, so one all-reduce carries every minibatch's moments of
    an epoch (of the whole batch with one minibatch); the unroll modes' come from each step's own pass, one
    all-reduce a step.  Here the other rank holds the same data (the sums doubled): the statistics, so the
    losses, are one process's, which they are not if a minibatch gets another's moments."""
    from rl_core.numerics import collectives

    calls = []

    class TwinRank:
        def all_reduce_sum(self, tensor):
            calls.append(tuple(tensor.shape))
            return tensor * 2

        def any_rank(self, flag):
            return flag

    args = ("--agent=ppo", "--advantage_normalization", f"--batch_mode={mode}", "--num_epochs=3")
    args += (f"--num_minibatches={minibatches}",)
    agent = make_agent(flags(*args), DISCRETE)
    losses = {}
    for world in ("one process", "two ranks"):
        torch.manual_seed(0)
        model = agent.build_model()
        batch = random_batch(DISCRETE, agent, model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        collectives.set_active(TwinRank() if world == "two ranks" else None)
        try:
            losses[world] = []
            for loss, _ in agent.updates(model, batch, ()):
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses[world].append(loss.item())
        finally:
            collectives.set_active(None)
    assert len(calls) == reductions, calls
    assert len(set(losses["one process"])) == 3 * minibatches  # the steps moved the weights
    assert losses["two ranks"] == pytest.approx(losses["one process"], rel=1e-5, abs=1e-6)


def test_shuffle_visits_every_unroll_once_per_epoch(monkeypatch):
    agent = make_agent(flags("--agent=ppo", "--batch_mode=shuffle", "--num_epochs=2", "--num_minibatches=5"), DISCRETE)
    model = agent.build_model()
    batch = random_batch(DISCRETE, agent, model)
    batch["obs"][:, :, 0] = torch.arange(B, dtype=torch.float32)  # tag each unroll
    seen = []
    monkeypatch.setattr(
        agent, "unroll_loss", lambda m, mb, st: (seen.append(int(mb["obs"][0, 0, 0])), (torch.zeros(()), {}))[1]
    )
    list(agent.updates(model, batch, ()))
    assert sorted(seen[:5]) == sorted(seen[5:]) == list(range(B))


def test_split_modes_refuse_recurrent_cores():
    with pytest.raises(SystemExit):
        from rl_core.config import flags as flags_lib

        parser = make_parser()
        flags_lib.check(parser, parser.parse_args(["--agent=ppo", "--batch_mode=split", "--use_lstm"]))


AGENT_STATE_FLAGS = {
    "vmpo": ["--agent=vmpo", "--obs_normalization", "--value_normalization=popart", "--popart_beta=0.1"],
    "ppo_box": [
        "--agent=ppo",
        "--obs_normalization",
        "--value_normalization=return_std",
        "--popart_beta=0.1",
        "--target_entropy=0.5",
        "--target_kl=0.01",
        "--squash",
        "--optimizer=adam",
    ],
}


def _save_load(obj):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("case", sorted(AGENT_STATE_FLAGS))
def test_resume_twice_equals_an_uninterrupted_run(case):
    """Normalizer statistics, PopArt / return-std scales, Lagrange multipliers and the optimizer
    state all live in what a checkpoint saves: stopping and resuming twice changes nothing."""
    from rl_core.runtime.learner import Learner, Weights

    spec = BOX if case.endswith("box") else DISCRETE
    f = flags(*AGENT_STATE_FLAGS[case], "--num_epochs=2", "--num_minibatches=2", "--total_steps=100000")
    batches = [random_batch(spec, make_agent(f, spec), None, seed=s) for s in range(6)]

    def fresh():
        agent = make_agent(f, spec)
        torch.manual_seed(123)
        model = agent.build_model()
        inference = agent.build_model()
        optimizer, scheduler = agent.make_optimizer(model)
        weights = Weights(model, optimizer, scheduler, inference, __import__("threading").Lock())
        return Learner(f, agent, weights, None, "cpu", None)

    def train(learner, indices):
        for i in indices:
            torch.manual_seed(1000 + i)  # minibatch shuffles
            learner.learn(batches[i], ())

    def checkpoint(learner):
        return _save_load(
            {
                "model": learner.model.state_dict(),
                "optimizer": learner.optimizer.state_dict(),
                "scheduler": learner.scheduler.state_dict(),
            }
        )

    def restore(state):
        learner = fresh()
        learner.model.load_state_dict(state["model"])
        learner.optimizer.load_state_dict(state["optimizer"])
        learner.scheduler.load_state_dict(state["scheduler"])
        return learner

    straight = fresh()
    train(straight, range(6))
    resumed = fresh()
    train(resumed, range(2))
    resumed = restore(checkpoint(resumed))
    train(resumed, range(2, 4))
    resumed = restore(checkpoint(resumed))
    train(resumed, range(4, 6))

    a, b = straight.model.state_dict(), resumed.model.state_dict()
    agent_state = [k for k in a if k.startswith(("obs_normalizer.", "value_normalizer.", "lagrange."))]
    assert any(k.startswith("obs_normalizer.") for k in agent_state)
    assert any(k.startswith("value_normalizer.") for k in agent_state)
    assert any(k.startswith("lagrange.") for k in agent_state)
    initial = fresh().model.state_dict()
    for k in agent_state:  # they did move during training (return_std keeps its mean at 0) ...
        if k != "value_normalizer.mu" or "--value_normalization=popart" in AGENT_STATE_FLAGS[case]:
            assert not torch.equal(a[k], initial[k]), k
    for k in a:  # ... and the resumed run holds exactly the same values
        assert torch.equal(a[k], b[k]), k
    sa, sb = straight.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    for i in sa:
        for name, value in sa[i].items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(sb[i][name])), (i, name)
    assert straight.scheduler.state_dict()["last_epoch"] == resumed.scheduler.state_dict()["last_epoch"] == 6


@pytest.mark.parametrize("agent_name", ON_POLICY)
@pytest.mark.parametrize("spec", [DISCRETE, BOX], ids=["discrete", "box"])
def test_every_on_policy_agent_takes_steps_on_both_action_kinds(agent_name, spec):
    f = flags(
        f"--agent={agent_name}", "--num_epochs=2", "--num_minibatches=2", "--optimizer=adam", "--learning_rate=0.01"
    )
    agent = make_agent(f, spec)
    torch.manual_seed(0)
    model = agent.build_model()
    optimizer, _ = agent.make_optimizer(model)
    batch = random_batch(spec, agent, model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    for loss, stats in agent.updates(model, batch, ()):
        assert torch.isfinite(loss) and "pg_loss" in stats
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert not torch.equal(before["baseline.weight"], model.baseline.weight)
    with torch.no_grad():
        inputs = {
            "obs": batch["obs"][:1],
            "reward": batch["reward"][:1],
            "done": batch["done"][:1],
            "last_action": batch["action"][:1],
        }
        greedy, extras, _ = agent.act(model, inputs, (), greedy=True)
        again, _, _ = agent.act(model, inputs, (), greedy=True)
    assert torch.equal(greedy, again)  # greedy is deterministic: argmax, or the Gaussian's mean
    assert set(extras) == set(agent.unroll_fields())


@pytest.mark.parametrize(
    "package", ["torchbeast_atari", "torchbeast_procgen", "torchbeast_gym", "torchbeast_mujoco", "torchbeast_football"]
)
@pytest.mark.parametrize("agent_name", ["impala", "ppo", "vmpo"])
def test_each_package_builds_and_updates_its_default_model_for_each_agent(package, agent_name):
    """A package's defaults for --agent build a model that acts and takes a step (image stems are
    channels-last, which orthogonal init must handle)."""
    import importlib

    from rl_core.runtime.entry import parse_flags

    pkg = importlib.import_module(f"{package}.env")
    if package == "torchbeast_mujoco" and agent_name == "impala":
        pytest.skip("IMPALA takes discrete actions")
    f = parse_flags(pkg, [f"--agent={agent_name}", "--unroll_length=3", "--batch_size=2", "--num_minibatches=2"])
    spec = {
        "torchbeast_atari": EnvSpec(Observation((4, 84, 84), "|u1"), DiscreteActions(6)),
        "torchbeast_procgen": EnvSpec(Observation((3, 64, 64), "|u1"), DiscreteActions(15)),
        "torchbeast_football": EnvSpec(Observation((16, 72, 96), "|u1"), DiscreteActions(19)),
        "torchbeast_gym": DISCRETE,
        "torchbeast_mujoco": BOX,
    }[package]
    agent = make_agent(f, spec)
    model = agent.build_model()
    optimizer, _ = agent.make_optimizer(model)
    T1, B2 = 4, 2
    obs = (
        torch.randint(0, 255, (T1, B2, *spec.obs.shape), dtype=torch.uint8)
        if spec.obs.dtype == "|u1"
        else torch.randn(T1, B2, *spec.obs.shape)
    )
    inputs = {
        "obs": obs,
        "reward": torch.zeros(T1, B2),
        "done": torch.zeros(T1, B2, dtype=torch.bool),
        "last_action": torch.zeros(
            (T1, B2, 2) if spec is BOX else (T1, B2), dtype=torch.float32 if spec is BOX else torch.int64
        ),
    }
    with torch.no_grad():
        action, extras, _ = agent.act(model, {k: v[:1] for k, v in inputs.items()}, model.initial_state(B2))
    batch = {
        "obs": obs,
        "reward": torch.randn(T1, B2),
        "done": inputs["done"],
        "truncated": inputs["done"],
        "action": action.expand(T1, *action.shape[1:]).clone(),
    }
    batch.update({k: v.expand(T1, *v.shape[1:]).clone() for k, v in extras.items()})
    for loss, _ in agent.updates(model, batch, model.initial_state(B2)):
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        assert torch.isfinite(loss)


@pytest.mark.parametrize("clipping", ["abs_one", "none"])
def test_impala_agent_loss_feeds_the_loss_function_the_right_slices_and_flags(clipping):
    """ImpalaAgent.loss on a hand-made [T+1, B] batch equals impala_loss called with learner outputs [:-1]
    against batch [1:], bootstrapping from the last baseline, the rewards clipped per --reward_clipping,
    a truncation's reward replaced by V(x_t), and each of rho-bar, pg-rho-bar, c-bar, lambda from its own flag."""
    from rl_core.losses.impala import impala_loss

    thresholds = dict(clip_rho_threshold=1.7, clip_pg_rho_threshold=0.6, clip_c_threshold=0.35, lambda_=0.8)
    f = flags(
        "--agent=impala",
        "--entropy_cost=0.013",
        "--baseline_cost=0.7",
        "--discounting=0.93",
        f"--reward_clipping={clipping}",
        "--clip_rho_threshold=1.7",
        "--clip_pg_rho_threshold=0.6",
        "--clip_c_threshold=0.35",
        "--vtrace_lambda=0.8",
    )
    agent = make_agent(f, DISCRETE)
    torch.manual_seed(1)
    model = agent.build_model()
    batch = random_batch(DISCRETE, agent, model, seed=3)
    batch["policy_logits"] = 2.5 * batch["policy_logits"]  # rhos far from 1: every threshold clips somewhere
    assert (batch["reward"][1:].abs() > 1).any() and batch["truncated"][1:].any() and batch["done"][1:].any()

    loss, stats = agent.loss(model, batch, ())
    inputs = {"obs": batch["obs"], "reward": batch["reward"], "done": batch["done"], "last_action": batch["action"]}
    out, _ = model(inputs, ())
    values = out["baseline"][:-1]

    def reference(clip=clipping == "abs_one", **changes):
        rewards = batch["reward"][1:]
        if clip:
            rewards = rewards.clamp(-1, 1)
        rewards = torch.where(batch["truncated"][1:], values.detach(), rewards)
        kwargs = dict(thresholds, **changes)
        return impala_loss(
            behavior_policy_logits=batch["policy_logits"][1:],
            target_policy_logits=out["policy_logits"][:-1],
            actions=batch["action"][1:],
            rewards=rewards,
            dones=batch["done"][1:],
            values=values,
            bootstrap_value=out["baseline"][-1],
            discounting=0.93,
            baseline_cost=0.7,
            entropy_cost=0.013,
            **kwargs,
        )[0]

    torch.testing.assert_close(loss, reference(), rtol=1e-6, atol=1e-6)
    assert stats["total_loss"] == pytest.approx(loss.item(), rel=1e-6)
    # The check can tell each wiring mistake apart: a swapped or ignored threshold, the other clipping.
    for wrong in (
        dict(clip_rho_threshold=0.6, clip_pg_rho_threshold=1.7),
        dict(clip_c_threshold=1.7),
        dict(clip_rho_threshold=0.35, clip_c_threshold=1.7),
        dict(lambda_=1.0),
        dict(clip_pg_rho_threshold=1.0),
        dict(clip_rho_threshold=1.0),
    ):
        assert abs(reference(**wrong).item() - loss.item()) > 1e-3, wrong
    assert abs(reference(clip=clipping != "abs_one").item() - loss.item()) > 1e-3


@pytest.mark.parametrize("package", ["torchbeast_atari", "torchbeast_procgen", "torchbeast_gym", "torchbeast_mujoco"])
@pytest.mark.parametrize("core", [None, "--use_lstm", "--use_elstm", "--use_rtrl"])
def test_each_package_builds_and_updates_r2d2_with_its_defaults(package, core, capsys):
    """--agent r2d2 in every package with discrete actions: its defaults (R2D2's published ones under
    the package's) build a Q-network that acts and learns from a replay batch; Box actions are refused
    in one line: at parse time where the package says its action kind (MuJoCo), else when the agent is made."""
    import importlib

    from rl_core.errors import UserError
    from rl_core.runtime.entry import parse_flags

    pkg = importlib.import_module(f"{package}.env")
    args = [
        "--agent=r2d2",
        "--unroll_length=3",
        "--burn_in=2",
        "--batch_size=2",
        "--replay_buffer_min_size=2",
        "--hidden_size=16",
        "--dueling_hidden_size=16",
        *([core] if core else []),
    ]
    if package == "torchbeast_mujoco":
        with pytest.raises(SystemExit):
            parse_flags(pkg, args)
        assert "error: --agent r2d2 takes discrete actions; this env has box" in capsys.readouterr().err
        gym_flags = parse_flags(importlib.import_module("torchbeast_gym.env"), args)  # a package that cannot say
        with pytest.raises(UserError, match="discrete actions"):
            make_agent(gym_flags, BOX).build_model()
        return
    f = parse_flags(pkg, args)
    spec = {
        "torchbeast_atari": EnvSpec(Observation((4, 84, 84), "|u1"), DiscreteActions(6)),
        "torchbeast_procgen": EnvSpec(Observation((3, 64, 64), "|u1"), DiscreteActions(15)),
        "torchbeast_gym": DISCRETE,
    }[package]
    agent = make_agent(f, spec)
    assert (f.optimizer, f.n_steps, f.grad_norm_clipping, f.reward_clipping) == ("adam", 5, 40.0, "none")
    model = agent.build_model()
    optimizer, _ = agent.make_optimizer(model)
    T1, B2 = 6, 2
    obs = (
        torch.randint(0, 255, (T1, B2, *spec.obs.shape), dtype=torch.uint8)
        if spec.obs.dtype == "|u1"
        else torch.randn(T1, B2, *spec.obs.shape)
    )
    done = torch.zeros(T1, B2, dtype=torch.bool)
    inputs = {
        "obs": obs[:1],
        "reward": torch.zeros(1, B2),
        "done": done[:1],
        "last_action": torch.zeros(1, B2, dtype=torch.int64),
        "epsilon": torch.full((1, B2), 0.5),
    }
    with torch.no_grad():
        action, extras, _ = agent.act(model, inputs, model.initial_state(B2))
    assert extras == {} and action.shape == (1, B2)
    batch = {
        "obs": obs,
        "reward": torch.randn(T1, B2),
        "done": done,
        "truncated": done,
        "action": action.expand(T1, B2).clone(),
        "replay/index": torch.arange(B2),
        "replay/weight": torch.ones(B2),
    }
    before = [p.clone() for p in model.q_head.parameters()]
    for loss, _ in agent.updates(model, batch, model.initial_state(B2)):
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        assert torch.isfinite(loss)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.q_head.parameters()))


def model_after_batches(agent, batches: int):
    """The agent's model (seed 0), its optimizer made, the schedule's batch count at ``batches``, as a
    resumed checkpoint's."""
    torch.manual_seed(0)
    model = agent.build_model()
    _, scheduler = agent.make_optimizer(model)
    state = scheduler.state_dict()
    state["last_epoch"] = batches
    scheduler.load_state_dict(state)
    return model


@pytest.mark.parametrize("batches", [0, 1, 3, 4, 6])
def test_ppo_clip_decays_linearly_with_the_schedule(batches):
    """--ppo_clip_decay linear (rl-baselines3-zoo's clip_range lin_0.2): after k learner batches of T x B steps
    the clip is --ppo_clip x (1 - min(k T B, total) / total), the loss that of a constant clip of that size;
    the schedule's batch count is what a checkpoint keeps, so a resumed run goes on from where it was."""
    total = 4 * T * B
    common = ("--agent=ppo", "--num_epochs=1", "--num_minibatches=1", "--optimizer=adam", f"--total_steps={total}")
    decaying = make_agent(flags(*common, "--ppo_clip_decay=linear"), DISCRETE)
    model = model_after_batches(decaying, batches)
    expected = 0.2 * (1 - min(batches * T * B, total) / total)
    batch = random_batch(DISCRETE, decaying, model)
    loss, stats = next(decaying.updates(model, batch, ()))
    assert stats["ppo_clip"] == pytest.approx(expected)
    constant = make_agent(flags(*common, f"--ppo_clip={max(expected, 1e-12)}"), DISCRETE)
    constant.make_optimizer(model)
    reference_loss, reference_stats = next(constant.updates(model, batch, ()))
    assert torch.allclose(loss, reference_loss) and torch.allclose(stats["pg_loss"], reference_stats["pg_loss"])
    assert torch.equal(stats["clip_fraction"], reference_stats["clip_fraction"])
    undecayed = make_agent(flags(*common), DISCRETE)
    undecayed.make_optimizer(model)
    undecayed_loss, undecayed_stats = next(undecayed.updates(model, batch, ()))
    assert undecayed_stats["ppo_clip"] == 0.2
    assert (batches == 0) == torch.allclose(loss, undecayed_loss)  # the clip binds on this batch


@pytest.mark.parametrize("agent", ["impala", "vtrace"])
@pytest.mark.parametrize("batches", [0, 1, 3, 4, 6])
def test_entropy_cost_decays_linearly_with_the_schedule(agent, batches):
    """--entropy_decay linear: after k learner batches of T x B steps the entropy cost is --entropy_cost x
    (1 - min(k T B, total) / total), the loss and gradients those of a constant cost of that size; the
    schedule's batch count is what a checkpoint keeps, so a resumed run goes on from where it was."""
    total = 4 * T * B
    common = (
        f"--agent={agent}",
        "--entropy_cost=0.5",
        f"--total_steps={total}",
        "--num_epochs=1",
        "--num_minibatches=1",
    )
    decaying = make_agent(flags(*common, "--entropy_decay=linear"), DISCRETE)
    model = model_after_batches(decaying, batches)
    expected = 0.5 * (1 - min(batches * T * B, total) / total)
    assert decaying.entropy_cost() == pytest.approx(expected)
    batch = random_batch(DISCRETE, decaying, model)

    def loss_and_grads(agent_):
        model.zero_grad()
        loss, stats = next(agent_.updates(model, batch, model.initial_state(B)))
        loss.backward()
        return loss.detach(), stats, [p.grad.clone() for p in model.parameters() if p.grad is not None]

    loss, stats, grads = loss_and_grads(decaying)
    constant = make_agent(flags(*common, f"--entropy_cost={expected}"), DISCRETE)
    reference_loss, _, reference_grads = loss_and_grads(constant)
    assert torch.allclose(loss, reference_loss, atol=1e-6)
    assert all(torch.allclose(g, r, atol=1e-6) for g, r in zip(grads, reference_grads))
    undecayed_loss, undecayed_stats, _ = loss_and_grads(make_agent(flags(*common), DISCRETE))
    assert (batches == 0) == torch.allclose(loss, undecayed_loss)  # the entropy term counts on this batch
    if agent == "impala":
        assert stats["entropy_cost"] == pytest.approx(expected) and "entropy_cost" not in undecayed_stats
        with torch.no_grad():
            log_policy = F.log_softmax(
                model(
                    {
                        "obs": batch["obs"],
                        "reward": batch["reward"],
                        "done": batch["done"],
                        "last_action": batch["action"],
                    },
                    model.initial_state(B),
                )[0]["policy_logits"][:-1],
                -1,
            )
        assert stats["entropy"] == pytest.approx(float(-(log_policy.exp() * log_policy).sum(-1).mean()), rel=1e-5)


def test_entropy_decay_is_refused_by_the_agents_without_an_entropy_cost(capsys):
    import torchbeast_gym.env as gym_pkg
    from tests.proc_utils import flag_error_line

    for agent in ("r2d2", "sac"):
        line = flag_error_line(capsys, gym_pkg, f"--agent={agent}", "--entropy_decay=linear")
        assert f"--agent {agent}" in line and "drop --entropy_decay" in line
    line = flag_error_line(capsys, gym_pkg, "--agent=ppo", "--target_entropy=0.5", "--entropy_decay=linear")
    assert "--target_entropy" in line and "drop one of them" in line


def test_every_agent_declares_its_traits():
    """What the core asks of an agent before it is built (rl_core/agents/traits.py), for every --agent."""
    from rl_core import agents

    assert set(agents.TRAITS) == set(agents.AGENTS)
    assert agents.agent_traits(make_parser().parse_args(["--agent=sac"])) is agents.TRAITS["sac"]
    assert [name for name in agents.AGENTS if agents.agent_traits(name).replays] == list(agents.REPLAY)
    assert set(agents.rank_shares()) == {name for t in agents.TRAITS.values() for name in t.rank_shares} | {
        "rnd_init_steps"
    }


@pytest.mark.parametrize("agent_name", ["impala", "ppo"])
def test_the_stem_value_head_learns_its_own_values_and_leaves_the_policy_gradient_alone(agent_name):
    """--stem_value: a value stream of coefficient 0 on ``stem_baseline``.  On one model and batch the agent with it
    gives the policy the same gradient as the agent without, and adds the head's own value loss: for IMPALA,
    baseline_cost * 0.5 * sum (v_s - V_stem)^2 with v_s V-trace's targets (IMPALA eq. 1) from the head's values."""
    from rl_core.losses import vtrace

    common = (f"--agent={agent_name}", "--use_lstm", "--baseline_cost=0.7", "--discounting=0.9")
    plain, with_head = make_agent(flags(*common), DISCRETE), make_agent(flags(*common, "--stem_value"), DISCRETE)
    assert [s.name for s in with_head.streams] == ["ext", "stem"] and with_head.streams[1].coef == 0
    torch.manual_seed(2)
    model = with_head.build_model()
    batch = random_batch(DISCRETE, with_head, model, seed=4, truncate=False)
    batch["stem_baseline"] = torch.randn(T + 1, B)
    assert set(with_head.unroll_fields()) - set(plain.unroll_fields()) == {"stem_baseline"}

    def grads(agent):
        model.zero_grad()
        loss, stats = next(iter(agent.updates(model, batch, model.initial_state(B))))
        loss.backward()
        return loss, stats, {n: p.grad.clone() if p.grad is not None else None for n, p in model.named_parameters()}

    loss0, stats0, g0 = grads(plain)
    loss1, stats1, g1 = grads(with_head)
    assert stats1["pg_loss"] == pytest.approx(stats0["pg_loss"], rel=1e-6)
    heads_and_core = [n for n in g0 if n.startswith(("core.", "policy.", "baseline."))]
    assert any(n.startswith("core.") for n in heads_and_core)
    for name in heads_and_core:  # the head reads the core's input: the core and the other heads learn as before
        torch.testing.assert_close(g1[name], g0[name])
    assert g0["stem_baseline.weight"] is None or not g0["stem_baseline.weight"].any()
    assert g1["stem_baseline.weight"].abs().sum() > 0
    stem_weight = next(n for n in g1 if n.startswith("stem.") and n.endswith("weight"))
    assert not torch.allclose(g1[stem_weight], g0[stem_weight])  # the head's gradient reaches the stem
    if agent_name == "impala":
        inputs = {"obs": batch["obs"], "reward": batch["reward"], "done": batch["done"], "last_action": batch["action"]}
        with torch.no_grad():
            out, _ = model(inputs, model.initial_state(B))
        v = out["stem_baseline"]
        targets = vtrace.from_logits(
            batch["policy_logits"][1:],
            out["policy_logits"][:-1],
            batch["action"][1:],
            (~batch["done"][1:]).float() * 0.9,
            batch["reward"][1:].clamp(-1, 1),
            v[:-1],
            v[-1],
        ).vs
        expected = 0.7 * 0.5 * ((targets - v[:-1]) ** 2).sum()
        assert (loss1 - loss0).item() == pytest.approx(expected.item(), rel=1e-5)
        assert "stem_explained_variance" in stats1


def test_stem_value_without_a_core_or_on_a_q_learner_is_refused_in_one_line(capsys):
    import torchbeast_gym.env as gym_pkg
    from tests.proc_utils import flag_error_line

    line = flag_error_line(capsys, gym_pkg, "--stem_value")
    assert "--stem_value" in line and "--use_lstm" in line
    for agent in ("r2d2", "sac"):
        line = flag_error_line(capsys, gym_pkg, f"--agent={agent}", "--stem_value")
        assert f"--agent {agent}" in line and "drop --stem_value" in line
