"""The valid range of every numeric flag, checked when the flags are parsed.

Ranges are written in interval notation: ``"[0, 1]"``, ``"(0, inf)"``, ``"[1, inf)"``;
``"finite"`` accepts any finite number.  An agent's folder gives the ranges of its own flags
(``AgentSpec.flag_ranges``; the shared groups': ``rl_core.agents.shared_flags.RANGES``) and an environment
package those of its own as ``FLAG_RANGES`` in its ``env`` module.  A numeric flag without a range is
an error of the code (a test walks every package's parser), not of the user.
"""

from __future__ import annotations

import math
import re

COMMON_RANGES: dict[str, str] = {
    # run, dashboards, validation, final test
    "seed": "[0, inf)",
    "checkpoint_every": "(0, inf)",
    "log_interval": "(0, inf)",
    "log_step_interval": "[1, inf)",
    "validate_every": "[0, inf)",
    "validate_step_every": "[0, inf)",
    "valid_num_episodes": "[1, inf)",
    "save_extra_checkpoint": "[0, inf)",
    "test_runs": "[0, inf)",
    "test_episodes": "[0, inf)",
    "test_num_envs": "[1, inf)",
    # actors and env servers
    "num_actors": "[1, inf)",
    "num_servers": "[1, inf)",
    "server_splits": "[1, inf)",
    "server_index": "[0, inf)",
    "connect_timeout": "(0, inf)",
    "env_timeout": "(0, inf)",
    "max_message_bytes": "[1, inf)",
    "num_actions": "[1, inf)",
    # learner
    "total_steps": "[1, inf)",
    "batch_size": "[1, inf)",
    "unroll_length": "[1, inf)",
    "num_learner_threads": "[1, inf)",
    "num_inference_threads": "[1, inf)",
    "max_inference_batch_size": "[0, inf)",
    "inference_batch_timeout_ms": "[0, inf)",
    "max_learner_queue_size": "[1, inf)",
    "torch_threads": "[0, inf)",
    # model
    "hidden_size": "[1, inf)",
    "forget_bias": "finite",
    # IMPALA loss
    "entropy_cost": "[0, inf)",
    "baseline_cost": "[0, inf)",
    "discounting": "[0, 1]",
    "clip_rho_threshold": "(0, inf)",
    "clip_pg_rho_threshold": "(0, inf)",
    "clip_c_threshold": "(0, inf)",
    "vtrace_lambda": "[0, 1]",
    # optimizer
    "learning_rate": "[0, inf)",
    "alpha": "[0, 1]",
    "momentum": "[0, 1]",
    "epsilon": "[0, inf)",
    "grad_norm_clipping": "[0, inf)",
    "publish_interval": "[1, inf)",
    "recycle_period": "[0, inf)",
    "recycle_tau": "[0, 1)",
}

_INTERVAL = re.compile(r"^([\[(])\s*(-?inf|[-0-9.e]+)\s*,\s*(-?inf|[-0-9.e]+)\s*([\])])$")


def contains(interval: str, value: float) -> bool:
    """Whether ``value`` lies in ``interval`` (NaN and infinities never do)."""
    if not math.isfinite(value):
        return False
    if interval == "finite":
        return True
    m = _INTERVAL.match(interval)
    if m is None:
        raise ValueError(f"bad interval {interval!r}")
    left, low, high, right = m.group(1), float(m.group(2)), float(m.group(3)), m.group(4)
    above = value >= low if left == "[" else value > low
    below = value <= high if right == "]" else value < high
    return above and below


def numeric_dests(parser) -> dict[str, type]:
    """Every int or float flag of ``parser``: dest -> type."""
    return {a.dest: a.type for a in parser._actions if a.type in (int, float)}


def check_ranges(parser, flags, extra: dict[str, str] | None = None) -> None:
    """``parser.error`` (one line, exit 2) for the first numeric flag outside its range (``extra``: the agents'
    and the package's ranges)."""
    ranges = dict(COMMON_RANGES, **(extra or {}))
    for dest in numeric_dests(parser):
        value = getattr(flags, dest)
        if value is None or dest not in ranges:
            continue
        if not contains(ranges[dest], float(value)):
            what = "a finite number" if ranges[dest] == "finite" else f"in {ranges[dest]}"
            parser.error(f"--{dest} must be {what}, got {value}")
