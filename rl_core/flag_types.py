"""A numeric flag's type with its valid range, so that a flag is declared once: ``type=ranged(float, "[0, 1]")``.

Ranges are written in interval notation: ``"[0, 1]"``, ``"(0, inf)"``, ``"[1, inf)"``; ``"finite"`` accepts any
finite number.  ``rl_core/config/flag_ranges.py: check_ranges`` checks every such flag once the flags are resolved.
Below every layer (like ``errors.py``): the agents' flag groups and the env packages declare their flags with it.
"""

from __future__ import annotations

import math
import re

_INTERVAL = re.compile(r"^([\[(])\s*(-?inf|[-0-9.e]+)\s*,\s*(-?inf|[-0-9.e]+)\s*([\])])$")


class Ranged:
    """argparse's ``type`` for a number in ``interval``: converts as ``kind`` does (its errors read the same)."""

    def __init__(self, kind: type, interval: str):
        if interval != "finite" and _INTERVAL.match(interval) is None:
            raise ValueError(f"bad interval {interval!r}")
        self.kind, self.interval = kind, interval
        self.__name__ = kind.__name__  # argparse's "invalid float value: 'x'"

    def __call__(self, text):
        return self.kind(text)

    def __repr__(self) -> str:
        return f"ranged({self.kind.__name__}, {self.interval!r})"


def ranged(kind: type, interval: str) -> Ranged:
    return Ranged(kind, interval)


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
