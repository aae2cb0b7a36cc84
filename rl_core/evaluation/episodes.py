"""Playing whole episodes with a frozen model: validation, the final test, eval-only runs.

``env_pkg`` is an ``EnvPackage`` (rl_core/config/env_package.py); its package may define:

* ``test_protocol(flags) -> list[dict]``: the runs of its final test, each
  ``{"name", "episodes", "group", "overrides"}`` (``overrides``: flag values for
  that run's envs, e.g. Procgen's held-out ``start_level``).  ``group`` says
  which runs are summarised together (mean and std over their means).  A
  multi-task run splits each set of levels into one run per task: such runs
  carry ``"set"`` (the set they belong to) and ``"task"`` (the game); a set's
  mean is the mean over its tasks, and each group also reports per task.
* ``make_test_env(flags, seed, record=False)``: the env for testing (Atari: no
  episodic life, whole games that go on after a lost life as training's
  reset does).  Without it, ``make_env`` is used.
* ``validation_protocol(flags) -> list[dict]``: the validation's runs, each
  ``{"name", "episodes", "overrides"}`` and optionally ``"task"`` (Procgen:
  ``--valid_start_level`` ..., one run per game of a multi-task run).  Without
  it: one run of ``--valid_num_episodes`` episodes.

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

from rl_core.records import seen_sets
from rl_core.config.env_package import EnvPackage
from rl_core.data.env_spec import ActionSpace, DiscreteActions, EnvSpec, Observation
from rl_core.envs.seeds import env_seed

log = logging.getLogger("evaluation")

TEST_SEED_OFFSET = 1_000_000  # test and validation seeds never meet training seeds


def test_seeds(flags, run_index: int) -> list[int]:
    """Env seeds of final-test run ``run_index`` (validation: -1), one per parallel env.

    ``env_seed(--seed, TEST_SEED_OFFSET + run_index, slot)``: training envs use server
    indices below --num_servers, so test and training seeds never share a stream.
    """
    return [env_seed(flags.seed, TEST_SEED_OFFSET + run_index, slot) for slot in range(flags.test_num_envs)]


def set_of(run: dict) -> str:
    """The set of levels a final-test run belongs to (its name, unless it is one task of a set)."""
    return run.get("set", run["name"])


def protocol(env_pkg: EnvPackage, flags) -> list[dict]:
    """The package's final-test runs, with --test_runs (sets per group) / --test_episodes (per run) applied."""
    runs = env_pkg.test_protocol(flags)
    if flags.test_runs:
        kept: dict[str, list[str]] = {}
        for run in runs:
            sets = kept.setdefault(run.get("group", "test"), [])
            if set_of(run) not in sets and len(sets) < flags.test_runs:
                sets.append(set_of(run))
        runs = [run for run in runs if set_of(run) in kept[run.get("group", "test")]]
    if flags.test_episodes:
        runs = [dict(run, episodes=flags.test_episodes) for run in runs]
    return runs


def validation_runs(env_pkg: EnvPackage, flags) -> list[dict]:
    """The validation's runs: the package's ``validation_protocol``, else --valid_num_episodes on the training envs."""
    return env_pkg.validation_protocol(flags)


def make_test_env_fn(env_pkg: EnvPackage, flags, overrides: dict, record: bool) -> Callable[[int], object]:
    run_flags = copy.copy(flags)
    for key, value in overrides.items():
        setattr(run_flags, key, value)
    return lambda seed: env_pkg.make_test_env(run_flags, seed, record=record)


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


