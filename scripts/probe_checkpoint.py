"""What a checkpoint's optimizer and Atari stem look like: the probe behind docs/experiments/impala.md's Pong notes.

    python scripts/probe_checkpoint.py RUN/model.tar [RUN2/model.tar ...] [--game PongNoFrameskip-v4]

For every parameter: the median of sqrt(v), the optimizer's running second moment (RMSprop's ``square_avg``,
Adam's ``exp_avg_sq``), and the mean over its elements of sqrt(v) / (sqrt(v) + eps), the share of one learning
rate by which eps lets that element move per update.  For an AtariNet stem (``--model atari``): how many
channels of each convolution fire (ReLU > 0) anywhere in 80 frames of random play (every 5th step); a channel that never does
gets no gradient again; how many of the stem's fc units fire, and for an eLSTM core how far its gates'
pre-activations sit in the flat tails of tanh and sigmoid.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def optimizer_report(checkpoint: dict) -> list[str]:
    optimizer = checkpoint["optimizer_state_dict"]
    indices = [index for group in optimizer["param_groups"] for index in group["params"]]
    # the optimizer numbers parameters in the model's order; the state dict holds buffers too (normalizer
    # statistics), and where it does its keys no longer name the indices, so the indices are shown instead
    names = list(checkpoint["model_state_dict"].keys())
    if len(names) != len(indices):
        names = []
    lines = []
    for group in optimizer["param_groups"]:
        eps = group.get("eps", 0.0)
        for index in group["params"]:
            state = optimizer["state"].get(index, {})
            second = state.get("square_avg", state.get("exp_avg_sq"))
            if second is None:
                continue
            root = second.float().sqrt().flatten()
            name = names[index] if names else f"parameter {index}"
            lines.append(
                f"  {name:28s} {root.numel():>9,d}  median sqrt(v) {root.median().item():.2e}  "
                f"step share {(root / (root + eps)).mean().item():.2f}  (eps {eps:g})"
            )
    return lines


def random_play_frames(game: str, count: int = 80, every: int = 5) -> torch.Tensor:
    """``count`` observations [count, 4, 84, 84] in [0, 1]: every ``every``-th step of uniformly random play."""
    from torchbeast_atari.env import create_env

    env = create_env(game, seed=1)
    env.reset(seed=1)
    rng = np.random.default_rng(0)
    frames = []
    for step in range(count * every):
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
        if step % every == 0:
            frames.append(np.asarray(obs))
        if terminated or truncated:
            env.reset()
    env.close()
    return torch.tensor(np.stack(frames)).float() / 255.0


def stem_report(state: dict, frames: torch.Tensor) -> list[str]:
    """Channels of each AtariNet convolution whose ReLU is positive somewhere in ``frames``."""
    from models.vision import AtariNetStem

    stem = AtariNetStem(frames.shape[1:])
    stem.load_state_dict({k[len("stem.") :]: v.float() for k, v in state.items() if k.startswith("stem.")})
    x, lines = frames, []
    with torch.no_grad():
        for name in ("conv1", "conv2", "conv3"):
            conv = getattr(stem, name)
            x = torch.relu(conv(x))
            alive = int((x > 0).flatten(2).any(2).any(0).sum())
            lines.append(f"  {name}: {alive} of {conv.out_channels} channels fire on some frame")
    return lines


def core_report(state: dict, frames: torch.Tensor) -> list[str]:
    """The stem's fc units that fire somewhere in ``frames`` and their largest output, and for an eLSTM core
    (``core.W_z``) the mean |pre-activation| its gates get from those features (W x + b, the cell's own term
    aside): past about 3 tanh and sigmoid are flat, and the core passes no gradient to its weights or the stem."""
    from models.vision import AtariNetStem

    stem = AtariNetStem(frames.shape[1:])
    stem.load_state_dict({k[len("stem.") :]: v.float() for k, v in state.items() if k.startswith("stem.")})
    with torch.no_grad():
        features = stem(frames)
    alive = int((features > 0).any(0).sum())
    lines = [
        f"  fc: {alive} of {features.shape[1]} units fire on some frame; largest output {features.max().item():.3g}"
    ]
    if "core.W_z" in state:
        n = features.shape[1]
        for gate in ("z", "f"):
            weight, bias = state[f"core.W_{gate}"].float()[:, :n], state[f"core.b_{gate}"].float()
            pre = (features @ weight.T + bias).abs().mean().item()
            lines.append(f"  core gate {gate}: mean |W_{gate} x + b_{gate}| {pre:.3g} over the frames")
    return lines


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoints", nargs="+", type=Path)
    parser.add_argument("--game", default="PongNoFrameskip-v4", help="the game whose random-play frames probe the stem")
    args = parser.parse_args(argv)
    frames = None
    for path in args.checkpoints:
        checkpoint = torch.load(path, weights_only=True, map_location="cpu")
        print(f"{path}: step {checkpoint.get('step')}")
        print("\n".join(optimizer_report(checkpoint)))
        if "stem.conv1.weight" in checkpoint["model_state_dict"]:
            frames = random_play_frames(args.game) if frames is None else frames
            print("\n".join(stem_report(checkpoint["model_state_dict"], frames)))
            print("\n".join(core_report(checkpoint["model_state_dict"], frames)))


if __name__ == "__main__":
    main()
