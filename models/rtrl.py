"""eLSTM trained by exact real-time recurrent learning (RTRL), as in R2AC.

Traces. Per env b, RTRL keeps the sensitivities of the cell state to the six cell
parameters: Z = dc/dW_z and F = dc/dW_f ([B, H, I]; row h only, because c_h
depends on W row h only), and dc/dw_z, dc/dw_f, dc/db_z, dc/db_f ([B, H]). Since
dc_t/dc_{t-1} is diagonal,

    a_t  = f_t + dz_t w_z + df_t w_f                  (diagonal Jacobian)
    dz_t = (1 - f_t)(1 - z_t^2),   df_t = (c_{t-1} - z_t) f_t (1 - f_t)
    Z_t  = a_t Z_{t-1} + dz_t x_t^T        F_t   = a_t F_{t-1} + df_t x_t^T
    wz_t = a_t wz_{t-1} + dz_t c_{t-1}     wf_t  = a_t wf_{t-1} + df_t c_{t-1}
    bz_t = a_t bz_{t-1} + dz_t             bf_t  = a_t bf_{t-1} + df_t

and a reset before step t (done[t]) zeroes c_{t-1} and every trace, i.e. a_t -> 0.
The traces are part of the recurrent state: (c, Z, F, wz, wf, bz, bf), batch first.

Gradients. For a loss L of this unroll's outputs, the full-BPTT gradient of a cell
parameter theta is  sum_t (dL/dc_t)_direct . dc_t/dtheta  (the published RTRL
formula, "stepwise" below). It splits exactly into
    [BPTT inside the unroll, c_0 held constant] + (dL/dc_0) . dc_0/dtheta,
where dc_0/dtheta is the trace carried in the state. The default "fused" mode
computes it that way: autograd runs through the unroll, and a custom Function
(`_CarryIn`) on c_0 adds (dL/dc_0) . trace_0 to the parameters' gradients. The
traces at the unroll end are the composition of the T per-step updates above,
evaluated in closed form: Z_T = P_0 Z_0 + sum_t P_t dz_t x_t^T with
P_t = prod_{r>t} a_r, one batched matmul (for T = 1, the actors' step, it is the
per-step update itself). "stepwise" is the literal published algorithm (traces
advanced step by step in the forward and again, from the unroll start, in the
backward); it is kept as the reference and for the cost comparison.

Input gradient (both modes, as in the published code): autograd runs through the
recurrence of the current unroll, so x_s receives the exact gradient of this
unroll's loss (direct output-gate path plus the path through c_s, c_{s+1}, ...).
Nothing reaches inputs of earlier unrolls (their graph is gone), so layers before
the core learn from gradients truncated at the unroll start, exactly as with
TBPTT; only the six cell parameters get the untruncated (RTRL) gradient. The
output gate is not recurrent, so backprop within the unroll is exact for it.
"""

from __future__ import annotations

from typing import Sequence, Tuple

import torch

from models.elstm import ELSTMCore, State, check_unroll_inputs, local_derivatives, previous_cells

Traces = Tuple[torch.Tensor, ...]  # (Z, F, wz, wf, bz, bf)


def trace_grads(lam: torch.Tensor, traces: Traces, needed: Sequence[bool] = (True,) * 6):
    """sum_b lam[b, h] * trace[b, h, ...] for each trace: gradients for (W_z, W_f, w_z, w_f, b_z, b_f)."""
    out = []
    for i, tr in enumerate(traces):
        if not needed[i]:
            out.append(None)
        elif tr.dim() == 3:
            out.append(torch.einsum("bh,bhi->hi", lam, tr))
        else:
            out.append((lam * tr).sum(0))
    return tuple(out)


@torch.no_grad()
def trace_step(
    traces: Traces, a: torch.Tensor, dz: torch.Tensor, df: torch.Tensor, x: torch.Tensor, c_prev: torch.Tensor
) -> Traces:
    """One RTRL step for all envs and units at once (a, dz, df, c_prev: [B, H]; x: [B, I])."""
    Z, F, wz, wf, bz, bf = traces
    a3 = a.unsqueeze(-1)
    xr = x.unsqueeze(1)
    Z = (Z * a3).addcmul_(dz.unsqueeze(-1), xr)
    F = (F * a3).addcmul_(df.unsqueeze(-1), xr)
    return (
        Z,
        F,
        torch.addcmul(wz * a, dz, c_prev),
        torch.addcmul(wf * a, df, c_prev),
        torch.add(bz * a, dz),
        torch.add(bf * a, df),
    )


@torch.no_grad()
def advance_traces(
    traces: Traces, x: torch.Tensor, dz: torch.Tensor, df: torch.Tensor, a: torch.Tensor, c_prev: torch.Tensor
) -> Traces:
    """The T per-step updates composed in closed form (x: [T, B, I]; the rest [T, B, H])."""
    Z0, F0, wz0, wf0, bz0, bf0 = traces
    if x.shape[0] == 1:
        p0, qz, qf = a[0], dz, df
    else:
        rev = torch.cumprod(a.flip(0), 0).flip(0)  # rev[t] = prod_{r >= t} a_r
        p0 = rev[0]  # what survives of the carried-in traces
        after = torch.cat([rev[1:], torch.ones_like(rev[:1])])  # prod_{r > t} a_r
        qz, qf = after * dz, after * df
    xb = x.detach().transpose(0, 1)  # [B, T, I]
    p3 = p0.unsqueeze(-1)
    Z = (Z0 * p3).baddbmm_(qz.permute(1, 2, 0), xb)  # sum over t as one batched matmul
    F = (F0 * p3).baddbmm_(qf.permute(1, 2, 0), xb)
    return (
        Z,
        F,
        wz0 * p0 + (qz * c_prev).sum(0),
        wf0 * p0 + (qf * c_prev).sum(0),
        bz0 * p0 + qz.sum(0),
        bf0 * p0 + qf.sum(0),
    )