class Recording(list):
    """The frames of a recorded episode, and the frame rate at which they play in real time
    (the env's ``metadata["render_fps"]``, set by :func:`play`)."""

    fps: float = 30.0


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
    from rl_core.data.batch import action_field

    n = max(1, min(len(seeds), num_episodes))
    quota = [num_episodes // n + (i < num_episodes % n) for i in range(n)]
    envs = [env_fn(seeds[i]) for i in range(n)]
    try:
        obs = [env.reset(seed=seeds[i])[0] for i, env in enumerate(envs)]
        if agent is None:
            from rl_core.agents.impala.agent import ImpalaAgent

            first = np.asarray(obs[0])
            spec = EnvSpec(Observation(first.shape, first.dtype.str), DiscreteActions(model.num_actions))
            agent = ImpalaAgent(None, spec)
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
        if recording and isinstance(record_frames, Recording):
            record_frames.fps = float((getattr(envs[0], "metadata", None) or {}).get("render_fps") or 30.0)
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
                o, r, terminated, truncated, info = env.step(step_action(actions[i], agent.spec.action))
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


def validate(
    model,
    env_pkg,
    flags,
    device="cpu",
    record_frames: list | None = None,
    stop: threading.Event | None = None,
    agent=None,
) -> dict | None:
    """Play the validation runs; None if stopped before every episode was played.

    Returns ``mean_return`` (a multi-task validation: the mean over the tasks' means,
    each task playing the same number of episodes), ``episodes``, and ``tasks``
    (task -> mean return; empty for a single task).
    """
    seeds = test_seeds(flags, -1)
    means, tasks, played = [], {}, 0
    for r, run in enumerate(validation_runs(env_pkg, flags)):
        env_fn = make_test_env_fn(env_pkg, flags, run.get("overrides", {}), record=record_frames is not None and r == 0)
        episodes = play(
            model,
            env_fn,
            seeds,
            run["episodes"],
            greedy=not flags.valid_sample,
            device=device,
            record_frames=record_frames if r == 0 else None,
            stop=stop,
            agent=agent,
        )
        if len(episodes) < run["episodes"]:
            return None
        played += len(episodes)
        means.append(float(np.mean([e["return"] for e in episodes])))
        if "task" in run:
            tasks[run["task"]] = means[-1]
    return {"mean_return": float(np.mean(means)), "episodes": played, "tasks": tasks}


def step_action(action: np.ndarray, space: ActionSpace):
    """What env.step takes: an int for discrete actions, a box action clipped to the bounds."""
    if isinstance(space, DiscreteActions):
        return int(action)
    return np.clip(action, *space.bounds())


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
    from rl_core.evaluation.video import write_video

    runs = protocol(env_pkg, flags)
    results, frames = [], Recording() if record_path else None
    total = sum(run["episodes"] for run in runs)
    done_before = 0
    start = time.monotonic()
    for r, run in enumerate(runs):
        seeds = test_seeds(flags, r)
        env_fn = make_test_env_fn(env_pkg, flags, run.get("overrides", {}), record=frames is not None and r == 0)

        def progress(k, r=r, run=run, base=done_before):
            if k == run["episodes"] or k % max(1, run["episodes"] // 5) == 0:
                log.info(
                    "final test: run %d/%d (%s), episode %d/%d; %d/%d episodes in all",
                    r + 1,
                    len(runs),
                    run["name"],
                    k,
                    run["episodes"],
                    base + k,
                    total,
                )

        episodes = play(
            model,
            env_fn,
            seeds,
            run["episodes"],
            greedy=not flags.valid_sample,
            device=device,
            record_frames=frames if r == 0 else None,
            stop=stop,
            progress=progress,
            agent=agent,
        )
        done_before += len(episodes)
        returns = [e["return"] for e in episodes]
        result = {"name": run["name"], "group": run.get("group", "test"), "overrides": run.get("overrides", {})}
        result.update({key: run[key] for key in ("set", "task") if key in run})
        result.update(summarize(returns))
        result["returns"] = returns
        result["lengths"] = [e["length"] for e in episodes]
        stat_names = sorted({k for e in episodes for k in e if k not in ("return", "length")})
        for name in stat_names:
            if seen_sets.is_mask(name):  # a set per episode (Montezuma's rooms), and their union
                per_episode = [seen_sets.members(e.get(name, 0.0)) for e in episodes]
                result[f"{seen_sets.base_name(name)}_per_episode"] = per_episode
                result[f"{seen_sets.base_name(name)}_seen"] = sorted(set().union(*per_episode))
                continue
            result[f"mean_{name}"] = float(np.mean([e[name] for e in episodes if name in e]))
        results.append(result)
    out = {
        "runs": results,
        "groups": summarize_groups(results),
        "seconds": round(time.monotonic() - start, 1),
        "greedy": not flags.valid_sample,
    }
    if frames:
        out["video"] = write_video(frames, record_path, fps=frames.fps)
    return out


def summarize_groups(results: list[dict]) -> dict:
    """Per group: mean and std over its sets' means (a set's mean: over its tasks), and per task.

    ``runs`` counts the sets.  With one run per set this is the mean and std over the
    runs' mean returns; a multi-task set weighs its tasks equally, and ``tasks`` maps
    each task to its mean over the group's sets.
    """
    by_group: dict[str, dict[str, list[dict]]] = {}
    for result in results:
        by_group.setdefault(result["group"], {}).setdefault(set_of(result), []).append(result)
    summary = {}
    for group, sets in by_group.items():
        set_means = [float(np.mean([r["mean_return"] for r in runs])) for runs in sets.values()]
        entry = {
            "runs": len(set_means),
            "mean": float(np.mean(set_means)),
            "std": float(np.std(set_means)) if len(set_means) > 1 else 0.0,
        }
        tasks: dict[str, list[float]] = {}
        for runs in sets.values():
            for r in runs:
                if "task" in r:
                    tasks.setdefault(r["task"], []).append(r["mean_return"])
        if tasks:
            entry["tasks"] = {task: float(np.mean(means)) for task, means in tasks.items()}
        summary[group] = entry
    return summary


def named(what: str, name: str) -> str:
    """``what`` followed by a run's or group's name, unless the name already ends it ("final test", not "final test
    test")."""
    return what if what.split()[-1] == name else f"{what} {name}"


def log_result(result: dict, what: str = "final test") -> None:
    """One line per run, per group, and per task of a group."""
    for run in result["runs"]:
        stats = ", ".join(
            f"{k[len('mean_') :]} {v:.2f}"
            for k, v in sorted(run.items())
            if k.startswith("mean_") and k != "mean_return" and isinstance(v, float)
        )
        log.info(
            "%s: mean return %.2f over %d episodes%s",
            named(what, run["name"]),
            run["mean_return"],
            run["episodes"],
            f" ({stats})" if stats else "",
        )
    for group, g in result["groups"].items():
        if g["runs"] > 1:  # a group of one run: its line above
            log.info("%s [%s]: mean %.2f, std %.2f over %d runs", what, group, g["mean"], g["std"], g["runs"])
        for task, mean in g.get("tasks", {}).items():
            log.info("%s [%s] %s: mean %.2f", what, group, task, mean)


def log_episodes(result: dict) -> None:
    """Per run, its episodes in one line: the returns' spread and the lengths, and each set seen in any episode (eval
    mode; every episode's return, length and sets are in the eval json, as the published RND code's eval.py prints
    each episode's reward and visited rooms)."""
    for run in result["runs"]:
        returns, lengths = np.asarray(run["returns"], dtype=float), np.asarray(run["lengths"], dtype=float)
        if not len(returns):
            continue
        log.info(
            "%s: %d episodes, return min %.1f, median %.1f, max %.1f; length mean %.0f, max %.0f",
            run["name"],
            len(returns),
            returns.min(),
            np.median(returns),
            returns.max(),
            lengths.mean(),
            lengths.max(),
        )
        for name in (k[: -len("_per_episode")] for k in run if k.endswith("_per_episode")):
            log.info("%s: %s seen in any episode: %s", run["name"], name, run[f"{name}_seen"])


def write_json(path: str, payload: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=2, default=lambda x: None if isinstance(x, float) and math.isnan(x) else x)
    os.replace(tmp, path)


def crossed(previous_step: int, step: int, every: int) -> bool:
    """True when the step count crossed a multiple of ``every`` (not only landed on one)."""
    return every > 0 and step // every > previous_step // every
