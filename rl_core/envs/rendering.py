"""Rendering frames of pygame-drawn envs (gymnasium's classic control, MiniGrid) on a machine with no display."""

from __future__ import annotations

import os


def render_off_screen() -> None:
    """Keep SDL from probing audio devices and displays, so pygame renders into memory (a user's own settings win)."""
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
