"""What a run tells its user: the announcement at the start and, every --log_interval seconds, a logs.csv row
and the progress line."""

from __future__ import annotations

import collections
import logging
import math
import time

import numpy as np

from rl_core.records import seen_sets

log = logging.getLogger("learner")


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def announce_rank(group, device, flags, global_flags) -> None:
    """Under torchrun: this rank's share of the run."""
    f, g = flags, global_flags
    log.info(
        "torchrun: %s on %s; this rank: %d of the run's %d envs on %d of its %d env servers "
        "(from server %d), batches of %d of its %d",
        group.describe(),
        device,
        f.num_actors,
        g.num_actors,
        f.num_servers,
        g.num_servers,
        f.server_offset,
        f.batch_size,
        g.batch_size,
    )


def announce_sizing(f, sizing, replays: bool) -> None:
    """The run's size (its totals ``f``, whatever the world size) and why the launcher chose it; ``replays``: the
    agent learns from a replay."""
    K = f.num_actors // f.num_servers
    if replays:
        batch = f"learner batches of {f.batch_size} from the replay (unrolls of {f.unroll_length} steps)"
    else:
        per = f.batch_size * f.unroll_length
        batch = (
            f"learner batches of {f.batch_size} x {f.unroll_length} = {per:,} steps "
            f"(~{math.ceil(f.total_steps / per):,} batches)"
        )
    servers = f"{f.num_servers} env server" + ("s" if f.num_servers != 1 else "")
    each = f"{K} each" + (
        f"; {f.server_splits} to a process, stepped in turn: {f.num_servers // f.server_splits} processes"
        if f.server_splits > 1
        else ""
    )
    why = f"; {sizing.reason}" if sizing is not None and sizing.reason else ""
    log.info(
        "sizing: --agent %s, %d envs on %s (%s), %s, --total_steps %s%s",
        f.agent,
        f.num_actors,
        servers,
        each,
        batch,
        f"{f.total_steps:,}",
        why,
    )


CORE_NAMES = {"lstm": "an LSTM", "elstm": "an eLSTM (truncated BPTT)", "rtrl_elstm": "an eLSTM trained by RTRL"}


def describe_core(f, recurrent: bool = True) -> str:
    """The model's recurrent core, or its absence, and the flag that changes it (``recurrent``: the agent takes a
    core at all)."""
    from models import core_kind

    kind = core_kind(f)
    if kind is None:
        return "model: feedforward" + (
            " (--use_lstm, --use_elstm or --use_rtrl: a recurrent core)" if recurrent else ""
        )
    return f"model: {CORE_NAMES[kind]} core of {f.hidden_size} units (--feedforward: none)"


def announce_sources(flags, sources: dict[str, str]) -> list[str]:
    """The start's lines: the values that are not their flags' own defaults, grouped by where they came from."""
    from rl_core.config import flags as flags_lib

    base = {a.dest: a.default for a in flags_lib.make_parser()._actions}
    groups: dict[str, list[str]] = {}
    for key, value in sorted(vars(flags).items()):
        if key in base and value != base[key] and key not in ("server_secret", "pipes_basename"):
            groups.setdefault(sources.get(key, "flag default"), []).append(f"--{key} {value}")
    return [f"from {source}: {', '.join(values)}" for source, values in groups.items()]


def sizing_record(f, sizing) -> dict:
    """meta.json's ``sizing``: the values used, which of them the launcher chose (``auto``) and why."""
    record = sizing.record() if sizing is not None else {"auto": [], "reason": ""}
    return {
        **record,
        "num_servers": f.num_servers,
        "num_actors": f.num_actors,
        "batch_size": f.batch_size,
        "server_splits": f.server_splits,
    }


