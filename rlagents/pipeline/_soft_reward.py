"""The reward model behind the soft reward: trained (or restored) once, before online RL.

The suite's expert plays `preferences.expert_attempts` episodes of each of
`preferences.expert_tasks` training tasks; a task with a correct and an incorrect episode gives
pairs (`learners.verified_preferences`), 20% of the tasks are held out for the pairwise
accuracy. The trained scorer is set on the job (`job.learned_scorer`), and `job.train_episodes`
adds its term to every training episode's reward. Host code.
"""

import os
import time
from typing import Any

import jax
import numpy as np

from rlagents import checkpoint as checkpoint_lib
from rlagents import episodes as episodes_lib
from rlagents import learners
from rlagents import networks
from rlagents.learners import reward_model as reward_model_lib
from rlagents.pipeline import _job as job_lib

REWARD_MODEL_PHASE_ID = 7


def train_reward_model(job: job_lib.Job, sft_params) -> dict[str, Any]:
  """Trains (or restores) the reward model from `sft_params`; sets the job's scorer; returns its
  report (held-out pairwise accuracy, pairs, seconds, parameters)."""
  config = job.config
  model = networks.Transformer(networks.reward_model_config(job.model.config))
  params = networks.reward_model_params(job_lib.fetch(sft_params), job.model.config)
  with checkpoint_lib.Checkpointer(
      os.path.join(job.workdir, "checkpoints", "reward_model")) as checkpointer:
    restored = checkpointer.restore_latest(params)
    if restored is not None:
      params, report = restored.state, restored.metadata
    else:
      params, report = _fit(job, model, params)
      checkpointer.save(config.reward_model.num_steps, params, report)
  job.outputs.metrics(job.sft_steps, {f"reward_model/{k}": float(v) for k, v in report.items()})
  print(f"reward model: held-out pairwise accuracy {report['heldout_accuracy']:.3f} on "
        f"{report['heldout_pairs']} pairs", flush=True)
  score = jax.jit(lambda p, tokens: networks.sequence_scores(model.apply, p, tokens))
  job.learned_scorer = lambda tokens: np.asarray(
      score(params, episodes_lib.trim_to_longest({"tokens": tokens})["tokens"]))
  return report


def _fit(job: job_lib.Job, model, params):
  config, prefs = job.config, job.config.preferences
  start = time.time()
  tasks = job.suite.splits["train"][:prefs.expert_tasks]
  episodes = job.expert_episodes([t for t in tasks for _ in range(prefs.expert_attempts)],
                                 job.rng(REWARD_MODEL_PHASE_ID))
  rng = job.rng(REWARD_MODEL_PHASE_ID, 1)
  pairs = learners.verified_preferences(episodes, rng=rng)
  train, heldout = reward_model_lib.split_pairs(pairs, config.reward_model.heldout_fraction, rng)
  length = config.rollout.max_length
  params, report = learners.train_reward_model(
      model, params, learners.encode_pairs(train, job.tokenizer, length), config.reward_model,
      rng=rng, heldout_data=learners.encode_pairs(heldout, job.tokenizer, length))
  report["seconds"] = time.time() - start
  report["parameters"] = job_lib.count_parameters(params)
  return params, report
