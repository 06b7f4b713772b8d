"""PPO for language agents: a token-level critic, GAE over the policy's own tokens, KL in the reward.

The RLHF form of PPO (Ziegler et al. 2019, https://arxiv.org/abs/1909.08593; Ouyang et al. 2022,
https://arxiv.org/abs/2203.02155) on multi-turn tool-use episodes. (`learners/ppo.py` is PPO for
JAX environments.) Each generated token is an action; the state before it is the text so far.

Rewards. The episode's outcome reward R lands on its last policy token, and every policy token t
pays the KL penalty to the reference (the SFT policy):

    r_t = R [t is the last policy token] - beta * (log pi_old(a_t) - log ref(a_t))

Values. V_t = V(tokens[:t]) is the critic's output after token t - 1 (the state in which a_t was
chosen). The critic is the policy's own value head on the shared trunk (`critic='shared'`,
`TransformerConfig.value_head`, zero-initialised) or a separate decoder with a scalar head
(`critic='separate'`, initialised from the policy's weights).

GAE over policy tokens only. Tool-output (observation) tokens are written by the environment, not
chosen by the policy: they are not actions and they have no reward, advantage or value target.
`policy_token_gae` *skips* them: the policy tokens of an episode, in order, form the trajectory,
and the successor of policy token t is the next policy token t' (however many observation tokens
lie between; the observation is part of the transition s_t -> s_t'). So

    delta_t = r_t + gamma * V_t' - V_t,     A_t = delta_t + gamma * lambda * A_t'

with V and A of the step after the last policy token equal to 0 (the episode ended). Discount and
lambda are applied once per policy token, never per observation token, so a long tool output does
not shrink the credit that flows back to the call that caused it. Masked positions get advantage
and return 0 (and the losses ignore them).

Loss, over `epochs` passes of `num_minibatches` shuffled minibatches:

    loss = policy_gradient_loss(logp, logp_old, A_t, mask)                     (clipped ratio)
         + value_coef * value_loss(V, V_old, returns, mask, clip_epsilon=value_clip)
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from rlagents import losses
from rlagents import networks
from rlagents.learners import _state
from rlagents.learners import sft

CRITICS = ("shared", "separate")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PPOAgentConfig:
  """PPO settings for the language agent.

  Attributes:
    num_steps: RL steps; each samples `episodes_per_step` episodes and makes
      `epochs * num_minibatches` updates.
    episodes_per_step: episodes sampled per step (distinct training tasks).
    epochs: passes over each sampled batch.
    num_minibatches: minibatches per pass (must divide `episodes_per_step`).
    clip: ratio clip, kept in [1 - clip, 1 + clip].
    value_clip: value clipping around the old values (0: off).
    value_coef: weight of the value loss.
    kl_beta: per-token KL penalty to the reference, folded into the reward (0: off).
    kl_estimator: the per-token KL estimate in the reward: 'k1' (usual), 'k2' or 'k3'.
    discount: gamma per policy token.
    gae_lambda: GAE's lambda. 1 (Monte Carlo returns, the critic only a baseline) is the
      default: the decisive tokens (call the tool or guess) come first, and with lambda < 1 a
      freshly initialised critic's errors discount their credit by lambda^(episode length).
    whiten_advantages: normalize advantages over the batch's policy tokens.
    critic: 'shared' (value head on the policy's trunk) or 'separate' (its own decoder).
    aggregation: token aggregation of both losses.
    optimizer: optimizer settings (policy and critic together).
  """
  num_steps: int = 200
  episodes_per_step: int = 128
  epochs: int = 2
  num_minibatches: int = 4
  clip: float = 0.2
  value_clip: float = 0.2
  value_coef: float = 0.5
  kl_beta: float = 0.02
  kl_estimator: str = "k1"
  discount: float = 1.0
  gae_lambda: float = 1.0
  whiten_advantages: bool = True
  critic: str = "shared"
  aggregation: str = "token_mean"
  optimizer: _state.OptimizerConfig = _state.OptimizerConfig(learning_rate=2e-4, warmup_steps=10)

  def __post_init__(self):
    for name in ("episodes_per_step", "epochs", "num_minibatches"):
      if getattr(self, name) < 1:
        raise ValueError(f"PPOAgentConfig.{name} must be >= 1, got {getattr(self, name)}")
    if self.num_steps < 0:
      raise ValueError(f"PPOAgentConfig.num_steps must be >= 0, got {self.num_steps}")
    if self.episodes_per_step % self.num_minibatches:
      raise ValueError(f"PPOAgentConfig.num_minibatches ({self.num_minibatches}) must divide "
                       f"episodes_per_step ({self.episodes_per_step})")
    if self.critic not in CRITICS:
      raise ValueError(f"PPOAgentConfig.critic must be one of {', '.join(CRITICS)}, got "
                       f"{self.critic!r}")
    for name in ("clip", "value_clip", "value_coef", "kl_beta"):
      if getattr(self, name) < 0:
        raise ValueError(f"PPOAgentConfig.{name} must be >= 0, got {getattr(self, name)}")
    for name in ("discount", "gae_lambda"):
      if not 0 <= getattr(self, name) <= 1:
        raise ValueError(f"PPOAgentConfig.{name} must be in [0, 1], got {getattr(self, name)}")
    losses.get_kl_estimator(self.kl_estimator)
    losses.get_aggregation(self.aggregation)


def policy_token_gae(rewards: jax.Array, values: jax.Array, loss_mask: jax.Array, *,
                     discount: float, gae_lambda: float) -> tuple[jax.Array, jax.Array]:
  """GAE over the policy tokens of one episode, skipping the masked positions.

  The policy tokens (mask 1) are gathered in order into a contiguous trajectory that ends with
  its last policy token, `losses.gae_advantages` runs on it, and the results are scattered back;
  see the module docstring for the recursion. Rewards and values at masked positions are ignored.

  Args:
    rewards: `[T]` per-token rewards.
    values: `[T]` V_t, the value of the state before token t.
    loss_mask: `[T]` 1 on policy tokens, 0 on prompt, observations and padding.
    discount: gamma per policy token.
    gae_lambda: lambda.

  Returns:
    `(advantages [T], returns [T])`, 0 where the mask is 0.
  """
  is_policy = loss_mask > 0
  # A stable sort puts the policy tokens first, in their order.
  order = jnp.argsort(jnp.logical_not(is_policy), stable=True)
  count = is_policy.sum()
  index = jnp.arange(rewards.shape[0])
  kept = index < count
  compact_rewards = jnp.where(kept, rewards[order], 0.0)
  compact_values = jnp.where(kept, values[order], 0.0)
  # Done at the last policy token (no bootstrap) and on the unused tail, so nothing leaks in.
  dones = index >= count - 1
  advantages, returns = losses.gae_advantages(
      compact_rewards, compact_values, dones, discount=discount, gae_lambda=gae_lambda,
      bootstrap_value=jnp.zeros((), compact_values.dtype))
  weights = is_policy.astype(rewards.dtype)
  scatter = lambda x: jnp.zeros_like(x).at[order].set(jnp.where(kept, x, 0.0)) * weights
  return scatter(advantages), scatter(returns)


def terminal_token_rewards(outcome: jax.Array, loss_mask: jax.Array) -> jax.Array:
  """`[B, T]` rewards: `outcome [B]` on each row's last policy token, 0 elsewhere.

  Args:
    outcome: `[B]` float32 episode rewards.
    loss_mask: `[B, T]`, 1 on policy tokens (a row with none gets no reward).
  """
  positions = jnp.arange(loss_mask.shape[1])
  last = jnp.max(jnp.where(loss_mask > 0, positions, -1), axis=1)
  return jnp.where(positions[None, :] == last[:, None], outcome[:, None], 0.0)


def shift_values(values: jax.Array) -> jax.Array:
  """`[B, T]` V_t = the head's output after token t - 1 (0 at t = 0, never a policy token).

  Args:
    values: `[B, T]` float32, the value head's output at each position.
  """
  return jnp.pad(values[:, :-1], ((0, 0), (1, 0)))


def init_params(policy_params, model_config: networks.TransformerConfig, *, critic: str):
  """PPO's trainable parameters from the SFT policy's.

  'shared': `{'policy': policy + zero value head}`; 'separate': `{'policy': policy, 'critic':
  a copy of the policy's trunk with a zero scalar head}`.

  Args:
    policy_params: the SFT policy's parameters (not modified; 'separate' copies them).
    model_config: the policy's `TransformerConfig`, for adding the value head.
    critic: 'shared' or 'separate' (see `PPOAgentConfig.critic`).
  """
  if critic == "shared":
    return {"policy": networks.reward_model_params(policy_params, model_config)}
  return {"policy": jax.tree.map(jnp.copy, policy_params),
          "critic": networks.reward_model_params(policy_params, model_config)}


def logprobs_and_values(apply_fn, params, tokens: jax.Array, *, critic: str):
  """`(logp [B, T], V [B, T])` of the policy and its critic; `apply_fn` has a value head.

  `logp` is each token's log-probability given those before it; `V` is shifted by
  `shift_values`, so V_t is the value of the state before token t.

  Args:
    apply_fn: the `apply` of a `Transformer` with a value head.
    params: from `init_params`: `{'policy': ...}` or `{'policy': ..., 'critic': ...}`.
    tokens: `[B, T]` int32 episodes.
    critic: 'shared' or 'separate', as `params` were built.
  """
  if critic == "shared":
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
    logits, values = apply_fn(params["policy"], tokens, positions,
                              method=networks.Transformer.logits_and_values)
    logp = networks.token_logprobs(logits, tokens)
  else:
    logp = _state.forward_logprobs(apply_fn, params["policy"], tokens)
    values = networks.token_values(apply_fn, params["critic"], tokens)
  return logp, shift_values(values)


def prepare_batch(params, apply_fn, ref_params, batch, *, config: PPOAgentConfig):
  """Adds `old_values`, `advantages` and `returns` (all `[N, T]`) to a sampled batch.

  `batch`: `tokens` [N, T] int32, `loss_mask` [N, T], `old_logprobs` [N, T] (the sampler's),
  `rewards` [N] (outcome per episode).

  Args:
    params: the policy's and critic's parameters (from `init_params`); not differentiated.
    apply_fn: the `apply` of a `Transformer` with a value head.
    ref_params: the frozen reference policy's parameters (unused when `config.kl_beta` is 0).
    batch: as above.
    config: the PPO settings (critic, KL penalty, discount, lambda, whitening).

  Returns:
    `(prepared batch, metrics)`: the batch with the three arrays added, and
    `ppo/return_mean` (plus `ppo/kl_reward_penalty` with a KL penalty).
  """
  tokens, mask = batch["tokens"], batch["loss_mask"]
  _, old_values = logprobs_and_values(apply_fn, params, tokens, critic=config.critic)
  rewards = terminal_token_rewards(batch["rewards"], mask)
  metrics = {}
  if config.kl_beta:
    ref_logp = _state.forward_logprobs(apply_fn, ref_params, tokens)
    penalized = losses.kl_penalty_in_reward(rewards, batch["old_logprobs"], ref_logp, mask,
                                            beta=config.kl_beta, estimator=config.kl_estimator)
    metrics["ppo/kl_reward_penalty"] = ((rewards - penalized) * mask).sum() / jnp.maximum(
        mask.sum(), 1.0)
    rewards = penalized
  gae = functools.partial(policy_token_gae, discount=config.discount,
                          gae_lambda=config.gae_lambda)
  advantages, returns = jax.vmap(gae)(rewards, old_values, mask)
  if config.whiten_advantages:
    count = jnp.maximum(mask.sum(), 1.0)
    mean = (advantages * mask).sum() / count
    std = jnp.sqrt((jnp.square(advantages - mean) * mask).sum() / count)
    advantages = (advantages - mean) / (std + 1e-8) * mask
  metrics["ppo/return_mean"] = (returns * mask).sum() / jnp.maximum(mask.sum(), 1.0)
  return {**batch, "old_values": old_values * mask, "advantages": advantages,
          "returns": returns}, metrics


def ppo_agent_loss(params, apply_fn, batch, *, config: PPOAgentConfig, max_len: int):
  """The PPO objective on a prepared (mini)batch; returns `(loss, metrics)`.

  Args:
    params: the policy's and critic's parameters (differentiated).
    apply_fn: the `apply` of a `Transformer` with a value head.
    batch: from `prepare_batch` (or rows of it): `tokens` [N, T] int32, `loss_mask`,
      `old_logprobs`, `old_values`, `advantages`, `returns` [N, T].
    config: the PPO settings (clip, value clip and coefficient, critic, aggregation).
    max_len: the constant of the 'seq_sum_max_len' aggregation.
  """
  tokens, mask = batch["tokens"], batch["loss_mask"]
  logp, values = logprobs_and_values(apply_fn, params, tokens, critic=config.critic)
  pg_loss, pg_metrics = losses.policy_gradient_loss(
      logp, batch["old_logprobs"], batch["advantages"], mask, variant="ppo",
      clip_low=config.clip, clip_high=config.clip, aggregation=config.aggregation,
      max_len=max_len)
  v_loss, v_metrics = losses.value_loss(
      values, batch["old_values"], batch["returns"], mask,
      clip_epsilon=config.value_clip or None, aggregation=config.aggregation, max_len=max_len)
  loss = pg_loss + config.value_coef * v_loss
  metrics = {f"ppo/{k}": v for k, v in {**pg_metrics, **v_metrics}.items()}
  metrics["ppo/loss"] = loss
  return loss, metrics


class PPOAgentStep:
  """One PPO step on a sampled batch: prepare (values, GAE), then minibatch epochs.

  Host code around two jitted pieces. `__call__(state, ref_params, batch, rng) -> (state,
  metrics)`; `state.params` is from `init_params`, `state.apply_fn` is the `apply` of a
  `Transformer` with a value head, `ref_params` the frozen reference policy's. `batch` is as for
  `prepare_batch`, `rng` shuffles the minibatches, and the state's buffers are donated.

  Args:
    config: the PPO settings.
    place_batch: puts the batch where the update runs, e.g. split over a device mesh
      (`rlagents.parallel`), so the jitted pieces run data-parallel; default: as it is.
  """

  def __init__(self, config: PPOAgentConfig, *, place_batch=None):
    self.config = config
    self.place_batch = place_batch or (lambda batch: batch)
    self._prepare = jax.jit(lambda params, apply_fn, ref_params, batch: prepare_batch(
        params, apply_fn, ref_params, batch, config=config), static_argnums=(1,))

    def update(state, minibatch):
      grad_fn = jax.value_and_grad(ppo_agent_loss, has_aux=True)
      (_, metrics), grads = grad_fn(state.params, state.apply_fn, minibatch, config=config,
                                    max_len=minibatch["tokens"].shape[1])
      metrics["ppo/grad_norm"] = sft.global_norm(grads)
      return state.apply_gradients(grads=grads), metrics

    self._update = jax.jit(update, donate_argnums=(0,))

  def __call__(self, state, ref_params, batch, rng: np.random.Generator):
    batch = self.place_batch({k: jnp.asarray(v) for k, v in batch.items()})
    prepared, prepare_metrics = self._prepare(state.params, state.apply_fn, ref_params, batch)
    n = len(batch["tokens"])
    size = n // self.config.num_minibatches
    if n % self.config.num_minibatches:
      raise ValueError(f"batch of {n} episodes is not divisible into "
                       f"{self.config.num_minibatches} minibatches")
    all_metrics = []
    for _ in range(self.config.epochs):
      order = rng.permutation(n)
      for start in range(0, n, size):
        rows = jnp.asarray(order[start:start + size])
        minibatch = self.place_batch({k: v[rows] for k, v in prepared.items()})
        state, metrics = self._update(state, minibatch)
        all_metrics.append(metrics)
    metrics = jax.tree.map(lambda *xs: jnp.mean(jnp.stack(xs)), *all_metrics)
    metrics.update(prepare_metrics)
    metrics["ppo/advantage_abs_mean"] = (jnp.abs(prepared["advantages"]).sum()
                                         / jnp.maximum(prepared["loss_mask"].sum(), 1.0))
    return state, metrics
