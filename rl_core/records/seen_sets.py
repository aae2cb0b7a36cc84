"""Set-valued episode statistics: which rooms (levels, items, ...) an episode reached.

An env reports a set as a bitmask in an episode statistic named ``<name>_mask`` (bit k: member
k; at most 24 members, which a float32 stat holds exactly), e.g. Montezuma's Revenge's
``rooms_mask``.  The run keeps the union over every training episode so far in
``<name>_seen.json`` in the run directory (rewritten when it grows) and logs its size as the
column ``<name>_seen``; evaluations list each episode's members.
"""

from __future__ import annotations

import json
import os

MASK_SUFFIX = "_mask"
MAX_MEMBERS = 24  # float32 represents every integer below 2^24 exactly


def is_mask(stat: str) -> bool:
    return stat.endswith(MASK_SUFFIX)


def base_name(stat: str) -> str:
    """``stat/rooms_mask`` or ``rooms_mask`` -> ``rooms``."""
    return stat.split("/", 1)[-1][: -len(MASK_SUFFIX)]


def members(mask: float) -> list[int]:
    """The members of a bitmask: 5.0 -> [0, 2]."""
    bits = int(mask)
    return [k for k in range(MAX_MEMBERS) if bits >> k & 1]


def to_mask(values) -> float:
    """The bitmask of a set of members in [0, 24)."""
    bits = 0
    for v in values:
        if 0 <= int(v) < MAX_MEMBERS:
            bits |= 1 << int(v)
    return float(bits)


class SeenSets:
    """The union of each set-valued statistic over a run's episodes, kept in ``<name>_seen.json``."""

    def __init__(self, rundir: str):
        self.rundir = rundir
        self.seen: dict[str, set[int]] = {}
        for entry in sorted(os.listdir(rundir)) if os.path.isdir(rundir) else []:
            if entry.endswith("_seen.json"):  # a resumed run goes on from what it had seen
                try:
                    with open(os.path.join(rundir, entry)) as f:
                        self.seen[entry[: -len("_seen.json")]] = set(int(m) for m in json.load(f)["members"])
                except (OSError, ValueError, KeyError, TypeError):
                    pass

    def update(self, episodes: list[dict], step: int) -> dict[str, float]:
        """Merge the episodes' ``stat/<name>_mask`` values; returns the columns ``<name>_seen``."""
        grown = set()
        for episode in episodes:
            for key, value in episode.items():
                if key.startswith("stat/") and is_mask(key):
                    name = base_name(key)
                    fresh = name not in self.seen
                    known = self.seen.setdefault(name, set())
                    new = set(members(value)) - known
                    if new or fresh:
                        grown.add(name)
                    known.update(new)
        for name in grown:
            self._write(name, step)
        return {f"{name}_seen": float(len(found)) for name, found in self.seen.items()}

    def _write(self, name: str, step: int) -> None:
        path = os.path.join(self.rundir, f"{name}_seen.json")
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"members": sorted(self.seen[name]), "count": len(self.seen[name]), "step": step}, f)
        os.replace(tmp, path)
