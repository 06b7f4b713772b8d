r"""Trains a tool-using agent: SFT on the suite's expert, then RL (GRPO by default), evaluation.

    python -m experiments.train_agent --workdir=/tmp/rlagents_calc
    python -m experiments.train_agent --workdir=/tmp/smoke \
        --config=experiments/configs/calculator.py:smoke --config.seed=1
    python -m experiments.train_agent --workdir=/tmp/retrieval_agent \
        --config=experiments/configs/retrieval.py      # SFT + GRPO on retrieval QA
    python -m experiments.train_agent --workdir=/tmp/retrieval --config.task=retrieval \
        --config.scripted_policy=pad      # a scripted hacking policy; the report counts it
    python -m experiments.train_agent --workdir=/tmp/codefix --config.task=codefix \
        --config.scripted_policy=edit_test      # the report counts the tampering
    python -m experiments.train_agent --workdir=/tmp/mine --config.task=my_pkg.my_task:suite
        # a user's suite: a factory `(config, data_dir) -> rlagents.tasks.TaskSuite`
    python -m experiments.train_agent --workdir=/tmp/ppo --config.algorithm=ppo
        # any registered phase after SFT (rlagents.pipeline.phases)
"""

import os
import sys

from absl import app
from absl import flags
from absl import logging
from ml_collections import config_flags

from rlagents import checkpoint
from rlagents import parallel
from rlagents import pipeline



def _exit_on_unknown_config_keys(argv):
  """ml_collections reports an unknown `--config.x=...` with a long traceback; say it in a line."""
  for arg in argv[1:]:
    if arg.startswith("--config."):
      try:
        pipeline.check_config_key(arg[len("--config."):].split("=", 1)[0])
      except pipeline.ConfigError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
  _exit_on_unknown_config_keys(sys.argv)

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(os.path.dirname(__file__), "configs", "calculator.py"),
    "Experiment config file, optionally with a variant after a colon "
    "(experiments/configs/calculator.py:smoke). Override any field with "
    "--config.<field>=<value>, e.g. --config.grpo.kl_beta=0.04 --config.seed=1; the fields are "
    "documented in rlagents.pipeline.AgentJobConfig.", lock_config=True)
_WORKDIR = flags.DEFINE_string(
    "workdir", "/tmp/rlagents_calc",
    "Where the run lives: config, checkpoints, metrics.csv, tensorboard/, learning_curves.png, "
    "audit/episodes.jsonl, report.json. Run again on the same workdir to resume.")


def main(argv):
  del argv
  logging.set_verbosity(logging.ERROR)
  try:
    # Several processes (RLAGENTS_COORDINATOR / SLURM / Cloud TPU): one job over all devices.
    parallel.initialize()
    config = pipeline.config_from_dict(_CONFIG.value.to_dict())
    report = pipeline.train_and_evaluate(config, _WORKDIR.value)
  except (pipeline.ConfigError, pipeline.JobError, checkpoint.CheckpointError, ValueError) as e:
    sys.exit(f"error: {e}")
  if config.task == "codefix" or config.scripted_policy:
    for split, summary in report["splits"].items():
      print(f"{split}: success {summary['success']:.3f}  mean reward "
            f"{summary['mean_reward']:.3f}  detectors {summary['detectors']}")
    print(f"report: {os.path.join(_WORKDIR.value, 'report.json')}")
    return
  heldout = report["splits"]["heldout"]
  print("heldout success: " + "  ".join(f"{name} {entry['success']:.3f}"
                                        for name, entry in heldout.items()))
  print(f"report: {os.path.join(_WORKDIR.value, 'report.json')}")


if __name__ == "__main__":
  app.run(main)
