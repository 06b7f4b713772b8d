"""DPO and KTO: offline updates on verified samples of the SFT policy (or on the user's files).

Unless `preferences.preference_file` (DPO) or `preferences.feedback_file` (KTO) is given, the
SFT policy is sampled on training prompts (through the guarded tools, audited, up to the token
budget), each episode is verified, and the pairs (a correct and an incorrect episode of a task)
or labelled completions are written to `data/{dpo,kto}.jsonl` once; the steps then draw batches
from that file.
"""

import json
import os

import jax

from rlagents import episodes as episodes_lib
from rlagents import learners
from rlagents.learners import dpo as dpo_lib
from rlagents.pipeline import _job as job_lib
from rlagents.pipeline.phases import _base

PREFERENCES_PHASE_ID = 8


def _fits(prompt: str, completion: str, tokenizer, max_length: int) -> bool:
  try:
    episodes_lib.encode_pieces(episodes_lib.completion_pieces(prompt, completion), tokenizer,
                               max_length)
  except episodes_lib.EncodeError:
    return False
  return True


class _Offline(_base.Phase):
  """DPO or KTO from the SFT policy, the frozen reference (`config.dpo`)."""
  phase_id = 6

  def settings(self, config):
    return config.dpo

  def validate(self, config):
    if config.lora.rank:
      return (f"algorithm={self.name!r} trains all parameters; lora.rank={config.lora.rank} "
              "needs 'grpo'")
    if config.soft_reward.weight:
      return (f"soft_reward.weight={config.soft_reward.weight}: algorithm={self.name!r} has no "
              "online reward for the learned term to join")
    if config.diversity_weight:
      return (f"diversity_weight={config.diversity_weight} shapes online rewards; "
              f"algorithm={self.name!r} has none")
    other = "feedback_file" if self.name == "dpo" else "preference_file"
    if getattr(config.preferences, other):
      return (f"preferences.{other} is read by algorithm="
              f"{'kto' if self.name == 'dpo' else 'dpo'!r}, not {self.name!r}")
    return None

  def _user_file(self, config) -> str:
    prefs = config.preferences
    return prefs.preference_file if self.name == "dpo" else prefs.feedback_file

  def _data_path(self, job) -> str:
    return self._user_file(job.config) or os.path.join(job.workdir, "data", f"{self.name}.jsonl")

  def _sample(self, job, reference, path: str) -> None:
    """Samples and verifies SFT episodes; writes the records and their statistics."""
    config, prefs = job.config, job.config.preferences
    train = job.suite.splits["train"]
    rng = job.rng(PREFERENCES_PHASE_ID)
    order = rng.permutation(len(train))[:prefs.policy_prompts]
    chunk = config.grpo.prompts_per_step
    episodes, sampled = [], 0
    for index, begin in enumerate(range(0, len(order), chunk)):
      if config.sampled_token_budget and sampled >= config.sampled_token_budget:
        break
      tasks = [train[i] for i in order[begin:begin + chunk] for _ in range(prefs.policy_samples)]
      batch = job.policy_episodes(
          reference, tasks, rng=job.rng(PREFERENCES_PHASE_ID, 1, index),
          key=jax.random.fold_in(jax.random.PRNGKey(config.seed + 1), index))
      sampled += int(batch.loss_mask.sum())
      episodes += batch.episodes
    job.outputs.episodes(episodes, phase=f"{self.name}_data", step=job.sft_steps, policy="sft")
    if self.name == "dpo":
      records = learners.pair_records(learners.verified_preferences(episodes, rng=rng))
      completions = ("chosen", "rejected")
    else:
      records = learners.feedback_records(learners.verified_feedback(episodes))
      completions = ("completion",)
    # An episode that ran into the end of the rollout buffer can re-encode a few tokens longer
    # than `rollout.max_length` (the tool output cut at the buffer's end is whole in its text):
    # such records are left out and counted, where a user's file would be an error.
    kept = [r for r in records
            if all(_fits(r["prompt"], r[c], job.tokenizer, config.rollout.max_length)
                   for c in completions)]
    learners.write_jsonl(path + ".tmp", kept)
    os.replace(path + ".tmp", path)
    with open(path + ".stats.json", "w") as f:
      json.dump({"sampled_tokens": sampled, "episodes": len(episodes), "records": len(kept),
                 "records_too_long": len(records) - len(kept)}, f)

  def prepare(self, job, state, reference):
    path = self._data_path(job)
    if not self._user_file(job.config) and not os.path.exists(path):
      self._sample(job, reference, path)
    length = job.config.rollout.max_length
    try:
      if self.name == "dpo":
        data = learners.encode_pairs(learners.load_preferences(path), job.tokenizer, length)
        update = learners.make_dpo_step(job.config.dpo)
      else:
        data = learners.encode_feedback(learners.load_feedback(path), job.tokenizer, length)
        update = learners.make_kto_step(job.config.dpo)
    except learners.PreferenceDataError as error:
      raise job_lib.JobError(str(error)) from None
    return data, update, job.place_state(reference)

  def step(self, job, context, state, *, step, key, rng):
    data, update, reference = context
    batch = dpo_lib.draw_batch(data, job.config.dpo.batch_size, rng)
    state, metrics = update(state, reference, job.place_batch(batch))
    return _base.StepResult(state, metrics)

  def finish(self, job, context):
    """The sampled data's statistics (tokens, records), and how many examples it trained on."""
    stats = {}
    path = self._data_path(job)
    if not self._user_file(job.config) and os.path.exists(path + ".stats.json"):
      with open(path + ".stats.json") as f:
        stats.update(json.load(f))
    else:
      stats["sampled_tokens"] = 0
    if context is not None:
      stats["train_examples"] = len(next(iter(context[0].values())))
    return stats


class DPO(_Offline):
  name = "dpo"

  def panels(self, config):
    return {"DPO objective": ["dpo/dpo_loss", "dpo/reward_accuracy"],
            "DPO implicit rewards": ["dpo/chosen_reward", "dpo/rejected_reward",
                                     "dpo/reward_margin"]}


class KTO(_Offline):
  name = "kto"

  def panels(self, config):
    return {"KTO objective": ["kto/kto_loss"],
            "KTO implicit rewards": ["kto/desirable_reward", "kto/undesirable_reward",
                                     "kto/kl_reference"]}


DPO_PHASE = _base.register_phase(DPO())
KTO_PHASE = _base.register_phase(KTO())
