"""Recurrent Q-network for value-based agents (R2D2): the actor-critic's torso (stem, reward and
last action, optional recurrent core) under a dueling head.

Dueling head (Wang et al. 2016, "Dueling Network Architectures for Deep Reinforcement
Learning", ICML, Eq. 9): two streams, each a hidden layer then a linear layer,

    Q(s, a) = V(s) + A(s, a) - (1/|A|) sum_a' A(s, a')

Outputs ``{"q_values": [T, B, A]}``.  The target network is a frozen copy registered as
``target_network`` (so ``model.tar`` keeps it); ``updates`` counts the learner's optimizer
steps for its copy period.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from models.policy import ActorCritic
from rl_core.data.env_spec import EnvSpec


class DuelingHead(nn.Module):
    def __init__(self, in_size: int, num_actions: int, hidden_size: int = 512):
        super().__init__()
        self.value = nn.Sequential(nn.Linear(in_size, hidden_size), nn.ReLU(), nn.Linear(hidden_size, 1))
        self.advantage = nn.Sequential(nn.Linear(in_size, hidden_size), nn.ReLU(), nn.Linear(hidden_size, num_actions))

    @property
    def weight(self) -> torch.Tensor:  # the head's dtype, as nn.Linear's
        return self.value[0].weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        advantage = self.advantage(x)
        return self.value(x) + advantage - advantage.mean(-1, keepdim=True)


class QNetwork(ActorCritic):
    """The actor-critic's torso with a dueling Q head instead of the policy and value heads."""

    learner_only = ("target_network",)  # acting needs the online network only

    def __init__(
        self,
        stem: nn.Module,
        num_actions: int,
        core: nn.Module | None = None,
        last_action_input: bool = True,
        dueling_hidden_size: int = 512,
    ):
        super().__init__(stem, num_actions, core=core, last_action_input=last_action_input)
        del self.policy, self.baseline
        head_in = core.hidden_size if core is not None else self.core_input_size
        self.q_head = DuelingHead(head_in, num_actions, dueling_hidden_size)
        self.register_buffer("updates", torch.zeros((), dtype=torch.int64))
        self.target_network: QNetwork | None = None

    def head_dtype(self) -> torch.dtype:
        return self.q_head.weight.dtype

    def add_target_network(self) -> None:
        """A frozen copy of this network, kept in the state_dict (a resumed run restores it)."""
        target = copy.deepcopy(self)
        for p in target.parameters():
            p.requires_grad_(False)
        self.target_network = target

    @torch.no_grad()
    def update_target_network(self) -> None:
        for dst, src in zip(self.target_network.state_dict().values(), self.online_state().values()):
            dst.copy_(src)

    def online_state(self) -> dict:
        return {k: v for k, v in self.state_dict().items() if not k.startswith("target_network.")}

    def forward(self, inputs: dict, state: tuple = ()):
        x, _, _, state = self.torso(inputs, state)
        return {"q_values": self.q_head(x)}, state


def build_q_network(flags, spec: EnvSpec) -> QNetwork:
    from models import action_size, build_stem, core_kind
    from models.policy import core_input_size
    from models.recurrent import make_core

    n = action_size(spec.action)
    stem = build_stem(flags, spec.obs.shape)
    kind = core_kind(flags)
    last_action_input = not flags.no_last_action
    core = None
    if kind is not None:
        core = make_core(
            kind,
            input_size=core_input_size(stem.out_size, n, last_action_input),
            hidden_size=flags.hidden_size,
            forget_bias=flags.forget_bias,
        )
    return QNetwork(
        stem, n, core=core, last_action_input=last_action_input, dueling_hidden_size=flags.dueling_hidden_size
    )
