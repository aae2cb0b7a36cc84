"""Playing whole episodes with a frozen model: validation, the final test, eval-only runs.

An environment package may define:

* ``test_protocol(flags) -> list[dict]``: the runs of its final test, each
  ``{"name", "episodes", "group", "overrides"}`` (``overrides``: flag values for
  that run's envs, e.g. Procgen's held-out ``start_level``).  ``group`` says
  which runs are summarised together (mean and std over their means).
* ``make_test_env(flags, seed, record=False)``: the env for testing (Atari: no
  episodic life, whole games).  Without it, ``make_env`` is used.
* ``validation_overrides(flags) -> dict``: flag values for the validation envs
  (Procgen's ``--valid_start_level`` ...).

Episodes are counted where the env says the logged episode ends
(``info["episode_end"]``, default terminated or truncated), as in training.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import threading
import time
from typing import Callable

import numpy as np
import torch

from rl_core.runtime.env_server import env_seed

log = logging.getLogger("evaluation")

TEST_SEED_OFFSET = 1_000_000  # test and validation seeds never meet training seeds


def test_seeds(flags, run_index: int) -> list[int]:
    """Env seeds of final-test run ``run_index`` (validation: -1), one per parallel env.

    ``env_seed(--seed, TEST_SEED_OFFSET + run_index, slot)``: training envs use server
    indices below --num_servers, so test and training seeds never share a stream.
    """
    return [env_seed(flags.seed, TEST_SEED_OFFSET + run_index, slot) for slot in range(flags.test_num_envs)]


def default_protocol(flags) -> list[dict]:
    return [{"name": "test", "episodes": 100, "group": "test", "overrides": {}}]


def protocol(env_pkg, flags) -> list[dict]:
    """The package's final-test runs, with --test_runs / --test_episodes applied."""
    runs = getattr(env_pkg, "test_protocol", default_protocol)(flags)
    if flags.test_runs:
        by_group: dict[str, list] = {}
        for run in runs:
            by_group.setdefault(run.get("group", "test"), []).append(run)
        runs = [run for group in by_group.values() for run in group[: flags.test_runs]]
    if flags.test_episodes:
        runs = [dict(run, episodes=flags.test_episodes) for run in runs]
    return runs


def make_test_env_fn(env_pkg, flags, overrides: dict, record: bool) -> Callable[[int], object]:
    run_flags = copy.copy(flags)
    for key, value in overrides.items():
        setattr(run_flags, key, value)
    if hasattr(env_pkg, "make_test_env"):
        return lambda seed: env_pkg.make_test_env(run_flags, seed, record=record)
    return lambda seed: env_pkg.make_env(run_flags, seed)


def frame_of(env, obs) -> np.ndarray | None:
    """An RGB frame [H, W, 3] uint8 for a video: the env's render, else the image observation."""
    if getattr(env, "render_mode", None) == "rgb_array":
        frame = env.render()
        if frame is not None:
            return np.asarray(frame, np.uint8)
    obs = np.asarray(obs)
    if obs.ndim == 3:
        if obs.shape[0] == 3:
            return np.ascontiguousarray(obs.transpose(1, 2, 0)).astype(np.uint8)
        return np.repeat(obs[-1][:, :, None], 3, axis=2).astype(np.uint8)
    return None


