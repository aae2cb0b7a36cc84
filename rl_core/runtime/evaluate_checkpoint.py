"""``--mode test --checkpoint PATH``: the package's final-test protocol on a saved model."""

from __future__ import annotations

import datetime
import logging
import os

import torch

from rl_core.records import checkpoint_file
from rl_core.evaluation import episodes
from rl_core.data.env_spec import EnvSpec
from rl_core.errors import UserError
from rl_core.config.flags import RENAMED
from rl_core.config.resolve import written_dests
from rl_core.records.run_log import setup_logging

log = logging.getLogger("test_mode")


def local_spec(env) -> EnvSpec:
    """The spec of one local env (its first observation and action space)."""
    obs, _ = env.reset(seed=0)
    return EnvSpec.of_env(obs, env.action_space)


def evaluate_checkpoint(flags, env_pkg, parser, argv: list[str]) -> int:
    setup_logging(None)
    try:
        saved = checkpoint_file.load(flags.checkpoint, fix="pass --checkpoint the model.tar of a run of this project")
        given = set(written_dests(parser, argv))  # the rest may come from the checkpoint
        for key, value in saved.get("flags", {}).items():
            key = RENAMED.get(key, key)  # a checkpoint saved under a flag's old name
            if key not in given and hasattr(flags, key) and key not in ("mode", "checkpoint"):
                setattr(flags, key, value)
        from rl_core.agents import make_agent

        probe = episodes.make_test_env_fn(env_pkg, flags, {}, record=False)(0)
        spec = local_spec(probe)
        probe.close()
        agent = make_agent(flags, spec)
        model = agent.build_model()
        try:
            model.load_state_dict(saved["model_state_dict"])
        except (KeyError, RuntimeError) as e:
            first = str(e).strip().splitlines()[0]
            raise UserError(f"{flags.checkpoint} does not fit the model its flags describe ({first[:160]})") from None
        device = torch.device("cuda" if torch.cuda.is_available() and not flags.disable_cuda else "cpu")
        model = model.to(device).eval()
        outdir = os.path.dirname(os.path.abspath(flags.checkpoint))
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        record = os.path.join(outdir, f"eval-{stamp}-first_episode") if flags.record_video else None
        log.info("testing %s (step %s) on %s", flags.checkpoint, saved.get("step"), flags.env)
        result = episodes.final_test(model, env_pkg, flags, device, record, agent=agent)
    except UserError as e:
        log.error("error: %s", e)
        return 2
    result.update(step=saved.get("step"), checkpoint=os.path.abspath(flags.checkpoint), env=flags.env)
    path = os.path.join(outdir, f"eval-{stamp}.json")
    episodes.write_json(path, result)
    episodes.log_episodes(result)
    episodes.log_result(result, "test")
    log.info("wrote %s", path)
    return 0
