"""PPO for JAX-native environments: rollout, GAE and minibatch epochs in one jitted program.

Schulman et al. 2017, "Proximal Policy Optimization Algorithms", https://arxiv.org/abs/1707.06347,
with the implementation choices of PureJaxRL (Lu et al. 2022, "Discovered Policy Optimisation",
https://arxiv.org/abs/2210.05639) and CleanRL: linear learning-rate annealing, advantages
normalised per minibatch, clipped value loss, global-norm gradient clipping. One addition: a
time-limit cut bootstraps from the value of the observation where the episode was cut
(`bootstrap_truncation`) instead of treating it as a terminal state.

    train = make_train(PPOConfig(total_timesteps=500_000))      # env 'CartPole-v1'
    state, metrics = jax.jit(train)(jax.random.key(0))         # metrics: [num_updates] arrays
    seeds = jax.jit(jax.vmap(train))(jax.random.split(jax.random.key(0), 8))   # 8 seeds at once

Each update (`PPOLearner.update`), readable top to bottom:
    COLLECT    `num_steps` steps of `num_envs` auto-resetting environments (`lax.scan`)
    ADVANTAGE  `rlagents.losses.gae_advantages` over the `[num_steps, num_envs]` trajectory
    UPDATE     `update_epochs` passes over the batch in `num_minibatches` shuffled minibatches;
               loss = policy_gradient_loss + value_coef * value_loss - entropy_coef * entropy

Speed on CPU, where XLA runs many tiny ops and every threefry draw is a small loop (measured on
the 2-core dev machine; see benchmarks/ppo_cartpole.py): the action noise of a whole rollout is
drawn at once (Gumbel-max sampling); the critic runs after the rollout on the whole trajectory;
`envs.AutoReset` resets only in steps where an episode ended; minibatches are shuffled by sorting
one packed array (`_permutation`); the optimizer works on one flat vector (`optax.flatten`).

Data parallelism across devices: `make_learner(..., axis_name='data', num_devices=n)` builds the
same update for one of `n` devices, each stepping `num_envs / n` environments, with gradients and
metrics averaged over the named axis (`lax.pmean`), so parameters stay identical on every device;
`make_data_parallel_train(config, num_devices=n)` wraps it with `jax.pmap` (one seed, its batch
split across devices). Independent seeds per device are `jax.pmap(make_train(config))`.
The single-minibatch step is `make_minibatch_update(learner)` (with an `axis_name`), which
`rlagents.parallel` wraps with shard_map over a mesh or `jax.pmap`.
"""

import dataclasses
import functools
import operator
from collections.abc import Callable
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax

from rlagents import envs
from rlagents import losses
from rlagents import parallel
from rlagents.networks import mlp

