"""The valid range of every numeric flag, checked when the flags are resolved.

Each numeric flag declares its range where it is declared: ``type=ranged(float, "[0, 1]")``
(``rl_core/flag_types.py``), in the shared flags, an agent's flag groups or an env package's ``add_flags``.  A
numeric flag without one is an error of the code (a test walks every package's parser), not of the user.
"""

from __future__ import annotations

from rl_core.flag_types import Ranged, contains


def numeric_dests(parser) -> dict[str, type]:
    """Every int or float flag of ``parser``: dest -> int or float."""
    found = {}
    for action in parser._actions:
        kind = action.type.kind if isinstance(action.type, Ranged) else action.type
        if kind in (int, float):
            found[action.dest] = kind
    return found


def flag_ranges(parser) -> dict[str, str]:
    """Every numeric flag's range, as its declaration gives it (``type=ranged(kind, interval)``)."""
    return {a.dest: a.type.interval for a in parser._actions if isinstance(a.type, Ranged)}


def check_ranges(parser, flags) -> None:
    """``parser.error`` (one line, exit 2) for the first numeric flag outside its range."""
    ranges = flag_ranges(parser)
    for dest in numeric_dests(parser):
        value = getattr(flags, dest)
        if value is None or dest not in ranges:
            continue
        if not contains(ranges[dest], float(value)):
            what = "a finite number" if ranges[dest] == "finite" else f"in {ranges[dest]}"
            parser.error(f"--{dest} must be {what}, got {value}")
