"""End-to-end jobs: tasks -> SFT -> RL -> evaluation, with checkpoints, metrics and audit logs.

Phases (`pipeline.phases`) and task suites (`rlagents.tasks.register_suite`, or a factory named
by module path) are registries; `train_and_evaluate` runs any registered phase after SFT on any
suite through one loop (`run_phase`) that gives each the same checkpoints, resume, audit log,
guards, drift monitor, metrics, plots and report.
"""

from rlagents.pipeline import phases
from rlagents.pipeline._checkpoints import PhaseStart
from rlagents.pipeline._checkpoints import restore_phase
from rlagents.pipeline._config import AgentJobConfig
from rlagents.pipeline._config import check_config_key
from rlagents.pipeline._config import config_to_dict
from rlagents.pipeline._config import ConfigError
from rlagents.pipeline._config import EvalConfig
from rlagents.pipeline._config import LoraSettings
from rlagents.pipeline._config import RLLoopConfig
from rlagents.pipeline._config import SelfPlayConfig
from rlagents.pipeline._job import Job
from rlagents.pipeline._job import JobError
from rlagents.pipeline._loop import run_phase
from rlagents.pipeline._main import train_and_evaluate
from rlagents.pipeline._main import train_sft_only
from rlagents.pipeline._replay import replay_workdir
from rlagents.pipeline._report import curve_panels
from rlagents.pipeline._validate import check_config
from rlagents.pipeline._validate import config_from_dict

__all__ = [
    "AgentJobConfig",
    "ConfigError",
    "EvalConfig",
    "Job",
    "JobError",
    "LoraSettings",
    "PhaseStart",
    "RLLoopConfig",
    "SelfPlayConfig",
    "check_config",
    "check_config_key",
    "config_from_dict",
    "config_to_dict",
    "curve_panels",
    "phases",
    "replay_workdir",
    "restore_phase",
    "run_phase",
    "train_and_evaluate",
    "train_sft_only",
]