Metrics = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True, kw_only=True)
class PPOConfig:
  """PPO settings; the defaults are PureJaxRL's CartPole settings.

  Attributes:
    env_name: environment for `make_train` when none is passed (`rlagents.envs.make`).
    num_envs: environments stepped in parallel.
    num_steps: steps per environment per update; a batch is `num_envs * num_steps` transitions.
    total_timesteps: environment steps in all; `num_updates = total_timesteps // batch_size`.
    update_epochs: passes over each batch.
    num_minibatches: minibatches per pass; must divide the batch.
    learning_rate: Adam's step size (annealed linearly to 0 over the updates if `anneal_lr`).
    anneal_lr: anneal the learning rate, stepwise per update.
    adam_eps: Adam's epsilon.
    max_grad_norm: global-norm gradient clip.
    discount: gamma.
    gae_lambda: GAE's lambda.
    clip_epsilon: the policy ratio is clipped to [1 - eps, 1 + eps].
    value_clip_epsilon: clip of the value loss around the old values; None turns it off.
    entropy_coef: weight of the entropy bonus.
    value_coef: weight of the value loss.
    normalize_advantages: standardise advantages within each minibatch.
    bootstrap_truncation: bootstrap time-limit cuts from V(final obs); False treats every end of
      an episode as terminal (as PureJaxRL does).
    hidden_sizes: hidden widths of the policy and of the value MLP.
    activation: 'tanh', 'relu' or 'gelu'.
  """
  env_name: str = "CartPole-v1"
  num_envs: int = 4
  num_steps: int = 128
  total_timesteps: int = 500_000
  update_epochs: int = 4
  num_minibatches: int = 4
  learning_rate: float = 2.5e-4
  anneal_lr: bool = True
  adam_eps: float = 1e-5
  max_grad_norm: float = 0.5
  discount: float = 0.99
  gae_lambda: float = 0.95
  clip_epsilon: float = 0.2
  value_clip_epsilon: float | None = 0.2
  entropy_coef: float = 0.01
  value_coef: float = 0.5
  normalize_advantages: bool = True
  bootstrap_truncation: bool = True
  hidden_sizes: tuple[int, ...] = (64, 64)
  activation: str = "tanh"

  def __post_init__(self):
    object.__setattr__(self, "hidden_sizes", tuple(self.hidden_sizes))
    for name in ("num_envs", "num_steps", "update_epochs", "num_minibatches"):
      if getattr(self, name) < 1:
        raise ValueError(f"PPOConfig.{name} must be >= 1, got {getattr(self, name)}")
    if self.batch_size % self.num_minibatches:
      raise ValueError(
          f"PPOConfig: the batch of num_envs * num_steps = {self.num_envs} * {self.num_steps} = "
          f"{self.batch_size} transitions is not divisible by num_minibatches = "
          f"{self.num_minibatches}.")
    if self.num_updates < 1:
      raise ValueError(
          f"PPOConfig.total_timesteps = {self.total_timesteps} is less than one batch "
          f"({self.batch_size} transitions); no update would run.")
    for name in ("learning_rate", "adam_eps", "max_grad_norm", "clip_epsilon"):
      if getattr(self, name) <= 0:
        raise ValueError(f"PPOConfig.{name} must be > 0, got {getattr(self, name)}")
    if self.value_clip_epsilon is not None and self.value_clip_epsilon <= 0:
      raise ValueError(f"PPOConfig.value_clip_epsilon must be > 0 or None, got "
                       f"{self.value_clip_epsilon}")
    for name in ("discount", "gae_lambda"):
      if not 0 <= getattr(self, name) <= 1:
        raise ValueError(f"PPOConfig.{name} must be in [0, 1], got {getattr(self, name)}")
    for name in ("entropy_coef", "value_coef"):
      if getattr(self, name) < 0:
        raise ValueError(f"PPOConfig.{name} must be >= 0, got {getattr(self, name)}")
    if not self.hidden_sizes or min(self.hidden_sizes) < 1:
      raise ValueError(f"PPOConfig.hidden_sizes must be positive widths, got {self.hidden_sizes}")
    if self.activation not in mlp.ACTIVATIONS:
      raise ValueError(f"Unknown activation {self.activation!r}; valid choices: "
                       f"{', '.join(repr(a) for a in mlp.ACTIVATIONS)}.")

  @property
  def batch_size(self) -> int:
    return self.num_envs * self.num_steps

  @property
  def minibatch_size(self) -> int:
    return self.batch_size // self.num_minibatches

  @property
  def num_updates(self) -> int:
    return self.total_timesteps // self.batch_size


@flax.struct.dataclass
class PPOState:
  """Everything an update reads and writes; a pytree, so it jits, vmaps and checkpoints.

  Attributes:
    params: the actor-critic's parameters.
    opt_state: the optimizer's state.
    env_state: the batched environments' state.
    obs: `[num_envs, D]`, the observation the next step acts on.
    key: the PRNG key of the next rollout.
    update_step: int32 scalar, updates done.
  """
  params: Any
  opt_state: Any
  env_state: Any
  obs: jax.Array  # [num_envs, D], the observation the next step acts on
  key: jax.Array
  update_step: jax.Array  # updates done


