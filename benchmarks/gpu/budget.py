"""The GPU suite's stages and the budget: what each stage needs and the share of --budget_s it gets (``allot``,
``plan``)."""

from __future__ import annotations

from benchmarks.agents import configs
from benchmarks.env_ceiling import default_procs

STAGES = ("ceiling", "impala_pong", "splits", "acting", "agents", "ppo_pong", "r2d2_pong", "ppo_breakout")
PACKAGE = "torchbeast_atari"
PONG, BREAKOUT = "PongNoFrameskip-v4", "BreakoutNoFrameskip-v4"
TRAINING = {
    "impala_pong": ("impala", PONG),
    "ppo_pong": ("ppo", PONG),
    "r2d2_pong": ("r2d2", PONG),
    "ppo_breakout": ("ppo", BREAKOUT),
}
AGENT_STAGES = ("ppo_pong", "r2d2_pong", "ppo_breakout")  # the agents beside IMPALA, in one table
TARGET = 18.0  # the last-100 return on Pong a training stage stops at
AGENTS = tuple(configs(PACKAGE))  # benchmarks/agents.py's agents on Atari, in its order

MARGIN_S = 15.0  # the suite's own start (torch's import) and its tables at the end
TRAIN_MIN_S = 60.0  # a training stage given less would be mostly start-up
STOP_GRACE_S = 20.0  # a launcher's clean stop (5 s documented) and its checkpoint, before it is killed
CEILING_OVERHEAD_S = 4.0  # per measurement of env_ceiling.py: forking, building and warming the envs
AGENT_OVERHEAD_S = 45.0  # per agent of agents.py beside its end-to-end seconds: learner alone, start, stop


def ceiling_need_s(args, cores: int) -> float:
    return len(default_procs(cores)) * (args.ceiling_seconds + CEILING_OVERHEAD_S)


def agent_need_s(args) -> float:
    return args.agents_seconds + AGENT_OVERHEAD_S


def splits_need_s(args) -> float:
    """Two runs of --splits_seconds, each with its clean stop's grace."""
    return 2 * (args.splits_seconds + STOP_GRACE_S)


def acting_counts(args) -> list[int]:
    """--acting_counts: the numbers of acting processes the acting stage runs beside acting in the learner process."""
    return [int(n) for n in str(args.acting_counts).split(",") if n.strip()]


def acting_need_s(args) -> float:
    """A run of --acting_seconds with acting in the learner process and one per count, each with its stop's grace."""
    return (1 + len(acting_counts(args))) * (args.acting_seconds + STOP_GRACE_S)


def allot(stage: str, left: float, later: list[str], args, cores: int) -> float:
    """The seconds ``stage`` gets of the ``left`` the budget still holds, ``later`` being the stages after it;
    0: skipped for the budget.  The ceiling, the splits, the acting runs and the agents get what they need (the
    agents: as many as fit), IMPALA up to --impala_max_s and never the share of the splits, the acting runs and
    the agents that would fit beside its minimum, the PPO runs an equal part of what is left."""
    left = max(left, 0.0)
    fixed = {"ceiling": lambda: ceiling_need_s(args, cores), "splits": lambda: splits_need_s(args)}
    fixed["acting"] = lambda: acting_need_s(args)
    if stage in fixed:
        need = fixed[stage]()
        return need if left >= need else 0.0
    if stage == "agents":
        return min(len(AGENTS), int(left // agent_need_s(args))) * agent_need_s(args)
    if left < TRAIN_MIN_S:
        return 0.0
    if stage == "impala_pong":
        reserve = 0.0
        for runs in ("splits", "acting"):
            if runs in later and left - TRAIN_MIN_S - reserve >= fixed[runs]():
                reserve += fixed[runs]()
        if "agents" in later:
            reserve += min(len(AGENTS), int((left - TRAIN_MIN_S - reserve) // agent_need_s(args))) * agent_need_s(args)
        return min(args.impala_max_s, left - reserve)
    share = left / (1 + sum(s in TRAINING for s in later))
    return share if share >= TRAIN_MIN_S else left


def plan(budget_s: float, stages: list[str], args, cores: int) -> dict[str, float]:
    """Each stage's share if every stage took all of it (what the start prints; the run allots again as it goes,
    so what a stage leaves unused goes to the next)."""
    left, out = budget_s - MARGIN_S, {}
    for i, stage in enumerate(stages):
        out[stage] = allot(stage, left, stages[i + 1 :], args, cores)
        left -= out[stage]
    return out
