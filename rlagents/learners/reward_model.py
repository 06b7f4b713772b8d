"""Reward model training: Bradley-Terry on preference pairs, and its held-out pairwise accuracy.

The model is the decoder trunk with a scalar head (`rlagents.networks.sequence_scores`); for a
pair (chosen y_w, rejected y_l) of the same prompt x it minimizes

    -log sigmoid(s(x, y_w) - s(x, y_l))          (`rlagents.losses.bradley_terry_loss`)

Data come from JSONL files or from verifiable tasks (a correct and an incorrect episode of the
same prompt), see `rlagents.learners.load_preferences` and `verified_preferences`.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rlagents import losses
from rlagents import networks
from rlagents import episodes as episodes_lib
from rlagents.learners import _state
from rlagents.learners import sft


@dataclasses.dataclass(frozen=True, kw_only=True)
class RewardModelConfig:
  """Reward-model training.

  Attributes:
    num_steps: optimizer steps.
    batch_size: pairs per step.
    heldout_fraction: fraction of the pairs kept out of training for the accuracy report.
    optimizer: optimizer settings.
  """
  num_steps: int = 300
  batch_size: int = 32
  heldout_fraction: float = 0.2
  optimizer: _state.OptimizerConfig = _state.OptimizerConfig(learning_rate=5e-4,
                                                             warmup_steps=20)

  def __post_init__(self):
    if self.num_steps < 0:
      raise ValueError(f"RewardModelConfig.num_steps must be >= 0, got {self.num_steps}")
    if self.batch_size < 1:
      raise ValueError(f"RewardModelConfig.batch_size must be >= 1, got {self.batch_size}")
    if not 0 < self.heldout_fraction < 1:
      raise ValueError(f"RewardModelConfig.heldout_fraction must be in (0, 1), got "
                       f"{self.heldout_fraction}")


def pair_scores(params, apply_fn, batch):
  """`(chosen [B], rejected [B])` scores, in one forward pass over the stacked pairs.

  Args:
    params: the reward model's parameters.
    apply_fn: the `apply` of a `Transformer` with a value head.
    batch: `chosen_tokens` `[B, T1]` and `rejected_tokens` `[B, T2]` int32 (zero-padded to a
      common length here).
  """
  chosen, rejected = batch["chosen_tokens"], batch["rejected_tokens"]
  length = max(chosen.shape[1], rejected.shape[1])
  pad = lambda x: jnp.pad(x, ((0, 0), (0, length - x.shape[1])))
  scores = networks.sequence_scores(apply_fn, params,
                                    jnp.concatenate([pad(chosen), pad(rejected)]))
  return scores[:len(chosen)], scores[len(chosen):]


def reward_model_loss(params, apply_fn, batch):
  """The Bradley-Terry loss of a batch of encoded pairs; returns `(loss, metrics)`.

  Args:
    params: the reward model's parameters (differentiated).
    apply_fn: the `apply` of a `Transformer` with a value head.
    batch: `chosen_tokens` and `rejected_tokens` `[B, T]` int32, from `encode_pairs`.
  """
  chosen, rejected = pair_scores(params, apply_fn, batch)
  loss, metrics = losses.bradley_terry_loss(chosen, rejected)
  return loss, {f"reward_model/{k}": v for k, v in metrics.items()}


def reward_model_update(state, batch, key=None):
  """One optimizer step; pure `(state, batch, key) -> (state, metrics)`.

  Args:
    state: the reward model's `TrainState`.
    batch: encoded pairs, as for `reward_model_loss`.
    key: unused (the step is deterministic); kept for the common update signature.
  """
  del key  # deterministic
  grad_fn = jax.value_and_grad(reward_model_loss, has_aux=True)
  (_, metrics), grads = grad_fn(state.params, state.apply_fn, batch)
  metrics["reward_model/grad_norm"] = sft.global_norm(grads)
  return state.apply_gradients(grads=grads), metrics


def make_reward_model_step():
  """The jitted update; the state buffer is donated. `batch` is from `encode_pairs`."""
  return jax.jit(reward_model_update, donate_argnums=(0,))


def split_pairs(pairs, heldout_fraction: float, rng: np.random.Generator):
  """(train, heldout) lists; pairs of one prompt stay on one side.

  Args:
    pairs: the `PreferencePair`s to split.
    heldout_fraction: fraction of the distinct prompts held out (at least one).
    rng: picks the held-out prompts.
  """
  prompts = sorted({p.prompt for p in pairs})
  order = rng.permutation(len(prompts))
  heldout_prompts = {prompts[i] for i in order[:max(1, int(len(prompts) * heldout_fraction))]}
  train = [p for p in pairs if p.prompt not in heldout_prompts]
  heldout = [p for p in pairs if p.prompt in heldout_prompts]
  return train, heldout


def pairwise_accuracy(apply_fn, params, data: dict[str, np.ndarray], *,
                      batch_size: int = 64) -> float:
  """Fraction of encoded pairs whose chosen completion scores higher (host loop).

  Args:
    apply_fn: the reward model's `apply`.
    params: its parameters.
    data: encoded pairs from `encode_pairs`, `[N, T]` arrays.
    batch_size: pairs scored per forward pass.

  Returns:
    The accuracy in [0, 1] (0 for no pairs); ties count as wrong.
  """
  score = jax.jit(lambda p, b: pair_scores(p, apply_fn, b))
  wins = 0
  n = len(data["chosen_tokens"])
  for start in range(0, n, batch_size):
    batch = episodes_lib.trim_to_longest(
        {k: v[start:start + batch_size] for k, v in data.items()})
    chosen, rejected = jax.device_get(score(params, batch))
    wins += int((chosen > rejected).sum())
  return wins / max(n, 1)


def train_reward_model(model, init_params, train_data: dict[str, np.ndarray], config:
                       RewardModelConfig, *, rng: np.random.Generator,
                       heldout_data: dict[str, np.ndarray] | None = None,
                       log=None) -> tuple[Any, dict[str, float]]:
  """Trains a reward model (host loop); returns `(params, report)`.

  Args:
    model: a `Transformer` with `value_head=True`.
    init_params: its initial parameters (e.g. `networks.reward_model_params(policy_params)`).
    train_data, heldout_data: from `encode_pairs`.
    config: training settings.
    rng: draws the batches.
    log: optional `fn(step, metrics)` called every 25 steps.

  Returns:
    The trained parameters and a report: 'train_accuracy', 'heldout_accuracy' (if held-out data
    were given), 'train_pairs', 'heldout_pairs', 'final_loss'.
  """
  state = _state.create_train_state(model, init_params, config.optimizer)
  update = make_reward_model_step()
  n = len(train_data["chosen_tokens"])
  metrics = {}
  for step in range(config.num_steps):
    rows = rng.integers(n, size=config.batch_size)
    batch = episodes_lib.trim_to_longest({k: v[rows] for k, v in train_data.items()})
    state, metrics = update(state, batch)
    if log is not None and ((step + 1) % 25 == 0 or step + 1 == config.num_steps):
      log(step + 1, jax.device_get(metrics))
  report = {
      "train_pairs": n,
      "train_accuracy": pairwise_accuracy(state.apply_fn, state.params, train_data),
      "final_loss": float(metrics.get("reward_model/bt_loss", np.nan)),
  }
  if heldout_data is not None:
    report["heldout_pairs"] = len(heldout_data["chosen_tokens"])
    report["heldout_accuracy"] = pairwise_accuracy(state.apply_fn, state.params, heldout_data)
  return state.params, report