@flax.struct.dataclass
class Transition:
  """One step of `num_envs` environments (a leading `[num_steps]` axis once collected).

  Each field is `[num_envs]` or `[num_envs, D]` (`[num_steps, ...]` once collected).

  Attributes:
    obs: the observation acted on.
    action: the sampled action.
    logp: its log-probability under the acting policy.
    reward: the reward of the step.
    done: the episode ended (terminated or truncated).
    truncated: it ended at the time limit.
    truncation_value: V(final obs) where truncated, bootstrapped in GAE; None when not used.
    episode_return: the running return, the finished episode's where done.
    episode_length: likewise its length.
    success: `info["success"]` where the env reports it, else None.
  """
  obs: jax.Array
  action: jax.Array
  logp: jax.Array
  reward: jax.Array
  done: jax.Array
  truncated: jax.Array
  truncation_value: jax.Array | None  # V(obs where the episode was cut); read where truncated
  episode_return: jax.Array
  episode_length: jax.Array
  success: jax.Array | None


@flax.struct.dataclass
class Minibatch:
  """A shuffled slice of the flattened rollout that one gradient step uses.

  Each field is `[minibatch_size]` or `[minibatch_size, D]`.

  Attributes:
    obs: observations.
    action: actions taken.
    logp: their log-probabilities when sampled.
    value: the value estimates when sampled (for value clipping).
    advantage: GAE advantages.
    target: value targets (advantage + value).
  """
  obs: jax.Array
  action: jax.Array
  logp: jax.Array
  value: jax.Array
  advantage: jax.Array
  target: jax.Array


@dataclasses.dataclass(frozen=True)
class PPOLearner:
  """PPO's pure functions and the objects they close over.

  Attributes:
    config: the settings.
    env: the training stack, `wrap_for_training(env, num_envs / num_devices)`.
    network: the `ActorCritic` module.
    optimizer: clip_by_global_norm then Adam with the (annealed) learning rate, on the flattened
      parameters.
    init: `key -> PPOState`.
    update: `PPOState -> (PPOState, metrics)`, one collect + advantage + update round; metrics
      are scalars (see `make_learner`).
  """
  config: PPOConfig
  env: envs.Environment
  network: mlp.ActorCritic
  optimizer: optax.GradientTransformation
  init: Callable[[jax.Array], PPOState]
  update: Callable[[PPOState], tuple[PPOState, Metrics]]


def _check_env(env: envs.Environment) -> None:
  envs.check_environment(env)
  if len(env.observation_spec().shape) != 1:
    raise ValueError(f"PPO's MLP needs flat observations [D]; {type(env).__name__} gives "
                     f"{env.observation_spec().shape}.")
  if not isinstance(env.action_spec(), envs.DiscreteSpec):
    raise ValueError(f"PPO here supports discrete actions; {type(env).__name__} has "
                     f"{env.action_spec()}.")


def _info_keys(env: envs.Environment) -> set[str]:
  key = jax.random.key(0)
  state, _ = jax.eval_shape(env.reset, key)
  action = jnp.zeros(env.action_spec().shape, env.action_spec().dtype)
  return set(jax.eval_shape(env.step, state, action, key)[4])


def _permutation(key: jax.Array, n: int) -> jax.Array:
  """A random permutation of `range(n)`, by sorting random keys, for minibatch shuffling.

  Each index is packed into the low bits of a random uint32 and the packed array is sorted
  alone: XLA's CPU sort runs a comparator call per comparison, and one operand is ~5x faster
  than the key-value pair `jax.random.permutation` sorts (12% of a vmapped CartPole update).
  Keys keep >= 20 random bits (n <= 4096), so ties, which fall back to index order, are rare:
  about n^2 / 2^(33 - index_bits) pairs, 0.02 for n = 512. Larger n uses
  `jax.random.permutation`.
  """
  index_bits = max(1, (n - 1).bit_length())
  if index_bits > 12:
    return jax.random.permutation(key, n)
  index_mask = jnp.uint32((1 << index_bits) - 1)
  random_bits = jax.random.bits(key, (n,), jnp.uint32)
  packed = (random_bits & ~index_mask) | jnp.arange(n, dtype=jnp.uint32)
  return (lax.sort(packed) & index_mask).astype(jnp.int32)


