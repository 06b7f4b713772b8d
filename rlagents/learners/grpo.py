"""GRPO: group-relative policy optimization with a clipped ratio and KL to a reference.

For each prompt the rollout samples a group of `group_size` episodes; the advantage of an episode
is its reward relative to its group's (Shao et al., 2024, DeepSeekMath). Every policy token of the
episode shares that advantage; observation and prompt tokens are excluded by `loss_mask`:

    loss = policy_gradient_loss(logp, old_logp, A, loss_mask)      (clipped surrogate)
         + beta * aggregate(KL_estimator(logp, ref_logp), loss_mask)

The advantage estimator, the loss variant, the aggregation and the KL estimator are picked by
name from `rlagents.losses`.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from rlagents import episodes as episodes_lib
from rlagents import losses
from rlagents import parallel
from rlagents.learners import _state
from rlagents.learners import sft


@dataclasses.dataclass(frozen=True, kw_only=True)
class GRPOConfig:
  """GRPO settings.

  Attributes:
    num_steps: RL steps (each samples a batch and makes `updates_per_batch` updates).
    prompts_per_step: distinct training tasks per step.
    group_size: episodes sampled per task; advantages are relative within the group.
    updates_per_batch: optimizer updates per sampled batch (1 is strictly on-policy; more makes
      the ratio clip matter).
    advantage_estimator: 'grpo', 'dr_grpo', 'rloo' or 'reinforce_pp'.
    policy_loss: 'ppo' (token ratio) or 'gspo' (sequence ratio).
    aggregation: 'token_mean', 'seq_mean_token_mean' or 'seq_sum_max_len'.
    kl_estimator: 'k1', 'k2' or 'k3'.
    kl_beta: weight of the KL to the reference (the SFT policy); 0 turns it off.
    clip_low: lower clip, the ratio is kept above `1 - clip_low`.
    clip_high: upper clip, the ratio is kept below `1 + clip_high` (DAPO's clip-higher if larger).
    advantage_epsilon: added to the group std.
    microbatch_size: episodes per length-sorted micro-batch in the job's update (0: the whole
      batch at once); the update is the same, only faster when lengths vary.
    off_policy_correction: 'none', 'token_tis' or 'sequence_tis': how a batch sampled by an
      older policy (asynchronous training, `batch['behaviour_logprobs']`) is reweighted towards
      the learner's old policy (`losses.importance_weights`); used only when the batch holds
      behaviour log-probs.
    tis_cap: the truncation C of the importance weights.
    optimizer: optimizer settings.
  """
  num_steps: int = 200
  prompts_per_step: int = 16
  group_size: int = 8
  updates_per_batch: int = 1
  advantage_estimator: str = "grpo"
  policy_loss: str = "ppo"
  aggregation: str = "token_mean"
  kl_estimator: str = "k3"
  kl_beta: float = 0.02
  clip_low: float = 0.2
  clip_high: float = 0.2
  advantage_epsilon: float = 1e-6
  microbatch_size: int = 32
  off_policy_correction: str = "token_tis"
  tis_cap: float = 2.0
  optimizer: _state.OptimizerConfig = _state.OptimizerConfig(learning_rate=2e-4, warmup_steps=10)

  def __post_init__(self):
    for name in ("prompts_per_step", "group_size", "updates_per_batch"):
      if getattr(self, name) < 1:
        raise ValueError(f"GRPOConfig.{name} must be >= 1, got {getattr(self, name)}")
    if self.num_steps < 0:
      raise ValueError(f"GRPOConfig.num_steps must be >= 0, got {self.num_steps}")
    if self.group_size < 2:
      raise ValueError(f"GRPOConfig.group_size must be >= 2 for group-relative advantages, "
                       f"got {self.group_size}")
    if self.microbatch_size < 0 or (
        self.microbatch_size and (self.prompts_per_step * self.group_size) % self.microbatch_size):
      raise ValueError(f"GRPOConfig.microbatch_size ({self.microbatch_size}) must divide "
                       f"prompts_per_step * group_size ({self.prompts_per_step * self.group_size})")
    if self.kl_beta < 0:
      raise ValueError(f"GRPOConfig.kl_beta must be >= 0, got {self.kl_beta}")
    # Unknown names fail here, when the config is built, not at the first step.
    losses.get_advantage_estimator(self.advantage_estimator)
    losses.get_policy_loss(self.policy_loss)
    losses.get_kl_estimator(self.kl_estimator)
    losses.get_aggregation(self.aggregation)
    if self.off_policy_correction not in losses.OFF_POLICY_CORRECTIONS:
      raise ValueError(f"GRPOConfig.off_policy_correction = {self.off_policy_correction!r}; "
                       f"choose one of {losses.OFF_POLICY_CORRECTIONS}")
    if self.tis_cap <= 0:
      raise ValueError(f"GRPOConfig.tis_cap must be > 0, got {self.tis_cap}")


def grpo_loss(params, apply_fn, ref_params, batch, *, config: GRPOConfig, max_len: int):
  """The GRPO objective on a batch whose `advantages` [N] are already computed.

  Returns `(loss, metrics)`; `max_len` is the constant of the 'seq_sum_max_len' aggregation.

  Args:
    params: the policy's parameters (differentiated).
    apply_fn: the model's apply function.
    ref_params: the KL reference's parameters (unused when `config.kl_beta` is 0).
    batch: `tokens` [N, T] int32, `loss_mask` [N, T], `old_logprobs` [N, T], `advantages` [N];
      optionally `behaviour_logprobs` [N, T], the sampler's when it was an older policy than
      the one `old_logprobs` were computed with (`config.off_policy_correction` then applies),
      and `kl_weights` [N], a factor on each episode's KL term (1 everywhere is the plain
      loss; `grpo/kl` stays the unweighted KL).
    config: the GRPO settings.
    max_len: see above.
  """
  tokens, mask = batch["tokens"], batch["loss_mask"]
  logp = _state.forward_logprobs(apply_fn, params, tokens)
  off_policy = {}
  if "behaviour_logprobs" in batch:
    weights, off_policy = losses.importance_weights(
        batch["old_logprobs"], batch["behaviour_logprobs"], mask,
        correction=config.off_policy_correction, cap=config.tis_cap)
  else:
    weights = None
  if config.kl_beta:
    ref_logp = jax.lax.stop_gradient(_state.forward_logprobs(apply_fn, ref_params, tokens))
  else:
    ref_logp = batch["old_logprobs"]
  pg_loss, metrics = losses.policy_gradient_loss(
      logp, batch["old_logprobs"], batch["advantages"], mask, variant=config.policy_loss,
      clip_low=config.clip_low, clip_high=config.clip_high, aggregation=config.aggregation,
      max_len=max_len, importance_weights=weights)
  metrics = {**metrics, **off_policy}
  token_kl = losses.kl_divergence(logp, ref_logp, estimator=config.kl_estimator)
  kl = losses.aggregate_loss(token_kl, mask, aggregation=config.aggregation, max_len=max_len)
  metrics = {f"grpo/{k}": v for k, v in metrics.items()}
  metrics["grpo/kl"] = kl
  if "kl_weights" in batch:  # a per-episode factor on its KL term (e.g. one role's)
    kl = losses.aggregate_loss(token_kl * batch["kl_weights"][:, None], mask,
                               aggregation=config.aggregation, max_len=max_len)
  loss = pg_loss + config.kl_beta * kl
  metrics["grpo/loss"] = loss
  return loss, metrics


def _with_advantages(batch, config: GRPOConfig):
  if "advantages" in batch:  # computed by the caller (e.g. self-play's role-conditioned ones)
    return batch
  estimator = losses.get_advantage_estimator(config.advantage_estimator)
  advantages = estimator(batch["rewards"], group_size=config.group_size,
                         epsilon=config.advantage_epsilon)
  return {**batch, "advantages": advantages}


def grpo_advantages(batch, config: GRPOConfig) -> jax.Array:
  """`[N]` advantages of a whole batch (groups contiguous); computed before it is split on devices,
  since some estimators ('reinforce_pp') normalise over the whole batch.

  Args:
    batch: holds `rewards` [N] float32, N = prompts * group_size with each group contiguous.
    config: the GRPO settings (`advantage_estimator`, `group_size`, `advantage_epsilon`).
  """
  return _with_advantages(batch, config)["advantages"]


def _aggregation_weight(mask: jax.Array, aggregation: str) -> jax.Array:
  """This shard's part of the aggregation's denominator (see `losses.aggregate_loss`)."""
  if aggregation == "token_mean":
    return mask.sum()
  if aggregation == "seq_mean_token_mean":
    return (mask.sum(axis=1) > 0).sum().astype(jnp.float32)
  return jnp.float32(mask.shape[0])  # seq_sum_max_len: a mean over rows


def _grpo_grads(state, params, ref_params, batch, *, config: GRPOConfig, axis_name=None):
  """The gradient part of `grpo_update`: this shard's mean gradient, weight and reduced metrics."""
  grad_fn = jax.value_and_grad(grpo_loss, has_aux=True)
  (_, metrics), grads = grad_fn(params, state.apply_fn, ref_params, batch,
                                config=config, max_len=batch["tokens"].shape[1])
  weight = _aggregation_weight(batch["loss_mask"], config.aggregation)
  metrics = parallel.reduce_across(metrics, weight, axis_name)
  advantage_abs_mean = jnp.abs(batch["advantages"]).mean()
  if axis_name is not None:  # a plain mean over rows, not the loss's weighting
    advantage_abs_mean = jax.lax.pmean(advantage_abs_mean, axis_name)
  metrics["grpo/advantage_abs_mean"] = advantage_abs_mean
  return grads, weight, metrics


