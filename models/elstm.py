"""eLSTM core ("QuasiLSTM" in the published R2AC code) trained by truncated BPTT.

Per step (Irie, Gopalakrishnan, Schmidhuber, ICLR 2024), with the state reset to
zero before step t where done[t]:

    z_t = tanh(W_z x_t + w_z * c_{t-1} + b_z)
    f_t = sigmoid(W_f x_t + w_f * c_{t-1} + b_f)
    c_t = f_t * c_{t-1} + (1 - f_t) * z_t
    h_t = c_t * sigmoid(W_o [x_t; c_t] + b_o)

The recurrence is element-wise (diagonal), so the only matrix products are the
input projections, done for the whole unroll at once, and the output gate.
`models.rtrl.RTRLELSTMCore` subclasses this class: same parameters, same names.
"""

from __future__ import annotations

from typing import List, Tuple

import torch
from torch import nn
from torch.nn import functional as F

State = Tuple[torch.Tensor, ...]


def check_unroll_inputs(
    core: nn.Module, x: torch.Tensor, done: torch.Tensor, state: State, state_len: int
) -> torch.Tensor:
    """Validates (x, done, state); returns notdone as x.dtype, shaped [T, B, 1]."""
    if x.dim() != 3 or x.shape[-1] != core.input_size:
        raise ValueError(f"x must be [T, B, {core.input_size}], got {tuple(x.shape)}")
    if x.shape[0] == 0:
        raise ValueError("x must hold at least one time step")
    if tuple(done.shape) != tuple(x.shape[:2]):
        raise ValueError(f"done must be [T, B] = {tuple(x.shape[:2])}, got {tuple(done.shape)}")
    if len(state) != state_len:
        raise ValueError(f"{type(core).__name__} state has {state_len} tensors, got {len(state)}")
    if done.dtype != torch.bool:
        done = done.bool()
    return (~done).to(x.dtype).unsqueeze(-1)