def _masked_mean(values: jax.Array, mask: jax.Array, reduce=lambda x: x) -> jax.Array:
  """Mean of `values` where `mask`; NaN where nothing is selected (no episode ended).

  `reduce` sums the totals over devices (`lax.psum`) in data-parallel training.
  """
  count = reduce(mask.sum())
  total = reduce((values * mask).sum())
  return jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.nan)


def _local_num_envs(config: PPOConfig, num_devices: int) -> int:
  """Environments per device when `config`'s batch is split across `num_devices`."""
  if num_devices < 1:
    raise ValueError(f"num_devices must be >= 1, got {num_devices}")
  if config.num_envs % num_devices:
    raise ValueError(
        f"PPOConfig.num_envs = {config.num_envs} is not divisible by the device count "
        f"{num_devices}: each device steps num_envs / devices environments of the batch.")
  local_batch = config.batch_size // num_devices
  if local_batch % config.num_minibatches:
    raise ValueError(
        f"PPOConfig: each of the {num_devices} devices holds {local_batch} transitions of the "
        f"batch, not divisible by num_minibatches = {config.num_minibatches}.")
  return config.num_envs // num_devices


def make_learner(config: PPOConfig, env: envs.Environment | None = None, *,
                 axis_name: str | None = None, num_devices: int = 1) -> PPOLearner:
  """Builds PPO's `init` and `update` for `env` (default `envs.make(config.env_name)`).

  With `axis_name`, `init` and `update` run on one of `num_devices` devices mapped over that
  axis (`jax.pmap(..., axis_name=...)` or shard_map): each steps `num_envs / num_devices`
  environments; parameters are initialised alike on every device, the environments and the
  sampling noise differ; gradients and metrics are averaged over the axis (advantages are
  normalised with the statistics of the whole minibatch across devices).

  The metrics of an update (scalars): 'env_steps' (after it), 'episodes' (that ended during its
  rollout), 'episode_return' / 'episode_length' (their means, NaN when none ended),
  'episode_success' (the fraction that succeeded, when the env reports `info["success"]`), and
  the means over epochs and minibatches of 'loss', 'pg_loss', 'value_loss', 'entropy',
  'approx_kl', 'clip_fraction', 'explained_variance', 'grad_norm'; and 'learning_rate'.

  Raises:
    InvalidEnvironmentError: the env's `reset`/`step` are not jittable or break their specs.
    ValueError: the env's observations are not flat or its actions not discrete, or the batch
      does not split evenly across `num_devices`.

  Args:
    config: the PPO settings.
    env: the environment (unbatched; the learner vmaps `num_envs / num_devices` copies); None
      builds `envs.make(config.env_name)`.
    axis_name: the device axis to average gradients and metrics over, or None on one device.
    num_devices: the number of devices mapped over `axis_name`.
  """
  if axis_name is None and num_devices != 1:
    raise ValueError(f"num_devices = {num_devices} needs an axis_name to reduce over")
  num_envs = _local_num_envs(config, num_devices)
  batch_size = num_envs * config.num_steps
  minibatch_size = batch_size // config.num_minibatches
  env = envs.make(config.env_name) if env is None else env
  _check_env(env)
  batched_env = envs.wrap_for_training(env, num_envs)
  num_actions = env.action_spec().num_values
  network = mlp.ActorCritic(num_actions=num_actions,
                            hidden_sizes=config.hidden_sizes, activation=config.activation)
  minibatch_updates_per_update = config.update_epochs * config.num_minibatches

  def learning_rate(count):
    # `count` counts minibatch steps; the rate is constant within an update.
    if not config.anneal_lr:
      return config.learning_rate
    updates_done = count // minibatch_updates_per_update
    return config.learning_rate * (1.0 - updates_done / config.num_updates)

  # One flat vector inside the optimizer: a few large elementwise ops instead of several per
  # parameter array (~8% of a CartPole minibatch step on CPU).
  optimizer = optax.flatten(optax.chain(optax.clip_by_global_norm(config.max_grad_norm),
                                        optax.adam(learning_rate, eps=config.adam_eps)))
  has_success = "success" in _info_keys(env)

  def per_device(key):
    return key if axis_name is None else jax.random.fold_in(key, lax.axis_index(axis_name))

  def sum_over_devices(x):
    return x if axis_name is None else lax.psum(x, axis_name)

  def init(key: jax.Array) -> PPOState:
    network_key, env_key, key = jax.random.split(key, 3)
    env_key, key = per_device(env_key), per_device(key)
    params = network.init(network_key, jnp.zeros(env.observation_spec().shape,
                                                 env.observation_spec().dtype))
    env_state, obs = batched_env.reset(env_key)
    return PPOState(params=params, opt_state=optimizer.init(params), env_state=env_state,
                    obs=obs, key=key, update_step=jnp.int32(0))

  def minibatch_step(carry, batch: Minibatch):
    return ppo_minibatch_update(carry, batch, config=config, network=network,
                                optimizer=optimizer, axis_name=axis_name)

  def update(state: PPOState) -> tuple[PPOState, Metrics]:
    key, action_key, env_key, epochs_key = jax.random.split(state.key, 4)
    params = state.params

    def critic(obs):
      return network.apply(params, obs, method=mlp.ActorCritic.value)

    # COLLECT. Actions are Gumbel-max samples (as jax.random.categorical draws them) with the
    # noise of the whole rollout drawn at once, one random draw (a loop on CPU) per update
    # instead of one per step. The critic runs afterwards, on the whole trajectory in one batch;
    # only the value of the observation where an episode was cut is taken in the loop, in the
    # (rare) steps with a cut.
    gumbel_noise = jax.random.gumbel(action_key, (config.num_steps, num_envs, num_actions))
    step_keys = jax.random.split(env_key, config.num_steps)
    del action_key, env_key

    def collect_step(carry, step_inputs):
      env_state, obs = carry
      noise, step_key = step_inputs
      logits = network.apply(params, obs, method=mlp.ActorCritic.logits)
      action = jnp.argmax(logits + noise, axis=-1)
      logp = jnp.take_along_axis(jax.nn.log_softmax(logits), action[:, None], axis=-1)[:, 0]
      env_state, next_obs, reward, done, info = batched_env.step(env_state, action, step_key)
      truncation_value = None
      if config.bootstrap_truncation:
        truncation_value = lax.cond(jnp.any(info["truncated"]), critic,
                                    lambda o: jnp.zeros(o.shape[:-1], o.dtype), info["final_obs"])
      transition = Transition(
          obs=obs, action=action, logp=logp, reward=reward, done=done,
          truncated=info["truncated"], truncation_value=truncation_value,
          episode_return=info["episode_return"], episode_length=info["episode_length"],
          success=info["success"] if has_success else None)
      return (env_state, next_obs), transition

    (env_state, last_obs), trajectory = lax.scan(
        collect_step, (state.env_state, state.obs), (gumbel_noise, step_keys))

    # ADVANTAGE
    values = critic(jnp.concatenate([trajectory.obs, last_obs[None]]))  # [num_steps + 1, B]
    values, last_value = values[:-1], values[-1]
    if config.bootstrap_truncation:
      advantages, targets = losses.gae_advantages(
          trajectory.reward, values, trajectory.done & ~trajectory.truncated,
          discount=config.discount, gae_lambda=config.gae_lambda, bootstrap_value=last_value,
          truncations=trajectory.truncated, truncation_values=trajectory.truncation_value)
    else:
      advantages, targets = losses.gae_advantages(
          trajectory.reward, values, trajectory.done, discount=config.discount,
          gae_lambda=config.gae_lambda, bootstrap_value=last_value)

    # UPDATE
    flat = jax.tree.map(lambda x: x.reshape(batch_size, *x.shape[2:]), Minibatch(
        obs=trajectory.obs, action=trajectory.action, logp=trajectory.logp, value=values,
        advantage=advantages, target=targets))

    def epoch(carry, epoch_key):
      order = _permutation(epoch_key, batch_size)
      minibatches = jax.tree.map(
          lambda x: x[order].reshape(config.num_minibatches, minibatch_size,
                                     *x.shape[1:]), flat)
      return lax.scan(minibatch_step, carry, minibatches)

    (params, opt_state), loss_metrics = lax.scan(
        epoch, (params, state.opt_state), jax.random.split(epochs_key, config.update_epochs))
    del epochs_key

    metrics = jax.tree.map(jnp.mean, loss_metrics)
    metrics["learning_rate"] = jnp.float32(
        learning_rate(state.update_step * minibatch_updates_per_update))
    metrics["env_steps"] = (state.update_step + 1) * config.batch_size
    done = trajectory.done
    metrics["episodes"] = sum_over_devices(done.sum())
    metrics["episode_return"] = _masked_mean(trajectory.episode_return, done, sum_over_devices)
    metrics["episode_length"] = _masked_mean(trajectory.episode_length, done, sum_over_devices)
    if has_success:
      metrics["episode_success"] = _masked_mean(trajectory.success, done, sum_over_devices)
    state = PPOState(params=params, opt_state=opt_state, env_state=env_state, obs=last_obs,
                     key=key, update_step=state.update_step + 1)
    return state, metrics

  return PPOLearner(config=config, env=batched_env, network=network, optimizer=optimizer,
                    init=init, update=update)


