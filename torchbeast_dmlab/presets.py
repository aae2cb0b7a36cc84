"""torchbeast_dmlab's flag defaults per agent (rl_core/config/env_package.py reads ``agent_defaults`` here; IMPALA keeps the
R2AC settings that ``env.add_flags`` sets).  Data only: no torch, no deepmind_lab."""

from __future__ import annotations

from rl_core.agents.sac import SAC_DISCRETE_IMAGE_DEFAULTS


def agent_defaults(agent: str) -> dict:
    """Defaults for ``--agent``: SAC takes discrete SAC's image settings (rl_core.agents.sac.SAC_DISCRETE_IMAGE_DEFAULTS,
    not measured on DMLab); the others the package's."""
    return dict(SAC_DISCRETE_IMAGE_DEFAULTS) if agent == "sac" else {}
