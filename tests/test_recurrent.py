"""Tests for models.recurrent: LSTM, eLSTM (TBPTT) and eLSTM (RTRL) cores.

The reference below is the paper's eLSTM written out one env and one step at a time
(Irie et al., ICLR 2024); gradients of full BPTT come from autograd through it.
"""

from __future__ import annotations

import copy

import pytest
import torch

from models.recurrent import make_core

DT = torch.float64
CORES = [("lstm", {}), ("elstm", {}), ("rtrl_elstm", {}), ("rtrl_elstm", {"impl": "stepwise"})]
CORE_IDS = ["lstm", "elstm", "rtrl_elstm", "rtrl_elstm-stepwise"]


def reference_elstm(core, x, done, c0):
    """Paper notation, plain loops over envs and steps:
        z_t = tanh(W_z x_t + w_z * c_{t-1} + b_z)
        f_t = sigmoid(W_f x_t + w_f * c_{t-1} + b_f)
        c_t = f_t * c_{t-1} + (1 - f_t) * z_t
        h_t = c_t * sigmoid(W_o [x_t; c_t] + b_o)
    with c_{t-1} := 0 where done[t]. Returns (h [T, B, H], c_T [B, H])."""
    W_z, W_f, w_z, w_f, b_z, b_f = core.W_z, core.W_f, core.w_z, core.w_f, core.b_z, core.b_f
    W_o, b_o = core.out_gate.weight, core.out_gate.bias
    T, B, _ = x.shape
    hs = [[None] * B for _ in range(T)]
    c_last = []
    for b in range(B):
        c = c0[b]
        for t in range(T):
            if bool(done[t, b]):
                c = torch.zeros_like(c)
            z = torch.tanh(W_z @ x[t, b] + w_z * c + b_z)
            f = torch.sigmoid(W_f @ x[t, b] + w_f * c + b_f)
            c = f * c + (1 - f) * z
            hs[t][b] = c * torch.sigmoid(W_o @ torch.cat([x[t, b], c]) + b_o)
        c_last.append(c)
    return torch.stack([torch.stack(row) for row in hs]), torch.stack(c_last)


