"""Dreamer for JAX-native environments: collect, replay, world model and imagination in one program.

Hafner et al. 2023, "Mastering Diverse Domains through World Models" (DreamerV3),
https://arxiv.org/abs/2301.04104. An RSSM world model (`rlagents.world_models`) learns from
replayed real transitions; an actor and a critic learn only from trajectories the model imagines
from the replayed states, so real steps are spent on data, not on policy gradients.

    train = make_train(DreamerConfig(total_timesteps=40_000))    # env 'CartPole-v1'
    state, metrics = jax.jit(train)(jax.random.key(0))          # metrics: [num_iterations] arrays
    seeds = jax.jit(jax.vmap(train))(jax.random.split(jax.random.key(0), 8))

Each iteration (`DreamerLearner.update`), readable top to bottom:
    COLLECT   `collect_steps` steps of `num_envs` auto-resetting environments; the actor acts on
              the posterior state it filters from the real observations (uniform random actions
              before `learning_starts`); the transitions go to the replay.
    REPLAY    `batch_size` sequences of `seq_len` transitions, uniform over the replay.
    MODEL     one world-model step: reconstruction (symlog), reward (two-hot), continue, KL
              balancing with free bits.
    IMAGINE   from every (`imagine_stride`-th) posterior state of the batch, `horizon` steps
              under the actor.
    BEHAVE    lambda-returns with the critic; actor: REINFORCE on advantages divided by
              max(1, EMA(P95 - P5)) of the returns, plus entropy; critic: two-hot regression to
              the returns, regularised towards a slow (EMA) copy of itself.
MODEL .. BEHAVE repeat `updates_per_collect` times per iteration; the train ratio (replayed
transitions per real step) is `updates_per_collect * batch_size * seq_len / (num_envs *
collect_steps)`.

Replay lives on the device as a pytree ring buffer (`Replay`, `[capacity, num_envs, ...]`
arrays): writing `collect_steps` rows and gathering `batch_size` sequences are two indexing ops
that vmap over seeds and split over devices by environment, which a general replay library would
not simplify.

Data parallelism: `make_learner(..., axis_name='data', num_devices=n)` builds the update for
one of `n` devices (`jax.pmap` or shard_map over `rlagents.parallel`'s mesh), each stepping
`num_envs / n` environments with its own share of the replay and sampling `batch_size / n`
sequences from it. Every random number is drawn for the whole batch from the replicated key and
sliced by device, the percentiles are taken over the gathered returns and gradients are averaged
(`lax.pmean`), so `n` devices compute what one device does (up to float rounding).
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import optax
from jax import lax

from rlagents import envs
from rlagents import world_models

Metrics = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True, kw_only=True)
class DreamerConfig:
  """Dreamer settings; the defaults learn CartPole-v1 on a CPU.

  Attributes:
    env_name: environment for `make_train` when none is passed (`rlagents.envs.make`).
    num_envs: environments stepped in parallel.
    collect_steps: steps per environment per iteration.
    total_timesteps: real environment steps in all; `num_iterations = total_timesteps //
      (num_envs * collect_steps)`.
    learning_starts: real steps of uniform random actions before learning starts.
    updates_per_collect: model + actor-critic steps per iteration.
    batch_size: replayed sequences per step; a multiple of `num_envs` (each environment's
      share of the replay gives `batch_size / num_envs`).
    seq_len: transitions per sequence.
    replay_capacity: transitions kept per environment (oldest overwritten); None keeps all.
    horizon: imagined steps.
    imagine_stride: imagination starts from every `imagine_stride`-th posterior state of each
      replayed sequence (1: all of them, DreamerV3's choice). Neighbouring states are nearly the
      same start, so a stride of 2 halves the cost of the actor-critic step for little loss.
    discount: gamma of the imagined returns.
    return_lambda: lambda of the returns.
    model_lr, actor_lr, critic_lr: Adam's step sizes.
    adam_eps: Adam's epsilon.
    max_grad_norm: global-norm gradient clip (each of the three optimizers).
    entropy_coef: weight of the actor's entropy bonus.
    return_normalization: divide advantages by max(1, EMA(P95 - P5) of the returns); False uses
      the raw advantages (the ablation).
    return_scale_decay: the percentiles' EMA decay.
    slow_critic_fraction: the slow critic moves this fraction towards the critic per step.
    slow_critic_reg: weight of the critic's regulariser towards the slow critic.
    actor_unimix: uniform share mixed into the actor's distribution.
    hidden_size: width of the actor's and the critic's hidden layers.
    mlp_layers: their hidden layers.
    world_model: the RSSM's settings (`world_models.WorldModelConfig`).
  """
  env_name: str = "CartPole-v1"
  num_envs: int = 4
  collect_steps: int = 16
  total_timesteps: int = 40_000
  learning_starts: int = 1_024
  updates_per_collect: int = 1
  batch_size: int = 16
  seq_len: int = 32
  replay_capacity: int | None = None
  horizon: int = 15
  imagine_stride: int = 1
  discount: float = 0.99
  return_lambda: float = 0.95
  model_lr: float = 1e-3
  actor_lr: float = 3e-4
  critic_lr: float = 3e-4
  adam_eps: float = 1e-6
  max_grad_norm: float = 100.0
  entropy_coef: float = 3e-4
  return_normalization: bool = True
  return_scale_decay: float = 0.99
  slow_critic_fraction: float = 0.02
  slow_critic_reg: float = 1.0
  actor_unimix: float = 0.01
  hidden_size: int = 128
  mlp_layers: int = 2
  world_model: world_models.WorldModelConfig = world_models.WorldModelConfig()

  def __post_init__(self):
    if isinstance(self.world_model, dict):
      object.__setattr__(self, "world_model", world_models.WorldModelConfig(**self.world_model))
    for name in ("num_envs", "collect_steps", "updates_per_collect", "batch_size", "seq_len",
                 "horizon", "imagine_stride", "hidden_size", "mlp_layers"):
      if getattr(self, name) < 1:
        raise ValueError(f"DreamerConfig.{name} must be >= 1, got {getattr(self, name)}")
    if self.learning_starts < 0:
      raise ValueError(f"DreamerConfig.learning_starts must be >= 0, got {self.learning_starts}")
    if self.batch_size % self.num_envs:
      raise ValueError(f"DreamerConfig.batch_size = {self.batch_size} must be a multiple of "
                       f"num_envs = {self.num_envs} (each environment's replay gives an equal "
                       f"share of the sequences).")
    if self.num_iterations < 1:
      raise ValueError(f"DreamerConfig.total_timesteps = {self.total_timesteps} is less than "
                       f"one iteration ({self.steps_per_iteration} steps); nothing would run.")
    if self.imagine_stride > self.seq_len:
      raise ValueError(f"DreamerConfig.imagine_stride = {self.imagine_stride} is longer than "
                       f"seq_len = {self.seq_len}.")
    if self.capacity < self.seq_len:
      raise ValueError(f"DreamerConfig: the replay keeps {self.capacity} transitions per "
                       f"environment, fewer than seq_len = {self.seq_len}.")
    # Sequences are sampled from the first iteration that learns; the replay must hold one.
    first_learning = max(self.learning_starts, self.steps_per_iteration)
    if first_learning // self.num_envs < self.seq_len:
      raise ValueError(f"DreamerConfig: learning starts after {first_learning} steps, "
                       f"{first_learning // self.num_envs} per environment, fewer than seq_len "
                       f"= {self.seq_len}; raise learning_starts.")
    for name in ("model_lr", "actor_lr", "critic_lr", "adam_eps", "max_grad_norm"):
      if getattr(self, name) <= 0:
        raise ValueError(f"DreamerConfig.{name} must be > 0, got {getattr(self, name)}")
    for name in ("discount", "return_lambda", "return_scale_decay", "slow_critic_fraction"):
      if not 0 <= getattr(self, name) <= 1:
        raise ValueError(f"DreamerConfig.{name} must be in [0, 1], got {getattr(self, name)}")
    for name in ("entropy_coef", "slow_critic_reg"):
      if getattr(self, name) < 0:
        raise ValueError(f"DreamerConfig.{name} must be >= 0, got {getattr(self, name)}")
    if not 0 <= self.actor_unimix < 1:
      raise ValueError(f"DreamerConfig.actor_unimix must be in [0, 1), got {self.actor_unimix}")

  @property
  def steps_per_iteration(self) -> int:
    return self.num_envs * self.collect_steps

  @property
  def num_iterations(self) -> int:
    return self.total_timesteps // self.steps_per_iteration

  @property
  def capacity(self) -> int:
    """Transitions kept per environment."""
    if self.replay_capacity is not None:
      return self.replay_capacity
    return self.num_iterations * self.collect_steps

  @property
  def train_ratio(self) -> float:
    """Replayed transitions per real step."""
    return (self.updates_per_collect * self.batch_size * self.seq_len
            / self.steps_per_iteration)

  @property
  def starts_per_sequence(self) -> int:
    """Imagination starts per replayed sequence."""
    return -(-self.seq_len // self.imagine_stride)


@flax.struct.dataclass
class Replay:
  """Real transitions of `E` environments, a ring buffer of `C` rows (`world_models.Sequences`
  fields, `[C, E, ...]`).

  Attributes:
    rows: the stored transitions, each field `[C, E, ...]`.
    position: int32 scalar, the row the next write starts at.
    size: int32 scalar, rows filled (at most C).
  """
  rows: world_models.Sequences
  position: jax.Array
  size: jax.Array


@flax.struct.dataclass
class DreamerState:
  """Everything an iteration reads and writes; a pytree (jits, vmaps, checkpoints).

  Attributes:
    model_params, actor_params, critic_params, slow_critic_params: the networks' parameters.
    model_opt, actor_opt, critic_opt: the optimizers' states.
    return_scale: the running percentiles of the imagined returns.
    replay: this device's replay.
    env_state: the environments' state (`[num_envs / devices]` leading axis).
    obs: `[num_envs / devices, D]`, the observation the next step acts on.
    first: `[num_envs / devices]` bool, `obs` starts an episode.
    latent: the posterior at `obs`, for acting.
    key: the PRNG key of the next iteration (the same on every device).
    iteration: int32 scalar, iterations done.
  """
  model_params: Any
  actor_params: Any
  critic_params: Any
  slow_critic_params: Any
  model_opt: Any
  actor_opt: Any
  critic_opt: Any
  return_scale: world_models.ReturnScale
  replay: Replay
  env_state: Any
  obs: jax.Array
  first: jax.Array
  latent: world_models.RSSMState
  key: jax.Array
  iteration: jax.Array


@dataclasses.dataclass(frozen=True)
class DreamerLearner:
  """Dreamer's pure functions and what they close over.

  Attributes:
    config: the settings.
    env: the unbatched environment.
    model: the world model.
    actor: `features -> action logits` module.
    critic: `features -> value logits (two-hot bins)` module.
    init: `key -> DreamerState`.
    update: `DreamerState -> (DreamerState, metrics)`, one iteration; metrics are scalars.
    policy_logits: `(actor_params, features) -> log-probabilities` (unimix applied).
  """
  config: DreamerConfig
  env: envs.Environment
  model: world_models.WorldModel
  actor: nn.Module
  critic: nn.Module
  init: Callable[[jax.Array], DreamerState]
  update: Callable[[DreamerState], tuple[DreamerState, Metrics]]
  policy_logits: Callable[[Any, jax.Array], jax.Array]


def _check_env(env: envs.Environment) -> None:
  envs.check_environment(env)
  if len(env.observation_spec().shape) != 1:
    raise ValueError(f"Dreamer's vector world model needs flat observations [D]; "
                     f"{type(env).__name__} gives {env.observation_spec().shape}.")
  if not isinstance(env.action_spec(), envs.DiscreteSpec) or env.action_spec().shape != ():
    raise ValueError(f"Dreamer here supports one discrete action per step; "
                     f"{type(env).__name__} has {env.action_spec()}.")


def _has_success(env: envs.Environment) -> bool:
  key = jax.random.key(0)
  state, _ = jax.eval_shape(env.reset, key)
  action = jnp.zeros(env.action_spec().shape, env.action_spec().dtype)
  return "success" in jax.eval_shape(env.step, state, action, key)[4]


def make_learner(config: DreamerConfig, env: envs.Environment | None = None, *,
                 axis_name: str | None = None, num_devices: int = 1) -> DreamerLearner:
  """Builds Dreamer's `init` and `update` for `env` (default `envs.make(config.env_name)`).

  The metrics of an iteration (scalars): 'env_steps' (after it), 'episodes' (that ended in its
  collection), 'episode_return' / 'episode_length' (their means, NaN when none ended),
  'episode_success' (when the env reports `info["success"]`); the means over its updates of the
  world model's 'wm_loss', 'obs_loss', 'reward_loss', 'continue_loss', 'kl', and of 'actor_loss',
  'critic_loss', 'entropy', 'imagined_return', 'return_scale', 'model_grad_norm'; and
  'learning' (1 once updates run).

  Raises:
    InvalidEnvironmentError: the env's `reset`/`step` are not jittable or break their specs.
    ValueError: non-flat observations, non-discrete actions, or `num_envs` / `batch_size` not
      divisible by `num_devices`.

  Args:
    config: the settings.
    env: the environment (unbatched); None builds `envs.make(config.env_name)`.
    axis_name: the device axis to reduce over, or None on one device.
    num_devices: devices mapped over `axis_name`.
  """
  if axis_name is None and num_devices != 1:
    raise ValueError(f"num_devices = {num_devices} needs an axis_name to reduce over")
  if num_devices < 1 or config.num_envs % num_devices:
    raise ValueError(f"DreamerConfig.num_envs = {config.num_envs} is not divisible by the "
                     f"device count {num_devices}: each device steps num_envs / devices "
                     f"environments.")
  env = envs.make(config.env_name) if env is None else env
  _check_env(env)
  has_success = _has_success(env)
  num_envs = config.num_envs // num_devices
  sequences_per_env = config.batch_size // config.num_envs
  local_batch = num_envs * sequences_per_env
  obs_size = env.observation_spec().shape[0]
  num_actions = env.action_spec().num_values
  model = world_models.WorldModel(config.world_model, obs_size=obs_size, num_actions=num_actions)
  feature_size = config.world_model.feature_size
  actor = world_models.MLPHead(num_actions, config.hidden_size, config.mlp_layers)
  critic = world_models.MLPHead(config.world_model.num_bins, config.hidden_size, config.mlp_layers,
                    zero_init=True)
  bins = world_models.symlog_bins(config.world_model.num_bins)
  # One env with auto-reset and episode statistics, vmapped here so that each environment's
  # key comes from the global split (the same on any number of devices).
  single_env = envs.EpisodeStatistics(envs.AutoReset(env))

  def optimizer(lr):
    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm),
                       optax.adam(lr, eps=config.adam_eps))

  model_opt = optimizer(config.model_lr)
  actor_opt = optimizer(config.actor_lr)
  critic_opt = optimizer(config.critic_lr)

  def local(x):
    """This device's slice of a leading axis drawn for all devices."""
    if axis_name is None:
      return x
    size = x.shape[0] // num_devices
    return lax.dynamic_slice_in_dim(x, lax.axis_index(axis_name) * size, size)

  def mean_over_devices(x):
    return x if axis_name is None else lax.pmean(x, axis_name)

  def sum_over_devices(x):
    return x if axis_name is None else lax.psum(x, axis_name)

  def policy_logits(actor_params, features):
    return world_models.unimix_logits(actor.apply(actor_params, features), config.actor_unimix)

  def env_keys(key):
    return local(jax.random.split(key, config.num_envs))

  def init(key: jax.Array) -> DreamerState:
    model_key, actor_key, critic_key, env_key, latent_key, key = jax.random.split(key, 6)
    model_params = model.init(model_key)
    features = jnp.zeros((1, feature_size))
    actor_params = actor.init(actor_key, features)
    critic_params = critic.init(critic_key, features)
    env_state, obs = jax.vmap(single_env.reset)(env_keys(env_key))
    latent = model.start(model_params, obs,
                         model.latent_noise(env_keys(latent_key), (num_envs,), 1)[0])
    capacity = config.capacity
    rows = world_models.Sequences(
        obs=jnp.zeros((capacity, num_envs, obs_size)),
        action=jnp.zeros((capacity, num_envs), jnp.int32),
        reward=jnp.zeros((capacity, num_envs)),
        next_obs=jnp.zeros((capacity, num_envs, obs_size)),
        terminal=jnp.zeros((capacity, num_envs), bool),
        first=jnp.zeros((capacity, num_envs), bool))
    return DreamerState(
        model_params=model_params, actor_params=actor_params, critic_params=critic_params,
        slow_critic_params=critic_params, model_opt=model_opt.init(model_params),
        actor_opt=actor_opt.init(actor_params), critic_opt=critic_opt.init(critic_params),
        return_scale=world_models.ReturnScale.create(),
        replay=Replay(rows, jnp.int32(0), jnp.int32(0)), env_state=env_state, obs=obs,
        first=jnp.ones((num_envs,), bool), latent=latent, key=key, iteration=jnp.int32(0))

  def collect(state: DreamerState, key: jax.Array):
    random_phase = state.iteration * config.steps_per_iteration < config.learning_starts

    def step(carry, step_key):
      env_state, obs, first, latent = carry
      action_key, env_key, latent_key, start_key = jax.random.split(step_key, 4)
      logits = policy_logits(state.actor_params, latent.features)
      logits = jnp.where(random_phase, jnp.zeros_like(logits), logits)
      noise = jax.vmap(lambda k: jax.random.gumbel(k, (num_actions,)))(env_keys(action_key))
      action = jnp.argmax(logits + noise, -1).astype(env.action_spec().dtype)
      env_state, next_obs, reward, done, info = jax.vmap(single_env.step)(
          env_state, action, env_keys(env_key))
      row = world_models.Sequences(
          obs=obs, action=action, reward=reward, next_obs=info["final_obs"],
          terminal=done & ~info["truncated"], first=first)
      latent_noise = model.latent_noise(env_keys(latent_key), (num_envs,), 2)
      post, _, _ = model.observe_step(state.model_params, latent, action, info["final_obs"],
                                      latent_noise[0])
      restarted = model.start(state.model_params, next_obs, latent_noise[1])
      latent = jax.tree.map(lambda fresh, old: jnp.where(
          done.reshape(-1, *[1] * (old.ndim - 1)), fresh, old), restarted, post)
      stats = (done, info["episode_return"], info["episode_length"],
               info["success"] if has_success else done)
      return (env_state, next_obs, done, latent), (row, stats)

    (env_state, obs, first, latent), (rows, stats) = lax.scan(
        step, (state.env_state, state.obs, state.first, state.latent),
        jax.random.split(key, config.collect_steps))
    return (env_state, obs, first, latent), rows, stats

  def write(replay: Replay, rows: world_models.Sequences) -> Replay:
    index = (replay.position + jnp.arange(config.collect_steps)) % config.capacity
    stored = jax.tree.map(lambda buffer, new: buffer.at[index].set(new), replay.rows, rows)
    return Replay(stored, (replay.position + config.collect_steps) % config.capacity,
                  jnp.minimum(replay.size + config.collect_steps, config.capacity))

  def sample(replay: Replay, key: jax.Array) -> world_models.Sequences:
    """`[local_batch, seq_len]` sequences; each env's replay gives `sequences_per_env`."""
    starts = local(jax.random.randint(key, (config.num_envs, sequences_per_env), 0,
                                      replay.size - config.seq_len + 1))
    oldest = (replay.position - replay.size) % config.capacity
    time = (oldest + starts[..., None] + jnp.arange(config.seq_len)) % config.capacity
    env_index = jnp.broadcast_to(jnp.arange(num_envs)[:, None, None], time.shape)
    return jax.tree.map(
        lambda x: x[time, env_index].reshape(local_batch, config.seq_len, *x.shape[2:]),
        replay.rows)

  def imagine(actor_params, critic_params, model_params, start, start_cont, key):
    """Imagines from `start`: `(features, actions, returns, values, weights)`, no gradients.

    `weights[t]` discounts step t by the imagined chance that the episode is still running
    (and is 0 from a terminal start)."""
    keys = local(jax.random.split(key, config.batch_size * config.starts_per_sequence))
    states, actions = model.imagine(model_params, start,
                                    lambda f: policy_logits(actor_params, f), keys,
                                    config.horizon)
    features = lax.stop_gradient(states.features)  # [H + 1, N, F]
    _, reward, cont = model.predict(model_params, states)
    value = world_models.twohot_mean(critic.apply(critic_params, features), bins)
    discount = config.discount * cont[1:]
    returns = world_models.lambda_returns(reward[1:], value, discount,
                                          lambda_=config.return_lambda)
    weight = start_cont * jnp.cumprod(
        jnp.concatenate([jnp.ones_like(discount[:1]), discount[:-1]]), axis=0)
    return lax.stop_gradient((features, actions, returns, value, weight))

  def train_step(carry, key):
    (model_params, actor_params, critic_params, slow_critic_params, opts, return_scale,
     replay) = carry
    model_opt_state, actor_opt_state, critic_opt_state = opts
    sample_key, model_key, imagine_key = jax.random.split(key, 3)

    # REPLAY + MODEL
    batch = sample(replay, sample_key)
    model_keys = local(jax.random.split(model_key, config.batch_size))
    (_, (model_metrics, posterior)), model_grads = jax.value_and_grad(
        model.loss, has_aux=True)(model_params, batch, model_keys)
    model_grads, model_metrics = mean_over_devices((model_grads, model_metrics))
    model_metrics["model_grad_norm"] = optax.global_norm(model_grads)
    updates, model_opt_state = model_opt.update(model_grads, model_opt_state, model_params)
    model_params = optax.apply_updates(model_params, updates)

    # IMAGINE (from the posterior of the batch, every imagine_stride-th step, with the updated
    # model)
    stride = config.imagine_stride
    start = jax.tree.map(lambda x: x[:, ::stride].reshape(-1, *x.shape[2:]), posterior)
    start_cont = 1.0 - batch.terminal[:, ::stride].reshape(-1).astype(jnp.float32)
    features, actions, returns, value, weight = imagine(
        actor_params, critic_params, model_params, start, start_cont, imagine_key)

    # BEHAVE
    return_scale = world_models.update_return_scale(
        return_scale, returns, decay=config.return_scale_decay, axis_name=axis_name)
    scale = return_scale.scale if config.return_normalization else 1.0
    advantage = (returns - value[:-1]) / scale

    def actor_loss(params):
      log_probs = policy_logits(params, features[:-1])
      log_prob = jnp.take_along_axis(log_probs, actions[..., None], -1)[..., 0]
      entropy = -jnp.sum(jnp.exp(log_probs) * log_probs, -1)
      loss = -(weight * (log_prob * advantage + config.entropy_coef * entropy)).mean()
      return loss, entropy.mean()

    def critic_loss(params):
      logits = critic.apply(params, features[:-1])
      slow = world_models.twohot_mean(critic.apply(slow_critic_params, features[:-1]), bins)
      loss = (world_models.twohot_loss(logits, returns, bins)
              + config.slow_critic_reg * world_models.twohot_loss(logits, slow, bins))
      return (weight * loss).mean()

    (a_loss, entropy), actor_grads = jax.value_and_grad(actor_loss, has_aux=True)(actor_params)
    c_loss, critic_grads = jax.value_and_grad(critic_loss)(critic_params)
    actor_grads, critic_grads = mean_over_devices((actor_grads, critic_grads))
    updates, actor_opt_state = actor_opt.update(actor_grads, actor_opt_state, actor_params)
    actor_params = optax.apply_updates(actor_params, updates)
    updates, critic_opt_state = critic_opt.update(critic_grads, critic_opt_state, critic_params)
    critic_params = optax.apply_updates(critic_params, updates)
    slow_critic_params = jax.tree.map(
        lambda slow, fast: slow + config.slow_critic_fraction * (fast - slow),
        slow_critic_params, critic_params)
    metrics = {**model_metrics, **mean_over_devices({
        "actor_loss": a_loss, "critic_loss": c_loss, "entropy": entropy,
        "imagined_return": returns[0].mean()}), "return_scale": return_scale.scale}
    carry = (model_params, actor_params, critic_params, slow_critic_params,
             (model_opt_state, actor_opt_state, critic_opt_state), return_scale, replay)
    return carry, metrics

  metric_names = ("wm_loss", "obs_loss", "reward_loss", "continue_loss", "kl",
                  "model_grad_norm", "actor_loss", "critic_loss", "entropy", "imagined_return",
                  "return_scale")

  def update(state: DreamerState) -> tuple[DreamerState, Metrics]:
    key, collect_key, train_key = jax.random.split(state.key, 3)

    # COLLECT
    (env_state, obs, first, latent), rows, stats = collect(state, collect_key)
    replay = write(state.replay, rows)
    env_steps = (state.iteration + 1) * config.steps_per_iteration

    # REPLAY .. BEHAVE, once the random prefill is done
    carry = (state.model_params, state.actor_params, state.critic_params,
             state.slow_critic_params, (state.model_opt, state.actor_opt, state.critic_opt),
             state.return_scale, replay)

    def train(carry):
      carry, metrics = lax.scan(train_step, carry,
                                jax.random.split(train_key, config.updates_per_collect))
      return carry, jax.tree.map(jnp.mean, metrics)

    def skip(carry):
      return carry, {name: jnp.float32(jnp.nan) for name in metric_names}

    learning = env_steps >= config.learning_starts
    carry, metrics = lax.cond(learning, train, skip, carry)
    (model_params, actor_params, critic_params, slow_critic_params,
     (model_opt_state, actor_opt_state, critic_opt_state), return_scale, replay) = carry

    done, episode_return, episode_length, success = stats
    episodes = sum_over_devices(done.sum())

    def episode_mean(values):
      total = sum_over_devices(jnp.where(done, values, 0).sum().astype(jnp.float32))
      return jnp.where(episodes > 0, total / jnp.maximum(episodes, 1), jnp.nan)

    metrics = {**metrics, "env_steps": env_steps, "episodes": episodes,
               "episode_return": episode_mean(episode_return),
               "episode_length": episode_mean(episode_length),
               "learning": learning.astype(jnp.float32)}
    if has_success:
      metrics["episode_success"] = episode_mean(success)
    state = DreamerState(
        model_params=model_params, actor_params=actor_params, critic_params=critic_params,
        slow_critic_params=slow_critic_params, model_opt=model_opt_state,
        actor_opt=actor_opt_state, critic_opt=critic_opt_state, return_scale=return_scale,
        replay=replay, env_state=env_state, obs=obs, first=first, latent=latent, key=key,
        iteration=state.iteration + 1)
    return state, metrics

  return DreamerLearner(config=config, env=env, model=model, actor=actor, critic=critic,
                        init=init, update=update, policy_logits=policy_logits)


def make_train(config: DreamerConfig,
               env: envs.Environment | None = None) -> Callable[[jax.Array],
                                                                tuple[DreamerState, Metrics]]:
  """`train(key) -> (final DreamerState, metrics)`: all iterations in one program.

  Pure and unjitted: `jax.jit(train)` for one seed, `jax.jit(jax.vmap(train))` for many. Each
  metric is a `[num_iterations]` array (see `make_learner`).

  Args:
    config: the settings.
    env: as in `make_learner`.
  """
  learner = make_learner(config, env)

  def train(key: jax.Array) -> tuple[DreamerState, Metrics]:
    return lax.scan(lambda state, _: learner.update(state), learner.init(key), None,
                    config.num_iterations)

  return train