class ELSTMCore(nn.Module):
    """eLSTM trained by truncated BPTT. State: (c,) with c [B, H]."""

    def __init__(self, input_size: int, hidden_size: int, forget_bias: float = 0.0, init_std: float = 0.1):
        super().__init__()
        self.input_size = int(input_size)
        self.hidden_size = int(hidden_size)
        self.forget_bias = float(forget_bias)
        self.init_std = float(init_std)
        H, I = self.hidden_size, self.input_size
        # Cell ("recurrent") parameters; RTRL traces exist for exactly these six.
        self.W_z = nn.Parameter(torch.empty(H, I))
        self.W_f = nn.Parameter(torch.empty(H, I))
        self.w_z = nn.Parameter(torch.empty(H))
        self.w_f = nn.Parameter(torch.empty(H))
        self.b_z = nn.Parameter(torch.empty(H))
        self.b_f = nn.Parameter(torch.empty(H))
        # Output gate W_o [x; c] + b_o: not recurrent (c_t never depends on it).
        self.out_gate = nn.Linear(I + H, H)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # Same scheme as the published code: N(0, 0.1) for the cell, default Linear init for the gate.
        with torch.no_grad():
            for p in self.cell_parameters():
                nn.init.normal_(p, mean=0.0, std=self.init_std)
            self.b_f.add_(self.forget_bias)
        self.out_gate.reset_parameters()

    def cell_parameters(self) -> Tuple[nn.Parameter, ...]:
        """(W_z, W_f, w_z, w_f, b_z, b_f): the parameters the RTRL traces are for."""
        return (self.W_z, self.W_f, self.w_z, self.w_f, self.b_z, self.b_f)

    def _device_dtype(self, device, dtype):
        p = self.W_z
        return (p.device if device is None else device), (p.dtype if dtype is None else dtype)

    def initial_state(self, batch_size: int, device=None, dtype=None) -> State:
        device, dtype = self._device_dtype(device, dtype)
        return (torch.zeros(batch_size, self.hidden_size, device=device, dtype=dtype),)

    def forward(self, x: torch.Tensor, done: torch.Tensor, state: State):
        notdone = check_unroll_inputs(self, x, done, state, 1)
        c_seq, c_last, _, _ = self._recurrence(x, notdone, state[0], record=False)
        return self._output(x, c_seq), (c_last.detach(),)

    def _recurrence(
        self, x: torch.Tensor, notdone: torch.Tensor, c: torch.Tensor, record: bool, detach_params: bool = False
    ):
        """Runs the cell over the unroll.

        Returns (c_seq [T, B, H], c_T [B, H], z [T, B, H] or None, f [T, B, H] or None);
        z and f (detached) only when `record`. With `detach_params` the graph reaches
        x and c but not the cell parameters (the step-wise RTRL mode needs that).
        """
        H = self.hidden_size
        W_z, W_f, w_z, w_f, b_z, b_f = (
            tuple(p.detach() for p in self.cell_parameters()) if detach_params else self.cell_parameters()
        )
        W = torch.cat([W_z, W_f])  # [2H, I]
        b = torch.cat([b_z, b_f])  # [2H]
        w = torch.cat([w_z, w_f])  # [2H]
        proj = F.linear(x, W, b)  # [T, B, 2H]: all input projections at once
        cs: List[torch.Tensor] = []
        zs: List[torch.Tensor] = []
        fs: List[torch.Tensor] = []
        # unbind/split (not indexing): their backward assembles the gradient once, where
        # proj[t]'s backward would zero-fill a whole [T, B, 2H] tensor for every step.
        for proj_t, nd_t in zip(proj.unbind(0), notdone.unbind(0)):
            c = c * nd_t
            pre_z, pre_f = torch.addcmul(proj_t, torch.cat([c, c], 1), w).split(H, 1)
            z = torch.tanh(pre_z)
            f = torch.sigmoid(pre_f)
            c = torch.addcmul(z, f, c - z)  # f c + (1 - f) z
            cs.append(c)
            if record:
                zs.append(z.detach())
                fs.append(f.detach())
        c_seq = torch.stack(cs)
        if not record:
            return c_seq, c, None, None
        return c_seq, c, torch.stack(zs), torch.stack(fs)

    def _output(self, x: torch.Tensor, c_seq: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.out_gate(torch.cat([x, c_seq], -1)))
        return c_seq * gate

    def extra_repr(self) -> str:
        return f"input_size={self.input_size}, hidden_size={self.hidden_size}"


def previous_cells(c0: torch.Tensor, c_seq: torch.Tensor, notdone: torch.Tensor) -> torch.Tensor:
    """The (reset-masked) c_{t-1} each step used, detached: [T, B, H]."""
    c_seq = c_seq.detach()
    prev = torch.cat([c0.detach().unsqueeze(0), c_seq[:-1]]) if c_seq.shape[0] > 1 else c0.detach().unsqueeze(0)
    return prev * notdone


def local_derivatives(
    z: torch.Tensor, f: torch.Tensor, c_prev: torch.Tensor, notdone: torch.Tensor, w_z: torch.Tensor, w_f: torch.Tensor
):
    """Per-step partial derivatives of c_t, all [T, B, H] (inputs detached, masked c_prev).

    dz = dc_t/d(pre_z) = (1 - f)(1 - z^2)
    df = dc_t/d(pre_f) = (c_{t-1} - z) f (1 - f)
    a  = dc_t/dc_{t-1} (diagonal) = f + dz w_z + df w_f, times notdone_t (a reset cuts it)
    """
    one_minus_f = 1.0 - f
    dz = one_minus_f * (1.0 - z * z)
    df = (c_prev - z) * f * one_minus_f
    a = (f + dz * w_z + df * w_f) * notdone
    return dz, df, a


__all__: List[str] = ["ELSTMCore", "State", "check_unroll_inputs", "previous_cells", "local_derivatives"]