class _CarryIn(torch.autograd.Function):
    """Identity on c_0. Backward adds (dL/dc_0) . (trace at the unroll start) to the cell
    parameters' gradients: the part of full BPTT that lies before this unroll."""

    @staticmethod
    def forward(ctx, c0, Z0, F0, wz0, wf0, bz0, bf0, W_z, W_f, w_z, w_f, b_z, b_f):
        ctx.save_for_backward(Z0, F0, wz0, wf0, bz0, bf0)
        return c0.clone()

    @staticmethod
    def backward(ctx, lam):
        need = ctx.needs_input_grad
        grads = trace_grads(lam, ctx.saved_tensors, need[7:])
        return (lam if need[0] else None, None, None, None, None, None, None) + grads


class _StepwiseRTRL(torch.autograd.Function):
    """Identity on c_seq. Backward: the published RTRL gradient sum_t g_t . trace_t, with the
    traces advanced again step by step from the unroll start; g passes on unchanged to c_seq
    (whose graph reaches x but not the cell parameters)."""

    @staticmethod
    def forward(ctx, c_seq, x, dz, df, a, c_prev, Z0, F0, wz0, wf0, bz0, bf0, W_z, W_f, w_z, w_f, b_z, b_f):
        ctx.save_for_backward(x, dz, df, a, c_prev, Z0, F0, wz0, wf0, bz0, bf0)
        return c_seq.clone()

    @staticmethod
    def backward(ctx, g):
        x, dz, df, a, c_prev, *traces = ctx.saved_tensors
        need = ctx.needs_input_grad[12:]
        acc = None
        for t in range(x.shape[0]):
            traces = trace_step(traces, a[t], dz[t], df[t], x[t], c_prev[t])
            step = trace_grads(g[t], traces, need)
            acc = step if acc is None else tuple(None if s is None else s + u for s, u in zip(acc, step))
        return (g,) + (None,) * 11 + acc


class RTRLELSTMCore(ELSTMCore):
    """eLSTM whose cell parameters learn by RTRL. State: (c, Z, F, wz, wf, bz, bf), batch first.

    impl="fused" (default) or "stepwise" (the literal published algorithm); both give the
    same outputs, traces and gradients (see the module docstring)."""

    IMPLS = ("fused", "stepwise")

    def __init__(
        self, input_size: int, hidden_size: int, forget_bias: float = 0.0, init_std: float = 0.1, impl: str = "fused"
    ):
        super().__init__(input_size, hidden_size, forget_bias=forget_bias, init_std=init_std)
        if impl not in self.IMPLS:
            raise ValueError(f"unknown RTRL impl {impl!r}; valid: {', '.join(self.IMPLS)}")
        self.impl = impl

    def initial_state(self, batch_size: int, device=None, dtype=None) -> State:
        device, dtype = self._device_dtype(device, dtype)
        B, H, I = batch_size, self.hidden_size, self.input_size
        kw = dict(device=device, dtype=dtype)
        return (
            torch.zeros(B, H, **kw),
            torch.zeros(B, H, I, **kw),
            torch.zeros(B, H, I, **kw),
            torch.zeros(B, H, **kw),
            torch.zeros(B, H, **kw),
            torch.zeros(B, H, **kw),
            torch.zeros(B, H, **kw),
        )

    def forward(self, x: torch.Tensor, done: torch.Tensor, state: State):
        notdone = check_unroll_inputs(self, x, done, state, 7)
        c0, traces0 = state[0], tuple(state[1:])
        params = self.cell_parameters()
        track = torch.is_grad_enabled() and any(p.requires_grad for p in params)
        fused = self.impl == "fused"
        if track and any(t.is_inference() for t in traces0):
            # made by actors under torch.inference_mode: autograd may not save those
            traces0 = tuple(t.clone() for t in traces0)
        c_in = _CarryIn.apply(c0, *traces0, *params) if (fused and track) else c0
        c_seq, c_last, z, f = self._recurrence(x, notdone, c_in, record=True, detach_params=not fused)
        with torch.no_grad():
            c_prev = previous_cells(c0, c_seq, notdone)
            dz, df, a = local_derivatives(z, f, c_prev, notdone, self.w_z, self.w_f)
        if not fused and track:
            c_seq = _StepwiseRTRL.apply(c_seq, x.detach(), dz, df, a, c_prev, *traces0, *params)
        out = self._output(x, c_seq)
        if fused:
            traces = advance_traces(traces0, x, dz, df, a, c_prev)
        else:
            traces = traces0
            for t in range(x.shape[0]):
                traces = trace_step(traces, a[t], dz[t], df[t], x[t].detach(), c_prev[t])
        return out, (c_last.detach(),) + tuple(traces)


__all__ = ["RTRLELSTMCore", "advance_traces", "trace_step", "trace_grads"]
