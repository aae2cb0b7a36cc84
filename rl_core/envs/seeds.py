"""Env seeds: a distinct, repeatable seed per (run, server, slot), for training, validation and the test alike."""

from __future__ import annotations

import numpy as np


def env_seed(run_seed: int, server_index: int, slot: int) -> int:
    """A distinct, repeatable seed per (run, server, slot)."""
    return int(np.random.SeedSequence([run_seed, server_index, slot]).generate_state(1)[0])