def _ppo_loss(params, batch: Minibatch, *, config: PPOConfig, network: mlp.ActorCritic,
              axis_name=None):
  logits, values = network.apply(params, batch.obs)
  logp = jnp.take_along_axis(jax.nn.log_softmax(logits), batch.action[:, None], axis=-1)[:, 0]
  advantage = batch.advantage
  if config.normalize_advantages:
    # Over the whole minibatch: under a device map its shards' statistics are combined.
    mean = advantage.mean() if axis_name is None else lax.pmean(advantage.mean(), axis_name)
    variance = jnp.square(advantage - mean).mean()
    if axis_name is not None:
      variance = lax.pmean(variance, axis_name)
    advantage = (advantage - mean) / (jnp.sqrt(variance) + 1e-8)
  # The losses take [B, T] sequences; a minibatch of M transitions is one row of M steps.
  mask = jnp.ones((1, logp.shape[0]), bool)
  pg_loss, pg_metrics = losses.policy_gradient_loss(
      logp[None], batch.logp[None], advantage[None], mask, clip_low=config.clip_epsilon,
      clip_high=config.clip_epsilon)
  v_loss, v_metrics = losses.value_loss(values[None], batch.value[None], batch.target[None],
                                        mask, clip_epsilon=config.value_clip_epsilon)
  entropy = losses.entropy_from_logits(logits[None], mask)
  loss = pg_loss + config.value_coef * v_loss - config.entropy_coef * entropy
  return loss, {"loss": loss, "pg_loss": pg_loss, "value_loss": v_loss, "entropy": entropy,
                "approx_kl": pg_metrics["approx_kl"],
                "clip_fraction": pg_metrics["clip_fraction"],
                "explained_variance": v_metrics["explained_variance"]}


