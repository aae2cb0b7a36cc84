"""Recurrent cores for the agent: LSTM, eLSTM by truncated BPTT, eLSTM by exact RTRL.

    core = make_core(kind, input_size=I, hidden_size=H)   # "lstm" | "elstm" | "rtrl_elstm"
    state = core.initial_state(batch_size=B, device=None, dtype=None)   # tuple, batch first
    out, state = core(x, done, state)   # x [T, B, I], done [T, B] bool -> out [T, B, H]

Where done[t] is True the state (RTRL traces included) is reset to its initial value
(zeros) before step t. The returned state is always detached: store it and pass it to
a later call (the actors' one-step calls, the learner's unroll from a stored state).

State per kind:
    lstm        (h, c)                      each [B, H]
    elstm       (c,)                        [B, H]
    rtrl_elstm  (c, Z, F, wz, wf, bz, bf)   c, wz, wf, bz, bf [B, H]; Z, F [B, H, I]

"elstm" and "rtrl_elstm" share parameters and names (W_z, W_f, w_z, w_f, b_z, b_f,
out_gate.weight, out_gate.bias), so their state_dicts load into each other. With
"rtrl_elstm", after backward of any loss of `out` the cell parameters' .grad hold the
gradient of full BPTT from the start of each episode (see models/rtrl.py for how, and
for what the gradient w.r.t. x is).
"""

from __future__ import annotations

from typing import Dict, Type

import torch
from torch import nn

from models.elstm import ELSTMCore, State, check_unroll_inputs
from models.rtrl import RTRLELSTMCore


class LSTMCore(nn.Module):
    """Single-layer torch.nn.LSTM. State: (h, c), each [B, H].

    The unroll is cut only at the time steps where some env resets, and each piece runs
    as one nn.LSTM call (the fused kernel); T = 1 is one call."""

    def __init__(self, input_size: int, hidden_size: int, forget_bias: float = 0.0):
        super().__init__()
        self.input_size = int(input_size)
        self.hidden_size = int(hidden_size)
        self.forget_bias = float(forget_bias)
        self.lstm = nn.LSTM(self.input_size, self.hidden_size, num_layers=1)
        with torch.no_grad():  # gate order i, f, g, o: rows [H, 2H) of the bias are the forget gate's
            self.lstm.bias_ih_l0[self.hidden_size : 2 * self.hidden_size].add_(self.forget_bias)

    def initial_state(self, batch_size: int, device=None, dtype=None) -> State:
        p = self.lstm.weight_ih_l0
        device = p.device if device is None else device
        dtype = p.dtype if dtype is None else dtype
        return tuple(torch.zeros(batch_size, self.hidden_size, device=device, dtype=dtype) for _ in range(2))

    def forward(self, x: torch.Tensor, done: torch.Tensor, state: State):
        notdone = check_unroll_inputs(self, x, done, state, 2)
        T = x.shape[0]
        starts = [0]
        if T > 1:
            starts += (torch.nonzero((notdone[1:, :, 0] == 0).any(1)).flatten() + 1).tolist()
        h, c = state
        outs = []
        for i, s in enumerate(starts):
            e = starts[i + 1] if i + 1 < len(starts) else T
            hc = ((h * notdone[s]).unsqueeze(0), (c * notdone[s]).unsqueeze(0))
            o, (h, c) = self.lstm(x[s:e], hc)
            h, c = h[0], c[0]
            outs.append(o)
        out = outs[0] if len(outs) == 1 else torch.cat(outs)
        return out, (h.detach(), c.detach())

    def extra_repr(self) -> str:
        return f"input_size={self.input_size}, hidden_size={self.hidden_size}"


CORE_KINDS: Dict[str, Type[nn.Module]] = {
    "lstm": LSTMCore,
    "elstm": ELSTMCore,
    "rtrl_elstm": RTRLELSTMCore,
}


def make_core(kind: str, input_size: int, hidden_size: int, **kwargs) -> nn.Module:
    """Builds a core; extra keyword arguments go to its class (forget_bias for every kind,
    impl="stepwise" for the literal published RTRL)."""
    try:
        cls = CORE_KINDS[kind]
    except (KeyError, TypeError):
        raise ValueError(f"unknown core kind {kind!r}; valid kinds: {', '.join(CORE_KINDS)}") from None
    return cls(input_size=input_size, hidden_size=hidden_size, **kwargs)


__all__ = ["make_core", "CORE_KINDS", "LSTMCore", "ELSTMCore", "RTRLELSTMCore"]
