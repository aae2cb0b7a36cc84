"""torchbeast_dmlab's presets as a table (``PRESETS``, rl_core/config/presets.py; IMPALA keeps the R2AC settings that
``env.add_flags`` sets).  Data only: no torch, no deepmind_lab."""

from __future__ import annotations

from rl_core.agents.sac import SAC_DISCRETE_IMAGE_DEFAULTS
from rl_core.config.presets import Preset

# SAC takes discrete SAC's image settings (rl_core.agents.sac.SAC_DISCRETE_IMAGE_DEFAULTS, not measured on DMLab); the
# other agents the package's.
PRESETS = (Preset(SAC_DISCRETE_IMAGE_DEFAULTS, agents="sac"),)