def ppo_minibatch_update(train, batch: Minibatch, *, config: PPOConfig,
                         network: mlp.ActorCritic, optimizer: optax.GradientTransformation,
                         axis_name=None):
  """One PPO optimizer step on one minibatch, pure: `((params, opt_state), batch) -> (..., metrics)`.

  Under a device map (`rlagents.parallel`) `batch` is this device's equal shard of the minibatch
  and `axis_name` the mapped axis (or axes): advantages are normalised with the whole
  minibatch's statistics and gradients and metrics are averaged (`lax.pmean`), so the step
  equals the single-device one (metrics such as 'explained_variance' become shard means).

  Args:
    train: `(params, opt_state)`, the network's parameters and the optimizer's state.
    batch: the minibatch, each field `[minibatch_size]` or `[minibatch_size, D]`.
    config: the PPO settings (clipping, loss coefficients, advantage normalisation).
    network: the `ActorCritic` module whose `apply` gives logits and values.
    optimizer: the gradient transformation `opt_state` belongs to.
    axis_name: the mapped device axis (or tuple of axes), or None on one device.

  Returns:
    `((params, opt_state), metrics)`, metrics the scalar losses and diagnostics of the step.
  """
  grads, _, metrics = _ppo_grads(train, train[0], batch, config=config, network=network,
                                 axis_name=axis_name)
  if axis_name is not None:
    grads = lax.pmean(grads, axis_name)
  return _ppo_apply(train, grads, metrics, optimizer=optimizer)


