"""Numerics the agents share: action distributions, running normalizers, the optimizer and its schedule, and the statistics' collectives over torchrun's ranks."""