def play(
    model,
    env_fn: Callable[[int], object],
    seeds: list[int],
    num_episodes: int,
    greedy: bool = True,
    device="cpu",
    record_frames: list | None = None,
    stop: threading.Event | None = None,
    progress: Callable[[int], None] | None = None,
    agent=None,
) -> list[dict]:
    """Play ``num_episodes`` episodes on ``len(seeds)`` envs in parallel, one batched forward per step.

    The actions are ``agent.act``'s (greedy: the most likely action, or a Gaussian's mean);
    without an agent, IMPALA's.  Env i plays every ``len(seeds)``-th episode, so long
    episodes are not under-counted.  ``record_frames`` (a list) receives env 0's first episode.
    """
    from rl_core.agents.base import action_field

    n = max(1, min(len(seeds), num_episodes))
    quota = [num_episodes // n + (i < num_episodes % n) for i in range(n)]
    envs = [env_fn(seeds[i]) for i in range(n)]
    try:
        obs = [env.reset(seed=seeds[i])[0] for i, env in enumerate(envs)]
        if agent is None:
            from rl_core.agents.impala import ImpalaAgent

            agent = ImpalaAgent(None, {"action": {"kind": "discrete", "n": model.num_actions}})
        reward = np.zeros(n, np.float32)
        done = np.ones(n, np.bool_)
        action_shape, action_dtype = action_field(agent.spec)
        last_action = np.zeros((n, *action_shape), action_dtype)
        ep_return = np.zeros(n, np.float64)
        ep_length = np.zeros(n, np.int64)
        active = np.array([q > 0 for q in quota])
        state = model.initial_state(n, device=device)
        episodes: list[dict] = []
        recording = record_frames is not None
        if recording:
            frame = frame_of(envs[0], obs[0])
            recording = frame is not None
            if recording:
                record_frames.append(frame)
        while active.any():
            if stop is not None and stop.is_set():
                break
            inputs = {
                "obs": torch.from_numpy(np.stack(obs)[None]).to(device),
                "reward": torch.from_numpy(reward[None]).to(device),
                "done": torch.from_numpy(done[None]).to(device),
                "last_action": torch.from_numpy(last_action[None]).to(device),
            }
            with torch.inference_mode():
                actions, _, state = agent.act(model, inputs, state, greedy=greedy)
                actions = actions[0].cpu().numpy()
            for i, env in enumerate(envs):
                if not active[i]:
                    continue
                o, r, terminated, truncated, info = env.step(step_action(actions[i], agent.spec["action"]))
                d = bool(terminated or truncated)
                ep_return[i] += r
                ep_length[i] += 1
                reward[i], done[i], last_action[i] = r, d, actions[i]
                end = bool(info.get("episode_end", d)) if info else d
                if end:
                    episode = {"return": float(ep_return[i]), "length": int(ep_length[i])}
                    episode.update((info or {}).get("episode_stats") or {})
                    episodes.append(episode)
                    ep_return[i], ep_length[i] = 0.0, 0
                    quota[i] -= 1
                    if i == 0:
                        recording = False
                    if progress is not None:
                        progress(len(episodes))
                    if quota[i] == 0:
                        active[i] = False
                if d and active[i]:
                    o, _ = env.reset()
                obs[i] = o
                if i == 0 and recording:
                    frame = frame_of(env, o)
                    if frame is not None:
                        record_frames.append(frame)
        return episodes
    finally:
        for env in envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001
                pass


def step_action(action: np.ndarray, action_spec: dict):
    """What env.step takes: an int for discrete actions, a box action clipped to the bounds."""
    if action_spec["kind"] == "discrete":
        return int(action)
    shape = tuple(action_spec["shape"])
    low = np.asarray(action_spec["low"], np.float32).reshape(shape)
    high = np.asarray(action_spec["high"], np.float32).reshape(shape)
    return np.clip(action, low, high)


def summarize(returns: list[float]) -> dict:
    return {
        "episodes": len(returns),
        "mean_return": float(np.mean(returns)) if returns else float("nan"),
        "std_return": float(np.std(returns)) if returns else float("nan"),
    }


def final_test(
    model,
    env_pkg,
    flags,
    device="cpu",
    record_path: str | None = None,
    stop: threading.Event | None = None,
    agent=None,
) -> dict:
    """Run the package's protocol; returns the result written to final_test.json."""
    from rl_core.video import write_video

    runs = protocol(env_pkg, flags)
    results, frames = [], [] if record_path else None
    total = sum(run["episodes"] for run in runs)
    done_before = 0
    start = time.monotonic()
    for r, run in enumerate(runs):
        seeds = test_seeds(flags, r)
        env_fn = make_test_env_fn(env_pkg, flags, run.get("overrides", {}), record=frames is not None and r == 0)

        def progress(k, r=r, run=run, base=done_before):
            if k == run["episodes"] or k % max(1, run["episodes"] // 5) == 0:
                log.info("final test: run %d/%d (%s), episode %d/%d; %d/%d episodes in all",
                         r + 1, len(runs), run["name"], k, run["episodes"], base + k, total)

        episodes = play(model, env_fn, seeds, run["episodes"], greedy=not flags.valid_sample, device=device,
                        record_frames=frames if r == 0 else None, stop=stop, progress=progress, agent=agent)
        done_before += len(episodes)
        returns = [e["return"] for e in episodes]
        result = {"name": run["name"], "group": run.get("group", "test"), "overrides": run.get("overrides", {})}
        result.update(summarize(returns))
        result["returns"] = returns
        stat_names = sorted({k for e in episodes for k in e if k not in ("return", "length")})
        for name in stat_names:
            result[f"mean_{name}"] = float(np.mean([e[name] for e in episodes if name in e]))
        results.append(result)
    groups = {}
    for result in results:
        groups.setdefault(result["group"], []).append(result["mean_return"])
    summary = {
        group: {"runs": len(means), "mean": float(np.mean(means)),
                "std": float(np.std(means)) if len(means) > 1 else 0.0}
        for group, means in groups.items()
    }
    out = {"runs": results, "groups": summary, "seconds": round(time.monotonic() - start, 1),
           "greedy": not flags.valid_sample}
    if frames:
        out["video"] = write_video(frames, record_path)
    return out


def write_json(path: str, payload: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=2, default=lambda x: None if isinstance(x, float) and math.isnan(x) else x)
    os.replace(tmp, path)


def crossed(previous_step: int, step: int, every: int) -> bool:
    """True when the step count crossed a multiple of ``every`` (not only landed on one)."""
    return every > 0 and step // every > previous_step // every
