"""Episode videos: mp4 through imageio's ffmpeg, GIF (Pillow) where mp4 is unavailable."""

from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger("video")


def write_video(frames: list[np.ndarray], path_stem: str, fps: float = 30) -> str:
    """Write RGB frames [H, W, 3] to ``path_stem.mp4`` (or ``.gif``); returns the path written."""
    try:
        import imageio.v2 as imageio
        import imageio_ffmpeg  # noqa: F401 - the ffmpeg binary ships in this wheel

        path = path_stem + ".mp4"
        # macro_block_size=1 keeps odd sizes (e.g. 84x84 is fine, 72x96 too) without resizing.
        imageio.mimwrite(path, [np.asarray(f, np.uint8) for f in frames], fps=fps, macro_block_size=1)
        return path
    except Exception as e:  # noqa: BLE001 - no ffmpeg: fall back to GIF
        log.info("mp4 unavailable (%s); writing a GIF", e)
    from PIL import Image

    path = path_stem + ".gif"
    images = [Image.fromarray(np.asarray(f, np.uint8)) for f in frames]
    images[0].save(path, save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
    return path