def _ppo_grads(train, params, batch: Minibatch, *, config: PPOConfig, network: mlp.ActorCritic,
               axis_name=None):
  """The gradient part of `ppo_minibatch_update`: shards weigh the same (weight 1)."""
  del train  # the parameters come whole in `params`
  grads, metrics = jax.grad(_ppo_loss, has_aux=True)(params, batch, config=config,
                                                     network=network, axis_name=axis_name)
  if axis_name is not None:
    metrics = lax.pmean(metrics, axis_name)
  return grads, jnp.float32(1.0), metrics


def _ppo_apply(train, grads, metrics, *, optimizer: optax.GradientTransformation):
  params, opt_state = train
  metrics = {**metrics, "grad_norm": optax.global_norm(grads)}
  updates, opt_state = optimizer.update(grads, opt_state, params)
  return (optax.apply_updates(params, updates), opt_state), metrics


def make_minibatch_update(learner: PPOLearner):
  """`learner`'s single-minibatch step `(train, batch, *, axis_name=None) -> (train, metrics)`,
  with `train = (params, opt_state)`; the function `rlagents.parallel` wraps for devices.

  Args:
    learner: from `make_learner`; its config, network and optimizer are bound into
      `ppo_minibatch_update`.
  """
  return functools.partial(ppo_minibatch_update, config=learner.config, network=learner.network,
                           optimizer=learner.optimizer)


def make_split_minibatch_update(learner: PPOLearner) -> parallel.SplitUpdate:
  """`make_minibatch_update(learner)` as its gradient and optimizer parts (`parallel.SplitUpdate`).

  Called as `split((params, opt_state), batch, axis_name=None)` it is the minibatch step; given
  to `parallel.make_update_step` on an fsdp mesh it keeps the parameters and optimizer state
  sharded.

  Args:
    learner: from `make_learner`.
  """
  return parallel.SplitUpdate(
      grads=functools.partial(_ppo_grads, config=learner.config, network=learner.network),
      apply=functools.partial(_ppo_apply, optimizer=learner.optimizer),
      params=operator.itemgetter(0))


def make_train(config: PPOConfig,
               env: envs.Environment | None = None) -> Callable[[jax.Array], tuple[PPOState,
                                                                                  Metrics]]:
  """`train(key) -> (final PPOState, metrics)`: all `config.num_updates` updates in one program.

  Pure and unjitted: `jax.jit(train)` for one seed, `jax.jit(jax.vmap(train))` for many. Each
  metric is a `[num_updates]` array (see `make_learner`).

  Args:
    config: the PPO settings.
    env: as in `make_learner`.
  """
  learner = make_learner(config, env)

  def train(key: jax.Array) -> tuple[PPOState, Metrics]:
    return lax.scan(lambda state, _: learner.update(state), learner.init(key), None,
                    config.num_updates)

  return train


def make_data_parallel_train(
    config: PPOConfig, env: envs.Environment | None = None, *, num_devices: int,
    axis_name: str = "data") -> Callable[[jax.Array], tuple[PPOState, Metrics]]:
  """One seed trained data-parallel on `num_devices` local devices: `train(key)`, compiled.

  Each device steps `config.num_envs / num_devices` environments and the gradients are averaged
  over the devices (see `make_learner`), so the run does `config`'s work per update. Returns
  `(state, metrics)`: the state has a leading `[num_devices]` axis (its parameters are the same
  on every device); the metrics are `[num_updates]` arrays, already reduced over devices.

  Raises:
    ValueError: `num_envs` (or the batch per device) does not split evenly across
      `num_devices`, or fewer devices are present.

  Args:
    config: the PPO settings (for the whole run; each device gets `num_envs / num_devices`
      environments).
    env: as in `make_learner`.
    num_devices: local devices to map over (the first `num_devices` of `jax.local_devices()`).
    axis_name: the `pmap` axis name that gradients and metrics are averaged over.
  """
  _local_num_envs(config, num_devices)
  available = jax.local_device_count()
  if num_devices > available:
    raise ValueError(f"num_devices = {num_devices}, but only {available} local device(s) are "
                     f"present (on CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N).")
  learner = make_learner(config, env, axis_name=axis_name, num_devices=num_devices)

  def train_on_device(key: jax.Array) -> tuple[PPOState, Metrics]:
    return lax.scan(lambda state, _: learner.update(state), learner.init(key), None,
                    config.num_updates)

  mapped = jax.pmap(train_on_device, axis_name=axis_name,
                    devices=jax.local_devices()[:num_devices])

  def train(key: jax.Array) -> tuple[PPOState, Metrics]:
    # The same key on every device: equal parameters; `init` folds in the device index for
    # the environments and the sampling noise.
    state, metrics = mapped(jnp.stack([key] * num_devices))
    return state, jax.tree.map(lambda x: x[0], metrics)

  return train