def _grpo_apply(state, grads, metrics):
  metrics = {**metrics, "grpo/grad_norm": sft.global_norm(grads)}
  return state.apply_gradients(grads=grads), metrics


def grpo_split_update(config: GRPOConfig) -> parallel.SplitUpdate:
  """`grpo_update` as its gradient and optimizer parts (`parallel.SplitUpdate`).

  Called as `split(state, ref_params, batch, axis_name=None)` it is `grpo_update`; given to
  `parallel.make_update_step` on an fsdp mesh it keeps the parameters and optimizer state
  sharded (only the parameters and the reference are gathered for the step).

  Args:
    config: the GRPO settings.
  """
  return parallel.SplitUpdate(grads=functools.partial(_grpo_grads, config=config),
                              apply=_grpo_apply)


def grpo_update(state, ref_params, batch, *, config: GRPOConfig, axis_name=None):
  """One GRPO optimizer step, pure: `(state, ref_params, batch) -> (state, metrics)`.

  `batch` holds `tokens` [N, T] int32, `loss_mask` [N, T], `old_logprobs` [N, T] and `advantages`
  [N] (from `grpo_advantages` on the whole batch). Under a device map (`rlagents.parallel`)
  `batch` is this device's shard and `axis_name` the mapped axis (or axes): gradients and metrics
  are averaged weighted by each shard's part of the aggregation's denominator, so the step equals
  the single-device step on the whole batch.

  Args:
    state: the policy's `TrainState`.
    ref_params: the KL reference's parameters (unused when `config.kl_beta` is 0).
    batch: as above.
    config: the GRPO settings.
    axis_name: the mapped device axis (or tuple of axes), or None on one device.
  """
  return grpo_split_update(config)(state, ref_params, batch, axis_name=axis_name)