def rel_err(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def random_state(core, batch_size, gen):
    """A non-trivial state (RTRL traces included) of the core's shapes."""
    return tuple(0.5 * torch.randn(s.shape, generator=gen, dtype=DT) for s in core.initial_state(batch_size, dtype=DT))


def build(kind, kw, input_size=5, hidden_size=4, seed=0):
    torch.manual_seed(seed)
    return make_core(kind, input_size=input_size, hidden_size=hidden_size, **kw).to(DT)


# --------------------------------------------------------------------------- API


def test_make_core_kinds_state_shapes_and_errors():
    I, H, B = 6, 3, 2
    expected = {
        "lstm": [(B, H), (B, H)],
        "elstm": [(B, H)],
        "rtrl_elstm": [(B, H), (B, H, I), (B, H, I), (B, H), (B, H), (B, H), (B, H)],
    }
    for kind, shapes in expected.items():
        core = make_core(kind, input_size=I, hidden_size=H)
        assert (core.input_size, core.hidden_size) == (I, H)
        state = core.initial_state(batch_size=B)
        assert isinstance(state, tuple) and [tuple(s.shape) for s in state] == shapes
        assert all(s.dtype == torch.float32 and not s.any() for s in state)
        assert all(s.dtype == DT for s in core.initial_state(B, device="cpu", dtype=DT))
        out, new_state = core(torch.randn(3, B, I), torch.zeros(3, B, dtype=torch.bool), state)
        assert out.shape == (3, B, H)
        assert [tuple(s.shape) for s in new_state] == shapes
        assert all(s.grad_fn is None and not s.requires_grad for s in new_state)
        with pytest.raises(ValueError, match="done must be"):
            core(torch.randn(3, B, I), torch.zeros(2, B, dtype=torch.bool), state)
    with pytest.raises(ValueError) as info:
        make_core("gru", input_size=I, hidden_size=H)
    msg = str(info.value)
    assert "\n" not in msg and "'gru'" in msg
    assert all(k in msg for k in ("lstm", "elstm", "rtrl_elstm"))


def forget_gate_bias(core):
    if hasattr(core, "b_f"):
        return core.b_f
    H = core.hidden_size  # nn.LSTM gate order: i, f, g, o
    return core.lstm.bias_ih_l0[H : 2 * H]


@pytest.mark.parametrize("kind", ["lstm", "elstm", "rtrl_elstm"])
def test_forget_bias_shifts_only_the_forget_gate_bias(kind):
    plain, shifted = build(kind, {}), build(kind, {"forget_bias": 1.5})
    delta = forget_gate_bias(shifted) - forget_gate_bias(plain)
    assert torch.allclose(delta, torch.full_like(delta, 1.5))
    changed = [name for (name, a), b in zip(plain.named_parameters(), shifted.parameters()) if not torch.equal(a, b)]
    assert changed == (["lstm.bias_ih_l0"] if kind == "lstm" else ["b_f"])


def test_build_model_passes_forget_bias_flag():
    from models import build_model
    from rl_core.data.env_spec import DiscreteActions, EnvSpec, Observation
    from rl_core.config.flags import make_parser

    spec = EnvSpec(Observation((3,), "<f4"), DiscreteActions(2))
    for core_flag in ("--use_lstm", "--use_elstm", "--use_rtrl"):
        torch.manual_seed(0)
        plain = build_model(make_parser().parse_args([core_flag]), spec)
        torch.manual_seed(0)
        shifted = build_model(make_parser().parse_args([core_flag, "--forget_bias=2"]), spec)
        delta = forget_gate_bias(shifted.core) - forget_gate_bias(plain.core)
        assert torch.allclose(delta, torch.full_like(delta, 2.0)), core_flag


# ------------------------------------------------- (a) RTRL == full BPTT gradients

# done[t, b]: reset before step t. Inside unrolls: (3, 0), (10, 0) for splits (4, 1, 7, 3);
# on unroll boundaries: (5, 1), (10, 0) for (5, 5, 5), (5, 1), (12, 2) for (4, 1, 7, 3).
DONES = [(3, 0), (5, 1), (10, 0), (12, 2)]  # env 3 never resets: a 15-step episode


@pytest.mark.parametrize("impl", ["fused", "stepwise"])
@pytest.mark.parametrize("splits", [(5, 5, 5), (4, 1, 7, 3)])
def test_rtrl_gradients_equal_full_bptt(impl, splits):
    I, H, B, T = 5, 4, 4, sum(splits)
    core = build("rtrl_elstm", {"impl": impl}, I, H)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(T, B, I, generator=gen, dtype=DT)
    weights = torch.randn(T, B, H, generator=gen, dtype=DT)
    done = torch.zeros(T, B, dtype=torch.bool)
    for t, b in DONES:
        done[t, b] = True

    ref = copy.deepcopy(core)
    out_ref, _ = reference_elstm(ref, x, done, torch.zeros(B, H, dtype=DT))
    (out_ref * weights).sum().backward()

    def run_unrolls(c):
        state, s = c.initial_state(B), 0
        for n in splits:
            out, state = c(x[s : s + n], done[s : s + n], state)
            assert all(t.grad_fn is None and not t.requires_grad for t in state)
            (out * weights[s : s + n]).sum().backward()  # .grad accumulates across unrolls
            s += n

    run_unrolls(core)
    ref_params = dict(ref.named_parameters())
    for name, p in core.named_parameters():
        assert rel_err(p.grad, ref_params[name].grad) < 1e-8, name

    # The same unrolls trained by TBPTT miss the cross-unroll part: the check above is not vacuous.
    tbptt = build("elstm", {}, I, H)
    tbptt.load_state_dict(core.state_dict())
    run_unrolls(tbptt)
    assert rel_err(tbptt.W_z.grad, ref.W_z.grad) > 1e-3
    assert rel_err(tbptt.w_f.grad, ref.w_f.grad) > 1e-3


def test_rtrl_input_gradient_is_exact_within_the_unroll():
    """Published-code semantics: x_s gets the gradient of its own unroll's loss through the
    recurrence inside the unroll (the same as the TBPTT eLSTM); nothing crosses unrolls."""
    I, H, B, T, n = 5, 4, 3, 10, 5
    rtrl = build("rtrl_elstm", {}, I, H)
    tbptt = build("elstm", {}, I, H)
    tbptt.load_state_dict(rtrl.state_dict())
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(T, B, I, generator=gen, dtype=DT)
    weights = torch.randn(T, B, H, generator=gen, dtype=DT)
    done = torch.zeros(T, B, dtype=torch.bool)
    done[2, 0] = done[5, 1] = True

    ref = copy.deepcopy(rtrl)
    x_ref = x.clone().requires_grad_()
    out_ref, _ = reference_elstm(ref, x_ref, done, torch.zeros(B, H, dtype=DT))
    (out_ref * weights).sum().backward()

    grads = {}
    for name, core in (("rtrl", rtrl), ("tbptt", tbptt)):
        state, parts = core.initial_state(B), []
        for s in range(0, T, n):
            xs = x[s : s + n].clone().requires_grad_()
            out, state = core(xs, done[s : s + n], state)
            (out * weights[s : s + n]).sum().backward()
            parts.append(xs.grad)
        grads[name] = torch.cat(parts)
    assert rel_err(grads["rtrl"], grads["tbptt"]) < 1e-12
    # Last unroll: no later loss, so this is the full-BPTT input gradient.
    assert rel_err(grads["rtrl"][n:], x_ref.grad[n:]) < 1e-10
    # First unroll: the later unroll's loss does not reach it (truncated at unroll boundaries).
    assert rel_err(grads["rtrl"][:n], x_ref.grad[:n]) > 1e-3


# ---------------------------------------- (b) one [T, B] unroll == T single steps


@pytest.mark.parametrize("kind,kw", CORES, ids=CORE_IDS)
def test_unroll_equals_single_steps(kind, kw):
    I, H, B, T = 5, 4, 3, 7
    core = build(kind, kw, I, H)
    gen = torch.Generator().manual_seed(3)
    state0 = random_state(core, B, gen)
    x = torch.randn(T, B, I, generator=gen, dtype=DT)
    done = torch.zeros(T, B, dtype=torch.bool)
    done[0, 0] = done[3, 1] = done[3, 2] = done[6, 0] = True

    out, state = core(x, done, state0)  # learner: grad mode, one call
    steps, s = [], state0
    with torch.no_grad():  # actors: one step at a time
        for t in range(T):
            o, s = core(x[t : t + 1], done[t : t + 1], s)
            steps.append(o)
    torch.testing.assert_close(out, torch.cat(steps), rtol=1e-10, atol=1e-12)
    assert len(state) == len(s)
    for a, b in zip(state, s):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    if kind == "rtrl_elstm":
        assert state[1].abs().max() > 1e-3 and state[3].abs().max() > 1e-3  # traces are live
    # the stored state was not modified in place (the learner reuses it)
    for a, b in zip(state0, random_state(core, B, torch.Generator().manual_seed(3))):
        assert torch.equal(a, b)


# ------------------------------------------------------- (c) reset where done


@pytest.mark.parametrize("kind,kw", CORES, ids=CORE_IDS)
def test_state_and_traces_reset_where_done(kind, kw):
    I, H, B, T, k = 5, 4, 3, 6, 3
    core = build(kind, kw, I, H)
    gen = torch.Generator().manual_seed(4)
    state0 = random_state(core, B, gen)
    x = torch.randn(T, B, I, generator=gen, dtype=DT)
    done = torch.zeros(T, B, dtype=torch.bool)
    done[k, 0] = True  # env 0 starts a new episode at step k
    done[0, 2] = True  # env 2 at the first step
    out, state = core(x, done, state0)

    def fresh(xs):
        return core(xs, torch.zeros(xs.shape[:2], dtype=torch.bool), core.initial_state(1, dtype=DT))

    for b, start in ((0, k), (2, 0)):
        f_out, f_state = fresh(x[start:, b : b + 1])
        torch.testing.assert_close(out[start:, b], f_out[:, 0], rtol=1e-10, atol=1e-12)
        for a, f in zip(state, f_state):  # c (and h) and every RTRL trace restarted from zero
            torch.testing.assert_close(a[b], f[0], rtol=1e-10, atol=1e-12)
    # env 1 never resets: it still carries its old state (so the checks above are not vacuous)
    f_out, f_state = fresh(x[:, 1:2])
    assert not torch.allclose(out[:, 1], f_out[:, 0])
    assert not torch.allclose(state[-1][1], f_state[-1][0])


# ------------------------------------------ (d) eLSTM <-> RTRL eLSTM state_dict


def test_state_dict_interchangeable_and_same_outputs():
    I, H, B, T = 5, 4, 3, 6
    elstm, rtrl = build("elstm", {}, I, H, seed=5), build("rtrl_elstm", {}, I, H, seed=6)
    assert list(elstm.state_dict()) == list(rtrl.state_dict())
    assert not torch.equal(elstm.W_z, rtrl.W_z)
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(T, B, I, generator=gen, dtype=DT)
    done = torch.zeros(T, B, dtype=torch.bool)
    done[2, 1] = True
    c0 = torch.randn(B, H, generator=gen, dtype=DT)

    for src, dst in ((elstm, rtrl), (rtrl, build("elstm", {}, I, H, seed=7))):
        dst.load_state_dict(src.state_dict())  # strict
        outs = []
        for core in (src, dst):
            state = (c0,) + core.initial_state(B, dtype=DT)[1:]
            out, new_state = core(x, done, state)
            outs.append((out, new_state[0]))
        assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


# --------------------------------- (e) TBPTT eLSTM gradient == paper reference


def test_elstm_gradient_matches_paper_reference():
    I, H, B, T = 4, 3, 3, 6
    core = build("elstm", {}, I, H, seed=8)
    ref = copy.deepcopy(core)
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(T, B, I, generator=gen, dtype=DT)
    c0 = torch.randn(B, H, generator=gen, dtype=DT)
    weights = torch.randn(T, B, H, generator=gen, dtype=DT)
    done = torch.zeros(T, B, dtype=torch.bool)
    done[2, 0] = done[4, 2] = True

    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    c1, c2 = c0.clone().requires_grad_(), c0.clone().requires_grad_()
    out, (c_T,) = core(x1, done, (c1,))
    out_ref, c_T_ref = reference_elstm(ref, x2, done, c2)
    torch.testing.assert_close(out, out_ref, rtol=1e-12, atol=1e-13)
    torch.testing.assert_close(c_T, c_T_ref.detach(), rtol=1e-12, atol=1e-13)
    (out * weights).sum().backward()
    (out_ref * weights).sum().backward()
    ref_params = dict(ref.named_parameters())
    for name, p in core.named_parameters():
        assert rel_err(p.grad, ref_params[name].grad) < 1e-10, name
    assert rel_err(x1.grad, x2.grad) < 1e-10
    assert rel_err(c1.grad, c2.grad) < 1e-10


@pytest.mark.parametrize("kind,kw", CORES, ids=CORE_IDS)
def test_state_from_inference_mode_actor_feeds_learner(kind, kw):
    """Actors may run under torch.inference_mode; the learner trains from their stored state."""
    I, H, B = 5, 4, 2
    core = build(kind, kw, I, H, seed=9)
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(4, B, I, generator=gen, dtype=DT)
    no_done = torch.zeros(4, B, dtype=torch.bool)
    with torch.inference_mode():
        _, actor_state = core(x, no_done, core.initial_state(B, dtype=DT))
    normal_state = tuple(s.clone() for s in actor_state)
    grads = []
    for state in (actor_state, normal_state):
        core.zero_grad(set_to_none=True)
        out, _ = core(x.flip(0), no_done, state)
        out.sum().backward()
        grads.append([p.grad.clone() for p in core.parameters()])
    for a, b in zip(*grads):
        assert torch.equal(a, b)