def steps_to_rolling_target(episode_mean: np.ndarray, episodes: np.ndarray,
                            env_steps: np.ndarray, target: float,
                            window: int = 100) -> list[int | None]:
  """Per seed, the real steps after which the rolling mean first reached `target` (host code).

  The rolling mean is `rolling_episode_mean(episode_mean, episodes, window)`, counted only once
  `window` episodes have ended: a mean over fewer episodes is biased towards short ones (in a
  maze whose failures run to the time limit, the first episodes to end are successes).

  Args:
    episode_mean: `[seeds, num_updates]` per-update means of a per-episode quantity.
    episodes: `[seeds, num_updates]` episodes that ended in each update.
    env_steps: `[seeds, num_updates]` real steps after each update.
    target: the threshold (reached at >=).
    window: episodes per rolling mean.

  Returns:
    One entry per seed: the steps, or None where the target was never reached.
  """
  rolling = rolling_episode_mean(episode_mean, episodes, window)
  full = np.cumsum(np.asarray(episodes, np.float64), axis=-1) >= window
  reached = full & (np.nan_to_num(rolling, nan=-np.inf) >= target)
  env_steps = np.asarray(env_steps)
  return [int(env_steps[seed, np.argmax(reached[seed])]) if reached[seed].any() else None
          for seed in range(reached.shape[0])]


def rolling_episode_mean(episode_mean: np.ndarray, episodes: np.ndarray,
                         window: int = 100) -> np.ndarray:
  """Mean over the last >= `window` episodes after each update (host code, not jittable).

  From per-update means of a per-episode quantity (e.g. the 'episode_return' metric) and the
  per-update counts 'episodes' (the last axis is updates; leading axes, e.g. seeds, are kept),
  each point averages the most recent updates that together hold at least `window` episodes (all
  of them while fewer have ended): for returns, the rolling mean that Stable-Baselines3 logs as
  `ep_rew_mean`, rounded up to whole updates. NaN before the first episode ends.

  Args:
    episode_mean: `[..., num_updates]` per-update means (NaN where no episode ended).
    episodes: `[..., num_updates]` episodes that ended in each update.
    window: episodes per rolling mean.

  Returns:
    `[..., num_updates]` float64.
  """
  episode_mean = np.asarray(episode_mean, np.float64)
  episodes = np.asarray(episodes, np.float64)
  sums = np.cumsum(np.nan_to_num(episode_mean) * episodes, axis=-1)
  counts = np.cumsum(episodes, axis=-1)
  updates = np.arange(episode_mean.shape[-1])
  out = np.full(episode_mean.shape, np.nan)
  for index in np.ndindex(episode_mean.shape[:-1]):
    s, c = sums[index], counts[index]
    # The latest start u with c[t] - c[u - 1] >= window (0 when fewer episodes have ended).
    start = np.minimum(np.searchsorted(c, c - window, side="right"), updates)
    before = start > 0
    total = c - np.where(before, c[start - 1], 0.0)
    window_sum = s - np.where(before, s[start - 1], 0.0)
    out[index] = np.where(total > 0, window_sum / np.maximum(total, 1.0), np.nan)
  return out