def make_grpo_step(config: GRPOConfig):
  """The jitted GRPO update `(state, ref_params, batch) -> (state, metrics)` on a whole batch.

  `batch` holds `tokens` [N, T] int32, `loss_mask` [N, T] float32, `old_logprobs` [N, T] (the
  sampler's) and `rewards` [N], with N = prompts * group_size and each group contiguous; or,
  instead of `rewards`, `advantages` [N] the caller computed (then used as they are, and the
  rows need not form groups; e.g. `losses.role_conditioned_advantages` for self-play).

  Args:
    config: the GRPO settings (advantage estimator, policy loss, aggregation, KL).
  """

  def update(state, ref_params, batch):
    batch = _with_advantages(batch, config)
    return grpo_update(state, ref_params, batch, config=config)

  return jax.jit(update, donate_argnums=(0,))


class MicrobatchedGRPOStep:
  """The same update as `make_grpo_step`, computed over length-sorted micro-batches.

  Episodes vary a lot in length (one call, or several with retries), so padding a whole batch to
  its longest episode wastes most of the compute. This step (host code around jitted pieces)
  computes advantages on the whole batch, sorts the episodes by length, cuts them into
  micro-batches of `microbatch_size` rows, trims each to its own length (rounded up to
  `length_multiple`, so few shapes compile), and sums the micro-batch gradients, each weighted
  by its share of the aggregation's denominator, so the result equals the whole-batch gradient.

  Args:
    config: the GRPO settings.
    microbatch_size: episodes per micro-batch.
    length_multiple: micro-batches are trimmed to a multiple of this many tokens (fewer shapes
      to compile).
    place_batch: puts each micro-batch where the update runs, e.g. split over a device mesh
      (`rlagents.parallel`), so its jitted pieces run data-parallel; default: as it is.
  """

  def __init__(self, config: GRPOConfig, *, microbatch_size: int, length_multiple: int = 32,
               place_batch=None):
    self.config = config
    self.microbatch_size = microbatch_size
    self.length_multiple = length_multiple
    self.place_batch = place_batch or (lambda batch: batch)
    self._advantages = jax.jit(lambda batch: _with_advantages(batch, config)["advantages"])

    def weighted_grads(params, apply_fn, ref_params, batch, weight, max_len):
      grad_fn = jax.value_and_grad(grpo_loss, has_aux=True)
      (_, metrics), grads = grad_fn(params, apply_fn, ref_params, batch, config=config,
                                    max_len=max_len)
      scale = lambda tree: jax.tree.map(lambda x: x * weight, tree)
      return scale(grads), scale(metrics)

    self._grads = jax.jit(weighted_grads, static_argnames=("apply_fn", "max_len"))
    self._add = jax.jit(lambda a, b: jax.tree.map(jnp.add, a, b))

    def apply(state, grads):
      return state.apply_gradients(grads=grads), sft.global_norm(grads)

    self._apply = jax.jit(apply, donate_argnums=(0,))

  def _weights(self, mask: np.ndarray, chunks) -> list[float]:
    if self.config.aggregation == "token_mean":
      per_row = mask.sum(axis=1)
    elif self.config.aggregation == "seq_mean_token_mean":
      per_row = (mask.sum(axis=1) > 0).astype(np.float64)
    else:  # seq_sum_max_len: a mean over rows of a constant-normalized sum.
      per_row = np.ones(len(mask))
    total = max(per_row.sum(), 1e-9)
    return [float(per_row[rows].sum() / total) for rows in chunks]

  def __call__(self, state, ref_params, batch):
    """`(state, ref_params, batch) -> (state, metrics)` with `batch` as for `make_grpo_step`
    (`rewards`, or precomputed `advantages`)."""
    batch = {k: np.asarray(v) for k, v in batch.items()}
    advantages = (batch["advantages"] if "advantages" in batch
                  else np.asarray(self._advantages(batch)))
    tokens, mask = batch["tokens"], batch["loss_mask"]
    full_length = tokens.shape[1]
    if len(tokens) % self.microbatch_size:
      raise ValueError(f"batch of {len(tokens)} episodes is not divisible into micro-batches "
                       f"of {self.microbatch_size}")
    row_lengths = episodes_lib.sequence_lengths(tokens, mask)
    order = np.argsort(row_lengths, kind="stable")
    size = self.microbatch_size
    chunks = [order[i:i + size] for i in range(0, len(order), size)]
    weights = self._weights(mask, chunks)
    grads = metrics = None
    for rows, weight in zip(chunks, weights):
      used = -(-int(row_lengths[rows].max()) // self.length_multiple) * self.length_multiple
      used = min(max(used, self.length_multiple), full_length)
      micro = {
          "tokens": tokens[rows, :used],
          "loss_mask": mask[rows, :used],
          "old_logprobs": batch["old_logprobs"][rows, :used],
          "advantages": advantages[rows],
      }
      if "behaviour_logprobs" in batch:
        micro["behaviour_logprobs"] = batch["behaviour_logprobs"][rows, :used]
      if "kl_weights" in batch:
        micro["kl_weights"] = batch["kl_weights"][rows]
      g, m = self._grads(state.params, state.apply_fn, ref_params, self.place_batch(micro),
                         weight, full_length)
      grads = g if grads is None else self._add(grads, g)
      metrics = m if metrics is None else self._add(metrics, m)
    state, grad_norm = self._apply(state, grads)
    metrics = dict(metrics)
    metrics["grpo/grad_norm"] = grad_norm
    metrics["grpo/advantage_abs_mean"] = np.abs(advantages).mean()
    return state, metrics