class Progress:
    """logs.csv's rows and the progress line, from the parts' counters (rank 0 alone under torchrun: ``peers``
    brings the other ranks' env steps).  Made when training starts: ``start_time``; ``recent_returns``: the
    last-100 window a resumed run's checkpoint carries, which the run's return goes on from."""

    def __init__(self, flags, parts, run_log, rundir: str, supervisor, validation, recent_returns=()):
        self.flags = flags
        self.parts = parts
        self.run_log = run_log
        self.supervisor = supervisor
        self.validation = validation
        self.start_time = start = time.monotonic()
        self._last = (start, parts.learner.step)
        self._rows = 0
        self._last_learn = (parts.learner.learn_seconds, parts.learner.learner_steps)
        self._returns = collections.deque((float(r) for r in recent_returns), maxlen=100)
        self.seen_sets = seen_sets.SeenSets(rundir)

    def recent_returns(self) -> list[float]:
        """The last 100 episodes' returns, those ended since the last row included: what a checkpoint keeps."""
        with self.parts.stats.lock:
            pending = [e["return"] for e in self.parts.stats.episodes]
        return [float(r) for r in [*self._returns, *pending][-100:]]

    def tick(self) -> None:
        """A logs.csv row and the progress line; none when nothing was learned since the last row."""
        p = self.parts
        learner = p.learner
        now = time.monotonic()
        step = learner.step
        last_time, last_step = self._last
        if self._rows and step == last_step:
            # nothing learned since the last row (e.g. the final tick): one row per step, as wandb keeps;
            # the sets seen (rooms) still take the episodes that ended since, so the run's file is whole
            with p.stats.lock:
                pending = list(p.stats.episodes)
            self.seen_sets.update(pending, step)
            return
        self._rows += 1
        sps = (step - last_step) / max(now - last_time, 1e-9)
        self._last = (now, step)
        episodes = p.stats.take_episodes()
        returns = [e["return"] for e in episodes]
        self._returns.extend(returns)
        batches, envs = p.batcher.take_counts()
        row = {
            "step": step,
            "time": round(now - self.start_time, 3),
            "sps": round(sps, 1),
            "episodes": len(episodes),
            "mean_episode_return": float(np.mean(returns)) if returns else float("nan"),
            "mean_episode_length": float(np.mean([e["length"] for e in episodes])) if episodes else float("nan"),
            "return_last_100": float(np.mean(self._returns)) if self._returns else float("nan"),
            "inference_batch": envs / batches if batches else float("nan"),
            "learner_queue": p.learner_queue.qsize(),
            "dropped_unrolls": p.stats.dropped_unrolls,
            "server_restarts": self.supervisor.restarts if self.supervisor else 0,
            # every rank's, under torchrun
            "env_steps": p.stats.env_steps + (p.peers.env_steps if p.peers is not None else 0),
        }
        learn_seconds, learner_steps = learner.learn_seconds, learner.learner_steps
        last_learn, last_updates = self._last_learn
        self._last_learn = (learn_seconds, learner_steps)
        updates = learner_steps - last_updates
        row["learner_busy"] = round((learn_seconds - last_learn) / max(now - last_time, 1e-9), 3)
        row["update_ms"] = round(1e3 * (learn_seconds - last_learn) / updates, 1) if updates else float("nan")
        row.update(learner.take_stats())
        if hasattr(p.data_source, "log_stats"):
            row.update(p.data_source.log_stats())
        if hasattr(p.agent, "log_stats"):
            row.update(p.agent.log_stats())
        row["valid_mean_return"] = self.validation.take_for_row()
        row.update(self.seen_sets.update(episodes, step))
        stat_names = sorted({k for e in episodes for k in e if k.startswith("stat/") and not seen_sets.is_mask(k)})
        for name in stat_names:
            row[name] = float(np.mean([e[name] for e in episodes if name in e]))
        self.run_log.log_row(row)
        self._print(row, sps, batches)

    def _print(self, row: dict, sps: float, batches: int) -> None:
        f, p = self.flags, self.parts
        step = row["step"]
        pct = 100.0 * step / f.total_steps
        eta = (f.total_steps - step) / sps if sps > 0 else float("inf")
        ret = f"{row['return_last_100']:.2f}" if self._returns else "n/a"
        loss = row.get("total_loss")
        world = f" over {p.peers.group.size} ranks" if p.peers is not None else ""  # steps and SPS: global
        log.info(
            "Step %d/%d (%.1f%%) @ %.0f SPS%s, ETA %s. Return %s (last %d ep). Loss %s. "
            "Inference batch %.1f envs, learner queue %d/%d, dropped unrolls %d.",
            step,
            f.total_steps,
            pct,
            sps,
            world,
            format_duration(eta) if math.isfinite(eta) else "?",
            ret,
            len(self._returns),
            f"{loss:.3f}" if loss is not None else "n/a",
            row["inference_batch"] if batches else 0.0,
            row["learner_queue"],
            p.learner_queue.maxsize,
            row["dropped_unrolls"],
        )
