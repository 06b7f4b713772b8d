"""End-to-end jobs: tasks -> SFT -> RL -> evaluation, with checkpoints, metrics and audit logs."""

from rlagents.pipeline._config import AgentJobConfig
from rlagents.pipeline._config import check_config_key
from rlagents.pipeline._config import config_from_dict
from rlagents.pipeline._config import config_to_dict
from rlagents.pipeline._config import ConfigError
from rlagents.pipeline._config import EvalConfig
from rlagents.pipeline._config import LoraSettings
from rlagents.pipeline._agent_job import curve_panels
from rlagents.pipeline._agent_job import JobError
from rlagents.pipeline._agent_job import train_and_evaluate
from rlagents.pipeline._agent_job import train_sft_only
from rlagents.pipeline._replay import replay_workdir

__all__ = [
    "AgentJobConfig",
    "check_config_key",
    "ConfigError",
    "EvalConfig",
    "LoraSettings",
    "JobError",
    "config_from_dict",
    "config_to_dict",
    "curve_panels",
    "train_and_evaluate",
    "replay_workdir",
    "train_sft_only",
]
